package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestNewGroupLatestPartitionListedLate (issue 43, suspected defect 7,
// proved): a brand-new group, start_from latest, a topic of two partitions
// that existed with 300 records each before any member started. t/0 is
// started at latest and committed; t/1's watermarks cannot be listed (its
// leader is not available), so its owner waits, reading and committing
// nothing of it. Then its owner leaves and the other member is assigned
// t/1: when it lists the group's offsets, the group has one for t/0 (this
// run's own, at latest) and none for t/1.
//
//   - founders: both members started before either joined (on Kafka: they
//     start together, within group.initial.rebalance.delay.ms), so both
//     found the group without offsets and members: t/1 existed when the
//     group started, and start_from latest applies: none of its 300 old
//     records is delivered. Before the fix it was taken for new to the group
//     and read from its first offset.
//   - joined_later: the second member started once the first was in the
//     group; a partition no member committed may be new to the group (its
//     topic or partition created after the group started), so it is read
//     from its first offset: all 300 delivered, duplicates rather than a
//     skip (documented).
func TestNewGroupLatestPartitionListedLate(t *testing.T) {
	for _, founders := range []bool{true, false} {
		name := "joined_later"
		if founders {
			name = "founders"
		}
		t.Run(name, func(t *testing.T) { testNewGroupLatest(t, founders) })
	}
}

func testNewGroupLatest(t *testing.T, founders bool) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produce(t, c, "t", 2, 300)
	var hidden atomic.Bool
	hidden.Store(true)
	hideLatestListing(c, 1, &hidden)
	both := make(chan struct{})
	if founders {
		// Every JoinGroup waits until both members started.
		c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			c.SleepControl(func() { <-both })
			return nil, nil, false
		})
	}
	member := func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StartFrom = StartLatest
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	a, alog := newEngine(t, c, member)
	if !founders {
		require.Eventually(t, func() bool { return owns(a, k0) && waitsFor(a, k1) }, 20*time.Second, 10*time.Millisecond,
			"the first member reads t/0 and waits for t/1\n%s", alog)
	}
	b, blog := newEngine(t, c, member)
	close(both)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 300 }, 20*time.Second, 20*time.Millisecond,
		"t/0 committed at latest\n%s\n--\n%s", alog, blog)
	// The member that waits for t/1 leaves; the other is assigned it.
	var stay *Engine
	var stayLog *testLogger
	require.Eventually(t, func() bool {
		switch {
		case waitsFor(a, k1) && !waitsFor(b, k1):
			stay, stayLog = b, blog
			require.NoError(t, a.Close(ctx))
		case waitsFor(b, k1) && !waitsFor(a, k1):
			stay, stayLog = a, alog
			require.NoError(t, b.Close(ctx))
		}
		return stay != nil
	}, 20*time.Second, 10*time.Millisecond, "a member waits for t/1\n%s\n--\n%s", alog, blog)
	require.Eventually(t, func() bool { return owns(stay, k0) && waitsFor(stay, k1) }, 20*time.Second, 10*time.Millisecond,
		"the remaining member reads t/0 and waits for t/1\n%s", stayLog)
	time.Sleep(300 * time.Millisecond) // it lists the group's offsets
	hidden.Store(false)                // t/1's leader is back
	require.Eventually(t, func() bool { return owns(stay, k1) }, 10*time.Second, 10*time.Millisecond, "t/1 not read\n%s", stayLog)
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		nctx, ncancel := context.WithTimeout(ctx, 200*time.Millisecond)
		bt, err := stay.Next(nctx)
		ncancel()
		if err == nil {
			got += len(bt.Records)
			bt.Ack()
		}
	}
	if founders {
		assert.Zero(t, got, "start_from latest, a founder of the group: t/1's 300 old records were delivered\n%s", stayLog)
	} else {
		assert.Equal(t, 300, got, "a partition no member committed, taken over by a member that joined a running group: read from its first offset, never skipped\n%s", stayLog)
	}
}

// waitsFor reports whether e waits to read k (assigned, its offsets not
// listed yet).
func waitsFor(e *Engine, k ranges.Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.parts.stateOf(k) == stateWaiting
}
