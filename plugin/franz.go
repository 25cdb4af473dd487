package plugin

import (
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Fields of kafka_franz (Redpanda Connect's, whose redpanda input shares
// them, and Bento's) that this input names otherwise or does without. A
// config carried over with one gets, from the lint and from ParseConfig, the
// field to write instead (foreignFieldHints), next to Benthos' own "field
// not recognised"; docs/migrating.md has the whole table.
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

// foreignFieldHints: a field of kafka_franz that this input lacks, and what
// to write instead.
func foreignFieldHints(pc *service.ParsedConfig) []error {
	var errs []error
	for _, f := range foreignFields {
		if !pc.Contains(f.name) {
			continue
		}
		v, _ := pc.FieldAny(f.name)
		s, _ := scalarText(v)
		errs = append(errs, fmt.Errorf("%s is a field of kafka_franz, not of %s: %s", f.name, InputName, f.hint(s)))
	}
	return errs
}
