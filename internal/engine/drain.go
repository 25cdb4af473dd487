package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Draining revoked partitions (Config.Group.RevokeDrainTimeout).
//
// Under an eager balancer every rebalance revokes every partition, and under
// the cooperative one the moved partitions are revoked. A batch still in the
// pipeline then is delivered, but its acknowledgement comes too late to be
// committed, so the next owner reads it again. Kafka's own consumers avoid
// that by finishing and committing in the revocation callback, which holds
// the rebalance, and so does Revoked:
//
//  1. The revoked partitions are marked draining. Their readers are
//     cancelled (a reader's end marker, with RangeEnds, lets a caller that
//     holds a range's batches cut what it holds), the planner skips them,
//     Next hands out nothing more of them (a batch caught between a reader
//     and Next is dropped), their replays are dropped, and a batch of them
//     rejected now is not replayed.
//  2. Revoked waits until every batch of them handed out by Next (parts
//     split off included: incarnation.pending, table.go) is done, at most
//     RevokeDrainTimeout, and not past its context or the engine stopping.
//  3. It commits their acknowledged frontier and forgets them, as before.
//     What is still unacknowledged at the deadline is read again by the next
//     owner.
//
// Lost partitions are not drained (their commits would be rejected), and a
// revocation while the engine stops does not wait. The host stopped handing
// batches to its pipeline, and Benthos waits for the acknowledgements of
// those in it before it closes the input, whose final commit covers them.

// drainWake wakes the drains when p is being drained and has nothing
// handed out left. Called (under Engine.mu) whenever a batch of p, current,
// is done, and when p ends (dropLocked, after which a drain no longer waits
// for it).
func (d *delivery) drainWake(p *incarnation) {
	if p.draining && p.pending == 0 && d.drained != nil {
		close(d.drained)
		d.drained = nil
	}
}

// drainRevoked marks the partitions of keys draining and waits until every
// batch of them handed out is done, at most RevokeDrainTimeout (and not
// past ctx or the engine stopping).
func (e *Engine) drainRevoked(ctx context.Context, keys []ranges.Key) {
	parts := map[ranges.Key]*incarnation{}
	e.mu.Lock()
	for _, k := range keys {
		// A revoked partition still waiting for its watermarks waits no
		// more. started during the drain it would be read as a new,
		// non-draining incarnation while the next owner reads it too.
		e.failLocked(e.parts.unwait(k))
		p := e.parts.cur(k)
		if p == nil {
			continue
		}
		parts[k] = p
		p.draining = true
		p.cancel() // its readers stop: nothing more is read or sent
	}
	e.dropStaleReplaysLocked()
	e.mu.Unlock()
	e.sched.signal()
	e.out.signal() // Next: end markers, and the replays are gone

	if e.cfg.Group.RevokeDrainTimeout <= 0 || len(parts) == 0 || e.shut.IsSoftStopSignalled() {
		return
	}
	began := time.Now()
	timer := time.NewTimer(e.cfg.Group.RevokeDrainTimeout)
	defer timer.Stop()
	// A batch rejected as the drain began may still be queued for a
	// replay. Looked for again now and then, it is dropped too.
	recheck := time.NewTicker(drainRecheck)
	defer recheck.Stop()
	for {
		e.mu.Lock()
		e.dropStaleReplaysLocked()
		left, batches := e.parts.undrained(parts)
		if left > 0 && e.out.drained == nil {
			e.out.drained = make(chan struct{})
		}
		wake := e.out.drained
		e.mu.Unlock()
		if left == 0 {
			e.log.Debugf("Group %q: every batch of the %d revoked partitions handed out was done in %s", e.cfg.Group.Name, len(parts), time.Since(began).Round(time.Millisecond))
			return
		}
		select {
		case <-wake:
		case <-recheck.C:
		case <-timer.C:
			e.log.Warnf("Group %q: %d batches of %d revoked partitions were not acknowledged within revoke_drain_timeout (%s); the next owner reads them again", e.cfg.Group.Name, batches, left, e.cfg.Group.RevokeDrainTimeout)
			return
		case <-ctx.Done():
			e.log.Warnf("Group %q: the revocation ended before %d batches of %d revoked partitions were acknowledged; the next owner reads them again: %v", e.cfg.Group.Name, batches, left, ctx.Err())
			return
		case <-e.shut.SoftStopChan():
			return // stopping: the final commit covers what is acknowledged
		}
	}
}

// drainRecheck is how often a drain looks for replays of its partitions
// queued after it began.
const drainRecheck = 100 * time.Millisecond

// undrained counts the partitions of parts (still current) with
// batches handed out and not done, and those batches.
func (t *partTable) undrained(parts map[ranges.Key]*incarnation) (left, batches int) {
	for k, p := range parts {
		if t.cur(k) == p && p.pending > 0 {
			left++
			batches += p.pending
		}
	}
	return left, batches
}

