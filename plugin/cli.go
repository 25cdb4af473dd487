package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Exit codes of RunCLI beyond Benthos' own (0: the stream ended normally,
// 1: Benthos failed, such as a config it refused).
const (
	// ExitFailed: an input stopped on an error (OnFailure), although
	// Benthos ended the stream cleanly.
	ExitFailed = 1
	// ExitStoppedBeforeEnd: a bounded run was stopped (SIGINT, SIGTERM, or
	// the stream ended otherwise) before it read and had acknowledged
	// everything up to its end. Running it again resumes from what it
	// committed.
	ExitStoppedBeforeEnd = 3
)

// RunCLI runs Benthos' command line (service.RunCLIToCode) with the
// kafka_batched_ranges input registered so that a run whose input stopped on
// an error (a bounded run that cannot start, data loss, a missing topic in a
// bounded run, a permanent cluster error, a failed final commit) exits 1,
// and returns the exit code. Benthos alone ends such a run as if it had
// ended normally, with 0. It is the one call a program that adds this input
// to its own Benthos or Redpanda Connect build needs:
//
//	func main() { os.Exit(plugin.RunCLI(context.Background(), nil)) }
//
// env is the environment to run in, or nil for a copy of Benthos' global
// environment (every component the program's imports registered). The input
// is registered in a copy of it (env itself is left as it is) with
// Options.OnFailure. opts are passed on after the environment, so they must
// not set another one. An error of the CLI itself is printed to stderr.
//
// Before a stream starts, RunCLI refuses a config whose bounded
// kafka_batched_ranges input feeds a batching policy without a period
// (checkEndBatching). Benthos would wait for ever for the messages that
// policy holds at the end. An opts entry of service.CLIOptOnConfigParse
// replaces that check (Benthos keeps one such hook).
func RunCLI(ctx context.Context, env *service.Environment, opts ...service.CLIOptFunc) int {
	if env == nil {
		env = service.GlobalEnvironment()
	}
	var failed, interrupted atomic.Bool
	env = env.Without(InputName)
	onFailure := func(err error) {
		if errors.Is(err, ErrStoppedBeforeEnd) {
			interrupted.Store(true)
		} else {
			failed.Store(true)
		}
	}
	if err := Register(env, Options{OnFailure: onFailure}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code, err := service.RunCLIToCode(ctx, append([]service.CLIOptFunc{service.CLIOptSetEnvironment(env), endBatchingOpt()}, opts...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	switch {
	case code != 0:
	case failed.Load():
		code = ExitFailed
	case interrupted.Load():
		code = ExitStoppedBeforeEnd
	}
	return code
}
