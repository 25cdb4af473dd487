package plugin

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The value rules of the config, stated once and checked twice: by the
// spec's lint rule (lintRule, bloblang, so `connect lint` and the lint that
// `connect run` does first report them) and by ParseConfig (Go, so every code
// path that builds an input checks them). Both take their messages and
// patterns from the constants below, so they say the same thing; bloblang's
// format method uses Go's fmt verbs.
//
// The lint rule uses only the bloblang methods of Benthos' core (no
// parse_duration or int64, which the pure components register): the spec is
// built by an init function, possibly before those components are
// registered, and a rule that fails to parse would turn every lint of the
// input into "field lint mapping itself failed to parse".

// Messages of the value rules: Go format strings, also used as bloblang
// format strings. Values are passed quoted (strconv.Quote, bloblang quote)
// when they are strings as written.
const (
	msgNotInteger    = "%s must be an integer, got %v"
	msgNotPositive   = "%s must be > 0, got %v"
	msgNegative      = "%s must be >= 0, got %v"
	msgNotOneOf      = "%s must be one of %s, got %s"
	msgNotDuration   = "%s must be a duration such as 1s, 500ms or 1m30s, got %s"
	msgNotSize       = "%s must be a byte size such as 1048576, 512KiB or 50MiB, got %s"
	msgSizeRange     = "%s must be > 0 and < 2 GiB, got %s"
	msgSizeOrder     = "%s (%s) must not exceed %s (%s)"
	msgDurationRange = "%s must be at least %s and at most %s, got %s"
	msgTooLong       = "%s must be at most %d bytes, got %d"
	msgNotHostPort   = "%s[%d]: %s is not host:port"
	msgNoBroker      = "%s must name at least one broker"
	msgNoTopic       = "%s must name at least one topic"
	msgBadTopic      = "%s[%d]: invalid entry %s: %s"
	msgTopicTwice    = "%s[%d]: topic %s is listed more than once"
	msgNeedsGroup    = "%s %s requires %s to be set"
	whyEmptyName     = "empty topic name"
	whyNameChars     = "a topic name cannot contain spaces or commas"
	whyEmptyPart     = "empty partition"
	whyNotPartition  = "partition %s is not a non-negative integer"
	whyPartitionSize = "partition %s is too large (the limit is %d)"
	whyBackwards     = "partition range %s runs backwards"
)

// Patterns of the value rules, used by Go's regexp and by bloblang's
// re_match and re_find_all_submatch (the same RE2 engine).
const (
	// brokerPattern is host:port: a host name or IPv4 address, or an IPv6
	// address in brackets, and a port of 1 to 5 digits (1-65535 is checked
	// apart).
	brokerPattern = `^(\[[^\s\[\]]+\]|[^\s\[\]:/,]+):[0-9]{1,5}$`
	// integerPattern is an integer field's value as fmt's %v shows it (so
	// 2.0, read from YAML as a float, is an integer and 1.5 is not).
	integerPattern = `^-?[0-9]+$`
	// partitionPattern is a partition number (after trimming spaces).
	partitionPattern = `^[0-9]+$`
	// durationPattern is what time.ParseDuration accepts (an out-of-range
	// value aside): "0", or numbers with units, with an optional sign.
	durationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// durationPartPattern finds the number and unit of each part of a
	// duration that matches durationPattern.
	durationPartPattern = `([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)`
	// sizePattern is a byte size: an integer and an optional unit of
	// sizeUnits, in any case.
	sizePattern = `^\s*(-?[0-9]+)\s*([A-Za-z]*)\s*$`
	// maxFetchBytes bounds the fetch sizes: franz-go takes them as int32.
	maxFetchBytes = 1<<31 - 1
	// maxDurationNanos is the largest time.Duration, in nanoseconds.
	maxDurationNanos = 1<<63 - 1
)

var (
	brokerRE    = regexp.MustCompile(brokerPattern)
	integerRE   = regexp.MustCompile(integerPattern)
	partitionRE = regexp.MustCompile(partitionPattern)
	sizeRE      = regexp.MustCompile(sizePattern)
)

