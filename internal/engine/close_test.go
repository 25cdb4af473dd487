package engine

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// freezeGroup holds every request to the group coordinator (commits,
// heartbeats, joins, leaves) in the broker until the returned thaw is
// called, as a member whose connections hang sees it. thaw is also called at
// cleanup.
func freezeGroup(t *testing.T, c *kfake.Cluster) (thaw func()) {
	t.Helper()
	thawed := make(chan struct{})
	var frozen atomic.Bool
	frozen.Store(true)
	for _, key := range []kmsg.Key{kmsg.OffsetCommit, kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.LeaveGroup} {
		c.ControlKey(key.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if frozen.Load() {
				c.SleepControl(func() { <-thawed })
			}
			return nil, nil, false
		})
	}
	var once atomic.Bool
	thaw = func() {
		if once.CompareAndSwap(false, true) {
			frozen.Store(false)
			close(thawed)
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// TestCloseWithFrozenGroupHonoursContext: with every request to the group
// coordinator hanging, Close returns within (about) its context instead of
// waiting in the member's leave, revocation and commit with franz-go's own
// context (1 min 51 s in defect 6a); once the coordinator answers again, a
// second Close commits what was acknowledged and leaves nothing running.
func TestCloseWithFrozenGroupHonoursContext(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	require.Eventually(t, func() bool { return len(ourGoroutines()) == 0 }, 20*time.Second, 20*time.Millisecond,
		"goroutines running before the test:\n%s", strings.Join(ourGoroutines(), "\n\n"))
	e, log := startEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Group.CommitPeriod = time.Hour // only the final commit commits
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	thaw := freezeGroup(t, c)
	b.Ack()

	closeCtx, closeCancel := context.WithTimeout(ctx, time.Second)
	defer closeCancel()
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- e.Close(closeCtx) }()
	select {
	case err = <-closed:
	case <-time.After(10 * time.Second):
		thaw() // let the Close return, so the test ends
		require.FailNow(t, "Close with a 1s context still running after 10s", "%s", log)
	}
	assert.Less(t, time.Since(start), 5*time.Second, "Close with a 1s context")
	require.ErrorIs(t, err, context.DeadlineExceeded, "Close while the group coordinator hangs")

	thaw()
	require.NoError(t, e.Close(ctx), "second Close, once the coordinator answers\n%s", log)
	require.NoError(t, e.Err())
	var left []string
	require.Eventually(t, func() bool { left = ourGoroutines(); return len(left) == 0 }, 10*time.Second, 20*time.Millisecond,
		"goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
	assert.Equal(t, b.Span.End, committedOf(t, c, "g", b.Range.Partition), "the acknowledged offset was committed")
}

// TestSecondCloseCommitsAfterExpiredClose: a first Close whose context has
// ended while a reader is still busy releases the readers but keeps what the
// final commit needs: a batch acknowledged after it is committed by the
// second Close, as the README promises (defect 6b: the first Close had
// closed the member, the second ran the final commit through closed
// clients, and the acknowledged offset was not committed).
func TestSecondCloseCommitsAfterExpiredClose(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	var prepared atomic.Int32
	unblock := make(chan struct{})
	e, log := startEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Group.CommitPeriod = time.Hour // only the final commit commits
		cfg.Hooks.Prepare = func(*Batch) any {
			if prepared.Add(1) > 2 {
				<-unblock // every reader but the first two is busy past Close's context
			}
			return nil
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var bs []*Batch
	for range 2 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	bs[0].Ack()
	require.Eventually(t, func() bool { return prepared.Load() > 2 }, 5*time.Second, 5*time.Millisecond, "no reader is busy")

	expired, expiredCancel := context.WithCancel(ctx)
	expiredCancel()
	require.ErrorIs(t, e.Close(expired), context.Canceled, "Close with an ended context while a reader is busy")
	bs[1].Ack() // acknowledged between the two Closes
	close(unblock)
	require.NoError(t, e.Close(ctx), "second Close\n%s", log)
	require.NoError(t, e.Err(), "the stopping error")
	assert.NotContains(t, log.String(), "Final commit failed")
	want := map[int32]int64{}
	for _, b := range bs {
		want[b.Range.Partition] = max(want[b.Range.Partition], b.Span.End)
	}
	for p, end := range want {
		assert.Equal(t, end, committedOf(t, c, "g", p), "the acknowledged offset of t/%d was committed", p)
	}
}

// TestStoppingErrorWithRangesInFlightEnds: a permanent error on one partition
// while readers of another wait to hand over their batches must end Next
// (defect: a batch was counted before it was handed over and never uncounted
// when its reader was cancelled in the hand-over, so Next never ended).
func TestStoppingErrorWithRangesInFlightEnds(t *testing.T) {
	c := newKafka(t, 2, 2000, "t")
	var broken atomic.Bool
	fetchError(c, "t", 1, kerr.TopicAuthorizationFailed.Code, broken.Load)
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 8
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sched.readers >= 4
	}, 5*time.Second, 10*time.Millisecond, "ranges in flight")
	// From now on partition 1 cannot be read; partition 0's readers keep
	// handing over batches while Next takes them, and the next fetch of
	// partition 1 stops the engine under them.
	broken.Store(true)
	b.Ack()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "Next after a stopping error with ranges in flight")
	require.ErrorIs(t, e.Err(), kerr.TopicAuthorizationFailed)
	assert.Regexp(t, `^read t/1\[\d+,\d+\) at offset \d+: `, e.Err().Error(), "the error names the range and offset")
	assert.Less(t, got["t/1"], 2000, "partition 1 was read to the end")
}

