package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Topic patterns (Config.RegexpTopics). Each Topics entry is a Go regular
// expression (RE2 syntax) that selects whole topics. A pattern matches
// anywhere in a topic name, as franz-go's kgo.ConsumeRegex (and so
// Benthos' kafka_franz with regexp_topics) matches: `orders` selects
// `orders`, `orders.eu` and `old-orders`. Anchor it (`^orders$`) to select
// one name. (Kafka's Java consumer matches the whole name instead.)
//
// An internal topic, as the broker's metadata flags it (__consumer_offsets,
// __transaction_state, __share_group_state), is selected only by a pattern
// that names it explicitly, that is, one that starts with `__` (after an
// optional `^`), such as `^__consumer_offsets$`: `.*` never reads them.
// franz-go never reads them through a pattern. This is the explicit way in.
//
// The patterns are matched against the cluster's topics when the engine
// starts and, in a continuous run, every MetadataMaxAge after, as part of
// the engine's refresh (so at the first poll once that much time passed). A
// topic that matches later is read from its first offset (where a group has
// no committed offset for it), whatever StartFrom says. Every record of it
// is new. With Membership the member adds the new topics to its
// subscription, so the group balances the union of what every member's
// patterns matched. A bounded run reads the topics matched at start.

// defaultMetadataMaxAge is how often patterns are matched again when
// Config.MetadataMaxAge is zero: Kafka's metadata.max.age.ms default.
const defaultMetadataMaxAge = 5 * time.Minute

// validatePatterns checks the topic entries of a RegexpTopics config.
func (c *Config) validatePatterns() []error {
	var errs []error
	if c.MetadataMaxAge < 0 {
		errs = append(errs, fmt.Errorf("metadata max age must be >= 0 (0 means %s), got %s", defaultMetadataMaxAge, c.MetadataMaxAge))
	}
	if !c.RegexpTopics {
		return errs
	}
	for _, t := range c.Topics {
		if t.Partitions != nil {
			errs = append(errs, fmt.Errorf("topic pattern %q cannot select partitions", t.Name))
		}
		if t.Name == "" {
			errs = append(errs, errors.New("empty topic pattern"))
		} else if _, err := regexp.Compile(t.Name); err != nil {
			errs = append(errs, fmt.Errorf("topic pattern %q: %w", t.Name, err))
		}
	}
	for _, x := range c.ExcludeTopics {
		if _, err := regexp.Compile(x); err != nil {
			errs = append(errs, fmt.Errorf("exclude pattern %q: %w", x, err))
		}
	}
	return errs
}

// topicPatterns are the compiled Topics entries of a RegexpTopics config.
type topicPatterns struct {
	raw  []string
	res  []*regexp.Regexp
	excl []*regexp.Regexp // Config.ExcludeTopics
}

// newTopicPatterns compiles the entries of a validated config, or returns
// nil without RegexpTopics.
func newTopicPatterns(c *Config) *topicPatterns {
	if !c.RegexpTopics {
		return nil
	}
	tp := &topicPatterns{}
	for _, t := range c.Topics {
		tp.raw = append(tp.raw, t.Name)
		tp.res = append(tp.res, regexp.MustCompile(t.Name))
	}
	for _, x := range c.ExcludeTopics {
		tp.excl = append(tp.excl, regexp.MustCompile(x))
	}
	return tp
}

// namesInternal reports whether pattern may select internal topics. It
// starts with "__", the prefix of Kafka's internal topics, after an
// optional "^".
func namesInternal(pattern string) bool {
	return strings.HasPrefix(strings.TrimPrefix(pattern, "^"), "__")
}

// match returns the topics some pattern selects and no exclude pattern
// matches, each with the first pattern (in config order) that does.
// Internal says which topics are internal.
func (tp *topicPatterns) match(internal map[string]bool) map[string]string {
	out := map[string]string{}
	for name, isInternal := range internal {
		if slices.ContainsFunc(tp.excl, func(re *regexp.Regexp) bool { return re.MatchString(name) }) {
			continue
		}
		for i, re := range tp.res {
			if re.MatchString(name) && (!isInternal || namesInternal(tp.raw[i])) {
				out[name] = tp.raw[i]
				break
			}
		}
	}
	return out
}

// String lists the patterns as the config has them.
func (tp *topicPatterns) String() string { return strings.Join(tp.raw, ",") }

