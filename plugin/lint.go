package plugin

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The value rules of the config: one list of Go functions, run by the lint
// (`connect lint`, and the lint `connect run` does first) and by ParseConfig
// (so every code path that builds an input checks them), so both report the
// same errors with the same messages.
//
//   - fieldRules check one field each. Each is that field's lint rule, so
//     Benthos reports its errors at the field's line. Benthos' own check of
//     enum fields is replaced by the field's rule, so an error is reported
//     once, with the options listed.
//   - crossRules compare fields. They are the spec's lint rule, which Benthos
//     reports at the input's first line, and name every field they compare.
//
// A new field with a value rule adds it to fieldRules and calls
// .LintRule(fieldLint(path)) on its spec field. A new rule across fields is
// a crossRule. ParseConfig reads values only after checkRules passed.

// Messages of the value rules. Values are quoted (strconv.Quote) when they
// are strings as written.
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
	msgEmptyBrokers  = "%s must name at least one broker, got %s (an environment variable that is not set leaves an entry empty)"
	msgNotList       = "%s must be a list, such as %s, got %s"
	msgNoValue       = "%s has no value: write a list, such as %s"
	msgNoTopic       = "%s must name at least one topic (or %s a pattern)"
	msgTopicsInclude = "%s and %s cannot both be set: names go in %s, patterns in %s (or in %s with %s: true)"
	msgExcludeAlone  = "%s requires %s (or %s: true): it drops topics that patterns match"
	msgBadTopic      = "%s[%d]: invalid entry %s: %s"
	msgTopicTwice    = "%s[%d]: topic %s is listed more than once"
	msgNeedsGroup    = "%s %s requires %s to be set"
	msgSpaces        = "%s must not start or end with spaces, got %s"
	msgBelow         = "%s (%s) must be below %s (%s)"
	msgWindowOrder   = "%s (%s) must be after %s (%s)"
	// msgConsumerProtocol takes the field, group_protocol, consumer and why.
	msgConsumerProtocol = "%s cannot be set with %s: %s (%s)"
	// msgTimestampNeeded and msgTimestampUnused take the timestamp field
	// and the setting that uses it ("start_from: timestamp").
	msgTimestampNeeded = "%s is required with %s"
	msgTimestampUnused = "%s is set but only used with %s"
	// msgBoundedOnly takes the field, its value, stop_at, end, timestamp,
	// stop_at, never, what a continuous run does instead, and the field.
	msgBoundedOnly = "%s (%s) is only used with %s: %s or %s; a continuous run (%s: %s) %s: remove %s"
	// msgSessionTooShort takes minSessionTimeout.
	msgSessionTooShort = "%s must be at least %s (the default group.min.session.timeout.ms of Kafka brokers, which reject shorter sessions), got %s"
	whyEmptyName       = "empty topic name"
	whyNameChars       = "a topic name can only contain ASCII letters, digits, '.', '_' and '-' (no spaces or commas)"
	whyNamePattern     = "a topic name can only contain ASCII letters, digits, '.', '_' and '-'; to read the topics a pattern matches, set regexp_topics: true"
	whyNameLength      = "a topic name is at most 249 characters, got %d"
	whyNameDots        = "a topic name cannot be '.' or '..'"
	whyEmptyPart       = "empty partition"
	whyNotPartition    = "partition %s is not a non-negative integer"
	whyNotOffset       = "start offset %s is not a non-negative integer (topic:partition:offset)"
	whyPartitionSize   = "partition %s is too large (the limit is %d)"
	whyBackwards       = "partition range %s runs backwards"
)

// Patterns of the value rules.
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
	// topicNamePattern is a name Kafka can give a topic (Kafka's
	// Topic.validate: ASCII letters, digits, '.', '_' and '-').
	topicNamePattern = `^[a-zA-Z0-9._-]+$`
	// sizePattern is a byte size: an integer and an optional unit of
	// sizeUnits, in any case.
	sizePattern = `^\s*(-?[0-9]+)\s*([A-Za-z]*)\s*$`
	// maxFetchBytes bounds the fetch sizes. franz-go takes them as int32.
	maxFetchBytes = 1<<31 - 1
)

var (
	brokerRE    = regexp.MustCompile(brokerPattern)
	integerRE   = regexp.MustCompile(integerPattern)
	partitionRE = regexp.MustCompile(partitionPattern)
	topicNameRE = regexp.MustCompile(topicNamePattern)
	sizeRE      = regexp.MustCompile(sizePattern)
)

