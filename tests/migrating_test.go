package tests

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBinaryLintForeignFields runs `connect lint` of the compiled binary on a
// kafka_franz config carried over as it is: each field this input names
// otherwise gets one lint, at its own line, that says what to write instead
// (docs/migrating.md; no bare "not recognised" beside it), and the forms it shares with
// kafka_franz (comma-separated topics, round_robin, sizes with units) pass.
func TestBinaryLintForeignFields(t *testing.T) {
	t.Parallel()
	const conf = `input:
  kafka_batched_ranges:
    seed_brokers: [ "127.0.0.1:9092" ]
    topics: [ "orders,payments" ]
    consumer_group: g
    group_balancers: [ round_robin ]
    fetch_max_bytes: 50MiB
    start_offset: committed
    transaction_isolation_level: read_committed
    checkpoint_limit: 1024
    multi_header: true
    start_from_oldest: false
    auto_offset_reset: none
output:
  drop: {}
`
	path := filepath.Join(t.TempDir(), "franz.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	res := runConnect(t, time.Minute, nil, "lint", path)
	require.False(t, res.TimedOut, "connect lint timed out\n%s", res)
	assert.NotEqual(t, 0, res.ExitCode, "connect lint passed fields this input does not have\n%s", res)
	const of = " is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: "
	assert.ElementsMatch(t, []string{
		"start_offset" + of + "use start_from: committed",
		"transaction_isolation_level" + of + "use isolation_level: read_committed",
		"checkpoint_limit" + of + "use max_in_flight, the ranges in flight across all partitions (each of up to max_range_records offsets), to bound what is processed at once; ordered: true keeps one range per partition in flight",
		"multi_header" + of + "remove it; a header key repeated in a record always gives the list of its values, in record order, and a key that occurs once its value as a string",
		"start_from_oldest" + of + "use start_from: latest",
		"auto_offset_reset" + of + "use start_from: committed",
	}, lintMessages(res, path), "connect lint %s\n%s", path, res)
}

// TestBinaryListShowsDescriptions pins what docs/configuration.md says of `connect
// list`: `list inputs` names the input (and nothing more), `list --format
// cue inputs` prints the spec's summary and each field's description.
func TestBinaryListShowsDescriptions(t *testing.T) {
	t.Parallel()
	res := runConnect(t, time.Minute, nil, "list", "inputs")
	requireExitZero(t, res)
	assert.Contains(t, res.Stdout, "  - kafka_batched_ranges\n")
	res = runConnect(t, time.Minute, nil, "list", "--format", "cue", "inputs")
	requireExitZero(t, res)
	assert.Contains(t, res.Stdout, "// Reads Kafka partitions as planned half-open offset ranges")
	assert.Contains(t, res.Stdout, "// Kafka brokers to bootstrap from, as `host:port`.")
	assert.Contains(t, res.Stdout, "// Regular expressions of the topics to read, as Redpanda Connect's `kafka_franz` and `redpanda` inputs name them")
}
