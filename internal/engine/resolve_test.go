package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// newKfakeCluster is a cluster (the engine's listing client) on a kfake
// broker seeded with the topics of partitions.
func newKfakeCluster(tb testing.TB, topics map[string]int32) *cluster {
	tb.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	for name, n := range topics {
		opts = append(opts, kfake.SeedTopics(n, name))
	}
	fake, err := kfake.NewCluster(opts...)
	require.NoError(tb, err)
	tb.Cleanup(fake.Close)
	c, err := newCluster(&Config{Seeds: fake.ListenAddrs()}, nil)
	require.NoError(tb, err)
	tb.Cleanup(c.close)
	return c
}

// TestResolve lists topics as a refresh does: every partition of a whole
// topic, sorted; the listed partitions of a topic given with partitions, and
// an error naming those that do not exist; a missing topic as errMissing;
// the topic IDs of those listed.
// relist, a refresh's listing, says the same as resolve, the start's.
func TestResolve(t *testing.T) {
	c := newKfakeCluster(t, map[string]int32{"a": 3, "b": 12})
	specs := []TopicSpec{
		{Name: "b"},
		{Name: "a", Partitions: []int32{2, 0, 7}},
		{Name: "gone"},
	}
	for _, list := range []struct {
		name string
		f    func(context.Context, []TopicSpec) ([]ranges.Key, map[string][16]byte, map[string]error, error)
	}{{"resolve", c.resolve}, {"relist", c.relist}} {
		t.Run(list.name, func(t *testing.T) { checkResolved(t)(list.f(t.Context(), specs)) })
	}
}

func checkResolved(t *testing.T) func(keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error, err error) {
	return func(keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error, err error) {
		require.NoError(t, err)
		want := []ranges.Key{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 2}}
		for p := range int32(12) {
			want = append(want, ranges.Key{Topic: "b", Partition: p})
		}
		assert.Equal(t, want, keys)
		require.Len(t, ids, 2)
		assert.NotEqual(t, [16]byte{}, ids["a"])
		assert.NotEqual(t, [16]byte{}, ids["b"])
		assert.NotEqual(t, ids["a"], ids["b"])
		require.Len(t, topicErrs, 2)
		assert.ErrorIs(t, topicErrs["a"], errMissing)
		assert.EqualError(t, topicErrs["a"], `topics: topic "a" partition 7 does not exist (the topic has 3 partitions)`)
		assert.ErrorIs(t, topicErrs["gone"], errMissing)
		assert.EqualError(t, topicErrs["gone"], `topics: topic "gone" does not exist`)
	}
}

// BenchmarkList1000 is a refresh's topic listing of a 1,000-partition
// topic (every poll_interval, caught up or not) against kfake, through kadm
// (resolve, the start's listing, which a refresh used before relist) and
// relist: kadm's allocations were the largest part of what an idle read
// left to the garbage collector. Each listing waits out the client's
// metadata min age first, as refreshes a poll_interval apart do (run it with
// -benchtime 20x).
func BenchmarkList1000(b *testing.B) {
	c := newKfakeCluster(b, map[string]int32{"t": 1000})
	specs := []TopicSpec{{Name: "t"}}
	for _, list := range []struct {
		name string
		f    func(context.Context, []TopicSpec) ([]ranges.Key, map[string][16]byte, map[string]error, error)
	}{{"resolve", c.resolve}, {"relist", c.relist}} {
		b.Run(list.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				time.Sleep(listingMetadataMinAge + 10*time.Millisecond)
				b.StartTimer()
				keys, _, _, err := list.f(b.Context(), specs)
				if err != nil || len(keys) != 1000 {
					b.Fatalf("%s = %d keys, %v", list.name, len(keys), err)
				}
			}
		})
	}
}
