package plugin

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Field names of topic patterns.
const (
	fieldRegexpTopics        = "regexp_topics"
	fieldRegexpTopicsInclude = "regexp_topics_include" // Redpanda Connect's name
	fieldRegexpTopicsExclude = "regexp_topics_exclude"
	fieldMetadataMaxAge      = "metadata_max_age"
)

// Reasons a pattern entry of `topics` is invalid (with msgBadTopic), and the
// pattern of an entry that selects partitions.
const (
	whyEmptyPattern = "empty pattern (.* matches every topic)"
	whyBadPattern   = "invalid regular expression: %s"
	whyPatternParts = "a pattern cannot select partitions (" + fieldRegexpTopics + ": true)"
	// patternPartsPattern finds a `:partitions` suffix in a pattern entry:
	// a colon followed by nothing but partition numbers, ranges and
	// commas. Topic names cannot hold a colon, so a pattern ending so
	// could match nothing anyway. Colons elsewhere, as in `(?:a|b)`, are
	// the expression's own.
	patternPartsPattern = `:[0-9\s,-]*$`
	// regexpErrorPrefix starts every error of Go's regexp parser.
	regexpErrorPrefix = "error parsing regexp: "
)

var patternPartsRE = regexp.MustCompile(patternPartsPattern)

// regexpTopicsField is the spec field that makes topics patterns.
func regexpTopicsField() *service.ConfigField {
	return service.NewBoolField(fieldRegexpTopics).
		Description("If true, each `topics` entry is a regular expression (Go RE2 syntax; surrounding spaces are ignored) and every topic of the cluster it matches is read, whole: partitions cannot be named. As in franz-go's `kgo.ConsumeRegex` (and `kafka_franz`'s `regexp_topics`, Bento's name, which Redpanda Connect replaced by `regexp_topics_include`), an expression matches anywhere in a name: `orders` reads `orders`, `orders.eu` and `old-orders`; anchor it, `^orders$`, to match the whole name (Kafka's Java consumer anchors its patterns; franz-go does not). The expressions are matched when the input starts and again every `metadata_max_age`, at the next `poll_interval`. A topic that starts matching later (one created while the input runs) is read from its first offset whatever `start_from` says (with `consumer_group`, from the group's committed offset where it has one), so none of its records is missed. Internal topics (those the broker flags internal: `__consumer_offsets`, `__transaction_state`, `__share_group_state`) are read only by an expression that names them, one starting with `__` (after an optional `^`), such as `^__consumer_offsets$`; `.*` never reads them. With `consumer_group` every process uses the same expressions and the group balances the partitions of every topic they match; each process adds a new topic to its subscription when it matches it, so the group takes it in within one `metadata_max_age`. With `stop_at` `end` or `timestamp` the topics matched at start are read and no others; if none matches, the input stops with an error. A matched topic deleted while it is read is handled as a named one (see `on_data_loss`).").
		Default(false)
}

// regexpTopicsListFields are the spec fields of Redpanda Connect's names for
// patterns: regexp_topics_include (the patterns of topics read) and
// regexp_topics_exclude (of topics not read).
func regexpTopicsListFields() []*service.ConfigField {
	return []*service.ConfigField{
		// lists (listRule), as topics
		service.NewAnyField(fieldRegexpTopicsInclude).
			LintRule(fieldLint(fieldRegexpTopicsInclude)).
			Description("Regular expressions of the topics to read, as Redpanda Connect's `kafka_franz` and `redpanda` inputs name them: the same as listing them in `topics` with `regexp_topics: true` (see `regexp_topics` for how they match). Set either this or `topics`.").
			Example([]string{`^orders\.`}).
			Default([]any{}),
		service.NewAnyField(fieldRegexpTopicsExclude).
			LintRule(fieldLint(fieldRegexpTopicsExclude)).
			Description("Regular expressions of topics never read, though a pattern of `regexp_topics_include` (or of `topics` with `regexp_topics: true`) matches them; matched as those are, anywhere in a name (anchor with `^` and `$`). Requires patterns.").
			Example([]string{`\.tmp$`, `^__`}).
			Default([]any{}),
	}
}

// metadataMaxAgeField is the spec field of how often patterns are matched.
func metadataMaxAgeField() *service.ConfigField {
	return service.NewDurationField(fieldMetadataMaxAge).
		LintRule(fieldLint(fieldMetadataMaxAge)).
		Description("With `regexp_topics`, how often the cluster's topics are listed again and matched against the expressions (what Kafka's `metadata.max.age.ms` and franz-go's `kgo.MetadataMaxAge` do for pattern subscriptions), checked at each `poll_interval`: a new matching topic is read within about this long. Each match lists every topic of the cluster, so very short values cost a metadata request for all topics each time. Unused without `regexp_topics`.").
		Default("5m").
		Advanced()
}

// parsePattern parses a `topics` entry of a regexp_topics config, and
// returns why it is invalid, or "".
func parsePattern(entry string) (TopicSpec, string) {
	p := strings.TrimSpace(entry)
	if p == "" {
		return TopicSpec{}, whyEmptyPattern
	}
	if patternPartsRE.MatchString(p) {
		return TopicSpec{}, whyPatternParts
	}
	if _, err := regexp.Compile(p); err != nil {
		return TopicSpec{}, fmt.Sprintf(whyBadPattern, regexpError(err))
	}
	return TopicSpec{Name: p}, ""
}