// listAll lists every topic of the cluster, internal ones included, with
// their partitions (for selectTopics) and which are internal. A topic the
// broker answers with an error of its own is left out unless the error says
// it exists (a leader election), so it is listed again when selected.
func (c *cluster) listAll(ctx context.Context) (kadm.TopicDetails, map[string]bool, error) {
	details, err := c.adm.ListTopicsWithInternal(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list every topic from seed brokers %s: %w", strings.Join(c.seeds, ","), err)
	}
	internal := map[string]bool{}
	for name, d := range details {
		if d.Err != nil && (errors.Is(d.Err, kerr.UnknownTopicOrPartition) || errors.Is(d.Err, kerr.TopicAuthorizationFailed)) {
			continue
		}
		internal[name] = d.IsInternal
	}
	return details, internal, nil
}

// discovery is the outcome of matching the patterns against the cluster's
// topics.
type discovery struct {
	matched map[string]string // every topic matched, with the pattern that selected it
	at      time.Time         // when the topics were listed
}

// names returns the topics matched, sorted.
func (d discovery) names() []string { return slices.Sorted(maps.Keys(d.matched)) }

// resolved is what resolve returns, without the error.
type resolved struct {
	keys      []ranges.Key
	ids       map[string][16]byte
	topicErrs map[string]error
}

// discover lists the cluster's topics, matches the patterns, and resolves
// the topics matched together with held (topics still read, waited for or
// snapshotted: one missing from the listing was deleted, and the result
// says so) from the same listing.
func (c *cluster) discover(ctx context.Context, tp *topicPatterns, held []string) (resolved, discovery, error) {
	at := time.Now()
	details, internal, err := c.listAll(ctx)
	if err != nil {
		return resolved{}, discovery{}, err
	}
	d := discovery{matched: tp.match(internal), at: at}
	var r resolved
	r.keys, r.ids, r.topicErrs = selectTopics(patternSpecs(d.names(), held), details)
	return r, d, nil
}

// patternSpecs returns the topic entries of a pattern config's listing: the
// topics matched and held, each once, sorted.
func patternSpecs(matched, held []string) []TopicSpec {
	names := slices.Sorted(slices.Values(append(slices.Clone(matched), held...)))
	names = slices.Compact(names)
	specs := make([]TopicSpec, len(names))
	for i, n := range names {
		specs[i] = TopicSpec{Name: n}
	}
	return specs
}

// heldTopics returns the topics of every partition the engine reads,
// waits for or snapshotted.
func (t *partTable) heldTopics() []string {
	seen := map[string]bool{}
	for k, r := range t.recs {
		if r.state.held() || r.snapped || r.snapErr != nil {
			seen[k.Topic] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// metadataMaxAge is how often patterns are matched again.
func (c *Config) metadataMaxAge() time.Duration {
	if c.MetadataMaxAge > 0 {
		return c.MetadataMaxAge
	}
	return defaultMetadataMaxAge
}

// patternTopicsDue returns, with RegexpTopics, the topic entries the refresh
// lists (the topics last matched and every topic held), and whether the
// patterns are to be matched again first (continuous runs only: a bounded
// run reads the topics matched at start). Without RegexpTopics it returns
// the configured topics.
func (rf *refresher) patternTopicsDue() (specs []TopicSpec, held []string, due bool) {
	e := rf.e
	if e.patterns == nil {
		return e.cfg.Topics, nil, false
	}
	e.mu.Lock()
	held = e.parts.heldTopics()
	e.mu.Unlock()
	due = !e.cfg.StopAtEnd && time.Since(e.sched.found.at) >= e.cfg.metadataMaxAge()
	return patternSpecs(e.sched.found.names(), held), held, due
}

// logMatched logs the topics the patterns matched at start.
func (tp *topicPatterns) logMatched(log Logger, names []string, cfg *Config) {
	switch {
	case len(names) == 0:
		log.Infof("No topic matches %s yet; matching again every %s", tp, cfg.metadataMaxAge())
	case cfg.StopAtEnd:
		log.Infof("%s match %d topics, which this bounded run reads: %s", tp, len(names), shortList(names))
	default:
		log.Infof("%s match %d topics: %s; matching again every %s", tp, len(names), shortList(names), cfg.metadataMaxAge())
	}
}

// shortList joins names, cut after 300 bytes.
func shortList(names []string) string {
	s := strings.Join(names, ", ")
	if len(s) > 300 {
		s = s[:300] + fmt.Sprintf("... (%d in all)", len(names))
	}
	return s
}
