package engine

import (
	"context"
	"net"
	"strings"
	"sync"
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

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestPermanentCommitErrorStops: a commit the coordinator refuses for good
// (every OffsetCommit answered GROUP_AUTHORIZATION_FAILED) stops the input
// with an error naming the group and the partitions, instead of a warning
// every 10s and a stall once every slot waits for a commit (defect 9).
func TestPermanentCommitErrorStops(t *testing.T) {
	for _, tc := range []struct {
		name       string
		membership bool
	}{
		{"member", true},
		{"pinned partitions", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 2, 300, "t")
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.GroupAuthorizationFailed, Count: -1})
			e, log := startEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				if !tc.membership {
					cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0, 1}}}
				}
				cfg.Group.Name = "g"
				cfg.Group.Membership = tc.membership
				cfg.MaxInFlight = 2 // every slot soon waits for a commit
			})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			_, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd, "Next after a refused commit\n%s", log)
			require.ErrorIs(t, e.Err(), kerr.GroupAuthorizationFailed)
			assert.Regexp(t, `group "g"`, e.Err().Error(), "the error names the group")
			assert.Regexp(t, `t/[01]`, e.Err().Error(), "the error names the partitions")
			closeCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.ErrorIs(t, e.Close(closeCtx), kerr.GroupAuthorizationFailed, "Close: the final commit is refused too")
			assert.NotContains(t, log.String(), "attempt 2 of", "a refused final commit is retried")
		})
	}
}

// TestRetriableCommitErrorIsRetried: a commit answered with a retriable
// error (the coordinator is loading) for a while is retried, logged, and the
// input goes on and commits once the coordinator answers.
func TestRetriableCommitErrorIsRetried(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.CoordinatorLoadInProgress, Count: 3})
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 2
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	require.NoError(t, e.Err(), "a retriable commit error stopped the input\n%s", log)
	assert.Equal(t, map[string]int{"t/0": 300}, got)
	assert.Equal(t, 3, h.Hits(), "every fault was answered")
}

// blockingCommitter holds every commit that has offsets until its context
// ends or it is released.
type blockingCommitter struct {
	real    committer
	entered chan struct{} // a commit is held
	release chan struct{}
}

func (b *blockingCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	if len(offsets) > 0 {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.real.Commit(ctx, offsets)
}

// TestCommitWaitsForTheCommitInFlightOnlyAsLongAsItsContext (review 4, read,
// not reproduced): a commit in flight (a revocation's, retried for up to 30 s)
// held the commit lock, and a commit behind it waited for it whatever its
// own context said, so the final commit could run up to 30 s past its limit.
// Now waiting for the lock ends with the waiter's context.
func TestCommitWaitsForTheCommitInFlightOnlyAsLongAsItsContext(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	bc := &blockingCommitter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.Group.CommitPeriod = time.Hour // only the commits of the test
		cfg.Group.wrapCommitter = func(m committer) committer { bc.real = m; return bc }
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err, "%s", log)
	b.Ack()

	inFlight := make(chan error, 1)
	go func() { inFlight <- e.commit(ctx) }() // held in the committer, holding the lock
	select {
	case <-bc.entered:
	case <-ctx.Done():
		t.Fatalf("the first commit was not made\n%s", log)
	}

	waitCtx, waitCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer waitCancel()
	behind := make(chan error, 1)
	go func() { behind <- e.commit(waitCtx) }()
	select {
	case err := <-behind:
		require.ErrorIs(t, err, context.DeadlineExceeded, "the commit behind the one in flight did not end with its context")
	case <-time.After(10 * time.Second):
		t.Error("the commit behind the one in flight still waits, 10 s after its context ended")
	}
	close(bc.release)
	assert.NoError(t, <-inFlight)
	select {
	case err := <-behind:
		t.Logf("the commit behind returned once the first was answered: %v", err)
	default:
	}
}

// holdingCommitter holds the first commit made once armed until a second
// commit has been answered (or a few seconds passed), and makes that second
// commit wait until the held one was answered: if the two can overlap, the
// older offsets land last.
type holdingCommitter struct {
	real     committer
	armed    atomic.Bool
	held     atomic.Bool
	release  chan struct{} // closed by the second commit once answered
	heldDone chan struct{} // closed once the held commit was answered
	once     sync.Once
}

func (h *holdingCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	if len(offsets) == 0 || !h.armed.Load() {
		return h.real.Commit(ctx, offsets)
	}
	if h.held.CompareAndSwap(false, true) {
		defer close(h.heldDone)
		select {
		case <-h.release:
		case <-time.After(3 * time.Second): // commits are serialised: no second commit comes
		case <-ctx.Done():
		}
		return h.real.Commit(ctx, offsets)
	}
	failed, err := h.real.Commit(ctx, offsets)
	h.once.Do(func() { close(h.release) })
	select {
	case <-h.heldDone:
	case <-ctx.Done():
	}
	return failed, err
}