// regexpError is the parser's error without its prefix: the error code and
// the offending part of the expression.
func regexpError(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return strings.TrimPrefix(se.Error(), regexpErrorPrefix)
	}
	return strings.TrimPrefix(err.Error(), regexpErrorPrefix)
}

// topicParser returns how a `topics` entry is parsed: as a name with
// partitions, or with regexp_topics as a pattern.
func topicParser(patterns bool) func(string) (TopicSpec, string) {
	if patterns {
		return parsePattern
	}
	return parseTopic
}

// partitionItemRE is an item of a `topics` entry, between commas, that
// continues the partition list of the topic before it (`2` in `a:0,2`):
// nothing but digits, ranges and signs (which parseTopic then rejects).
var partitionItemRE = regexp.MustCompile(`^[\s0-9+-]*$`)

// splitEntry returns the topics of a `topics` entry of names, each with its
// partitions. An entry may list several, separated by commas, as
// kafka_franz reads them (`a,b`), and an item of partitions continues the
// list of the topic before it, so `a:0,2,b:1` is `a:0,2` and `b:1`. A
// pattern entry is never split. Its commas are the expression's (`a{1,3}`).
func splitEntry(entry string, patterns bool) []string {
	if patterns {
		return []string{entry}
	}
	var out []string
	for _, item := range strings.Split(entry, ",") {
		if n := len(out); n > 0 && strings.Contains(out[n-1], ":") && partitionItemRE.MatchString(item) {
			out[n-1] += "," + item
			continue
		}
		out = append(out, item)
	}
	return out
}

// topicSpecs parses the entries of the topic list field (names, or
// patterns) and returns an error for each entry that is invalid or lists a
// topic again. A topic listed again with partitions, after partitions, gets
// both lists (Bento's `foo:0,foo:1`). Listed whole twice, or whole and with
// partitions, it is an error.
func topicSpecs(field string, entries []string, patterns bool) ([]TopicSpec, []error) {
	var (
		specs []TopicSpec
		errs  []error
	)
	at := map[string]int{} // index in specs, by name
	parse := topicParser(patterns)
	for i, e := range entries {
		for _, part := range splitEntry(e, patterns) {
			ts, why := parse(part)
			if why != "" {
				errs = append(errs, fmt.Errorf(msgBadTopic, field, i, strconv.Quote(e), why))
				break
			}
			j, seen := at[ts.Name]
			switch {
			case !seen:
				at[ts.Name] = len(specs)
				specs = append(specs, ts)
			case ts.Partitions != nil && specs[j].Partitions != nil && !offsetTwice(specs[j], ts):
				ps := slices.Concat(specs[j].Partitions, ts.Partitions)
				slices.Sort(ps)
				specs[j].Partitions = slices.Compact(ps)
				for p, o := range ts.Offsets {
					if specs[j].Offsets == nil {
						specs[j].Offsets = map[int32]int64{}
					}
					specs[j].Offsets[p] = o
				}
			default:
				errs = append(errs, fmt.Errorf(msgTopicTwice, field, i, strconv.Quote(ts.Name)))
			}
		}
	}
	return specs, errs
}

// offsetTwice reports whether a partition of b is in a too and one of the
// two gives it a start offset: which one it starts from would be unclear.
func offsetTwice(a, b TopicSpec) bool {
	for _, p := range b.Partitions {
		if !slices.Contains(a.Partitions, p) {
			continue
		}
		_, inA := a.Offsets[p]
		_, inB := b.Offsets[p]
		if inA || inB {
			return true
		}
	}
	return false
}

// entriesOf returns the entries of the string list field name, each
// scalar as text. nil if it is unset or not a list.
func entriesOf(pc *service.ParsedConfig, name string) []string {
	if !pc.Contains(name) {
		return nil
	}
	v, err := pc.FieldAny(name)
	if err != nil {
		return nil
	}
	entries, _ := stringList(v)
	return entries
}

// notList reports whether the field name is written with something other
// than a list (a string where a list belongs) or without a value (what an
// environment variable that is not set leaves): its own rule reports it
// (listRule, checkBrokers), and a rule about its entries has nothing to
// say.
func notList(pc *service.ParsedConfig, name string) bool {
	if !pc.Contains(name) {
		return false
	}
	v, err := pc.FieldAny(name)
	if err != nil {
		return false
	}
	_, ok := stringList(v)
	return !ok
}

// parseTopicFields reads what is read, of a config that passed checkRules:
// the topics entries (names, or patterns with regexp_topics), or the
// patterns of regexp_topics_include, and the patterns of
// regexp_topics_exclude.
func parseTopicFields(pc *service.ParsedConfig) (topics []TopicSpec, patterns bool, exclude []string, err error) {
	patterns, err = pc.FieldBool(fieldRegexpTopics)
	if err != nil {
		return nil, false, nil, err
	}
	entries := entriesOf(pc, fieldTopics)
	if include := entriesOf(pc, fieldRegexpTopicsInclude); len(include) > 0 {
		entries, patterns = include, true
	}
	for _, x := range entriesOf(pc, fieldRegexpTopicsExclude) {
		exclude = append(exclude, strings.TrimSpace(x))
	}
	specs, errs := topicSpecs(fieldTopics, entries, patterns)
	return specs, patterns, exclude, errors.Join(errs...)
}