// sizeUnits are the units of byte sizes, by lower-case name: decimal (KB, MB,
// GB) and binary (KiB, MiB, GiB).
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1000, "mb": 1000 * 1000, "gb": 1000 * 1000 * 1000,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// durationUnits are the units time.ParseDuration accepts, in nanoseconds.
var durationUnits = map[string]int64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9,
}

// quoted formats a value as the messages show it: strings quoted, anything
// else as fmt's %v (the bloblang map "quoted" does the same).
func quoted(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// oneOf checks an enum value: Benthos' own lint of enum fields ignores case
// and does not list the options; this rule does both like ParseConfig.
func oneOf(name, v string, options ...string) error {
	if slices.Contains(options, v) {
		return nil
	}
	return fmt.Errorf(msgNotOneOf, name, strings.Join(options, ", "), strconv.Quote(v))
}

// parseInteger reads an integer field, declared as an any field so that a
// value of the wrong type reaches the lint rule (Benthos skips the lint rule
// of a component whose int field does not decode); name is the field's path.
func parseInteger(name string, v any) (int, error) {
	switch v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		if s := fmt.Sprint(v); integerRE.MatchString(s) {
			if n, err := strconv.Atoi(s); err == nil {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf(msgNotInteger, name, quoted(v))
}

// parseDuration parses a duration field that must be > 0; name is the
// field's path.
func parseDuration(name, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(msgNotDuration, name, strconv.Quote(s))
	}
	if d <= 0 {
		return 0, fmt.Errorf(msgNotPositive, name, strconv.Quote(s))
	}
	return d, nil
}

// durationBound is a bound of a duration field: its value and how the
// messages show it (time.Duration's String writes 1m as 1m0s).
type durationBound struct {
	d    time.Duration
	text string
}

// checkDurationRange checks that d, parsed from s (of the field name) and
// > 0, is within [lo, hi].
func checkDurationRange(name, s string, d time.Duration, lo, hi durationBound) error {
	if d < lo.d || d > hi.d {
		return fmt.Errorf(msgDurationRange, name, lo.text, hi.text, strconv.Quote(s))
	}
	return nil
}

// parseOptionalDuration reads a duration field where 0 turns something off:
// it must parse and be >= 0.
func parseOptionalDuration(pc *service.ParsedConfig, name string) (time.Duration, error) {
	s, err := pc.FieldString(name)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(msgNotDuration, name, strconv.Quote(s))
	}
	if d < 0 {
		return 0, fmt.Errorf(msgNegative, name, strconv.Quote(s))
	}
	return d, nil
}

// parseByteSize parses a fetch size: an integer number of bytes, or one with
// a unit (`512KiB`, `50MiB`, `1MB`), > 0 and < 2 GiB.
func parseByteSize(name, s string) (int32, error) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf(msgNotSize, name, strconv.Quote(s))
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf(msgNotSize, name, strconv.Quote(s))
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n <= 0 || n > maxFetchBytes/unit {
		// The pattern leaves only out-of-range integers to fail.
		return 0, fmt.Errorf(msgSizeRange, name, strconv.Quote(s))
	}
	return int32(n * unit), nil
}

// formatByteSize formats n bytes as parseByteSize reads them, with the
// largest binary unit that divides n.
func formatByteSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// checkBroker checks one seed broker address (entry i of seed_brokers).
func checkBroker(i int, b string) error {
	if brokerRE.MatchString(b) {
		port, _ := strconv.Atoi(b[strings.LastIndexByte(b, ':')+1:])
		if port >= 1 && port <= 65535 {
			return nil
		}
	}
	return fmt.Errorf(msgNotHostPort, fieldSeedBrokers, i, strconv.Quote(b))
}

