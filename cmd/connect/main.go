// Command connect is a Benthos binary with Benthos' pure and io components,
// the kafka_batched_ranges input and a prometheus metrics exporter, plus a
// `demo` subcommand. It exits non-zero when an input stopped on an error
// (such as data loss), even if the stream itself shut down cleanly.
package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func main() {
	os.Exit(run(context.Background()))
}

// run runs the CLI in an environment of its own, where the input reports a
// stopping error to this run, and returns the exit code: 1 if an input
// stopped on an error although Benthos itself ended cleanly.
func run(ctx context.Context) int {
	var failed atomic.Bool
	env := service.NewEnvironment().Without(plugin.InputName)
	if err := plugin.Register(env, plugin.Options{OnFailure: func(error) { failed.Store(true) }}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := registerPrometheus(env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	info := buildInfo()
	cli := func() int {
		code, err := service.RunCLIToCode(ctx,
			service.CLIOptSetEnvironment(env),
			service.CLIOptSetBinaryName("connect"),
			service.CLIOptSetProductName("kafka_batched_ranges connect"),
			service.CLIOptSetDocumentationURL(docsURL),
			service.CLIOptSetVersion(versionString(version, info), buildDate(dateBuilt, info)),
			service.CLIOptAddCommand(demoCommand()),
		)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return code
	}
	var code int
	if isRootHelp(os.Args[1:]) {
		code = withRootHelp(os.Stdout, cli)
	} else {
		code = cli()
	}
	if code == 0 && failed.Load() {
		code = 1
	}
	return code
}
