package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestInvalidTopicNameIsIsolatedLikeAMissingTopic: a topic the cluster
// answers INVALID_TOPIC_EXCEPTION for (a name Kafka cannot give a topic,
// such as the pattern logs.* without regexp_topics) is kept out as missing,
// with an error that says why, and the other topics are listed as usual.
// Before, its error was retried as a listing failure.
func TestInvalidTopicNameIsIsolatedLikeAMissingTopic(t *testing.T) {
	keys, ids, errs := selectListed([]TopicSpec{{Name: "logs.*"}, {Name: "payments"}}, map[string]listedTopic{
		"logs.*":   {err: kerr.InvalidTopicException},
		"payments": {id: [16]byte{1}, partitions: []int32{0, 1}},
	})
	assert.Equal(t, []ranges.Key{{Topic: "payments", Partition: 0}, {Topic: "payments", Partition: 1}}, keys)
	assert.Equal(t, map[string][16]byte{"payments": {1}}, ids)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs["logs.*"], errMissing)
	assert.ErrorContains(t, errs["logs.*"], `topics: topic "logs.*" is not a name Kafka can give a topic`)
	assert.ErrorContains(t, errs["logs.*"], "regexp_topics: true")
}
