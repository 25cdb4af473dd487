package engine

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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

// listed is a kadm.ListedOffsets of "topic/partition" -> offset.
func listed(offsets map[ranges.Key]int64) kadm.ListedOffsets {
	lo := kadm.ListedOffsets{}
	for k, o := range offsets {
		if lo[k.Topic] == nil {
			lo[k.Topic] = map[int32]kadm.ListedOffset{}
		}
		lo[k.Topic][k.Partition] = kadm.ListedOffset{Topic: k.Topic, Partition: k.Partition, Offset: o}
	}
	return lo
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
