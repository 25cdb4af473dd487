package plugin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
)

// TestParsePatterns checks that regexp_topics and metadata_max_age reach the
// engine's config, the patterns trimmed, and that patterns join a group.
func TestParsePatterns(t *testing.T) {
	c, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\nconsumer_group: g\nregexp_topics: true\ntopics: [ ' ^orders\\.(eu|us)$ ', 'a{1,2}' ]\n")
	require.NoError(t, err)
	ec := c.engineConfig(nil, nil)
	assert.True(t, ec.RegexpTopics, "engine RegexpTopics")
	assert.Equal(t, 5*time.Minute, ec.MetadataMaxAge, "engine MetadataMaxAge (default)")
	assert.Equal(t, []engine.TopicSpec{{Name: `^orders\.(eu|us)$`}, {Name: "a{1,2}"}}, ec.Topics)
	assert.True(t, ec.Group.Membership, "patterns with a group join it")

	c, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nmetadata_max_age: 30s\n")
	require.NoError(t, err)
	ec = c.engineConfig(nil, nil)
	assert.False(t, ec.RegexpTopics, "engine RegexpTopics")
	assert.Equal(t, 30*time.Second, ec.MetadataMaxAge, "engine MetadataMaxAge")
}

// TestInputRegexpTopics runs a bounded read of the topics matching a
// pattern through a Benthos stream: every record of the matching topics is
// delivered once, none of the others.
func TestInputRegexpTopics(t *testing.T) {
	addr := newKafka(t, "orders.eu", 2)
	adm := newAdmin(t, addr)
	for _, name := range []string{"orders.us", "audit", "old-orders.eu"} {
		_, err := adm.CreateTopic(t.Context(), 1, 1, nil, name)
		require.NoError(t, err)
	}
	produceRecords(t, addr, "orders.eu", 2, 0, 10)
	produceRecords(t, addr, "orders.us", 1, 0, 5)
	produceRecords(t, addr, "audit", 1, 0, 7)
	produceRecords(t, addr, "old-orders.eu", 1, 0, 3)

	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  regexp_topics: true
  topics: [ '^orders\.' ]
  stop_at: end
`, nil)
	requireEnded(t, res)
	byTopic := map[string]int{}
	for _, g := range res.msgs {
		byTopic[g.meta["kafka_topic"].(string)]++
	}
	assert.Equal(t, map[string]int{"orders.eu": 10, "orders.us": 5}, byTopic)
	assert.Contains(t, res.log.String(), `^orders\\. match 2 topics, which this bounded run reads: orders.eu, orders.us`)
}

// TestParseRegexpTopicsInclude checks Redpanda Connect's names:
// regexp_topics_include is topics with regexp_topics, and
// regexp_topics_exclude reaches the engine as the patterns never read.
func TestParseRegexpTopicsInclude(t *testing.T) {
	c, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: []\nregexp_topics_include: [ '^orders\\.', 'a{1,2}' ]\nregexp_topics_exclude: [ ' \\.tmp$ ' ]\n")
	require.NoError(t, err)
	ec := c.engineConfig(nil, nil)
	assert.True(t, ec.RegexpTopics, "engine RegexpTopics")
	assert.Equal(t, []engine.TopicSpec{{Name: `^orders\.`}, {Name: "a{1,2}"}}, ec.Topics)
	assert.Equal(t, []string{`\.tmp$`}, ec.ExcludeTopics)

	c, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\nregexp_topics: true\ntopics: [ '.*' ]\nregexp_topics_exclude: [ '^_' ]\n")
	require.NoError(t, err)
	ec = c.engineConfig(nil, nil)
	assert.Equal(t, []engine.TopicSpec{{Name: ".*"}}, ec.Topics)
	assert.Equal(t, []string{"^_"}, ec.ExcludeTopics)
}

// TestInputRegexpTopicsExclude runs a bounded read with Redpanda Connect's
// regexp_topics_include and regexp_topics_exclude: the topics an include
// pattern matches are read, except those an exclude pattern matches.
func TestInputRegexpTopicsExclude(t *testing.T) {
	addr := newKafka(t, "orders.eu", 1)
	adm := newAdmin(t, addr)
	for _, name := range []string{"orders.us", "orders.eu.tmp", "audit"} {
		_, err := adm.CreateTopic(t.Context(), 1, 1, nil, name)
		require.NoError(t, err)
	}
	produceRecords(t, addr, "orders.eu", 1, 0, 4)
	produceRecords(t, addr, "orders.us", 1, 0, 3)
	produceRecords(t, addr, "orders.eu.tmp", 1, 0, 2)
	produceRecords(t, addr, "audit", 1, 0, 1)

	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  regexp_topics_include: [ '^orders\.' ]
  regexp_topics_exclude: [ '\.tmp$' ]
  stop_at: end
`, nil)
	requireEnded(t, res)
	byTopic := map[string]int{}
	for _, g := range res.msgs {
		byTopic[g.meta["kafka_topic"].(string)]++
	}
	assert.Equal(t, map[string]int{"orders.eu": 4, "orders.us": 3}, byTopic)
}
