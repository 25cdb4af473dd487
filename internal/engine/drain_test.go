package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// deliveries counts how often each offset of each partition was delivered,
// across the members of a group.
type deliveries struct {
	mu sync.Mutex // guards n
	n  map[int32]map[int64]int
}

func (d *deliveries) add(b *Batch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[int32]map[int64]int{}
	}
	m := d.n[b.Range.Partition]
	if m == nil {
		m = map[int64]int{}
		d.n[b.Range.Partition] = m
	}
	for _, r := range b.Records {
		m[r.Offset]++
	}
}

// count returns the distinct offsets delivered and the deliveries past the
// first of each.
func (d *deliveries) count() (distinct, dups int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.n {
		for _, n := range m {
			distinct++
			dups += n - 1
		}
	}
	return distinct, dups
}

// missing lists the offsets below n of partitions [0, parts) never delivered.
func (d *deliveries) missing(parts int32, n int64) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for p := range parts {
		for o := range n {
			if d.n[p][o] == 0 {
				out = append(out, fmt.Sprintf("%d@%d", p, o))
			}
		}
	}
	return out
}

func runPipeline(ctx context.Context, e *Engine, seen *deliveries, depth int, delay time.Duration, split bool) *pipeline {
	ctx, cancel := context.WithCancel(ctx)
	pl := &pipeline{cancel: cancel}
	slots := make(chan struct{}, depth)
	pl.taking.Add(1)
	go func() {
		defer pl.taking.Done()
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			b, err := e.Next(ctx)
			if err != nil {
				<-slots
				return
			}
			seen.add(b)
			pl.mu.Lock()
			pl.taken++
			pl.mu.Unlock()
			parts := []*Batch{b}
			if split && len(b.Records) > 1 {
				parts = append(parts, b.Split(len(b.Records)/2))
			}
			pl.acks.Add(1)
			go func() {
				defer pl.acks.Done()
				time.Sleep(delay)
				for _, p := range parts {
					p.Ack()
				}
				<-slots
			}()
		}
	}()
	return pl
}

// TestGracefulHandoverDeliversNothingTwice: a member reads a group's
// partitions through a pipeline that holds batches for a while; a second
// member joins mid-run and later leaves gracefully (it stops taking
// batches, its pipeline acknowledges what it holds, it closes). Under every
// balancer (eager ones revoke every partition at each rebalance, the
// cooperative one the moved ones) the batches held at each revocation are
// acknowledged and committed before the partitions are handed over, so no
// offset is delivered twice and every offset is delivered. Before the drain,
// the batches in the pipeline at a revocation were delivered but not
// committed, and read again by the next owner.
func TestGracefulHandoverDeliversNothingTwice(t *testing.T) {
	const parts, records = 4, 2000
	for _, bal := range balancers {
		for _, split := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/split=%v", bal.name, split), func(t *testing.T) {
				c := newKafka(t, parts, records, "t")
				member := func(cfg *Config) {
					memberConfig(bal.b())(cfg)
					cfg.MaxRangeRecords = 50
					cfg.MaxInFlight = 8
					cfg.Group.RevokeDrainTimeout = 10 * time.Second
					cfg.Group.Opts = append(cfg.Group.Opts, kgo.RebalanceTimeout(20*time.Second))
				}
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				seen := &deliveries{}
				const depth, delay = 4, 20 * time.Millisecond

				a, logA := newEngine(t, c, member)
				pa := runPipeline(ctx, a, seen, depth, delay, split)
				defer pa.stop()
				require.Eventually(t, func() bool { d, _ := seen.count(); return d >= parts*records/10 }, 20*time.Second, 5*time.Millisecond,
					"the first member read nothing\n%s", logA)

				b, logB := newEngine(t, c, member)
				pb := runPipeline(ctx, b, seen, depth, delay, split)
				require.Eventually(t, func() bool { return pb.took() >= 5 }, 20*time.Second, 5*time.Millisecond,
					"the joining member read nothing\n%s", logB)
				pb.stop()
				closeCtx, closeCancel := context.WithTimeout(ctx, 10*time.Second)
				require.NoError(t, b.Close(closeCtx))
				closeCancel()
				d, _ := seen.count()
				require.Less(t, d, parts*records, "everything was read before the second member left: the leave moved nothing")

				require.Eventually(t, func() bool {
					for p := range int32(parts) {
						if committedOf(t, c, "g", p) != records {
							return false
						}
					}
					return true
				}, 30*time.Second, 20*time.Millisecond, "the group did not commit every partition to its end\n%s", logA)
				pa.stop()
				require.NoError(t, a.Err())
				require.NoError(t, b.Err())

				distinct, dups := seen.count()
				t.Logf("%s, split %v: %d offsets delivered, %d duplicate deliveries; the joining member took %d batches",
					bal.name, split, distinct, dups, pb.took())
				assert.Empty(t, seen.missing(parts, records), "offsets never delivered")
				assert.Zero(t, dups, "offsets delivered twice in graceful handovers\nfirst member:\n%s\nsecond member:\n%s", logA, logB)
			})
		}
	}
}

