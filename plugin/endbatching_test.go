package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckEndBatching checks the promise of RunCLI's doc: a config whose
// bounded input feeds a batching policy that can hold messages and has no
// period is refused, naming the policy; every other config runs.
func TestCheckEndBatching(t *testing.T) {
	const bounded = `"input": {"kafka_batched_ranges": {"topics": ["t"], "stop_at": "end"}}`
	const continuous = `"input": {"kafka_batched_ranges": {"topics": ["t"]}}`
	for _, tc := range []struct {
		name, conf string
		want       string // the path the error names; "" for no error
	}{
		{"count without period", `{` + bounded + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50}}}}`, "output.broker.batching"},
		{"byte_size without period", `{` + bounded + `, "output": {"http_client": {"url": "x", "batching": {"byte_size": 1000}}}}`, "output.http_client.batching"},
		{"check without period", `{` + bounded + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"check": "true"}}}}`, "output.broker.batching"},
		{"nested in a switch case", `{` + bounded + `, "output": {"switch": {"cases": [{"output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 2}}}}]}}}`, "output.switch.cases.0.output.broker.batching"},
		{"an output resource", `{` + bounded + `, "output": {"resource": "o"}, "output_resources": [{"label": "o", "broker": {"outputs": [{"drop": {}}], "batching": {"count": 9}}}]}`, "output_resources.0.broker.batching"},
		{"a broker input's batching", `{"input": {"broker": {"inputs": [{"kafka_batched_ranges": {"stop_at": "timestamp"}}], "batching": {"count": 10}}}, "output": {"drop": {}}}`, "input.broker.batching"},
		{"a batched input's policy", `{"input": {"batched": {"child": {"kafka_batched_ranges": {"stop_at": "end"}}, "policy": {"count": 10}}}, "output": {"drop": {}}}`, "input.batched.policy"},
		{"count as a string", `{` + bounded + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": "50"}}}}`, "output.broker.batching"},
		{"with a period", `{` + bounded + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50, "period": "1s"}}}}`, ""},
		{"count of one", `{` + bounded + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 1}}}}`, ""},
		{"defaults", `{` + bounded + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 0, "byte_size": 0, "period": "", "check": ""}}}}`, ""},
		{"continuous", `{` + continuous + `, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50}}}}`, ""},
		{"stop_at never", `{"input": {"kafka_batched_ranges": {"stop_at": "never"}}, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50}}}}`, ""},
		{"the input's own batching", `{"input": {"kafka_batched_ranges": {"stop_at": "end", "batching": {"count": 50}}}, "output": {"drop": {}}}`, ""},
		{"a buffer", `{` + bounded + `, "buffer": {"memory": {}}, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50}}}}`, ""},
		{"buffer none", `{` + bounded + `, "buffer": {"none": {}}, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50}}}}`, "output.broker.batching"},
		{"another input", `{"input": {"generate": {"count": 5}}, "output": {"broker": {"outputs": [{"drop": {}}], "batching": {"count": 50}}}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conf any
			require.NoError(t, json.Unmarshal([]byte(tc.conf), &conf))
			err := checkEndBatching(conf)
			if tc.want == "" {
				assert.NoError(t, err, "checkEndBatching(%s)", tc.conf)
				return
			}
			require.Error(t, err, "checkEndBatching(%s)", tc.conf)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want+": "), "checkEndBatching(%s) = %q, want it to name %s first", tc.conf, err, tc.want)
			assert.Contains(t, err.Error(), "period")
		})
	}
}

// TestRunCLIRefusesABoundedRunThatCannotEnd: the bounded run of issue 50
// (stop_at: end, an output batching by count without a period), which
// waited for ever, ends at once through RunCLI (connect run) with exit code
// 1 and an error naming the policy and what to change; the input never
// starts.
func TestRunCLIRefusesABoundedRunThatCannotEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bounded.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
http: { enabled: false }
input:
  kafka_batched_ranges:
    seed_brokers: [ "127.0.0.1:1" ]
    topics: [ changelog ]
    stop_at: end
output:
  broker:
    outputs: [ { drop: {} } ]
    batching: { count: 50 }
`), 0o644))
	stderr := captureStderr(t)
	start := time.Now()
	code := RunCLI(t.Context(), service.NewEnvironment(), service.CLIOptSetArgs("connect", "run", path))
	out := stderr()
	assert.Equal(t, 1, code, "exit code; stderr:\n%s", out)
	assert.Less(t, time.Since(start), 10*time.Second, "the run ended only after %s", time.Since(start))
	assert.Contains(t, out, "output.broker.batching: a batching policy without a period")
	assert.Contains(t, out, "period: 1s")
}

// captureStderr redirects os.Stderr until the returned function is called,
// which restores it and returns what was written.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stderr
	os.Stderr = w
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	restored := false
	restore := func() string {
		if restored {
			return ""
		}
		restored = true
		os.Stderr = old
		_ = w.Close()
		select {
		case s := <-got:
			return s
		case <-time.After(5 * time.Second):
			return ""
		}
	}
	t.Cleanup(func() { restore() })
	return restore
}

// TestBoundedRunWithOutputBatchingEnds is the reproduction of issue 50's
// hang with the policy RunCLI's error asks for (a period): a bounded run of
// several ranges per partition, whose record count is not a multiple of the
// output's batch count, ends by itself with every record acknowledged,
// ordered or not.
func TestBoundedRunWithOutputBatchingEnds(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(map[bool]string{true: "ordered", false: "unordered"}[ordered], func(t *testing.T) {
			const (
				topic      = "changelog"
				partitions = 2
				n          = 5003 // 2,501 and 2,502 per partition: 6 ranges of at most 500; 100 x 50 + 3
			)
			addr := newKafka(t, topic, partitions)
			produceRecords(t, addr, topic, partitions, 0, n)
			env := service.NewEnvironment().Without(InputName)
			require.NoError(t, Register(env, Options{}))
			sb := env.NewStreamBuilder()
			log := &syncBuffer{}
			sb.SetLogger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})))
			require.NoError(t, sb.AddInputYAML(fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ changelog ]
  stop_at: end
  ordered: %t
  max_range_records: 500
`, addr, ordered)))
			sb.SetThreads(4)
			require.NoError(t, sb.AddOutputYAML(`
broker:
  outputs: [ { drop: {} } ]
  batching: { count: 50, period: 200ms }
`))
			stream, err := sb.Build()
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			require.NoError(t, stream.Run(ctx), "the bounded run did not end within 30 s\n%s", log)
			assert.Contains(t, log.String(), "Closed: 5003 records acknowledged of 5003 handed out", "%s", log)
		})
	}
}