// TestRevokedCommitIsNotOverwrittenByOlderCommit: the commit loop takes its
// offsets, then a revocation commits a newer frontier of the revoked
// partition, then the loop's older commit is answered: the group's offset
// must not move back to the older one ("Also check" of issue 15).
func TestRevokedCommitIsNotOverwrittenByOlderCommit(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	hc := &holdingCommitter{release: make(chan struct{}), heldDone: make(chan struct{})}
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
		cfg.MaxRangeRecords = 50
		cfg.MaxInFlight = 12
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1 // small batches: several per range
		cfg.Group.wrapCommitter = func(m committer) committer { hc.real = m; return hc }
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// One unacknowledged batch of each partition; then the commit that
	// covers both is held.
	first := map[int32]*Batch{}
	acked := map[int32]int64{} // end of the last batch acknowledged, by partition
	for len(first) < 2 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if first[b.Range.Partition] == nil {
			first[b.Range.Partition] = b
			continue
		}
		b.Nack(nil) // delivered again later, after the held batches
	}
	hc.armed.Store(true)
	for p, b := range first {
		b.Ack()
		acked[p] = b.Span.End
	}
	require.Eventually(t, hc.held.Load, 5*time.Second, 5*time.Millisecond, "no commit was held")
	// Both partitions move on past the held offsets.
	moved := map[int32]bool{}
	for len(moved) < 2 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		p := b.Range.Partition
		if b.Span.Start != acked[p] {
			b.Nack(nil)
			continue
		}
		b.Ack()
		acked[p] = b.Span.End
		moved[p] = true
	}

	// A second member joins: one partition is revoked and committed.
	joinOther(ctx, t, c, "t", kgo.CooperativeStickyBalancer())
	var revoked int32 = -1
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for p := range int32(2) {
			k := ranges.Key{Topic: "t", Partition: p}
			if !e.parts.stateOf(k).held() {
				revoked = p
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "no partition was revoked\n%s", log)
	select {
	case <-hc.heldDone:
	case <-ctx.Done():
		require.FailNow(t, "the held commit never finished")
	}
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "revoked 1 partitions") }, 10*time.Second, 10*time.Millisecond,
		"the revocation did not finish")

	adm := kadm.NewClient(kgoClient(t, c))
	offs, err := adm.FetchOffsets(ctx, "g")
	require.NoError(t, err)
	o, ok := offs.Lookup("t", revoked)
	require.True(t, ok, "revoked partition %d has no commit", revoked)
	assert.GreaterOrEqual(t, o.At, acked[revoked], "the group's offset of revoked partition %d moved back to the held, older commit", revoked)
}

// TestRefusedCommitEndsConsumerOwnership: under the consumer group protocol
// (KIP-848), a commit the coordinator answers UNKNOWN_MEMBER_ID or
// STALE_MEMBER_EPOCH ends the ownership it was sent under: the incarnation
// is dropped (nothing of it committed, its late acknowledgements stale), the
// member, which still owns the partition, reads it again from the group's
// committed offset as a new incarnation, every record is delivered, and the
// group commits the end. Before, the refusal was only retried.
func TestRefusedCommitEndsConsumerOwnership(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.UnknownMemberID, kerr.StaleMemberEpoch} {
		t.Run(code.Message, func(t *testing.T) {
			c := newKafka(t, 1, 300, "t")
			// franz-go retries a stale epoch 10 times itself; the fault outlasts that.
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: code, Count: 12})
			e, log := newEngine(t, c, func(cfg *Config) {
				asMember(cfg)
				cfg.StopAtEnd = true
				cfg.MaxInFlight = 2
				cfg.MaxRangeRecords = 50
				cfg.Group.Opts = []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer())}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			got, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd, "Next\n%s", log)
			require.NoError(t, e.Err(), "a refused commit stopped the input\n%s", log)
			assert.GreaterOrEqual(t, got["t/0"], 300, "every record delivered\n%s", log)
			assert.Positive(t, h.Hits(), "the fault was answered")
			assert.Contains(t, log.String(), "this member's ownership of them ended", "the refusal ends the ownership\n%s", log)
			assert.Contains(t, log.String(), "(incarnation 2)", "t/0 read again as a new incarnation\n%s", log)

			assert.Equal(t, int64(300), committedOf(t, c, "g", 0), "group g's offset of t/0")
		})
	}
}

// TestCommitRefusedUnknownMemberHandsOverAsLost: under the classic protocol
// a commit answered UNKNOWN_MEMBER_ID (the member's session ended: a process
// paused past session_timeout) makes franz-go rejoin, and an eager balancer
// then revokes every partition of the session that is over. Draining and
// committing them would only hold the rebalance (the coordinator refuses
// the commit, other members may read them already), so they are handed over
// as a lost session's are: logged as lost, no drain, no commit, no warning;
// every record is still delivered and the group commits the end. Before,
// they were revoked: drained and committed under the ended session (CI saw
// "Committing revoked partitions failed ... UNKNOWN_MEMBER_ID" on a resumed
// member, TestHandoverSessionLost/range).
func TestCommitRefusedUnknownMemberHandsOverAsLost(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.UnknownMemberID, Count: 1})
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 2
		cfg.MaxRangeRecords = 50
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "Next\n%s", log)
	require.NoError(t, e.Err(), "a refused commit stopped the input\n%s", log)
	require.Equal(t, 1, h.Hits(), "the fault was answered\n%s", log)
	assert.GreaterOrEqual(t, got["t/0"], 300, "every record delivered\n%s", log)
	assert.Contains(t, log.String(), `lost 1 partitions of this member`, "the ended session's partitions are handed over as lost\n%s", log)
	assert.NotContains(t, log.String(), `revoked 1 partitions of this member`, "the ended session's partitions were revoked (drained, committed)\n%s", log)
	assert.NotContains(t, log.String(), "Committing revoked partitions failed", "\n%s", log)

	assert.Equal(t, int64(300), committedOf(t, c, "g", 0), "group g's offset of t/0")
}

