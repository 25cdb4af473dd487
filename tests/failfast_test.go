package tests

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBoundedRunGivesUpOnUnreachableCluster starts a bounded read (stop_at: end) whose only
// seed broker does not listen, with start_timeout: 3s: connect retries, then stops with exit 1
// and an error naming start_timeout and the broker. A continuous read of the same cluster keeps
// retrying past it (Benthos' convention for inputs); it is written without start_timeout, which
// the lint refuses with stop_at: never (issue 50).
func TestBoundedRunGivesUpOnUnreachableCluster(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	in := inputConfig{
		"seed_brokers":  []string{addr},
		"topics":        []string{"kbr-unreachable"},
		"stop_at":       "end",
		"start_timeout": "3s",
	}

	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		line, res := runStopped(t, in)
		require.Truef(t, strings.HasPrefix(line.Msg, inputStoppedPrefix+"could not start within start_timeout (3s)"), "stop message: %s", line.Msg)
		require.Contains(t, line.Msg, addr, "the stop message does not name the broker")
		attempts := failedConnects(res.Stdout + res.Stderr)
		require.GreaterOrEqualf(t, len(attempts), 2, "the bounded run was not retried before it gave up\n%s", res)
		for _, l := range attempts {
			require.NotContainsf(t, l.Msg, unfixableSuffix, "an unreachable broker is said to be unfixable: %s", l.Msg)
		}
	})

	t.Run("continuous", func(t *testing.T) {
		t.Parallel()
		const watch = 6 * time.Second
		cont := inputConfig{}
		for k, v := range in {
			cont[k] = v
		}
		cont["stop_at"] = "never"
		delete(cont, "start_timeout")
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, cont, filepath.Join(dir, "out.jsonl"), withJSONLogs())
		rc := startConnect(t, watch+time.Minute, nil, "run", cfg)
		exited := rc.waitFor(watch, func() bool {
			select {
			case <-rc.done:
				return true
			default:
				return false
			}
		})
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		require.Falsef(t, exited, "a continuous run gave up on an unreachable cluster\n%s", res)
		require.GreaterOrEqualf(t, len(failedConnects(res.Stdout+res.Stderr)), 3, "a continuous run did not keep retrying\n%s", res)
		require.NotContains(t, res.Stdout+res.Stderr, inputStoppedPrefix)
	})
}
