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
		// Bento's kafka_franz.
		{"preferring_lag: 1000", "preferring_lag is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; ranges of every partition are planned in turn, so a lagging partition is read at once, with max_in_flight ranges in flight across partitions"},
		{"rate_limit: orders_limit", "rate_limit is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; throttle with a rate_limit processor in the pipeline (pipeline.processors: [ { rate_limit: { resource: orders_limit } } ]), which takes the same rate_limit resource"},
		{"reconnect_on_unknown_topic: true", "reconnect_on_unknown_topic is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; a topic that does not exist never stops a continuous run (it is read once it is created), and on_missing_topic decides for a bounded run"},
		// Redpanda Connect's.
		{"max_yield_batch_bytes: 32KB", "max_yield_batch_bytes is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; batching (Benthos' batch policy, byte_size included) sizes the message batches, cut within each range of at most max_range_records offsets"},
		{"timely_nacks_maximum_wait: 1m", "timely_nacks_maximum_wait is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; a batch waits for the pipeline's acknowledgement as long as it takes (a crash re-reads at most max_in_flight × max_range_records records; with share_group, share_renew_interval keeps its records)"},
		{"unordered_processing: { enabled: true, checkpoint_limit: 1024, batching: { count: 100 } }", "unordered_processing is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; this input already processes a partition's records in parallel: up to max_in_flight ranges of up to max_range_records offsets are in flight at once, several of one partition among them (ordered: true keeps one range per partition in flight, in order); write its batching policy as batching (cut within each range) and bound what is in flight with max_in_flight instead of its checkpoint_limit"},
		{"tcp:\n  tcp_user_timeout: 5s", "tcp.tcp_user_timeout is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; tcp.keep_alive notices a connection whose peer stopped answering (after idle + count × interval, 2m30s by default)"},
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

// TestWrongTypeSaysOnlyWhatIsWrong: a string where a list belongs (topics: orders, or an unset
// environment variable in place of a list) gets one lint, that the field must be a list, naming
// the value: not also "topics must name at least one topic" or "seed_brokers must name at least
// one broker", which are not what is wrong (issue 44; Benthos decodes such a string into the
// empty list `[]` gives, so the fields are any fields with a rule of their own). An empty list
// still gets those; ParseConfig says the same.
func TestWrongTypeSaysOnlyWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		fields string
		want   []string
	}{
		{"seed_brokers: [ \"a:1\" ]\ntopics: orders\n", []string{`topics must be a list, such as [ orders ], got "orders"`}},
		{"seed_brokers: \"a:1\"\ntopics: [ t ]\n", []string{`seed_brokers must be a list, such as [ "localhost:9092" ], got "a:1"`}},
		{"seed_brokers: \"\"\ntopics: \"\"\n", []string{`seed_brokers must be a list, such as [ "localhost:9092" ], got ""`, `topics must be a list, such as [ orders ], got ""`}},
		{"seed_brokers: [ \"a:1\" ]\nregexp_topics_include: \"o.*\"\n", []string{`regexp_topics_include must be a list, such as [ '^orders\.' ], got "o.*"`}},
		{"seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nregexp_topics: true\nregexp_topics_exclude: 5\n", []string{`regexp_topics_exclude must be a list, such as [ '\.tmp$' ], got 5`}},
		// Written without a value: an environment variable that is not set leaves it so, and
		// Benthos' lint says which.
		{"seed_brokers:\ntopics: [ t ]\n", []string{`seed_brokers has no value: write a list, such as [ "localhost:9092" ]`}},
		{"seed_brokers: [ \"a:1\" ]\ntopics:\n", []string{`topics has no value: write a list, such as [ orders ]`}},
		{"seed_brokers: []\ntopics: [ t ]\n", []string{"seed_brokers must name at least one broker"}},
		{"topics: [ t ]\n", []string{"seed_brokers must name at least one broker"}},
		{"seed_brokers: [ \"a:1\" ]\ntopics: []\n", []string{"topics must name at least one topic (or regexp_topics_include a pattern)"}},
		{"seed_brokers: [ \"a:1\" ]\n", []string{"topics must name at least one topic (or regexp_topics_include a pattern)"}},
	} {
		assert.ElementsMatch(t, tc.want, lintInput(t, "kafka_batched_ranges:\n"+indent(tc.fields)), "lint of %q", tc.fields)
		_, err := parseYAML(t, tc.fields)
		if assert.Error(t, err, "ParseConfig(%q)", tc.fields) {
			assert.ElementsMatch(t, tc.want, strings.Split(err.Error(), "\n"), "ParseConfig(%q)", tc.fields)
		}
	}
}