// TestSurvivorReadsWhileADeadMemberHoldsTheJoin (issue 50 defect 2, the
// review's chaos M1): under the classic protocol a member that died (SIGKILL,
// SIGSTOP) stays in the group until its session ends. If meanwhile another
// member joins (the dead process restarted at once, as a supervisor does, or
// any scale-up), the rebalance's join phase waits for the dead member until
// its session expires, and franz-go blocks every commit of the surviving
// members while they are in join&sync (kgo's noCommitDuringJoinAndSync,
// consumer_group.go joinAndSync). The engine keeps ranges in their
// max_in_flight slots until a commit covers them (internal/engine/commit.go),
// so once the slots fill, the survivors hand out nothing more, even of the
// partitions they keep: the whole group stops for the rest of the dead
// member's session (7.5 s and 4.9 s of a 10 s session in the review's soak;
// up to 45 s with the default session_timeout). docs/several-instances.md
// says "the partitions that stay with their member keep their latency".
//
// Here member A (the engine) shares t with B, a franz-go member that stops
// sending (its connections freeze: a SIGSTOP); C joins right after. While the
// join waits for B's 6 s session, A should go on handing out batches of the
// partitions it owns.
//
// The member's commits no longer wait for franz-go during the join: they go
// around it with the generation the member holds, which the coordinator
// accepts while it prepares the rebalance (group.Member.Commit), so the
// slots are freed as before.
func TestSurvivorReadsWhileADeadMemberHoldsTheJoin(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	produce(t, c, "t", 3, 1000)
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.MaxRangeRecords = 200
		cfg.MaxInFlight = 4
		cfg.Group.CommitPeriod = 100 * time.Millisecond
		cfg.Group.Opts = []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond)}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// A producer writes to every partition all along (the soak's 2,000
	// records/s), so that A always has records to hand out.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(t, err)
	defer pcl.Close()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			for p := range int32(3) {
				pcl.Produce(ctx, &kgo.Record{Topic: "t", Partition: p, Value: []byte("v")}, nil)
			}
			time.Sleep(time.Millisecond)
		}
	}()

	var mu sync.Mutex
	var handed []time.Time
	go func() {
		for {
			b, err := e.Next(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			handed = append(handed, time.Now())
			mu.Unlock()
			b.Ack()
		}
	}()
	countIn := func(from, to time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, h := range handed {
			if !h.Before(from) && h.Before(to) {
				n++
			}
		}
		return n
	}

	member := func(frozen *atomic.Bool) *kgo.Client {
		opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.DisableAutoCommit(), kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond)}
		if frozen != nil {
			d := &net.Dialer{}
			opts = append(opts, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, network, host)
				if err != nil {
					return nil, err
				}
				return &freezableConn{Conn: conn, frozen: frozen}, nil
			}))
		}
		cl, err := kgo.NewClient(opts...)
		require.NoError(t, err)
		return cl // never polled nor committing: B and C only hold partitions
	}
	var frozen atomic.Bool
	b := member(&frozen)
	defer func() { frozen.Store(false); b.Close() }()
	require.Eventually(t, func() bool { return countIn(time.Time{}, time.Now()) > 0 }, 20*time.Second, 50*time.Millisecond)
	time.Sleep(3 * time.Second) // B joined; A reads the partitions it owns
	require.Regexp(t, `it owns [12] now`, log.String(), "B owns a partition")

	frozen.Store(true) // B stops: no heartbeat any more, its session ends 6 s after its last one
	joined := time.Now()
	cc := member(nil) // C joins: a rebalance whose join waits for B
	defer cc.Close()
	time.Sleep(5 * time.Second)

	before := countIn(joined.Add(-1500*time.Millisecond), joined)
	during := countIn(joined.Add(1500*time.Millisecond), joined.Add(4500*time.Millisecond))
	t.Logf("batches handed out by A: %d in the 1.5 s before C joined, %d from 1.5 s to 4.5 s after (B's session still running)", before, during)
	require.Greater(t, before, 0)
	assert.Greater(t, during, 0, "A handed out nothing while the join waited for the dead member B (commits blocked in join&sync, max_in_flight slots full)\n%s", log)
}

// freezableConn blocks every write once frozen: a process that stopped.
type freezableConn struct {
	net.Conn
	frozen *atomic.Bool
}

func (f *freezableConn) Write(p []byte) (int, error) {
	for f.frozen.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	return f.Conn.Write(p)
}
