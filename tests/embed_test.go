package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEmbedderExitsNonZero builds tests/testdata/embedder, a main that uses only plugin.RunCLI
// (and Benthos' pure and io components), and runs it on a bounded read that cannot start (its
// seed broker does not listen; start_timeout 1s): the input stops on an error, which Benthos
// alone would end with exit 0, and the program exits 1. The same program on a config with
// nothing wrong (a lint) exits 0.
func TestEmbedderExitsNonZero(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "embedder")
	build := exec.Command("go", "build", "-o", bin, "./tests/testdata/embedder")
	build.Dir = repoRoot
	out, err := build.CombinedOutput()
	require.NoErrorf(t, err, "go build ./tests/testdata/embedder:\n%s", out)

	dir := t.TempDir()
	cfg := writeRunConfig(t, dir, inputConfig{
		"seed_brokers":  []string{closedAddr(t)},
		"topics":        []string{"kbr-embedder"},
		"stop_at":       "end",
		"start_timeout": "1s",
	}, filepath.Join(dir, "out.jsonl"))

	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = os.Environ()
		done := make(chan struct{})
		var out []byte
		var err error
		go func() {
			defer close(done)
			out, err = cmd.CombinedOutput()
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("embedder %v did not end within a minute\n%s", args, out)
		}
		var exit *exec.ExitError
		if err != nil {
			require.ErrorAsf(t, err, &exit, "embedder %v", args)
			return exit.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	code, log := run("run", cfg)
	require.Equalf(t, 1, code, "the embedder's failed run\n%s", log)
	require.Contains(t, log, "Input stopped: could not start within start_timeout (1s)")
	code, log = run("lint", cfg)
	require.Equalf(t, 0, code, "the embedder's lint of a valid config\n%s", log)
}
