package engine

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTopicPatternsMatch checks how patterns select topics: anywhere in the
// name (franz-go's ConsumeRegex), and internal topics only by a pattern
// starting with "__" (after an optional "^").
func TestTopicPatternsMatch(t *testing.T) {
	topics := map[string]bool{ // name: internal
		"orders": false, "orders.eu": false, "old-orders": false, "audit": false,
		"__consumer_offsets": true, "__transaction_state": true, "__app": false,
	}
	tests := []struct {
		patterns []string
		want     map[string]string
	}{
		{[]string{"orders"}, map[string]string{"orders": "orders", "orders.eu": "orders", "old-orders": "orders"}},
		{[]string{"^orders$"}, map[string]string{"orders": "^orders$"}},
		{[]string{`^orders\.`, "orders"}, map[string]string{"orders.eu": `^orders\.`, "orders": "orders", "old-orders": "orders"}},
		{[]string{".*"}, map[string]string{"orders": ".*", "orders.eu": ".*", "old-orders": ".*", "audit": ".*", "__app": ".*"}},
		{[]string{"offsets", "(__consumer_offsets)", "_state$"}, map[string]string{}},
		{[]string{"^__consumer_offsets$"}, map[string]string{"__consumer_offsets": "^__consumer_offsets$"}},
		{[]string{"__"}, map[string]string{"__consumer_offsets": "__", "__transaction_state": "__", "__app": "__"}},
		{[]string{"nothing"}, map[string]string{}},
	}
	for _, tc := range tests {
		cfg := Config{RegexpTopics: true}
		for _, p := range tc.patterns {
			cfg.Topics = append(cfg.Topics, TopicSpec{Name: p})
		}
		got := newTopicPatterns(&cfg).match(topics)
		assert.Equal(t, tc.want, got, "match(%q) = %v, want %v", tc.patterns, got, tc.want)
	}
}