// lintRuleTemplate is the spec's lint rule with {{name}} placeholders that
// lintRule fills in from the constants above. `this` is the input's config as
// written (after environment variables are replaced); a field left out takes
// its default, so the rule reads optional fields with .or(default). Named maps
// return null for a valid value and the message otherwise; the items of the
// root array are messages, nulls or arrays of them, flattened and filtered at
// the end.
const lintRuleTemplate = `
map quoted {
  root = if this.type() == "string" { this.quote() } else { "%v".format(this) }
}

map as_string {
  root = if ["string", "number", "bool"].contains(this.type()) { this.string() } else { null }
}

map int_error {
  root = if this.value == null {
    null
  } else if this.value.type() != "number" || !"%v".format(this.value).re_match({{integerPattern}}) {
    {{msgNotInteger}}.format(this.name, this.value.apply("quoted"))
  } else if this.min == 1 && this.value < 1 {
    {{msgNotPositive}}.format(this.name, this.value)
  } else if this.min == 0 && this.value < 0 {
    {{msgNegative}}.format(this.name, this.value)
  } else {
    null
  }
}

map enum_error {
  let s = this.value.apply("as_string")
  root = if this.value != null && !this.options.contains($s) {
    {{msgNotOneOf}}.format(this.name, this.options.join(", "), if $s != null { $s.quote() } else { this.value.apply("quoted") })
  } else {
    null
  }
}

map timestamp_error {
  let s = this.value.apply("as_string")
  let ok = $s != null && ($s.trim().re_match("^[0-9]+$") || $s.trim().re_match("^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"))
  root = if this.value == null || $ok || this.value.type() == "timestamp" {
    null
  } else {
    "%s must be an RFC 3339 time such as 2026-11-30T10:00:00Z or unix milliseconds, got %s".format(this.name, if $s != null { $s.quote() } else { this.value.apply("quoted") })
  }
}

map duration_nanos {
  root = this.re_find_all_submatch({{durationPartPattern}}).fold(0, t -> t.tally + t.value.index(1).number() * {{durationUnits}}.get(t.value.index(2)))
}

map duration_error {
  let s = this.value.apply("as_string")
  let valid = $s != null && $s.re_match({{durationPattern}})
  let nanos = if $valid { $s.apply("duration_nanos") } else { 0 }
  root = if this.value == null {
    null
  } else if !$valid || $nanos > {{maxDurationNanos}} {
    {{msgNotDuration}}.format(this.name, if $s != null { $s.quote() } else { this.value.apply("quoted") })
  } else if $s.has_prefix("-") && this.zero_ok == true {
    {{msgNegative}}.format(this.name, $s.quote())
  } else if ($nanos == 0 && this.zero_ok != true) || $s.has_prefix("-") {
    {{msgNotPositive}}.format(this.name, $s.quote())
  } else {
    null
  }
}

map duration_range_error {
  let s = this.value.apply("as_string")
  let nanos = if $s != null && $s.re_match({{durationPattern}}) && !$s.has_prefix("-") { $s.apply("duration_nanos") } else { 0 }
  root = if $nanos > 0 && $nanos <= {{maxDurationNanos}} && ($nanos < this.min_nanos || $nanos > this.max_nanos) {
    {{msgDurationRange}}.format(this.name, this.min, this.max, $s.quote())
  } else {
    null
  }
}

map size_bytes {
  let s = this.apply("as_string").or("")
  let m = $s.re_find_all_submatch({{sizePattern}}).index(0).catch(null)
  let unit = if $m != null { {{sizeUnits}}.get(if $m.index(2) == "" { "b" } else { $m.index(2).lowercase() }) } else { null }
  root = if $unit != null { $m.index(1).number() * $unit } else { null }
}

map size_error {
  let bytes = this.value.apply("size_bytes")
  let shown = if this.value.apply("as_string") != null { this.value.apply("as_string").quote() } else { this.value.apply("quoted") }
  root = if this.value == null {
    null
  } else if $bytes == null {
    {{msgNotSize}}.format(this.name, $shown)
  } else if $bytes <= 0 || $bytes > {{maxFetchBytes}} {
    {{msgSizeRange}}.format(this.name, $shown)
  } else {
    null
  }
}

map partition_error {
  let s = this.trim()
  root = if !$s.re_match({{partitionPattern}}) {
    {{whyNotPartition}}.format(this.quote())
  } else if $s.number() >= {{maxPartition}} {
    {{whyPartitionSize}}.format($s, {{maxPartition}} - 1)
  } else {
    null
  }
}

map partition_item_error {
  let item = this.trim()
  let ends = $item.split("-")
  let lo = $ends.index(0)
  let hi = if $ends.length() > 1 { $ends.slice(1).join("-") } else { null }
  let lo_error = $lo.apply("partition_error")
  let hi_error = if $hi != null { $hi.apply("partition_error") } else { null }
  root = if $item == "" {
    {{whyEmptyPart}}
  } else if $lo_error != null {
    $lo_error
  } else if $hi_error != null {
    $hi_error
  } else if $hi != null && $hi.trim().number() < $lo.trim().number() {
    {{whyBackwards}}.format($item)
  } else {
    null
  }
}

map topic_error {
  let entry = this.apply("as_string").or("").trim()
  let name = $entry.split(":").index(0)
  root = if $name == "" {
    {{whyEmptyName}}
  } else if $name.contains(" ") || $name.contains(",") {
    {{whyNameChars}}
  } else if $entry.contains(":") {
    $entry.split(":").slice(1).join(":").split(",").map_each(i -> i.apply("partition_item_error")).filter(e -> e != null).index(0).catch(null)
  } else {
    null
  }
}

let brokers = if this.seed_brokers.type() == "array" { this.seed_brokers.map_each(e -> (e.apply("as_string").or("")).split(",").map_each(b -> b.trim()).filter(b -> b != "")) } else { [] }
let topics = if this.topics.type() == "array" { this.topics } else { [] }
let patterns = this.regexp_topics.or(false) == true
let topic_errors = $topics.map_each(e -> if $patterns { e.apply("pattern_error") } else { e.apply("topic_error") })
let topic_names = $topics.enumerated().map_each(t -> if $topic_errors.index(t.index) != null { null } else if $patterns { t.value.apply("as_string").or("").trim() } else { t.value.apply("as_string").or("").trim().split(":").index(0) })
let fetch_max = this.fetch_max_bytes.or({{defaultFetchMaxBytes}}).apply("size_bytes")
let fetch_part = this.fetch_max_partition_bytes.or({{defaultFetchMaxPartitionBytes}}).apply("size_bytes")
let fetch_min = this.fetch_min_bytes.or({{defaultFetchMinBytes}}).apply("size_bytes")

root = [
  if this.start_from.or("earliest") == "committed" && this.consumer_group.or("") == "" { {{msgNeedsGroup}}.format("start_from", "committed", "consumer_group") },
  if $fetch_max != null && $fetch_part != null && $fetch_max > 0 && $fetch_max <= {{maxFetchBytes}} && $fetch_part > 0 && $fetch_part <= {{maxFetchBytes}} && $fetch_part > $fetch_max { {{msgSizeOrder}}.format("fetch_max_partition_bytes", "%.0f".format($fetch_part), "fetch_max_bytes", "%.0f".format($fetch_max)) },
  {"name": "max_range_records", "value": this.max_range_records, "min": 1}.apply("int_error"),
  {"name": "max_in_flight", "value": this.max_in_flight, "min": 1}.apply("int_error"),
  {"name": "consumer_cache.capacity", "value": this.consumer_cache.capacity, "min": 0}.apply("int_error"),
  {"name": "poll_interval", "value": this.poll_interval}.apply("duration_error"),
  {"name": "commit_period", "value": this.commit_period}.apply("duration_error"),
  {"name": "progress_interval", "value": this.progress_interval, "zero_ok": true}.apply("duration_error"),
  {"name": "consumer_cache.idle_timeout", "value": this.consumer_cache.idle_timeout}.apply("duration_error"),
  {"name": "fetch_max_bytes", "value": this.fetch_max_bytes}.apply("size_error"),
  {"name": "fetch_max_partition_bytes", "value": this.fetch_max_partition_bytes}.apply("size_error"),
  {"name": "fetch_min_bytes", "value": this.fetch_min_bytes}.apply("size_error"),
  if $fetch_max != null && $fetch_min != null && $fetch_max > 0 && $fetch_max <= {{maxFetchBytes}} && $fetch_min > 0 && $fetch_min <= {{maxFetchBytes}} && $fetch_min > $fetch_max { {{msgSizeOrder}}.format("fetch_min_bytes", "%.0f".format($fetch_min), "fetch_max_bytes", "%.0f".format($fetch_max)) },
  {"name": "fetch_max_wait", "value": this.fetch_max_wait}.apply("duration_error"),
  {"name": "fetch_max_wait", "value": this.fetch_max_wait, "min_nanos": {{minFetchMaxWaitNanos}}, "max_nanos": {{maxFetchMaxWaitNanos}}, "min": {{minFetchMaxWait}}, "max": {{maxFetchMaxWait}}}.apply("duration_range_error"),
  if this.rack_id.type() == "string" && this.rack_id.length() > {{maxRackIDBytes}} { {{msgTooLong}}.format("rack_id", {{maxRackIDBytes}}, this.rack_id.length()) },
  {"name": "start_from", "value": this.start_from, "options": {{startFromOptions}}}.apply("enum_error"),
  {"name": "stop_at", "value": this.stop_at, "options": {{stopAtOptions}}}.apply("enum_error"),
  {"name": "isolation_level", "value": this.isolation_level, "options": {{isolationOptions}}}.apply("enum_error"),
  {"name": "on_data_loss", "value": this.on_data_loss, "options": ["fail", "skip"]}.apply("enum_error"),
  if this.start_from.or("") == "timestamp" && this.start_timestamp == null { "start_timestamp is required with start_from: timestamp" },
  {"name": "start_timestamp", "value": this.start_timestamp}.apply("timestamp_error"),
  {"name": "stop_timestamp", "value": this.stop_timestamp}.apply("timestamp_error"),
  if this.stop_at.or("") == "timestamp" && this.stop_timestamp == null { "stop_timestamp is required with stop_at: timestamp" },
  if this.seed_brokers.type() == "array" && $brokers.flatten().length() == 0 { {{msgNoBroker}}.format("seed_brokers") },
  $brokers.enumerated().map_each(e -> e.value.map_each(b -> if !b.re_match({{brokerPattern}}) || b.split(":").index(-1).number() < 1 || b.split(":").index(-1).number() > 65535 { {{msgNotHostPort}}.format("seed_brokers", e.index, b.quote()) } else { null })).flatten(),
  if this.topics.type() == "array" && $topics.length() == 0 { {{msgNoTopic}}.format("topics") },
  $topics.enumerated().map_each(t -> if $topic_errors.index(t.index) != null { {{msgBadTopic}}.format("topics", t.index, t.value.apply("quoted"), $topic_errors.index(t.index)) } else { null }),
  $topic_names.enumerated().map_each(t -> if t.value != null && t.index > 0 && $topic_names.slice(0, t.index).contains(t.value) { {{msgTopicTwice}}.format("topics", t.index, t.value.quote()) } else { null }),`

