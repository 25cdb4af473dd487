package plugin

import (
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Fields of kafka_franz (Redpanda Connect's, whose redpanda input shares
// them, and Bento's) and of the old kafka input that this input names
// otherwise or does without. A config carried over with one gets, from the
// lint (at the field's line) and from ParseConfig, the field to write
// instead (foreignRules, foreignSpecFields). Docs/migrating.md has the whole
// table.
var foreignFields = []struct {
	name string
	hint func(v string) string // v: the value as written
}{
	{"start_offset", startFromHint(map[string]string{startEarliest: startEarliest, startLatest: startLatest, startCommitted: startCommitted})},
	{"auto_offset_reset", startFromHint(map[string]string{startEarliest: startEarliest, startLatest: startLatest, "none": startCommitted})},
	{"start_from_oldest", startFromHint(map[string]string{"true": startEarliest, "false": startLatest})},
	{"transaction_isolation_level", func(v string) string {
		if oneOf(fieldIsolationLevel, v, readUncommitted, readCommitted) == nil {
			return fmt.Sprintf("use %s: %s", fieldIsolationLevel, v)
		}
		return fmt.Sprintf("use %s (%s or %s)", fieldIsolationLevel, readUncommitted, readCommitted)
	}},
	{"checkpoint_limit", func(string) string {
		return fmt.Sprintf("use %s, the ranges in flight across all partitions (each of up to %s offsets), to bound what is processed at once; %s: true keeps one range per partition in flight",
			fieldMaxInFlight, fieldMaxRangeRecords, fieldOrdered)
	}},
	{"multi_header", func(string) string {
		return "remove it; a header key repeated in a record always gives the list of its values, in record order, and a key that occurs once its value as a string"
	}},
	// The old kafka input (sarama).
	{"addresses", func(string) string {
		return fmt.Sprintf("use %s (host:port entries, commas allowed)", fieldSeedBrokers)
	}},
	{"target_version", func(string) string {
		return "remove it; franz-go negotiates each request's version with each broker (ApiVersions)"
	}},
	{"max_processing_period", func(string) string {
		return fmt.Sprintf("remove it; a member of a group has %s to finish its revoked partitions' batches (%s)", fieldRebalanceTimeout, fieldRevokeDrain)
	}},
	{"group", func(string) string {
		return fmt.Sprintf("write its fields at the top level: %s, %s and %s", fieldSessionTimeout, fieldHeartbeatInterval, fieldRebalanceTimeout)
	}},
	{"fetch_buffer_cap", func(string) string {
		return fmt.Sprintf("use %s and %s, which bound what is fetched ahead of the pipeline", fieldFetchMaxPartitionBytes, fieldFetchMaxBytes)
	}},
	{"extract_tracing_map", func(string) string {
		return "remove it; this input does not extract tracing spans from records (a mapping processor can read the headers: metadata)"
	}},
	// Redpanda Connect's redpanda and kafka_franz inputs.
	{"partition_buffer_bytes", func(string) string {
		return fmt.Sprintf("use %s (what one fetch brings per partition) and %s (the ranges in flight)", fieldFetchMaxPartitionBytes, fieldMaxInFlight)
	}},
	{"topic_lag_refresh_period", func(string) string {
		return "remove it; with lag_metadata: true each message carries its partition's lag as listed every poll_interval"
	}},
	{"request_timeout_overhead", func(string) string {
		return "remove it; requests are bounded by the group's timeouts and, at start, by start_timeout"
	}},
	{"conn_idle_timeout", func(string) string {
		return fmt.Sprintf("remove it; connections are kept per broker (idle cursors close after %s.%s)", fieldConsumerCache, fieldCacheIdleTimeout)
	}},
	{"max_yield_batch_bytes", func(string) string {
		return fmt.Sprintf("remove it; %s (Benthos' batch policy, byte_size included) sizes the message batches, cut within each range of at most %s offsets", fieldBatching, fieldMaxRangeRecords)
	}},
	{"timely_nacks_maximum_wait", func(string) string {
		return fmt.Sprintf("remove it; a batch waits for the pipeline's acknowledgement as long as it takes (a crash re-reads at most %s × %s records; with %s, %s keeps its records)", fieldMaxInFlight, fieldMaxRangeRecords, fieldShareGroup, fieldShareRenewInterval)
	}},
	{"unordered_processing", func(string) string {
		return fmt.Sprintf("remove it; this input already processes a partition's records in parallel: up to %s ranges of up to %s offsets are in flight at once, several of one partition among them (%s: true keeps one range per partition in flight, in order); write its batching policy as %s (cut within each range) and bound what is in flight with %s instead of its checkpoint_limit",
			fieldMaxInFlight, fieldMaxRangeRecords, fieldOrdered, fieldBatching, fieldMaxInFlight)
	}},
	{fieldTCPUserTimeout, func(string) string {
		return fmt.Sprintf("remove it; %s.keep_alive notices a connection whose peer stopped answering (after idle + count × interval, 2m30s by default)", fieldTCP)
	}},
	// Bento's kafka_franz.
	{"preferring_lag", func(string) string {
		return fmt.Sprintf("remove it; ranges of every partition are planned in turn, so a lagging partition is read at once, with %s ranges in flight across partitions", fieldMaxInFlight)
	}},
	{"rate_limit", func(v string) string {
		if v == "" {
			v = "<name>"
		}
		return fmt.Sprintf("remove it; throttle with a rate_limit processor in the pipeline (pipeline.processors: [ { rate_limit: { resource: %s } } ]), which takes the same rate_limit resource", v)
	}},
	{"reconnect_on_unknown_topic", func(string) string {
		return fmt.Sprintf("remove it; a topic that does not exist never stops a continuous run (it is read once it is created), and %s decides for a bounded run", fieldOnMissingTopic)
	}},
}

// fieldTCPUserTimeout is Redpanda Connect's tcp.tcp_user_timeout, which the
// tcp object has only to say what to write instead (tcpField).
const fieldTCPUserTimeout = fieldTCP + ".tcp_user_timeout"

// foreignRules are the field rules of foreignFields. A field the spec has
// only to say, at its own line, what to write instead.
func foreignRules() []fieldRule {
	rules := make([]fieldRule, len(foreignFields))
	for i, f := range foreignFields {
		rules[i] = fieldRule{f.name, func(name string, v any) []error {
			s, _ := scalarText(v)
			return []error{fmt.Errorf("%s is a field of kafka_franz, redpanda or the old kafka input, not of %s: %s", name, InputName, f.hint(s))}
		}}
	}
	return rules
}

// foreignSpecFields are the top-level fields of foreignFields in the spec
// (tcpField has the nested one): deprecated (left out of the docs), of any
// type, each with its rule as its lint rule, so `connect lint` reports the
// hint at the field's line, once, instead of Benthos' bare "field not
// recognised".
func foreignSpecFields() []*service.ConfigField {
	var fields []*service.ConfigField
	for _, f := range foreignFields {
		if !strings.Contains(f.name, ".") {
			fields = append(fields, foreignSpecField(f.name, f.name))
		}
	}
	return fields
}

// foreignSpecField is the spec field name of the foreign field at path.
func foreignSpecField(name, path string) *service.ConfigField {
	return service.NewAnyField(name).
		Description("A field of another Kafka input; its lint says what to write instead.").
		Deprecated().
		Optional().
		LintRule(fieldLint(path))
}

// startFromHint is the hint of a field whose values map to start_from's.
func startFromHint(to map[string]string) func(string) string {
	return func(v string) string {
		if s, ok := to[strings.ToLower(v)]; ok {
			return fmt.Sprintf("use %s: %s", fieldStartFrom, s)
		}
		return fmt.Sprintf("use %s (%s, %s, %s or %s)", fieldStartFrom, startEarliest, startLatest, startCommitted, startTimestamp)
	}
}
