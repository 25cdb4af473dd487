// Command embedder is what a Benthos (or Redpanda Connect) build adds to use
// kafka_batched_ranges: the components it wants, the prometheus metrics
// exporter of plugin/promexport (registered in Benthos' global environment,
// which makes it the default of `metrics`, as in Redpanda Connect; a
// Redpanda Connect build, which has its own, leaves it out), and
// plugin.RunCLI, which runs Benthos' CLI with the input registered so that a
// run whose input stopped on an error exits 1. tests/embed_test.go builds
// and runs it.
package main

import (
	"context"
	"fmt"
	"os"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/plugin"
	"github.com/kbr/kafka_batched_ranges/plugin/promexport"
)

func main() {
	if err := promexport.Register(service.GlobalEnvironment()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(plugin.RunCLI(context.Background(), nil))
}
