package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunDemo(t *testing.T) {
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	sum, err := RunDemo(ctx, &buf, DemoOptions{Records: 20000, Partitions: 8})
	require.NoError(t, err, "RunDemo output:\n%s", buf.String())
	assert.Equal(t, int64(20000), sum.Records, "Summary.Records")
	assert.Positive(t, sum.Bytes, "Summary.Bytes")
	// 2500 records per partition, demo.yaml's ranges hold up to 5000: one each.
	assert.Equal(t, int64(8), sum.Ranges, "Summary.Ranges")
	assert.Positive(t, sum.Elapsed, "Summary.Elapsed")
	out := buf.String()
	for _, want := range []string{"in-process broker", "20000 sample records", "8 partitions", "B/s,", "continuations", "20000 records"} {
		assert.Contains(t, out, want, "RunDemo output does not mention %q:\n%s", want, out)
	}
	// demo.yaml reports progress every 200ms: a run that long has a line
	// (without -race the demo often ends within 100ms, before the first).
	if sum.Elapsed >= 400*time.Millisecond {
		assert.Contains(t, out, "Progress: ", "RunDemo output of a %s run has no progress line:\n%s", sum.Elapsed, out)
	}
}

func TestRunDemoInvalidOptions(t *testing.T) {
	tests := []struct {
		opts DemoOptions
		want string
	}{
		{opts: DemoOptions{Records: 0, Partitions: 8}, want: "records must be > 0, got 0"},
		{opts: DemoOptions{Records: -1, Partitions: 8}, want: "records must be > 0, got -1"},
		{opts: DemoOptions{Records: 10, Partitions: 0}, want: "partitions must be > 0, got 0"},
		{opts: DemoOptions{Records: 10, Partitions: 1, Config: "input: [ not yaml"}, want: "config"},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		_, err := RunDemo(t.Context(), &buf, tc.opts)
		require.Error(t, err, "RunDemo(%+v) = nil, want an error", tc.opts)
		assert.Contains(t, err.Error(), tc.want, "RunDemo(%+v) = %q, want it to contain %q", tc.opts, err, tc.want)
	}
}

// cancelOn is an io.Writer that cancels a context once the text written to
// it contains a marker.
type cancelOn struct {
	mu     sync.Mutex // guards buf
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.buf.Write(p)
	hit := strings.Contains(w.buf.String(), w.marker)
	w.mu.Unlock()
	if hit {
		w.cancel()
	}
	return n, err
}

// TestRunDemoCancelled cancels the demo while its stream runs: RunDemo must
// return ctx's error and leave no input behind. It runs in its own process,
// so that a leaked stream cannot disturb the other tests.
func TestRunDemoCancelled(t *testing.T) {
	if !runInSubprocess(t, "TestRunDemoCancelled", 90*time.Second) {
		return
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &cancelOn{marker: "demo: running", cancel: cancel}

	done := make(chan error, 1)
	go func() {
		_, err := RunDemo(ctx, w, DemoOptions{Records: 200000, Partitions: 8})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "RunDemo did not return within 30s of its context being cancelled")
	}
	assert.ErrorIs(t, err, context.Canceled, "RunDemo after cancel = %v, want context.Canceled", err)

	// The demo's stream must be stopped once RunDemo returned.
	var stacks string
	for range 20 {
		b := make([]byte, 1<<20)
		stacks = string(b[:runtime.Stack(b, true)])
		if !strings.Contains(stacks, streamMarker) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("the demo's stream still runs 2s after RunDemo returned:\n%s", streamStacks(stacks))
}

// streamMarker is in the stack of goroutines of a running Benthos stream's
// input.
const streamMarker = "benthos/v4/internal/component/input"

// streamStacks returns the goroutine stacks of a running Benthos stream's
// input.
func streamStacks(all string) string {
	var out []string
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, streamMarker) {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// subprocessEnv marks a test run by runInSubprocess: the test does its work
// instead of starting itself again.
const subprocessEnv = "KBR_CONNECT_TEST_SUBPROCESS"

// runInSubprocess runs the test named name alone in a new process of the test
// binary and fails t if it fails there, showing its output. It reports
// whether the caller is that process and should do the work itself. Used by
// tests that check what a process leaves running.
func runInSubprocess(t *testing.T, name string, timeout time.Duration) (isChild bool) {
	t.Helper()
	if os.Getenv(subprocessEnv) == name {
		return true
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), subprocessEnv+"="+name)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("%s did not finish within %s:\n%s", name, timeout, out)
		return false
	}
	if err != nil {
		t.Errorf("%s failed in its own process: %v\n%s", name, err, out)
	} else if !bytes.Contains(out, []byte("--- PASS: "+name)) {
		t.Errorf("%s did not run in its own process:\n%s", name, out)
	}
	return false
}
