package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// embedRecipe is the recipe docs/embedding.md gives for adding the input to a
// program of one's own from a clone of this repository (the module path is
// not published, so `go get …@latest` cannot fetch it), in order; CLONE is
// the clone's path. TestEmbeddingRecipeBuilds runs exactly these.
var embedRecipe = [][]string{
	{"go", "mod", "init", "example.com/myconnect"},
	{"go", "mod", "edit", "-require", "github.com/kbr/kafka_batched_ranges@v0.0.0", "-replace", "github.com/kbr/kafka_batched_ranges=CLONE"},
	{"go", "get", "github.com/redpanda-data/benthos/v4@v4.60.0"},
	{"go", "mod", "tidy"},
	{"go", "build", "-o", "myconnect", "."},
}

// TestEmbeddingRecipeBuilds follows the embedding recipe in a module of its
// own, outside this one: tests/testdata/embedder/main.go (the input,
// plugin.RunCLI's exit codes and the prometheus exporter) as the program's
// main.go, this clone as the replaced module, Benthos v4.60.0. The program
// lints a config with Redpanda Connect's prometheus fields, and its failed
// bounded run exits 1 with the input's error.
func TestEmbeddingRecipeBuilds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	main, err := os.ReadFile(filepath.Join(repoRoot, "tests", "testdata", "embedder", "main.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), main, 0o644))
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "embedding.md"))
	require.NoError(t, err)
	for _, step := range embedRecipe {
		shown := strings.ReplaceAll(strings.Join(step, " "), "CLONE", "../kafka_batched_ranges")
		require.Containsf(t, string(doc), shown, "docs/embedding.md does not show the recipe's step %q", shown)
		args := make([]string, len(step)-1)
		for i, a := range step[1:] {
			args[i] = strings.ReplaceAll(a, "CLONE", repoRoot)
		}
		cmd := exec.Command(step[0], args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoErrorf(t, err, "%s:\n%s", shown, out)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "github.com/redpanda-data/benthos/v4 v4.60.0", "the Benthos version the recipe builds with")
	bin := filepath.Join(dir, "myconnect")

	cfg := filepath.Join(dir, "metrics.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`input:
  kafka_batched_ranges:
    seed_brokers: [ "`+closedAddr(t)+`" ]
    topics: [ kbr-recipe ]
    stop_at: end
    start_timeout: 1s
output:
  drop: {}
metrics:
  prometheus:
    use_histogram_timing: false
    summary_quantiles_objectives: [ { quantile: 0.5, error: 0.05 } ]
    push_job_name: benthos_push
    file_output_path: ""
`), 0o644))
	lint := exec.Command(bin, "lint", cfg)
	out, err := lint.CombinedOutput()
	require.NoErrorf(t, err, "myconnect lint with Redpanda Connect's prometheus fields:\n%s", out)
	run := exec.Command(bin, "run", cfg)
	out, err = run.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAsf(t, err, &exit, "myconnect run of a bounded read that cannot start:\n%s", out)
	require.Equalf(t, 1, exit.ExitCode(), "its exit code\n%s", out)
	require.Contains(t, string(out), "could not start within start_timeout (1s)")
	// The program says which version of the input it carries (issue 44): built from a clone (a
	// replacement by a directory), the VERSION file's, -devel.
	version, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	require.NoError(t, err)
	require.Contains(t, string(out), "kafka_batched_ranges input "+strings.TrimSpace(string(version))+"-devel")
}
