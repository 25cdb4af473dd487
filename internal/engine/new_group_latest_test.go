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

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestNewGroupLatestPartitionListedLate (issue 43, suspected defect 7,
// proved): a brand-new group, start_from latest, a topic of two partitions
// that existed with 300 records each before any member started. The first
// member is assigned both; it starts t/0 at latest and commits it, but
// cannot list t/1's watermarks (its leader is not available), so t/1
// waits, unread and uncommitted. A second member, then the only one, is
// assigned t/1; when it lists the group's offsets, the group has one for
// t/0 (this run's own, at latest) and none for t/1.
//
//   - first_run: the second member started while the group had no offset
//     (on Kafka: both start together, group.initial.rebalance.delay.ms puts
//     them in the group's first generation, and one lists after the other
//     committed). t/1 existed when the group started, so start_from latest
//     applies: none of its 300 old records is delivered. Before the fix it
//     was taken for new to the group and read from its first offset.
//   - joined_later: the second member started once the group had offsets;
//     a partition no member ever committed may be new to the group (its
//     topic created after the group started), so it is read from its first
//     offset: all 300 delivered, duplicates rather than a skip (documented).
func TestNewGroupLatestPartitionListedLate(t *testing.T) {
	for _, firstRun := range []bool{true, false} {
		name := "joined_later"
		if firstRun {
			name = "first_run"
		}
		t.Run(name, func(t *testing.T) { testNewGroupLatest(t, firstRun) })
	}
}

func testNewGroupLatest(t *testing.T, firstRun bool) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produce(t, c, "t", 2, 300)
	var hidden atomic.Bool
	hidden.Store(true)
	hideLatestListing(c, 1, &hidden)
	member := func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StartFrom = StartLatest
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	// The first member's commits wait until the second member started
	// (first_run), or not (joined_later).
	commits := make(chan struct{})
	if !firstRun {
		close(commits)
	}
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	a, alog := newEngine(t, c, func(cfg *Config) {
		member(cfg)
		cfg.wrapCommitter = func(m committer) committer { return gatedCommitter{committer: m, open: commits} }
	})
	require.Eventually(t, func() bool { return owns(a, k0) && waitsFor(a, k1) }, 20*time.Second, 10*time.Millisecond,
		"the first member reads t/0 and waits for t/1\n%s", alog)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if !firstRun {
		require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 300 }, 10*time.Second, 20*time.Millisecond,
			"t/0 committed at latest\n%s", alog)
	}
	b, blog := newEngine(t, c, member)
	if firstRun {
		close(commits) // the second member listed the group empty at its start
		require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 300 }, 10*time.Second, 20*time.Millisecond,
			"t/0 committed at latest\n%s", alog)
	}
	require.Eventually(t, func() bool { return owns(b, k0) || waitsFor(b, k1) }, 20*time.Second, 10*time.Millisecond,
		"the second member is assigned a partition\n%s\n--\n%s", alog, blog)
	require.NoError(t, a.Close(ctx)) // the first member leaves: the second owns both
	require.Eventually(t, func() bool { return owns(b, k0) && waitsFor(b, k1) }, 20*time.Second, 10*time.Millisecond,
		"the second member reads t/0 and waits for t/1\n%s\n--\n%s", alog, blog)
	time.Sleep(300 * time.Millisecond) // it lists the group's offsets
	hidden.Store(false)                 // t/1's leader is back
	require.Eventually(t, func() bool { return owns(b, k1) }, 10*time.Second, 10*time.Millisecond, "t/1 not read\n%s", blog)
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		nctx, ncancel := context.WithTimeout(ctx, 200*time.Millisecond)
		bt, err := b.Next(nctx)
		ncancel()
		if err == nil {
			got += len(bt.Records)
			bt.Ack()
		}
	}
	if firstRun {
		assert.Zero(t, got, "start_from latest in the group's first run: t/1's 300 old records were delivered\n%s\n--\n%s", alog, blog)
	} else {
		assert.Equal(t, 300, got, "a partition no member committed, in a group that had offsets when this member started: read from its first offset, never skipped\n%s", blog)
	}
}

// gatedCommitter holds every commit until open is closed.
type gatedCommitter struct {
	committer
	open <-chan struct{}
}

func (g gatedCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.committer.Commit(ctx, offsets)
}

// waitsFor reports whether e waits to read k (assigned, its offsets not
// listed yet).
func waitsFor(e *Engine, k ranges.Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stateLocked(k) == stateWaiting
}
