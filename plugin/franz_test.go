package plugin

import (
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
		{"start_offset: latest", "start_offset is a field of kafka_franz, not of kafka_batched_ranges: use start_from: latest"},
		{"start_offset: committed", "start_offset is a field of kafka_franz, not of kafka_batched_ranges: use start_from: committed"},
		{"start_offset: soon", "start_offset is a field of kafka_franz, not of kafka_batched_ranges: use start_from (earliest, latest, committed or timestamp)"},
		{"auto_offset_reset: none", "auto_offset_reset is a field of kafka_franz, not of kafka_batched_ranges: use start_from: committed"},
		{"auto_offset_reset: earliest", "auto_offset_reset is a field of kafka_franz, not of kafka_batched_ranges: use start_from: earliest"},
		{"start_from_oldest: false", "start_from_oldest is a field of kafka_franz, not of kafka_batched_ranges: use start_from: latest"},
		{"start_from_oldest: true", "start_from_oldest is a field of kafka_franz, not of kafka_batched_ranges: use start_from: earliest"},
		{"transaction_isolation_level: read_committed", "transaction_isolation_level is a field of kafka_franz, not of kafka_batched_ranges: use isolation_level: read_committed"},
		{"checkpoint_limit: 1024", "checkpoint_limit is a field of kafka_franz, not of kafka_batched_ranges: use max_in_flight, the ranges in flight across all partitions (each of up to max_range_records offsets), to bound what is processed at once; ordered: true keeps one range per partition in flight"},
		{"multi_header: true", "multi_header is a field of kafka_franz, not of kafka_batched_ranges: remove it; a header key repeated in a record always gives the list of its values, in record order, and a key that occurs once its value as a string"},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			yaml := "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n" + tc.field + "\n"
			lints := lintInput(t, "kafka_batched_ranges:\n"+indent(yaml))
			assert.Contains(t, lints, tc.want, "lint of %q", tc.field)
			_, err := parseYAML(t, yaml)
			require.Error(t, err, "ParseConfig(%q)", yaml)
			assert.Equal(t, tc.want, err.Error(), "ParseConfig(%q)", yaml)
		})
	}
}
