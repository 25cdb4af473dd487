package plugin

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Field names of topic patterns.
const (
	fieldRegexpTopics   = "regexp_topics"
	fieldMetadataMaxAge = "metadata_max_age"
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
	// could match nothing anyway; colons elsewhere, as in `(?:a|b)`, are
	// the expression's own.
	patternPartsPattern = `:[0-9\s,-]*$`
	// regexpErrorPrefix starts every error of Go's regexp parser.
	regexpErrorPrefix = "error parsing regexp: "
)

var patternPartsRE = regexp.MustCompile(patternPartsPattern)

// regexpTopicsField is the spec field that makes topics patterns.
func regexpTopicsField() *service.ConfigField {
	return service.NewBoolField(fieldRegexpTopics).
		Description("If true, each `topics` entry is a regular expression (Go RE2 syntax; surrounding spaces are ignored) and every topic of the cluster it matches is read, whole: partitions cannot be named. As in franz-go's `kgo.ConsumeRegex` (and `kafka_franz`'s `regexp_topics`), an expression matches anywhere in a name: `orders` reads `orders`, `orders.eu` and `old-orders`; anchor it, `^orders$`, to match the whole name (Kafka's Java consumer anchors its patterns; franz-go does not). The expressions are matched when the input starts and again every `metadata_max_age`, at the next `poll_interval`. A topic that starts matching later (one created while the input runs) is read from its first offset whatever `start_from` says (with `consumer_group`, from the group's committed offset where it has one), so none of its records is missed. Internal topics (those the broker flags internal: `__consumer_offsets`, `__transaction_state`, `__share_group_state`) are read only by an expression that names them, one starting with `__` (after an optional `^`), such as `^__consumer_offsets$`; `.*` never reads them. With `consumer_group` every process uses the same expressions and the group balances the partitions of every topic they match; each process adds a new topic to its subscription when it matches it, so the group takes it in within one `metadata_max_age`. With `stop_at` `end` or `timestamp` the topics matched at start are read and no others; if none matches, the input stops with an error. A matched topic deleted while it is read is handled as a named one (see `on_data_loss`).").
		Default(false)
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

// parseTopics parses the `topics` entries: names, or patterns with
// regexp_topics.
func parseTopics(entries []string, patterns bool) ([]TopicSpec, error) {
	var specs []TopicSpec
	var errs []error
	parse := topicParser(patterns)
	for i, t := range entries {
		ts, why := parse(t)
		if why != "" {
			errs = append(errs, fmt.Errorf(msgBadTopic, fieldTopics, i, strconv.Quote(t), why))
			continue
		}
		specs = append(specs, ts)
	}
	return specs, errors.Join(errs...)
}