// longDrain configures a member whose drain would hold a rebalance for
// minutes: a test that ends within its limits shows the drain ended for
// another reason.
func longDrain(b kgo.GroupBalancer) func(*Config) {
	return func(cfg *Config) {
		memberConfig(b)(cfg)
		cfg.Group.RevokeDrainTimeout = 5 * time.Minute
		cfg.Group.Opts = append(cfg.Group.Opts, kgo.RebalanceTimeout(10*time.Minute))
	}
}

// TestDrainEndsWhenHeldBatchIsNacked: a batch held at a revocation and then
// rejected is not replayed (its partition is being handed over) and does not
// hold the drain: the partition moves to the other member long before the
// drain's limit.
func TestDrainEndsWhenHeldBatchIsNacked(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, longDrain(kgo.CooperativeStickyBalancer()))
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 2)
	joinOther(ctx, t, c, "t", kgo.CooperativeStickyBalancer())
	require.Eventually(t, func() bool { return draining(e) }, 20*time.Second, 5*time.Millisecond, "no drain began\n%s", log)
	var moving *Batch
	e.mu.Lock()
	for _, b := range held {
		if b.st.part.draining {
			moving = b
		}
	}
	e.mu.Unlock()
	require.NotNil(t, moving)
	moving.Nack(fmt.Errorf("rejected while its partition moves"))
	k := moving.Range.Key()
	require.Eventually(t, func() bool { return !owns(e, k) && !draining(e) }, 20*time.Second, 5*time.Millisecond,
		"the drain of %s waited for a rejected batch\n%s", k, log)
	assert.True(t, moving.Done(), "the rejected batch of the revoked partition waits for a replay")
	for _, b := range held {
		b.Ack()
	}
	require.NoError(t, e.Err())
}

// TestCloseDuringDrain: Close while a revocation drains a partition whose
// batch is never acknowledged ends the drain (the final commit covers what
// was acknowledged) and returns within its context, without error.
func TestCloseDuringDrain(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, longDrain(kgo.RangeBalancer()))
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	holdFirst(ctx, t, e, 2) // never acknowledged
	joinOther(ctx, t, c, "t", kgo.RangeBalancer())
	require.Eventually(t, func() bool { return draining(e) }, 20*time.Second, 5*time.Millisecond, "no drain began\n%s", log)
	closeCtx, closeCancel := context.WithTimeout(ctx, 10*time.Second)
	defer closeCancel()
	require.NoError(t, e.Close(closeCtx), "Close during a drain\n%s", log)
}

// TestLostPartitionsAreNotDrained: a lost session hands the partitions over
// at once (their commits would be rejected), even with batches held and a
// drain limit of minutes; the member goes on reading everything.
func TestLostPartitionsAreNotDrained(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, longDrain(kgo.CooperativeStickyBalancer()))
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 2)
	loseSessionOnce(c)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "lost 2 partitions") }, 20*time.Second, 10*time.Millisecond,
		"the session was not lost\n%s", log)
	require.Eventually(t, func() bool { return owns(e, k0, k1) }, 20*time.Second, 10*time.Millisecond,
		"the partitions did not come back\n%s", log)
	for _, b := range held {
		b.Ack() // stale: their incarnation was lost
	}
	readToTheEnd(ctx, t, c, e, log)
}