// TestCloseWithExpiredContextReleasesClients: Close whose context ends while
// readers are blocked on the network still closes every client, so the
// readers return and nothing is left running; a second Close then finishes.
func TestCloseWithExpiredContextReleasesClients(t *testing.T) {
	c := newKafka(t, 4, 500, "t")
	require.Eventually(t, func() bool { return len(ourGoroutines()) == 0 }, 20*time.Second, 20*time.Millisecond,
		"goroutines running before the test:\n%s", strings.Join(ourGoroutines(), "\n\n"))
	// Fetches hang once blocked: the broker holds them until the test ends.
	var blocked atomic.Bool
	release := make(chan struct{})
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if blocked.Load() {
			<-release
		}
		return nil, nil, false
	})
	t.Cleanup(func() { close(release) })
	e, err := New(Config{
		Seeds: c.ListenAddrs(), Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 100, MaxInFlight: 8,
		PollInterval: 50 * time.Millisecond, Fetch: FetchConfig{CacheCapacity: 16, CacheIdleTimeout: time.Minute,
			MaxBytes: 1, MaxPartitionBytes: 1},
	})
	require.NoError(t, err)
	blocked.Store(true)
	require.NoError(t, e.Start(t.Context())) // lists offsets, which are not blocked
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sched.readers == 4 // one per partition: none has read, so none gets a second range
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the readers' first fetches are now held by the broker

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err = e.Close(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "Close while readers are blocked")
	require.NoError(t, e.Close(t.Context()), "second Close, after the clients were closed")
	var left []string
	require.Eventually(t, func() bool { left = ourGoroutines(); return len(left) == 0 }, 10*time.Second, 20*time.Millisecond,
		"goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
}

// TestCloseWithReadsInFlightLeavesNothing closes an engine whose readers are
// reading and waiting to hand over batches.
func TestCloseWithReadsInFlightLeavesNothing(t *testing.T) {
	c := newKafka(t, 4, 2000, "t")
	require.Eventually(t, func() bool { return len(ourGoroutines()) == 0 }, 20*time.Second, 20*time.Millisecond)
	e, err := New(Config{
		Seeds: c.ListenAddrs(), Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 100, MaxInFlight: 16,
		PollInterval: 50 * time.Millisecond, Fetch: FetchConfig{CacheCapacity: 16, CacheIdleTimeout: time.Minute},
		Group: GroupConfig{Name: "g", CommitPeriod: 20 * time.Millisecond}, ReplayNacks: true,
	})
	require.NoError(t, err)
	require.NoError(t, e.Start(t.Context()))
	for range 5 {
		b, err := e.Next(t.Context())
		require.NoError(t, err)
		b.Ack()
	}
	held, err := e.Next(t.Context())
	require.NoError(t, err)
	require.NoError(t, e.Close(t.Context()))
	held.Nack(errors.New("after close")) // dropped, never replayed
	_, err = e.Next(t.Context())
	require.ErrorIs(t, err, ErrEnd)
	var left []string
	require.Eventually(t, func() bool { left = ourGoroutines(); return len(left) == 0 }, 10*time.Second, 20*time.Millisecond,
		"goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
}

// ourGoroutines returns the stacks of goroutines running franz-go client code
// or this module's engine and cache.
func ourGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "franz-go/pkg/kgo.") || strings.Contains(g, "internal/engine.(*Engine)") ||
			strings.Contains(g, "internal/cache.(*Cache)") {
			out = append(out, g)
		}
	}
	return out
}

