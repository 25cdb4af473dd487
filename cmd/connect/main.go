// Command connect is a Benthos binary with Benthos' pure and io components
// and the kafka_batched_ranges input, plus a `demo` subcommand. It exits
// non-zero when an input stopped on an error (such as data loss), even if the
// stream itself shut down cleanly.
package main

import (
	"context"
	"fmt"
	"os"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func main() {
	code, err := service.RunCLIToCode(context.Background(),
		service.CLIOptSetBinaryName("connect"),
		service.CLIOptSetProductName("kafka_batched_ranges connect"),
		service.CLIOptAddCommand(plugin.DemoCommand()),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if code == 0 && plugin.Err() != nil {
		code = 1
	}
	os.Exit(code)
}