// TestRevocationsAndLossDuringDrains: two revocations drain at once (the
// handler is called directly, as from two goroutines) and one of their
// partitions is lost meanwhile: the lost one is handed over without a
// commit and ends its drain, the other drain ends once its held batch is
// acknowledged and commits it, and nothing stops the engine.
func TestRevocationsAndLossDuringDrains(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group.Name = "g" // commits from outside a group: no member, the test plays the group
		cfg.MaxInFlight = 2
		cfg.Ordered = true // nothing of a partition is read past its held batch
		cfg.Group.RevokeDrainTimeout = 5 * time.Minute
	})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 2)
	h := (*handler)(e)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	var revoked sync.WaitGroup
	done := make([]atomic.Bool, 2)
	for i, k := range []ranges.Key{k0, k1} {
		revoked.Add(1)
		go func() {
			defer revoked.Done()
			h.Revoked(ctx, []ranges.Key{k})
			done[i].Store(true)
		}()
	}
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.parts.cur(k0) != nil && e.parts.cur(k0).draining && e.parts.cur(k1) != nil && e.parts.cur(k1).draining
	}, 10*time.Second, 5*time.Millisecond, "the drains did not begin\n%s", log)

	h.Lost(ctx, []ranges.Key{k0})
	require.Eventually(t, func() bool { return done[0].Load() }, 10*time.Second, 5*time.Millisecond,
		"the drain of the lost partition went on\n%s", log)
	assert.False(t, done[1].Load(), "the other drain ended with its batch unacknowledged")

	held[1].Ack()
	held[0].Ack() // stale: lost
	revoked.Wait()
	assert.Equal(t, held[1].Span.End, committedOf(t, c, "g", 1), "the drained partition's acknowledged batch was not committed")
	assert.Less(t, committedOf(t, c, "g", 0), held[0].Span.End, "the lost partition's batch acknowledged late was committed")
	require.NoError(t, e.Err())
}

// TestDrainDeadlineHandsOverUnacknowledged: a batch still unacknowledged
// when the drain's limit passes is handed over as without a drain: the
// partition moves, a warning says how many batches were left, and the late
// acknowledgement is not committed.
func TestDrainDeadlineHandsOverUnacknowledged(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.Ordered = true // nothing of a partition is read past its held batch
		cfg.Group.RevokeDrainTimeout = 300 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 2)
	joinOther(ctx, t, c, "t", kgo.CooperativeStickyBalancer())
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool { return !owns(e, k0) || !owns(e, k1) }, 20*time.Second, 5*time.Millisecond,
		"no partition moved\n%s", log)
	revoked := k0
	if owns(e, k0) {
		revoked = k1
	}
	assert.Contains(t, log.String(), "1 batches of 1 revoked partitions were not acknowledged within revoke_drain_timeout (300ms)")
	before := committedOf(t, c, "g", revoked.Partition)
	for _, b := range held {
		b.Ack()
	}
	kept := held[1-revoked.Partition]
	require.Eventually(t, func() bool { return committedOf(t, c, "g", kept.Range.Partition) >= kept.Span.End }, 10*time.Second, 20*time.Millisecond,
		"the kept partition's batch was not committed\n%s", log)
	assert.Equal(t, before, committedOf(t, c, "g", revoked.Partition), "the late acknowledgement of %s moved the group's offset", revoked)
	require.NoError(t, e.Err())
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
		asMember(cfg)
		cfg.MaxInFlight = 8
		cfg.Group.RevokeDrainTimeout = 5 * time.Minute
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.RebalanceTimeout(10 * time.Minute)}
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
	defer joinOther(ctx, t, c, "t", kgo.RangeBalancer())()
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

// settleConfig configures a member of a bounded group run (StopAtEnd) whose
// first batches wait until its assignment settled for settle, with balancer
// b, a pipeline-side drain far shorter than the pipeline holds a batch (so
// a batch handed out before its partition moves cannot be drained: read
// twice), and heartbeats every 100 ms.
func settleConfig(b kgo.GroupBalancer, settle time.Duration) func(*Config) {
	return func(cfg *Config) {
		memberConfig(b)(cfg)
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 8
		cfg.Group.Settle = settle
		cfg.Group.RevokeDrainTimeout = 200 * time.Millisecond
		cfg.Group.Opts = append(cfg.Group.Opts, kgo.RebalanceTimeout(20*time.Second))
	}
}

