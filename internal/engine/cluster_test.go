package engine

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// listOffsetsShard is a failed shard of a ListOffsets request for the
// partitions of topic, as kadm reports it: broker -1 for partitions kgo could
// not map to a leader.
func listOffsetsShard(broker int32, err error, topic string, partitions ...int32) kadm.ShardError {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return kadm.ShardError{Req: req, Err: err, Broker: kadm.BrokerDetail{NodeID: broker, Host: "127.0.0.1", Port: 9092 + broker}}
}

// TestWatermarksKeepPartialListings feeds combineMarks what kadm returns
// when some partitions have no leader or their broker is down: the listed
// partitions together with a *kadm.ShardErrors (defect: watermarks returned
// on that error, so one leaderless partition kept every other partition from
// being listed). The listed partitions get watermarks; each failed one gets
// its own error naming the listing, the partition and the shard's reason.
func TestWatermarksKeepPartialListings(t *testing.T) {
	t0, t1, u0, u1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1},
		ranges.Key{Topic: "u", Partition: 0}, ranges.Key{Topic: "u", Partition: 1}
	keys := []ranges.Key{t0, t1, u0, u1}
	noLeader := &kadm.ShardErrors{Name: "ListOffsets", Errs: []kadm.ShardError{
		listOffsetsShard(-1, kerr.LeaderNotAvailable, "t", 1),
	}}
	noLeaderAndDown := &kadm.ShardErrors{Name: "ListOffsets", Errs: []kadm.ShardError{
		listOffsetsShard(-1, kerr.LeaderNotAvailable, "t", 1),
		listOffsetsShard(2, syscall.ECONNREFUSED, "u", 1),
	}}
	starts, err := newListing("start offset", listed(map[ranges.Key]int64{t0: 0, u0: 3, u1: 0}), noLeader)
	require.NoError(t, err, "newListing of a partial answer")
	ends, err := newListing("end offset", listed(map[ranges.Key]int64{t0: 10, u0: 13}), noLeaderAndDown)
	require.NoError(t, err, "newListing of a partial answer")

	out, errs := combineMarks(keys, starts, ends, nil, nil)
	assert.Equal(t, map[ranges.Key]marks{t0: {start: 0, end: 10, high: 10, from: -1}, u0: {start: 3, end: 13, high: 13, from: -1}}, out)
	require.Len(t, errs, 2)
	require.ErrorIs(t, errs[t1], kerr.LeaderNotAvailable)
	assert.Regexp(t, `^start offset of t/1: LEADER_NOT_AVAILABLE`, errs[t1].Error())
	require.ErrorIs(t, errs[u1], syscall.ECONNREFUSED)
	assert.Equal(t, "end offset of u/1: broker 2 (127.0.0.1:9094): "+syscall.ECONNREFUSED.Error(), errs[u1].Error())

	// A window's listing fails for its partitions the same way.
	from, err := newListing("offset at the window's start", listed(map[ranges.Key]int64{t0: 4}), &kadm.ShardErrors{
		Name: "ListOffsets", Errs: []kadm.ShardError{listOffsetsShard(-1, kerr.LeaderNotAvailable, "u", 0)},
	})
	require.NoError(t, err)
	out, errs = combineMarks([]ranges.Key{t0, u0}, starts, ends, &from, nil)
	assert.Equal(t, map[ranges.Key]marks{t0: {start: 0, end: 10, high: 10, from: 4}}, out)
	require.ErrorIs(t, errs[u0], kerr.LeaderNotAvailable)
	assert.Regexp(t, `^offset at the window's start of u/0: `, errs[u0].Error())
}

// TestNewListingFailsWhenNothingListed: err comes back only when nothing
// could be listed.
func TestNewListingFailsWhenNothingListed(t *testing.T) {
	other := errors.New("dial tcp 127.0.0.1:9092: connection refused")
	for _, tc := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"no error", nil, true},
		{"some shards failed", &kadm.ShardErrors{Name: "ListOffsets", Errs: []kadm.ShardError{listOffsetsShard(-1, kerr.LeaderNotAvailable, "t", 1)}}, true},
		{"every shard failed", &kadm.ShardErrors{Name: "ListOffsets", AllFailed: true, Errs: []kadm.ShardError{listOffsetsShard(-1, kerr.LeaderNotAvailable, "t", 0, 1)}}, false},
		{"metadata failed", other, false},
		{"authorization", &kadm.AuthError{Err: kerr.TopicAuthorizationFailed}, false},
	} {
		_, err := newListing("start offset", listed(map[ranges.Key]int64{{Topic: "t", Partition: 0}: 0}), tc.err)
		if tc.ok {
			assert.NoErrorf(t, err, "newListing(%s)", tc.name)
		} else {
			assert.ErrorIsf(t, err, tc.err, "newListing(%s)", tc.name)
		}
	}
}

// TestTimeWindowSelectsExactly: start and stop timestamps select exactly the
// records whose timestamps lie in [start, stop), and a partition with none
// of them is empty.
func TestTimeWindowSelectsExactly(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range 60 { // partition 0: one record a minute from 10:00
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Timestamp: base.Add(time.Duration(i) * time.Minute), Value: fmt.Appendf(nil, "%d", i)})
	}
	for i := range 10 { // partition 1: all before the window
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 1, Timestamp: base.Add(-time.Hour + time.Duration(i)*time.Minute), Value: []byte("early")})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	start, stop := base.Add(15*time.Minute), base.Add(20*time.Minute)
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StartFrom = StartTimestamp
		cfg.StartMillis = start.UnixMilli()
		cfg.StopAtEnd = true
		cfg.StopMillis = stop.UnixMilli()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err)
		for _, r := range b.Records {
			got = append(got, fmt.Sprintf("%d:%s", r.Partition, r.Value))
		}
		b.Ack()
	}
	assert.Equal(t, []string{"0:15", "0:16", "0:17", "0:18", "0:19"}, got)
}

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

// newKfakeCluster is a cluster (the engine's listing client) on a kfake
// broker seeded with the topics of partitions.
func newKfakeCluster(tb testing.TB, topics map[string]int32) *cluster {
	tb.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	for name, n := range topics {
		opts = append(opts, kfake.SeedTopics(n, name))
	}
	fake := kfakeCluster(tb, opts...)
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
