package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
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

// committedOf returns the group's committed offset of t/p, or -1.
func committedOf(t *testing.T, c *kfake.Cluster, group string, p int32) int64 {
	t.Helper()
	cl := kgoClient(t, c)
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(t.Context(), group)
	require.NoError(t, err)
	o, ok := offs.Lookup("t", p)
	if !ok {
		return -1
	}
	return o.At
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
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.CommitPeriod = time.Hour // only the final commit commits
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
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.CommitPeriod = time.Hour // only the final commit commits
		cfg.Prepare = func(*Batch) any {
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