// TestMembersStartedTogetherSettleBeforeDelivering: two members of a
// bounded group run start 200 ms apart, as workers splitting one backfill
// do; the first joins alone and is assigned every partition, the second
// takes some of them a moment later. Their pipelines hold each batch 1 s,
// far past the 200 ms drain, so a batch handed out before its partition
// moved would be read again by the next owner. With the settle (Group.Settle
// 1 s) neither hands out a batch before its assignment has not changed for
// 1 s and the group is stable: under every balancer (eager ones revoke every
// partition at each rebalance) every offset is delivered exactly once, no
// drain runs out of time, and both end. Without it (Settle 0) the first
// member handed out batches of every partition at once and the offsets that
// moved were delivered twice.
func TestMembersStartedTogetherSettleBeforeDelivering(t *testing.T) {
	const parts, records = 4, 300
	for _, bal := range balancers {
		t.Run(bal.name, func(t *testing.T) {
			c := newKafka(t, parts, records, "t")
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			seen := &deliveries{}
			const depth, delay = 4, time.Second

			a, logA := newEngine(t, c, settleConfig(bal.b(), time.Second))
			pa := runPipeline(ctx, a, seen, depth, delay, false)
			defer pa.stop()
			time.Sleep(200 * time.Millisecond)
			b, logB := newEngine(t, c, settleConfig(bal.b(), time.Second))
			pb := runPipeline(ctx, b, seen, depth, delay, false)
			defer pb.stop()

			for _, m := range []struct {
				name string
				e    *Engine
				log  *testLogger
				pl   *pipeline
			}{{"first", a, logA, pa}, {"second", b, logB, pb}} {
				taken := make(chan struct{})
				go func() { m.pl.taking.Wait(); close(taken) }()
				select {
				case <-taken: // Next ended: ErrEnd, or an error the engine reports
				case <-ctx.Done():
					require.Failf(t, "no end", "the %s member's Next did not end\n%s", m.name, m.log)
				}
				m.pl.stop()
				require.NoError(t, m.e.Err())
				assert.Truef(t, m.e.Summary().Ended, "the %s member did not end\n%s", m.name, m.log)
				// The engines' logs are printed at cleanup if the test failed.
				assert.Falsef(t, strings.Contains(m.log.String(), "not acknowledged within revoke_drain_timeout"), "the %s member handed batches over undrained", m.name)
				assert.Truef(t, strings.Contains(m.log.String(), "the assignment settled"), "the %s member did not say when its assignment settled", m.name)
			}
			distinct, dups := seen.count()
			t.Logf("%s: %d offsets delivered, %d duplicate deliveries; the members took %d and %d batches", bal.name, distinct, dups, pa.took(), pb.took())
			assert.Empty(t, seen.missing(parts, records), "offsets never delivered")
			assert.Zero(t, dups, "offsets delivered twice by members started together")
			assert.Positive(t, pb.took(), "the second member was assigned nothing: nothing moved")
		})
	}
}

// TestSettleWaitsForTheGroupToBeStable: a member that joins a moment after
// the first one was assigned every partition turns the group
// PreparingRebalance at once, but the first member learns of it only on its
// next heartbeat (every 3 s here, with an eager balancer), long after its assignment stayed
// unchanged for the settle (1 s). The settle asks the coordinator: the
// group is not stable, so the first member goes on holding its batches until
// the rebalance reached it, and the partitions that move are delivered once.
// Taking an unchanged assignment for a settled one, it handed them out
// before the heartbeat and the next owner read them again.
func TestSettleWaitsForTheGroupToBeStable(t *testing.T) {
	const parts, records = 4, 300
	c := newKafka(t, parts, records, "t")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	seen := &deliveries{}
	const hold = 3 * time.Second // each batch in the pipeline: past the heartbeat that brings the rebalance
	member := func(cfg *Config) {
		// An eager balancer: franz-go's cooperative one checks the group
		// 500 ms after an assignment, sooner than the settle.
		settleConfig(kgo.RangeBalancer(), time.Second)(cfg)
		cfg.Group.Opts = append(cfg.Group.Opts, kgo.HeartbeatInterval(3*time.Second))
	}
	a, logA := newEngine(t, c, member)
	pa := runPipeline(ctx, a, seen, 4, hold, false)
	defer pa.stop()
	require.Eventually(t, func() bool { return strings.Contains(logA.String(), "assigned 4 partitions") }, 20*time.Second, time.Millisecond,
		"the first member was not assigned every partition\n%s", logA)
	b, logB := newEngine(t, c, member)
	pb := runPipeline(ctx, b, seen, 4, hold, false)
	defer pb.stop()

	for _, m := range []struct {
		name string
		log  *testLogger
		pl   *pipeline
	}{{"first", logA, pa}, {"second", logB, pb}} {
		taken := make(chan struct{})
		go func() { m.pl.taking.Wait(); close(taken) }()
		select {
		case <-taken:
		case <-ctx.Done():
			require.Failf(t, "no end", "the %s member's Next did not end\n%s", m.name, m.log)
		}
	}
	require.NoError(t, a.Err())
	require.NoError(t, b.Err())
	require.Contains(t, logA.String(), "revoked", "nothing moved: the second member joined in the first generation")
	distinct, dups := seen.count()
	t.Logf("%d offsets delivered, %d duplicate deliveries; the members took %d and %d batches", distinct, dups, pa.took(), pb.took())
	assert.Empty(t, seen.missing(parts, records), "offsets never delivered")
	assert.Zero(t, dups, "offsets delivered twice: the first member handed out batches before the rebalance reached it")
}