// TestCloseDuringAHeldJoinCommitsAndLeaves (issue 50 defect 2): a member is told to
// rejoin (a new member joined) while the coordinator holds its JoinGroup, as a
// real coordinator does while it waits for a member that was SIGKILLed (until
// that member's session times out, 45 s by default). SIGTERM now (Close with
// Benthos' default shutdown_timeout of 20 s) should still commit what was
// acknowledged, or give up on it within a few seconds, and end, so that the
// process leaves the group instead of being killed by Benthos ("Some
// components prevented forced termination") and staying in the group as a
// dead member for another session timeout. Before, the final commit waited
// in franz-go's CommitOffsetsSync for the pending join (kgo
// groupConsumer.waitJoinSyncMu) until the context ended. Now the final
// commit goes around the join and commits what was acknowledged, and the
// member leaves the group by itself (group.Member.Close).
func TestCloseDuringAHeldJoinCommitsAndLeaves(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := startEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Group.CommitPeriod = time.Hour // only the final commit commits
		cfg.Group.Opts = []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.Zero(t, b.Span.Start, "the first batch of its partition")
	b.Ack()
	e.mu.Lock()
	memberID, _ := e.group.member.Client().GroupMetadata()
	e.mu.Unlock()

	// From now on the coordinator holds the JoinGroup of every member
	// without an instance id (our engine's), as one waiting for a dead member.
	released := make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	var held atomic.Int32
	c.ControlKey(kmsg.JoinGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req, ok := r.(*kmsg.JoinGroupRequest); ok && req.InstanceID == nil && holding.Load() {
			held.Add(1)
			c.SleepControl(func() { <-released })
		}
		return nil, nil, false
	})
	release := func() {
		if holding.CompareAndSwap(true, false) {
			close(released)
		}
	}
	t.Cleanup(release)

	// A second member joins: the coordinator asks ours to rejoin.
	joiner, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("t"), kgo.InstanceID("joiner"))
	require.NoError(t, err)
	defer joiner.Close()
	go func() {
		for ctx.Err() == nil {
			joiner.PollFetches(ctx)
		}
	}()
	require.Eventually(t, func() bool { return held.Load() > 0 }, 15*time.Second, 20*time.Millisecond,
		"our member never rejoined\n%s", log)

	// SIGTERM: Benthos closes the input with its shutdown_timeout (20 s).
	closeCtx, closeCancel := context.WithTimeout(ctx, 20*time.Second)
	defer closeCancel()
	start := time.Now()
	err = e.Close(closeCtx)
	took := time.Since(start)
	release()
	assert.Less(t, took, 10*time.Second, "Close during a pending rebalance (Benthos kills the process at 20 s, before it leaves the group)")
	assert.NoError(t, err, "Close during a pending rebalance\n%s", log)
	assert.Equal(t, b.Span.End, committedOf(t, c, "g", b.Range.Partition), "the acknowledged batch's end committed by the final commit\n%s", log)
	cl := kgoClient(t, c)
	defer cl.Close()
	d, err := kadm.NewClient(cl).DescribeGroups(t.Context(), "g")
	require.NoError(t, err)
	for _, m := range d["g"].Members {
		assert.NotEqual(t, memberID, m.MemberID, "the closed member is still in the group")
	}
}
