package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFollowedPartitionsAreNotListedEveryPoll: once the partitions of a
// continuous read are caught up and followed by their cursors (whose
// fetches report each partition's end), a refresh lists only the watermarks
// of the partitions with no follower (here u/0, which cannot be listed, so
// it is listed at every refresh: the test's clock), and the followed ones
// only every followedListEvery refreshes. Records written afterwards are
// still read, from the followers' reports.
func TestFollowedPartitionsAreNotListedEveryPoll(t *testing.T) {
	const partitions = 4
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"), kfake.SeedTopics(1, "u"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produce(t, c, "t", partitions, 100)
	var endT atomic.Int64 // t's end offsets (the control function cannot ask the cluster)
	endT.Store(100)
	var listedT, listedU atomic.Int64 // end offset listings naming t, u
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				switch {
				case rt.Topic == "u":
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				case rp.Timestamp == -2:
					sp.Offset, sp.LeaderEpoch = 0, 0
				default:
					sp.Offset, sp.LeaderEpoch = endT.Load(), 0
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
			if rt.Partitions[0].Timestamp == -1 {
				switch rt.Topic {
				case "t":
					listedT.Add(1)
				case "u":
					listedU.Add(1)
				}
			}
		}
		return resp, nil, true
	})
	e, log := newEngine(t, c, func(cfg *Config) { cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "u"}} })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n := 0
	for n < partitions*100 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		n += len(b.Records)
		b.Ack()
	}
	require.Eventually(t, func() bool { return e.kafka.cache.Stats().Following == partitions }, 10*time.Second, 10*time.Millisecond, "followers")

	listedT.Store(0)
	listedU.Store(0)
	require.Eventually(t, func() bool { return listedU.Load() >= 30 }, 15*time.Second, 10*time.Millisecond, "refreshes")
	lt, lu := listedT.Load(), listedU.Load()
	// Listed at every refresh: lt is lu. Every followedListEvery (10)
	// refreshes: about lu/10.
	assert.LessOrEqual(t, lt*3, lu, "the followed partitions were listed in %d of %d refreshes", lt, lu)

	endT.Store(110) // before the records exist: a listing never shows an end below the followers' reports
	produce(t, c, "t", partitions, 10)
	for n < partitions*110 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "\n%s", log)
		n += len(b.Records)
		b.Ack()
	}
	assert.Contains(t, log.String(), "Partition u/0 is not readable yet")
}
