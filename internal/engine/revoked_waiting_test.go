package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// hideListing makes the ListOffsets answers for partition p of topic
// fail with LEADER_NOT_AVAILABLE while hidden is set; every other partition
// is answered start 0 and end n (the control function cannot ask the
// cluster).
func hideListing(c *kfake.Cluster, topic string, p int32, n int64, hidden *atomic.Bool) {
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !hidden.Load() {
			return nil, nil, false
		}
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				if rt.Topic == topic && rp.Partition == p {
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				} else {
					sp.Offset, sp.LeaderEpoch = n, 0
					if rp.Timestamp == -2 {
						sp.Offset = 0
					}
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// anyDraining reports whether some partition of e is being drained.
func anyDraining(e *Engine) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.parts.reading() {
		if p.draining {
			return true
		}
	}
	return false
}

// groupOffsetOf returns group g's committed offset of t/p, or -1.
func groupOffsetOf(ctx context.Context, t *testing.T, c *kfake.Cluster, p int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "g"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = "t"
	rt.Partitions = []int32{p}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == p {
				return rp.Offset
			}
		}
	}
	return -1
}

// TestRevokedWaitingPartitionIsReadDuringTheDrain: a partition that
// is revoked while it still waits for its watermarks (its leader was not
// available when it was assigned) is not drained (it has no incarnation
// yet), and its wait is only ended when the revocation releases it, after
// the drain of the other revoked partitions. If its listing succeeds while
// that drain waits, the refresh starts it as a new incarnation, not
// draining: the engine reads it and Next hands its batches to the pipeline
// while the rebalance is held for the revocation of that very partition.
// The revocation then commits only what of them was acknowledged and drops
// the rest, so the next owner delivers them again: a graceful handover
// (README "Handovers": "no offset delivered twice") delivers twice.
//
// Real group, eager balancer (range: every rebalance revokes every
// partition): member A owns t/0 (one batch held by the pipeline) and t/1
// (unlistable); a second member joins, A's Revoked(t/0, t/1) drains t/0;
// t/1 becomes listable meanwhile.
func TestRevokedWaitingPartitionIsReadDuringTheDrain(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	var hidden atomic.Bool
	hidden.Store(true)
	hideListing(c, "t", 1, 300, &hidden)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.MaxInFlight = 8
		cfg.RevokeDrainTimeout = 5 * time.Minute
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.RebalanceTimeout(10 * time.Minute)}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	k1 := ranges.Key{Topic: "t", Partition: 1}

	// The pipeline holds the first batch of t/0; t/1 waits for its listing.
	held, err := e.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int32(0), held.Range.Partition)
	e.mu.Lock()
	st1 := e.parts.stateOf(k1)
	e.mu.Unlock()
	require.Equal(t, stateWaiting, st1, "t/1 waits for its watermarks\n%s", log)

	// A second member joins: Revoked(t/0, t/1) drains t/0.
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.Balancers(kgo.RangeBalancer()), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond))
	require.NoError(t, err)
	otherCtx, otherCancel := context.WithCancel(ctx)
	var polling sync.WaitGroup
	polling.Add(1)
	go func() {
		defer polling.Done()
		for otherCtx.Err() == nil {
			other.PollFetches(otherCtx)
		}
	}()
	defer func() { otherCancel(); polling.Wait(); other.Close() }()
	require.Eventually(t, func() bool { return anyDraining(e) }, 20*time.Second, 5*time.Millisecond, "no drain began\n%s", log)

	// t/1's leader is back while the drain waits for the held batch.
	hidden.Store(false)
	type handed struct {
		b        *Batch
		draining bool // t/0 was still being drained (the revocation under way) when it was handed out
	}
	var mu sync.Mutex
	var got []handed
	nextCtx, nextCancel := context.WithCancel(ctx)
	var taking sync.WaitGroup
	taking.Add(1)
	go func() {
		defer taking.Done()
		for {
			b, err := e.Next(nextCtx)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, handed{b, anyDraining(e)})
			mu.Unlock()
		}
	}()
	time.Sleep(2 * time.Second) // the drain still waits for the held batch
	var during []ranges.Range
	mu.Lock()
	for _, h := range got {
		if h.b.Range.Partition == 1 && h.draining {
			during = append(during, h.b.Span)
		}
	}
	mu.Unlock()
	held.Ack() // the drain ends, the revocation commits and hands over
	require.Eventually(t, func() bool { return !anyDraining(e) }, 20*time.Second, 5*time.Millisecond, "the drain did not end\n%s", log)
	nextCancel()
	taking.Wait()

	t.Logf("batches of t/1 handed out while the revocation of t/1 drained t/0: %v", during)
	t.Logf("group g's offset of t/1 after the handover: %d", groupOffsetOf(ctx, t, c, 1))
	assert.Empty(t, during, "Next handed batches of t/1 to the pipeline while t/1 was being revoked: they are neither drained nor committed, so the next owner delivers them again\n%s", log)
	require.NoError(t, e.Err())
}
