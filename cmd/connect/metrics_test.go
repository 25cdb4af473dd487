package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLintRedpandaConnectMetrics runs `connect lint` of the compiled binary
// on a config whose metrics block is Redpanda Connect's prometheus exporter
// with every field (as its documentation shows them, defaults and all; and
// with every field set): a config migrated from Redpanda Connect lints
// clean. A field the exporter does not have still fails, so the lint is
// real.
func TestLintRedpandaConnectMetrics(t *testing.T) {
	bin := buildBinary(t)
	const pipeline = `input:
  kafka_batched_ranges:
    seed_brokers: [ "127.0.0.1:9092" ]
    topics: [ orders ]
output:
  drop: {}
`
	configs := map[string]string{
		"documented": `metrics:
  prometheus:
    use_histogram_timing: false
    histogram_buckets: []
    summary_quantiles_objectives:
      - error: 0.05
        quantile: 0.5
      - error: 0.01
        quantile: 0.9
      - error: 0.001
        quantile: 0.99
    add_process_metrics: false
    add_go_metrics: false
    push_url: ""
    push_interval: ""
    push_job_name: benthos_push
    push_basic_auth:
      username: ""
      password: ""
    file_output_path: ""
  mapping: ""
`,
		"set": `metrics:
  prometheus:
    use_histogram_timing: true
    histogram_buckets: [ 0.01, 0.1, 1, 10 ]
    summary_quantiles_objectives: [ { quantile: 0.5, error: 0.05 } ]
    add_process_metrics: true
    add_go_metrics: true
    push_url: http://pushgateway:9091
    push_interval: 30s
    push_job_name: orders_export
    push_basic_auth: { username: alice, password: "${PUSH_PASSWORD:secret}" }
    file_output_path: /tmp/metrics.prom
`,
		"empty": "metrics:\n  prometheus: {}\n",
	}
	dir := t.TempDir()
	for name, metrics := range configs {
		path := filepath.Join(dir, name+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(pipeline+metrics), 0o600))
		out, err := exec.Command(bin, "lint", path).CombinedOutput()
		assert.NoError(t, err, "connect lint of Redpanda Connect's prometheus fields (%s): %s", name, out)
	}

	path := filepath.Join(dir, "unknown.yaml")
	require.NoError(t, os.WriteFile(path, []byte(pipeline+"metrics:\n  prometheus:\n    push_urls: http://pushgateway:9091\n"), 0o600))
	out, err := exec.Command(bin, "lint", path).CombinedOutput()
	require.Error(t, err, "connect lint passed a field the exporter does not have: %s", out)
	assert.Contains(t, string(out), "push_urls")
}
