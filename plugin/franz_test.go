package plugin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestForeignFields checks that a field of kafka_franz, redpanda or Bento's
// kafka_franz that this input names otherwise or does without gets a lint,
// and the same error from ParseConfig, naming the field this input uses
// instead (with the value translated where there is one).
func TestForeignFields(t *testing.T) {
	tests := []struct {
		field string // field: value, as kafka_franz users write it
		want  string
	}{
		{"start_offset: latest", "start_offset is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from: latest"},
		{"start_offset: committed", "start_offset is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from: committed"},
		{"start_offset: soon", "start_offset is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from (earliest, latest, committed or timestamp)"},
		{"auto_offset_reset: none", "auto_offset_reset is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from: committed"},
		{"auto_offset_reset: earliest", "auto_offset_reset is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from: earliest"},
		{"start_from_oldest: false", "start_from_oldest is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from: latest"},
		{"start_from_oldest: true", "start_from_oldest is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use start_from: earliest"},
		{"transaction_isolation_level: read_committed", "transaction_isolation_level is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use isolation_level: read_committed"},
		{"checkpoint_limit: 1024", "checkpoint_limit is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use max_in_flight, the ranges in flight across all partitions (each of up to max_range_records offsets), to bound what is processed at once; ordered: true keeps one range per partition in flight"},
		{"addresses: [ \"a:1\" ]", "addresses is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use seed_brokers (host:port entries, commas allowed)"},
		{"target_version: 2.1.0", "target_version is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; franz-go negotiates each request's version with each broker (ApiVersions)"},
		{"group: { session_timeout: 10s }", "group is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: write its fields at the top level: session_timeout, heartbeat_interval and rebalance_timeout"},
		{"max_processing_period: 100ms", "max_processing_period is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; a member of a group has rebalance_timeout to finish its revoked partitions' batches (revoke_drain_timeout)"},
		{"fetch_buffer_cap: 256", "fetch_buffer_cap is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use fetch_max_partition_bytes and fetch_max_bytes, which bound what is fetched ahead of the pipeline"},
		{"extract_tracing_map: root = @", "extract_tracing_map is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; this input does not extract tracing spans from records (a mapping processor can read the headers: metadata)"},
		{"partition_buffer_bytes: 1MB", "partition_buffer_bytes is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: use fetch_max_partition_bytes (what one fetch brings per partition) and max_in_flight (the ranges in flight)"},
		{"topic_lag_refresh_period: 5s", "topic_lag_refresh_period is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; with lag_metadata: true each message carries its partition's lag as listed every poll_interval"},
		{"request_timeout_overhead: 10s", "request_timeout_overhead is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; requests are bounded by the group's timeouts and, at start, by start_timeout"},
		{"conn_idle_timeout: 20s", "conn_idle_timeout is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; connections are kept per broker (idle cursors close after consumer_cache.idle_timeout)"},
		{"multi_header: true", "multi_header is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; a header key repeated in a record always gives the list of its values, in record order, and a key that occurs once its value as a string"},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			yaml := "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n" + tc.field + "\n"
			lints := lintInput(t, "kafka_batched_ranges:\n"+indent(yaml))
			assert.Equal(t, []string{tc.want}, lints, "lint of %q: the hint once, and no bare \"not recognised\"", tc.field)
			_, err := parseYAML(t, yaml)
			require.Error(t, err, "ParseConfig(%q)", yaml)
			assert.Equal(t, tc.want, err.Error(), "ParseConfig(%q)", yaml)
		})
	}
}

// TestSASLObjectOfTheOldKafkaInput: the old kafka input's sasl object
// (mechanism, user, password) written where this input takes a list gets
// one lint that shows the list form, not one invented "sasl[i].mechanism"
// error per key and value (six before).
func TestSASLObjectOfTheOldKafkaInput(t *testing.T) {
	lints := lintInput(t, "kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n  topics: [ t ]\n  sasl:\n    mechanism: PLAIN\n    user: alice\n    password: secret\n")
	var ours []string
	for _, l := range lints {
		assert.NotContains(t, l, "sasl[", "an invented entry: %q", lints)
		if strings.HasPrefix(l, "sasl must be a list") {
			ours = append(ours, l)
		}
	}
	assert.Equal(t, []string{"sasl must be a list of mechanisms, each an object: sasl: [ { mechanism: PLAIN, username: ..., password: ... } ] (the old kafka input's sasl object, with user, is one entry here, with username)"}, ours, "lints %q", lints)
}