// sizeUnits are the units of byte sizes, by lower-case name: decimal (KB, MB,
// GB) and binary (KiB, MiB, GiB).
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1000, "mb": 1000 * 1000, "gb": 1000 * 1000 * 1000,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	// as kafka_franz reads them too (go-humanize): k, m, g decimal. Ki,
	// mi, gi binary
	"k": 1000, "m": 1000 * 1000, "g": 1000 * 1000 * 1000,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30,
}

// quoted formats a value as the messages show it: strings quoted, anything
// else as fmt's %v.
func quoted(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// oneOf checks an enum value, case and all, and lists the options when it
// is not one of them.
func oneOf(name, v string, options ...string) error {
	if slices.Contains(options, v) {
		return nil
	}
	return fmt.Errorf(msgNotOneOf, name, strings.Join(options, ", "), strconv.Quote(v))
}

// parseInteger reads an integer field, declared as an any field so that a
// value of the wrong type reaches the lint rule (Benthos skips the lint rule
// of a component whose int field does not decode). name is the field's path.
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

// parseDuration parses a duration field that must be > 0. name is the
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

// parseOptionalDuration parses a duration field where 0 turns something
// off. It must parse and be >= 0.
func parseOptionalDuration(name, s string) (time.Duration, error) {
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

// fieldRule is the value rule of one field. check returns what is wrong with
// v, the field's value as written (a scalar given to a string field arrives
// as its text), naming the field by name, its path. Its field carries it as
// its lint rule (fieldLint), so `connect lint` reports its errors at the
// field's line, and ParseConfig runs it on the parsed value (checkRules).
type fieldRule struct {
	path  string
	check func(name string, v any) []error
}

// checksNull reports whether the rule of the field at path also gets a
// value written without one (nil), such as what an environment variable
// that is not set leaves: the list fields' rules say so. The others leave
// it to the field's default.
func checksNull(path string) bool {
	switch path {
	case fieldSeedBrokers, fieldTopics, fieldRegexpTopicsInclude, fieldRegexpTopicsExclude:
		return true
	}
	return false
}

// crossRule is a rule across fields. It reads the fields it compares from
// the parsed config (defaults filled in) and says nothing about a value that
// breaks its field's own rule, which reports it. It runs in the spec's lint
// rule (specLint) and in ParseConfig.
type crossRule func(pc *service.ParsedConfig) []error

// fieldRules are the value rules, by field. A field listed here gets its
// rule with .LintRule(fieldLint(path)) in the spec. TestEveryFieldRuleLinted
// checks that none is missing.
var fieldRules = append([]fieldRule{
	{fieldSeedBrokers, checkBrokers},
	{fieldTopics, listRule},
	{fieldRegexpTopicsInclude, listRule},
	{fieldRegexpTopicsExclude, listRule},
	{fieldStartFrom, enum(startEarliest, startLatest, startCommitted, startTimestamp)},
	{fieldStopAt, enum(stopNever, stopEnd, stopTimestamp)},
	{fieldMaxRangeRecords, integer(1)},
	{fieldMaxInFlight, integer(1)},
	{fieldOrdering, emptyOr(enum(orderingNone, orderingPartition, orderingKey))},
	{fieldKeyBuckets, integer(1)},
	{fieldPollInterval, duration(nil)},
	{fieldMetadataMaxAge, duration(nil)},
	{fieldProgressInterval, zeroOrDuration},
	{fieldConsumerCache + "." + fieldCacheCapacity, integer(0)},
	{fieldConsumerCache + "." + fieldCacheIdleTimeout, duration(nil)},
	{fieldIsolationLevel, enum(readUncommitted, readCommitted)},
	{fieldCommitPeriod, duration(nil)},
	{fieldFetchMaxBytes, byteSize},
	{fieldFetchMaxPartitionBytes, byteSize},
	{fieldFetchMaxWait, duration(func(name, s string, d time.Duration) error {
		return checkDurationRange(name, s, d, minFetchMaxWait, maxFetchMaxWait)
	})},
	{fieldFetchMinBytes, byteSize},
	{fieldFetchConnections, bounded(1, maxFetchConnections)},
	{fieldRackID, maxLength(maxRackIDBytes)},
	{fieldTCPConnectTimeout, zeroOrDuration},
	{fieldTCPIdle, duration(nil)},
	{fieldTCPInterval, duration(nil)},
	{fieldTCPCount, integer(1)},
	{fieldSASL, checkSASL},
	{fieldGroupBalancers, checkBalancers},
	{fieldSessionTimeout, emptyOr(duration(checkSessionTimeout))},
	{fieldHeartbeatInterval, emptyOr(duration(nil))},
	{fieldRebalanceTimeout, duration(nil)},
	{fieldRevokeDrain, emptyOrDuration},
	{fieldInstanceID, trimmed},
	{fieldGroupProtocol, enum(protocolClassic, protocolConsumer)},
	{fieldRemoteAssignor, emptyOr(enum(assignorUniform, assignorRange))},
	{fieldOnDataLoss, enum(onLossFail, onLossSkip)},
	{fieldOnMissingTopic, enum(onMissingFail, onMissingSkip)},
	{fieldStartTimestamp, timestamp},
	{fieldStopTimestamp, timestamp},
	{fieldStartTimeout, zeroOrDuration},
	{fieldUnreachable, zeroOrDuration},
	{fieldBatching, batchPolicyCounts},
}, append(shareFieldRules(), foreignRules()...)...)

// crossRules are the rules across fields.
var crossRules = []crossRule{
	brokersNamed,
	topicEntries,
	alignedWithoutCuts,
	keyOrdering,
	committedNeedsGroup,
	fetchSizeOrder,
	timeWindow,
	resetOffsets,
	heartbeatBelowSession,
	consumerProtocolFields,
	drainBelowRebalance,
	serverNeedsTLS,
	tlsNeeded,
}

// writtenRule is a rule across fields that asks whether a field was
// written (differsFromDefault).
type writtenRule func(pc *service.ParsedConfig, written func(name string) bool) []error

// writtenRules are the rules across fields that ask whether a field was
// written: they run after crossRules, in the lint and in ParseConfig.
var writtenRules = []writtenRule{
	boundedOnly,
	shareRules,
}

// checkRules runs every rule on a parsed config: the value rules on the
// fields that are set, then the rules across fields.
func checkRules(pc *service.ParsedConfig) error {
	var errs []error
	for _, r := range fieldRules {
		path := strings.Split(r.path, ".")
		if !pc.Contains(path...) {
			continue
		}
		if v, err := pc.FieldAny(path...); err == nil && (v != nil || checksNull(r.path)) {
			errs = append(errs, r.check(r.path, v)...)
		}
	}
	for _, r := range crossRules {
		errs = append(errs, r(pc)...)
	}
	written := differsFromDefault(pc)
	for _, r := range writtenRules {
		errs = append(errs, r(pc, written)...)
	}
	return errors.Join(errs...)
}

// scalarText is v as a string field holds it: strings as they are, numbers
// and booleans as written. Ok is false for lists and objects (Benthos' type
// check reports those).
func scalarText(v any) (s string, ok bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return fmt.Sprint(t), true
	}
	return "", false
}

// one is err as a list of errors.
func one(err error) []error {
	if err == nil {
		return nil
	}
	return []error{err}
}

// enum is the rule of a field that takes one of options, case and all.
// Benthos' own check of enum fields (which ignores case, lists no options
// and would report a second lint) is replaced by it.
func enum(options ...string) func(string, any) []error {
	return func(name string, v any) []error {
		if s, ok := scalarText(v); ok {
			return one(oneOf(name, s, options...))
		}
		return nil
	}
}

// integer is the rule of an integer field (an any field, see parseInteger)
// that must be at least min, 0 or 1.
func integer(min int) func(string, any) []error {
	return func(name string, v any) []error {
		n, err := parseInteger(name, v)
		switch {
		case err != nil:
			return one(err)
		case n < min && min == 1:
			return one(fmt.Errorf(msgNotPositive, name, n))
		case n < min:
			return one(fmt.Errorf(msgNegative, name, n))
		}
		return nil
	}
}

// duration is the rule of a duration field that must be > 0, and then pass
// more, if it is not nil.
func duration(more func(name, s string, d time.Duration) error) func(string, any) []error {
	return func(name string, v any) []error {
		s, ok := scalarText(v)
		if !ok {
			return nil
		}
		d, err := parseDuration(name, s)
		if err == nil && more != nil {
			err = more(name, s, d)
		}
		return one(err)
	}
}

// batchPolicyCounts is the rule of a batching policy (an object). Its
// count and byte_size must be >= 0 (0 turns them off). Benthos takes a
// negative one for 0 without a word, so `count: -5` batched nothing.
func batchPolicyCounts(name string, v any) []error {
	m, ok := v.(map[string]any)
	if !ok {
		return nil // Benthos' type check reports it
	}
	var errs []error
	for _, k := range []string{"count", "byte_size"} {
		x, ok := m[k]
		if !ok || x == nil {
			continue
		}
		if n, err := parseInteger(name+"."+k, x); err == nil && n < 0 {
			errs = append(errs, fmt.Errorf(msgNegative, name+"."+k, n))
		}
	}
	return errs
}

// zeroOrDuration is the rule of a duration field where 0 turns something
// off.
func zeroOrDuration(name string, v any) []error {
	s, ok := scalarText(v)
	if !ok {
		return nil
	}
	_, err := parseOptionalDuration(name, s)
	return one(err)
}

// byteSize is the rule of a fetch size.
func byteSize(name string, v any) []error {
	s, ok := scalarText(v)
	if !ok {
		return nil
	}
	_, err := parseByteSize(name, s)
	return one(err)
}

// maxLength is the rule of a string field of at most n bytes.
func maxLength(n int) func(string, any) []error {
	return func(name string, v any) []error {
		if s, ok := scalarText(v); ok && len(s) > n {
			return one(fmt.Errorf(msgTooLong, name, n, len(s)))
		}
		return nil
	}
}

// trimmed is the rule of a name that must not start or end with spaces.
func trimmed(name string, v any) []error {
	if s, ok := scalarText(v); ok && strings.TrimSpace(s) != s {
		return one(fmt.Errorf(msgSpaces, name, strconv.Quote(s)))
	}
	return nil
}

// stringList is v as a list of strings, each scalar as text. Ok is false if
// v is not a list (Benthos' type check reports it).
func stringList(v any) (ss []string, ok bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	for _, e := range list {
		s, _ := scalarText(e)
		ss = append(ss, s)
	}
	return ss, true
}

// checkBrokers is the rule of seed_brokers: a list of host:port entries.
// That it names one is brokersNamed's, which sees it unset too (its
// default is the empty list).
func checkBrokers(name string, v any) []error {
	entries, ok := stringList(v)
	if !ok {
		return one(notAList(name, v))
	}
	_, errs := splitBrokers(entries)
	return errs
}

// brokersNamed: seed_brokers names at least one broker, when it is a list
// (checkBrokers reports a value that is not, or none, and entries that are
// not host:port).
func brokersNamed(pc *service.ParsedConfig) []error {
	if notList(pc, fieldSeedBrokers) {
		return nil
	}
	entries := entriesOf(pc, fieldSeedBrokers)
	brokers, errs := splitBrokers(entries)
	switch {
	case len(brokers) > 0 || len(errs) > 0:
		return nil
	case len(entries) > 0 && !slices.ContainsFunc(entries, func(e string) bool { return e != "" }):
		// What unset environment variables leave. The lint leaves it to
		// Benthos' own (noValueKept). ParseConfig says what it got.
		quotedEntries := make([]string, len(entries))
		for i, e := range entries {
			quotedEntries[i] = strconv.Quote(e)
		}
		return one(fmt.Errorf(msgEmptyBrokers, fieldSeedBrokers, "["+strings.Join(quotedEntries, ", ")+"]"))
	}
	return one(fmt.Errorf(msgNoBroker, fieldSeedBrokers))
}

// listRule is the rule of a list field whose entries a rule across fields
// checks (topics, regexp_topics_include, regexp_topics_exclude). It is a
// list. The fields are declared any, as seed_brokers is: Benthos decodes a
// string where a list belongs into the same empty list as `[]`, so the
// rules across fields would say "no topic" beside its own "expected array
// value". This says only what is wrong, and they say nothing more.
func listRule(name string, v any) []error {
	if _, ok := stringList(v); !ok {
		return one(notAList(name, v))
	}
	return nil
}

// listExamples are the examples the messages of listRule and checkBrokers
// give, by field.
var listExamples = map[string]string{
	fieldSeedBrokers:         `[ "localhost:9092" ]`,
	fieldTopics:              `[ orders ]`,
	fieldRegexpTopicsInclude: `[ '^orders\.' ]`,
	fieldRegexpTopicsExclude: `[ '\.tmp$' ]`,
}

// notAList is the error of a list field (name) whose value v is not a
// list: a string, a number or an object, or nothing (written without a
// value, as an environment variable that is not set leaves it).
func notAList(name string, v any) error {
	if v == nil {
		return fmt.Errorf(msgNoValue, name, listExamples[name])
	}
	return fmt.Errorf(msgNotList, name, listExamples[name], quoted(v))
}

// splitBrokers returns the addresses of the seed_brokers entries (several to
// an entry, separated by commas) and an error for each that is not
// host:port.
func splitBrokers(entries []string) ([]string, []error) {
	var (
		brokers []string
		errs    []error
	)
	for i, e := range entries {
		for _, b := range strings.Split(e, ",") {
			b = strings.TrimSpace(b)
			if b == "" {
				continue
			}
			if err := checkBroker(i, b); err != nil {
				errs = append(errs, err)
				continue
			}
			brokers = append(brokers, b)
		}
	}
	return brokers, errs
}

// topicEntries: the topics entries are names (with partitions) or, with
// regexp_topics, regular expressions, or the patterns are in
// regexp_topics_include (Redpanda Connect's name), and
// regexp_topics_exclude takes patterns, so they are checked across the
// fields (reported at the input's line, naming topics[i]).
func topicEntries(pc *service.ParsedConfig) []error {
	names, include := entriesOf(pc, fieldTopics), entriesOf(pc, fieldRegexpTopicsInclude)
	exclude := entriesOf(pc, fieldRegexpTopicsExclude)
	patterns, _ := pc.FieldBool(fieldRegexpTopics)
	var errs []error
	switch {
	case notList(pc, fieldTopics) || notList(pc, fieldRegexpTopicsInclude):
		// listRule reports it. No entries is not what is wrong.
	case len(names) == 0 && len(include) == 0:
		errs = append(errs, fmt.Errorf(msgNoTopic, fieldTopics, fieldRegexpTopicsInclude))
	case len(names) > 0 && len(include) > 0:
		errs = append(errs, fmt.Errorf(msgTopicsInclude, fieldTopics, fieldRegexpTopicsInclude, fieldTopics, fieldRegexpTopicsInclude, fieldTopics, fieldRegexpTopics))
	}
	_, e := topicSpecs(fieldTopics, names, patterns)
	errs = append(errs, e...)
	_, e = topicSpecs(fieldRegexpTopicsInclude, include, true)
	errs = append(errs, e...)
	for i, x := range exclude {
		if _, why := parsePattern(x); why != "" {
			errs = append(errs, fmt.Errorf(msgBadTopic, fieldRegexpTopicsExclude, i, strconv.Quote(x), why))
		}
	}
	if len(exclude) > 0 && !patterns && len(include) == 0 {
		errs = append(errs, fmt.Errorf(msgExcludeAlone, fieldRegexpTopicsExclude, fieldRegexpTopicsInclude, fieldRegexpTopics))
	}
	return errs
}

// text reads a string field for a rule across fields: "" if it is unset or
// not a string.
func text(pc *service.ParsedConfig, path ...string) string {
	s, _ := pc.FieldString(path...)
	return s
}

// committedNeedsGroup: start_from: committed reads the group's offsets.
func committedNeedsGroup(pc *service.ParsedConfig) []error {
	if text(pc, fieldStartFrom) == startCommitted && text(pc, fieldConsumerGroup) == "" {
		return one(fmt.Errorf(msgNeedsGroup, fieldStartFrom, startCommitted, fieldConsumerGroup))
	}
	return nil
}

// fetchSizeOrder: neither the partition's share nor the minimum of a fetch
// may exceed the fetch's maximum.
func fetchSizeOrder(pc *service.ParsedConfig) []error {
	size := func(name string) (int32, bool) {
		n, err := parseByteSize(name, text(pc, name))
		return n, err == nil
	}
	most, ok := size(fieldFetchMaxBytes)
	if !ok {
		return nil
	}
	var errs []error
	for _, name := range []string{fieldFetchMaxPartitionBytes, fieldFetchMinBytes} {
		if n, ok := size(name); ok && n > most {
			errs = append(errs, fmt.Errorf(msgSizeOrder, name, strconv.Itoa(int(n)), fieldFetchMaxBytes, strconv.Itoa(int(most))))
		}
	}
	return errs
}