// TestConfigValidatePatterns checks the engine's checks of topic patterns.
func TestConfigValidatePatterns(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" for valid
	}{
		{name: "patterns", mod: func(c *Config) { c.Topics = []TopicSpec{{Name: "^a"}, {Name: "b{1,2}"}} }},
		{name: "a name that is not a pattern without regexp topics", mod: func(c *Config) { c.RegexpTopics = false; c.Topics = []TopicSpec{{Name: "(a"}} }},
		{name: "invalid", mod: func(c *Config) { c.Topics = []TopicSpec{{Name: "(a"}} }, wantErr: "topic pattern \"(a\": error parsing regexp: missing closing ): `(a`"},
		{name: "partitions", mod: func(c *Config) { c.Topics = []TopicSpec{{Name: "a", Partitions: []int32{0}}} }, wantErr: `topic pattern "a" cannot select partitions`},
		{name: "empty", mod: func(c *Config) { c.Topics = []TopicSpec{{Name: ""}} }, wantErr: "empty topic pattern"},
		{name: "negative age", mod: func(c *Config) { c.MetadataMaxAge = -time.Second }, wantErr: "metadata max age must be >= 0 (0 means 5m0s), got -1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Seeds: []string{"a:1"}, Topics: []TopicSpec{{Name: "t"}}, RegexpTopics: true, MaxRangeRecords: 1, MaxInFlight: 1, PollInterval: time.Second}
			tc.mod(&cfg)
			_, err := New(cfg)
			if tc.wantErr == "" {
				assert.NoError(t, err, "New(%+v)", cfg)
				return
			}
			require.Error(t, err, "New(%+v)", cfg)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// patternConfig reads the topics matching patterns, matching them again
// every 100ms.
func patternConfig(patterns ...string) func(*Config) {
	return func(cfg *Config) {
		cfg.Topics = nil
		for _, p := range patterns {
			cfg.Topics = append(cfg.Topics, TopicSpec{Name: p})
		}
		cfg.RegexpTopics = true
		cfg.MetadataMaxAge = 100 * time.Millisecond
	}
}

// readTopics returns the topics of the partitions the engine reads.
func readTopics(e *Engine) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	for k := range e.parts.reading() {
		names = append(names, k.Topic)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// readKeys returns the partitions the engine reads.
func readKeys(e *Engine) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var keys []string
	for k := range e.parts.reading() {
		keys = append(keys, k.String())
	}
	slices.Sort(keys)
	return keys
}

// TestPatternReadsTopicCreatedMidRun: with start_from latest, a topic that
// matches and is created while the input runs is read from its first
// offset; one that does not match is not read, nor is an internal topic the
// pattern matches without naming it. Before, a pattern was taken for a
// topic name that does not exist.
func TestPatternReadsTopicCreatedMidRun(t *testing.T) {
	c := newKafka(t, 1, 10, "orders.eu", "audit")
	require.NoError(t, c.CreateTopic("orders.state", 1, map[string]string{"kfake.is_internal": "true"}))
	produce(t, c, "orders.state", 1, 10)
	e, log := newEngine(t, c, func(cfg *Config) {
		patternConfig(`^orders\.`)(cfg)
		cfg.StartFrom = StartLatest
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// Created before the matching topic, so whatever listing found that
	// one found this one too.
	require.NoError(t, c.CreateTopic("payments", 1, nil))
	produce(t, c, "payments", 1, 10)
	require.NoError(t, c.CreateTopic("orders.us", 2, nil))
	produce(t, c, "orders.us", 2, 20)
	produce(t, c, "orders.eu", 1, 5)
	got := take(ctx, t, e, log, 45)
	assert.Equal(t, map[string]int{"orders.eu/0": 5, "orders.us/0": 20, "orders.us/1": 20}, got)
	assert.Equal(t, []string{"orders.eu", "orders.us"}, readTopics(e))
	assert.Contains(t, log.String(), `Topic "orders.us" matches pattern "^orders\\."; reading it from its first offset`)
	require.NoError(t, e.Err())
}

// TestPatternReadsInternalTopicOnlyWhenNamed: an internal topic is read by a
// pattern starting with "__", not by one that merely matches it; a topic
// whose name starts with "__" but that is not internal is like any other.
func TestPatternReadsInternalTopicOnlyWhenNamed(t *testing.T) {
	c := newKafka(t, 1, 10, "__app")
	require.NoError(t, c.CreateTopic("__state", 1, map[string]string{"kfake.is_internal": "true"}))
	produce(t, c, "__state", 1, 7)
	for _, tc := range []struct {
		patterns []string
		want     map[string]int
	}{
		{[]string{"state", "app"}, map[string]int{"__app/0": 10}},
		{[]string{".*"}, map[string]int{"__app/0": 10}},
		{[]string{"^__state$"}, map[string]int{"__state/0": 7}},
		{[]string{"__"}, map[string]int{"__app/0": 10, "__state/0": 7}},
	} {
		e, log := newEngine(t, c, func(cfg *Config) {
			patternConfig(tc.patterns...)(cfg)
			cfg.StopAtEnd = true
		})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		got, err := drain(ctx, e)
		cancel()
		require.ErrorIs(t, err, ErrEnd, "%q\n%s", tc.patterns, log)
		assert.Equal(t, tc.want, got, "patterns %q", tc.patterns)
	}
}

// TestPatternBoundedRunWithoutMatchStops: a bounded run whose patterns match
// no topic has nothing to read: it stops naming the patterns.
func TestPatternBoundedRunWithoutMatchStops(t *testing.T) {
	c := newKafka(t, 1, 10, "audit")
	e, log := newEngine(t, c, func(cfg *Config) {
		patternConfig("^orders", "payments")(cfg)
		cfg.StopAtEnd = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	require.EqualError(t, e.Err(), "topics: no topic matches ^orders,payments, so this bounded run has nothing to read")
}

// TestPatternDeletedTopicIsDropped: a matching topic deleted after it was
// read is dropped with a warning, also when the listing that no longer
// shows it is the one that matches the patterns again (every poll here).
// Before, the topic just stopped being listed, and its partitions were
// kept for ever.
func TestPatternDeletedTopicIsDropped(t *testing.T) {
	c := newKafka(t, 1, 20, "t1", "t2")
	e, log := newEngine(t, c, func(cfg *Config) {
		patternConfig("^t")(cfg)
		cfg.MetadataMaxAge = time.Millisecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	assert.Equal(t, map[string]int{"t1/0": 20, "t2/0": 20}, take(ctx, t, e, log, 40))
	require.NoError(t, c.DeleteTopic("t1"))
	require.Eventually(t, func() bool { return strings.Contains(log.String(), `Topic "t1" was deleted`) }, 10*time.Second, 20*time.Millisecond, "%s", log)
	assert.Equal(t, []string{"t2"}, readTopics(e))
	produce(t, c, "t2", 1, 5)
	assert.Equal(t, map[string]int{"t2/0": 5}, take(ctx, t, e, log, 5))
	require.NoError(t, e.Err())
}

// countAllTopicListings counts the metadata requests for every topic.
func countAllTopicListings(c *kfake.Cluster) (all, named *atomic.Int64) {
	all, named = &atomic.Int64{}, &atomic.Int64{}
	c.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req.(*kmsg.MetadataRequest).Topics == nil {
			all.Add(1)
		} else {
			named.Add(1)
		}
		return nil, nil, false
	})
	return all, named
}

// TestPatternsMatchedEveryMetadataMaxAge: the cluster's every topic is
// listed at start and then every metadata_max_age, not at every poll: the
// polls in between list only the matched topics.
func TestPatternsMatchedEveryMetadataMaxAge(t *testing.T) {
	c := newKafka(t, 1, 10, "orders")
	all, named := countAllTopicListings(c)
	e, log := newEngine(t, c, func(cfg *Config) {
		patternConfig("^orders")(cfg)
		cfg.MetadataMaxAge = time.Hour
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.CreateTopic("orders.new", 1, nil))
	produce(t, c, "orders.new", 1, 5)
	assert.Equal(t, map[string]int{"orders/0": 10}, take(ctx, t, e, log, 10))
	from := named.Load()
	require.Eventually(t, func() bool { return named.Load() >= from+10 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int64(1), all.Load(), "listings of every topic")
	assert.Equal(t, []string{"orders"}, readTopics(e))
}

// TestPatternMembersBalanceNewTopic: two members of a group with the same
// pattern and start_from latest; a matching topic created while they run
// is added to both subscriptions, the group balances the partitions of
// both topics over the members, the new ones are read from their first
// offsets, and the group commits them to
// their ends; a topic that does not match is not read.
func TestPatternMembersBalanceNewTopic(t *testing.T) {
	c := newKafka(t, 2, 10, "orders.a")
	var engines []*Engine
	var logs []*testLogger
	for range 2 {
		e, log := newEngine(t, c, func(cfg *Config) {
			memberConfig(kgo.CooperativeStickyBalancer())(cfg)
			patternConfig(`^orders\.`)(cfg)
			cfg.StartFrom = StartLatest
		})
		engines, logs = append(engines, e), append(logs, log)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	dctx, stop := context.WithCancel(ctx)
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := drain(dctx, e)
			mu.Lock()
			defer mu.Unlock()
			for k, v := range n {
				got[k] += v
			}
		}()
	}
	require.Eventually(t, func() bool { return len(readTopics(engines[0])) > 0 && len(readTopics(engines[1])) > 0 },
		30*time.Second, 20*time.Millisecond, "both members own partitions\n%s\n%s", logs[0], logs[1])

	require.NoError(t, c.CreateTopic("payments", 2, nil))
	produce(t, c, "payments", 2, 10)
	require.NoError(t, c.CreateTopic("orders.b", 2, nil))
	produce(t, c, "orders.b", 2, 30)
	adm := kadm.NewClient(kgoClient(t, c))
	require.Eventually(t, func() bool {
		return committed(ctx, t, adm, "g", "orders.b", 0) == 30 && committed(ctx, t, adm, "g", "orders.b", 1) == 30
	}, 40*time.Second, 50*time.Millisecond, "orders.b was not committed to its end\n%s\n%s", logs[0], logs[1])
	// The union of both subscriptions, balanced: two partitions each.
	require.Eventually(t, func() bool {
		k0, k1 := readKeys(engines[0]), readKeys(engines[1])
		union := slices.Sorted(slices.Values(append(k0, k1...)))
		return len(k0) == 2 && len(k1) == 2 && slices.Equal(union, []string{"orders.a/0", "orders.a/1", "orders.b/0", "orders.b/1"})
	}, 10*time.Second, 20*time.Millisecond, "the members do not share the four partitions\n%s\n%s", logs[0], logs[1])
	stop()
	wg.Wait()
	for _, e := range engines {
		require.NoError(t, e.Err())
		assert.NotContains(t, readTopics(e), "payments")
	}
	assert.GreaterOrEqual(t, got["orders.b/0"], 30, "records of orders.b/0 read: %v", got)
	assert.GreaterOrEqual(t, got["orders.b/1"], 30, "records of orders.b/1 read: %v", got)
	assert.NotContains(t, slices.Collect(maps.Keys(got)), "payments/0")
	assert.Equal(t, int64(-1), committed(ctx, t, adm, "g", "payments", 0))
}

// TestPatternMemberStartsWithoutMatch: a member whose patterns match no
// topic yet joins the group once one matches, and reads it.
func TestPatternMemberStartsWithoutMatch(t *testing.T) {
	c := newKafka(t, 1, 10, "audit")
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		patternConfig(`^orders\.`)(cfg)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.CreateTopic("orders.x", 2, nil))
	produce(t, c, "orders.x", 2, 15)
	assert.Equal(t, map[string]int{"orders.x/0": 15, "orders.x/1": 15}, take(ctx, t, e, log, 30))
	assert.Contains(t, log.String(), `No topic matches ^orders\. yet`)
	require.NoError(t, e.Err())
}
