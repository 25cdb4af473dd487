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

// TestOrderedWaitsForEarlierIncarnation (review 4, finding 1): docs/configuration.md
// "ordered: one range per partition in flight, so each partition arrives in
// offset order". A member holds a batch of t/0 (the pipeline is slow on it)
// and gets t/0 back as a new incarnation: after a lost session, and at an
// eager rebalance (range, roundrobin and sticky revoke everything and hand
// the kept partitions back; here a second member joins for another topic).
// The new incarnation must hand out nothing of t/0 while the old batch is
// still in the pipeline (a changelog table would end with an older value),
// and once it is done, t/0 is read to its end.
func TestOrderedWaitsForEarlierIncarnation(t *testing.T) {
	cases := []struct {
		name     string
		balancer func() kgo.GroupBalancer
		handover func(t *testing.T, c *kfake.Cluster, bal func() kgo.GroupBalancer)
	}{
		{"lost_session", kgo.CooperativeStickyBalancer, func(_ *testing.T, c *kfake.Cluster, _ func() kgo.GroupBalancer) { loseSessionOnce(c) }},
	}
	for _, bal := range balancers {
		if bal.name == "cooperative_sticky" {
			continue // a join revokes only what moves: t/0 stays the same incarnation
		}
		cases = append(cases, struct {
			name     string
			balancer func() kgo.GroupBalancer
			handover func(t *testing.T, c *kfake.Cluster, bal func() kgo.GroupBalancer)
		}{"rebalance_" + bal.name, bal.b, joinForOtherTopic})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 1, 300, "t", "other")
			e, log := newEngine(t, c, func(cfg *Config) {
				memberConfig(tc.balancer())(cfg)
				cfg.Ordered = true
			})
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			k0 := ranges.Key{Topic: "t", Partition: 0}
			old, err := e.Next(ctx) // the pipeline is slow on this one: not acknowledged yet
			require.NoError(t, err)
			oldInc := old.Incarnation()

			tc.handover(t, c, tc.balancer)
			require.Eventually(t, func() bool { return owns(e, k0) && incOf(e, k0) != oldInc }, 20*time.Second, 10*time.Millisecond,
				"t/0 did not come back as a new incarnation\n%s", log)

			// The old batch is still in the pipeline: nothing more of t/0.
			var overtook []ranges.Range
			nctx, ncancel := context.WithTimeout(ctx, 2*time.Second)
			for {
				b, err := e.Next(nctx)
				if err != nil {
					break
				}
				if !old.Done() {
					overtook = append(overtook, b.Span)
				}
				b.Ack()
			}
			ncancel()
			assert.Empty(t, overtook, "ordered mode handed out batches of t/0 while its batch %s of incarnation %d was still in the pipeline", old.Span, oldInc)

			old.Ack() // late: stale, and the new incarnation may go on
			end := int64(0)
			for end < 300 {
				b, err := e.Next(ctx)
				require.NoError(t, err, "t/0 was not read to its end after the old batch was done (read to %d)\n%s", end, log)
				assert.Equal(t, incOf(e, k0), b.Incarnation())
				end = max(end, b.Span.End)
				b.Ack()
			}
			assert.NoError(t, e.Err())
		})
	}
}

// joinForOtherTopic makes a second member join group g for topic "other"
// only: an eager balancer revokes every partition of the first member and
// hands t/0 back to it.
func joinForOtherTopic(t *testing.T, c *kfake.Cluster, bal func() kgo.GroupBalancer) {
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("other"),
		kgo.Balancers(bal()), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var polling sync.WaitGroup
	polling.Add(1)
	go func() {
		defer polling.Done()
		for ctx.Err() == nil {
			other.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		polling.Wait()
		other.Close()
	})
}

// loseSessionOnce answers the group's next heartbeat with UNKNOWN_MEMBER_ID:
// the member loses its partitions and rejoins.
func loseSessionOnce(c *kfake.Cluster) {
	var lose atomic.Bool
	lose.Store(true)
	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !lose.Swap(false) {
			return nil, nil, false
		}
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
}
