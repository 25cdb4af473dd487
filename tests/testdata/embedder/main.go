// Command embedder is what a Benthos (or Redpanda Connect) build adds to use
// kafka_batched_ranges: the components it wants, and plugin.RunCLI, which
// runs Benthos' CLI with the input registered so that a run whose input
// stopped on an error exits 1. tests/embed_test.go builds and runs it.
package main

import (
	"context"
	"os"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func main() {
	os.Exit(plugin.RunCLI(context.Background(), nil))
}