// TestSettleEndsWithTheRun: of two members of a bounded group run on one
// partition, the first reads it (its assignment settles in 1 s) while the
// second, assigned nothing, holds its Next; once the first ended and left,
// the partition comes to the second, read to its end already: the second
// ends at once (ErrEnd), not once its own settle (5 minutes here, at most
// settleMax) passed, and every record was delivered once.
func TestSettleEndsWithTheRun(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	a, logA := newEngine(t, c, settleConfig(kgo.CooperativeStickyBalancer(), time.Second))
	time.Sleep(200 * time.Millisecond) // the first joins first
	b, logB := newEngine(t, c, settleConfig(kgo.CooperativeStickyBalancer(), 5*time.Minute))
	type result struct {
		got map[string]int
		err error
	}
	results := make([]chan result, 2)
	for i, e := range []*Engine{a, b} {
		results[i] = make(chan result, 1)
		go func() {
			got, err := drain(ctx, e)
			if err == nil || errors.Is(err, ErrEnd) {
				// As Benthos closes an input that ended: the member
				// leaves, and the group assigns the partition to the
				// other, which learns from it that the group is done.
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = errors.Join(err, e.Close(cctx))
				cancel()
			}
			results[i] <- result{got, err}
		}()
	}
	got := map[string]int{}
	for i, m := range []struct {
		e   *Engine
		log *testLogger
	}{{a, logA}, {b, logB}} {
		r := <-results[i]
		require.ErrorIsf(t, r.err, ErrEnd, "a member did not end\n%s", m.log)
		for k, v := range r.got {
			got[k] += v
		}
		assert.True(t, m.e.Summary().Ended)
	}
	assert.Equal(t, map[string]int{"t/0": 300}, got, "records delivered per partition")
}

// TestRevocationAfterTheFinalCommitDoesNotWarn: a member told to stop makes
// its final commit, which carries every owned partition's acknowledged
// offsets, and then leaves the group, which revokes its partitions with a
// context that leaving ends. That revocation has nothing left to commit: it
// must not warn that the next owner reads from older offsets (CI saw that
// WARN in TestNormalStopAndRebalanceLogNoWarnings, the lock's wait failing
// on the ended context).
func TestRevocationAfterTheFinalCommitDoesNotWarn(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	e, log := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group.Name = "g" // commits from outside a group: no member, the test plays the group
		cfg.Ordered = true
	})
	started(t, e, log, 10*time.Second, false)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	first, err := e.Next(ctx) // acknowledged: the progress the final commit commits
	require.NoError(t, err)
	first.Ack()
	require.NoError(t, e.Close(ctx), "%s", log)
	k := ranges.Key{Topic: "t", Partition: 0}
	for range 20 { // the revocation's lock wait picks at random between a free lock and an ended context
		left, leave := context.WithCancel(ctx)
		leave()
		(*handler)(e).Revoked(left, []ranges.Key{k})
	}
	assert.NotContains(t, log.String(), "WARN", "a revocation after the final commit warned")
}