// Settling a group's first assignment (Config.Group.Settle).
//
// Members started together (N processes splitting one backfill) do not join
// at the same instant. The first to join is assigned every partition, and
// each that joins a moment later takes some of them away in a rebalance,
// which the members already in the group learn of only on their next
// heartbeat. Had the first member handed batches out by then, its drain
// waits for them (above), and what its pipeline does not acknowledge within
// RevokeDrainTimeout is read again by the next owner. With a slow pipeline
// and whole-range batches, that is most of what moved (40% of a backfill in
// a review). So, as the broker's group.initial.rebalance.delay.ms holds an
// empty group's first rebalance for members still joining, Next hands out
// no batch until this member's assignment has not changed for Settle and
// the coordinator reports the group stable (group.Member.Stable), at most
// settleMax after the first assignment. A member that joined turns a
// classic group PreparingRebalance at once, before the others' heartbeats
// tell them. The ranges are read meanwhile (the readers wait to send), so
// the hold costs the pipeline's start, not the reads. And a revocation
// during it finds nothing handed out. The drain ends at once and the next
// owner starts where this member started, having delivered nothing of it.
// Only the first assignment settles. Later joins are handovers, drained.

// settleHold holds the first batches of a member until its assignment
// settles. Guarded by Engine.mu. Changed only through its methods.
type settleHold struct {
	began   time.Time // the first assignment; zero before it
	changed time.Time // the last change of this member's assignment (assigned, revoked, lost)
	done    bool      // settled (or given up waiting): batches flow
}

// changedAt records a change of the member's assignment at now.
func (s *settleHold) changedAt(now time.Time) {
	if s.began.IsZero() {
		s.began = now
	}
	s.changed = now
}

// settleMax bounds the settle hold after the first assignment. So a group
// that keeps rebalancing (or a coordinator that does not answer) does not hold
// the member's pipeline for longer.
const settleMax = 30 * time.Second

// settleEvery is how often a settle hold looks at the group.
const settleEvery = 200 * time.Millisecond

// settling reports whether Next holds the first batches until the
// group's assignment settles.
func (d *delivery) settling(cfg *Config) bool {
	return cfg.Group.Membership && cfg.Group.Settle > 0 && !d.settle.done
}

// settle waits until the member's assignment settles. It has not changed
// for Config.Group.Settle and the coordinator reports the group stable. Or
// settleMax passed since the first assignment, the scheduler read
// everything (a member that is never assigned anything), or the engine
// stops. It returns ctx's error if ctx ends first (the hold stays).
func (e *Engine) settle(ctx context.Context) error {
	state := ""
	for {
		e.mu.Lock()
		s, m, owned, ended := e.out.settle, e.group.member, e.parts.owned(), e.sched.reachedEnd
		e.mu.Unlock()
		now := time.Now()
		quiet := now.Sub(s.changed)
		why := ""
		switch {
		case e.stopping():
			why = "the input is stopping"
		case ended:
			why = "nothing more will be read"
		case s.began.IsZero() || m == nil:
			// Not assigned anything yet.
		case now.Sub(s.began) >= settleMax:
			why = fmt.Sprintf("it did not settle within %s (the group %s)", settleMax, orUnknown(state))
		case quiet >= e.cfg.Group.Settle:
			cctx, cancel := context.WithTimeout(ctx, 10*settleEvery)
			stable, st, err := m.Stable(cctx)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil:
				// The coordinator cannot say (a group migrating between
				// protocols answers the other protocol's describe with an
				// error). The assignment's quiet is all there is to go by.
				why = fmt.Sprintf("its %s unchanged for %s (whether the group is stable could not be asked: %v)", plural(owned, "partition"), quiet.Round(time.Millisecond), err)
			case stable:
				why = fmt.Sprintf("its %s unchanged for %s and the group stable", plural(owned, "partition"), quiet.Round(time.Millisecond))
			}
			if st != "" {
				state = st
			}
		}
		if why != "" {
			e.mu.Lock()
			e.out.settle.done = true
			e.mu.Unlock()
			if !s.began.IsZero() {
				e.log.Infof("Group %q: the assignment settled %s after the first: %s; handing out batches", e.cfg.Group.Name, now.Sub(s.began).Round(time.Millisecond), why)
			}
			return nil
		}
		wait := settleEvery
		if !s.began.IsZero() && quiet < e.cfg.Group.Settle {
			wait = min(wait, e.cfg.Group.Settle-quiet)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-e.out.wake: // partitions released, the engine stops, ...
		case <-t.C:
		}
		t.Stop()
	}
}

func orUnknown(state string) string {
	if state == "" {
		return "state unknown"
	}
	return "was " + state
}