// lintRule is the spec's one lint rule (a second LintRule call would replace
// it): the map of topic patterns (patternLintMaps), lintRuleTemplate filled
// in, the rules of patternLintRules, then the TLS and SASL rules of
// securityLintRules, which close the array.
var lintRule = patternLintMaps + strings.NewReplacer(
	"{{msgNotInteger}}", strconv.Quote(msgNotInteger),
	"{{msgNotPositive}}", strconv.Quote(msgNotPositive),
	"{{msgNegative}}", strconv.Quote(msgNegative),
	"{{msgNotOneOf}}", strconv.Quote(msgNotOneOf),
	"{{msgNotDuration}}", strconv.Quote(msgNotDuration),
	"{{msgNotSize}}", strconv.Quote(msgNotSize),
	"{{msgSizeRange}}", strconv.Quote(msgSizeRange),
	"{{msgSizeOrder}}", strconv.Quote(msgSizeOrder),
	"{{msgNotHostPort}}", strconv.Quote(msgNotHostPort),
	"{{msgNoBroker}}", strconv.Quote(msgNoBroker),
	"{{msgNoTopic}}", strconv.Quote(msgNoTopic),
	"{{msgBadTopic}}", strconv.Quote(msgBadTopic),
	"{{msgTopicTwice}}", strconv.Quote(msgTopicTwice),
	"{{msgNeedsGroup}}", strconv.Quote(msgNeedsGroup),
	"{{whyEmptyName}}", strconv.Quote(whyEmptyName),
	"{{whyNameChars}}", strconv.Quote(whyNameChars),
	"{{whyEmptyPart}}", strconv.Quote(whyEmptyPart),
	"{{whyNotPartition}}", strconv.Quote(whyNotPartition),
	"{{whyPartitionSize}}", strconv.Quote(whyPartitionSize),
	"{{whyBackwards}}", strconv.Quote(whyBackwards),
	"{{brokerPattern}}", strconv.Quote(brokerPattern),
	"{{partitionPattern}}", strconv.Quote(partitionPattern),
	"{{integerPattern}}", strconv.Quote(integerPattern),
	"{{durationPattern}}", strconv.Quote(durationPattern),
	"{{durationPartPattern}}", strconv.Quote(durationPartPattern),
	"{{sizePattern}}", strconv.Quote(sizePattern),
	"{{durationUnits}}", blobObject(durationUnits),
	"{{sizeUnits}}", blobObject(sizeUnits),
	"{{maxFetchBytes}}", strconv.Itoa(maxFetchBytes),
	"{{maxDurationNanos}}", strconv.Itoa(maxDurationNanos),
	"{{maxPartition}}", strconv.Itoa(maxPartition),
	"{{defaultFetchMaxBytes}}", strconv.Quote(strconv.Itoa(defaultFetchMaxBytes)),
	"{{defaultFetchMaxPartitionBytes}}", strconv.Quote(strconv.Itoa(defaultFetchMaxPartitionBytes)),
	"{{defaultFetchMinBytes}}", strconv.Quote(strconv.Itoa(defaultFetchMinBytes)),
	"{{minFetchMaxWaitNanos}}", strconv.FormatInt(int64(minFetchMaxWait.d), 10),
	"{{maxFetchMaxWaitNanos}}", strconv.FormatInt(int64(maxFetchMaxWait.d), 10),
	"{{minFetchMaxWait}}", strconv.Quote(minFetchMaxWait.text),
	"{{maxFetchMaxWait}}", strconv.Quote(maxFetchMaxWait.text),
	"{{maxRackIDBytes}}", strconv.Itoa(maxRackIDBytes),
	"{{msgDurationRange}}", strconv.Quote(msgDurationRange),
	"{{msgTooLong}}", strconv.Quote(msgTooLong),
	"{{startFromOptions}}", blobArray(startEarliest, startLatest, startCommitted, startTimestamp),
	"{{stopAtOptions}}", blobArray(stopNever, stopEnd, stopTimestamp),
	"{{isolationOptions}}", blobArray(readUncommitted, readCommitted),
).Replace(lintRuleTemplate) + patternLintRules + securityLintRules + `.filter(v -> v != null)
`

// blobObject writes m as a bloblang object literal, keys sorted.
func blobObject(m map[string]int64) string {
	var items []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		items = append(items, strconv.Quote(k)+": "+strconv.FormatInt(m[k], 10))
	}
	return "{" + strings.Join(items, ", ") + "}"
}

// blobArray writes strings as a bloblang array literal.
func blobArray(ss ...string) string {
	var items []string
	for _, s := range ss {
		items = append(items, strconv.Quote(s))
	}
	return "[" + strings.Join(items, ", ") + "]"
}
