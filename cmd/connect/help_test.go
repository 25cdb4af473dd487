package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildBinary builds this command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "connect")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestHelpShowsExamplesThatWork: the top-level help shows examples of this
// binary (not Benthos' `create kafka//file`, which fails here) and no
// benthos.dev link, and every example it shows that can run here does.
func TestHelpShowsExamplesThatWork(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		require.NoError(t, err, "connect %v: %s", args, out)
		help := string(out)
		assert.NotContains(t, help, "kafka//file", "connect %v", args)
		assert.NotContains(t, help, "benthos.dev", "connect %v", args)
		assert.Contains(t, help, "kafka_batched_ranges", "connect %v", args)
		assert.Contains(t, help, "COMMANDS:", "connect %v: the command list stays", args)
		assert.Contains(t, help, "demo ", "connect %v", args)
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err)
	ran := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "connect" {
			continue
		}
		switch f[1] {
		case "create", "list", "lint":
		default:
			continue // run and demo read Kafka; lint covers the files they name
		}
		args := f[1:]
		if i := indexOf(args, ">"); i >= 0 {
			args = args[:i]
		}
		if args[0] == "lint" {
			for i := 1; i < len(args); i++ {
				args[i] = filepath.Join("..", "..", args[i])
			}
		}
		res, err := exec.Command(bin, args...).CombinedOutput()
		assert.NoError(t, err, "help example %q: %s", line, res)
		if args[0] == "create" {
			assert.Contains(t, string(res), "kafka_batched_ranges:", "help example %q", line)
		}
		ran++
	}
	assert.GreaterOrEqual(t, ran, 3, "examples run from the help text")
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
