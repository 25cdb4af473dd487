// Command connect is a Benthos binary with Benthos' pure and io components,
// the kafka_batched_ranges input and the prometheus metrics exporter of
// plugin/promexport (Redpanda Connect's fields, names and types), plus a
// `demo` subcommand. It exits non-zero when an input stopped on an error
// (such as data loss), even if the stream itself shut down cleanly.
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
	os.Exit(run(context.Background()))
}

// run runs the CLI through plugin.RunCLI, where the input reports a
// stopping error to this run, and returns the exit code: 1 if an input
// stopped on an error although Benthos itself ended cleanly.
func run(ctx context.Context) int {
	// The exporter goes into Benthos' global environment, whose prometheus
	// exporter Benthos makes the default of `metrics` (as Redpanda Connect
	// serves /metrics by default); env is a copy of it.
	if err := promexport.Register(service.GlobalEnvironment()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := service.NewEnvironment()
	info := buildInfo()
	cli := func() int {
		return plugin.RunCLI(ctx, env,
			service.CLIOptSetBinaryName("connect"),
			service.CLIOptSetProductName("kafka_batched_ranges connect"),
			service.CLIOptSetDocumentationURL(docsURL),
			service.CLIOptSetVersion(versionString(version, plugin.Version, info), buildDate(dateBuilt, info)),
			service.CLIOptAddCommand(demoCommand()),
		)
	}
	if isRootHelp(os.Args[1:]) {
		return withRootHelp(os.Stdout, cli)
	}
	return cli()
}
