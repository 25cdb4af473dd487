package engine

import (
	"context"
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
