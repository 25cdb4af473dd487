package engine

import (
	"context"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Draining revoked partitions (Config.Group.RevokeDrainTimeout).
//
// Under an eager balancer every rebalance revokes every partition, and under
// the cooperative one the moved partitions are revoked; a batch still in the
// pipeline then is delivered, but its acknowledgement comes too late to be
// committed, so the next owner reads it again. Kafka's own consumers avoid
// that by finishing and committing in the revocation callback, which holds
// the rebalance, and so does Revoked:
//
//  1. The revoked partitions are marked draining: their readers are
//     cancelled (a reader's end marker, with RangeEnds, lets a caller that
//     holds a range's batches cut what it holds), the planner skips them,
//     Next hands out nothing more of them (a batch caught between a reader
//     and Next is dropped), their replays are dropped, and a batch of them
//     rejected now is not replayed.
//  2. Revoked waits until every batch of them handed out by Next (parts
//     split off included: partition.pending, table.go) is done, at most
//     RevokeDrainTimeout, and not past its context or the engine stopping.
//  3. It commits their acknowledged frontier and forgets them, as before:
//     what is still unacknowledged at the deadline is read again by the next
//     owner.
//
// Lost partitions are not drained (their commits would be rejected), and a
// revocation while the engine stops does not wait: the host stopped handing
// batches to its pipeline, and Benthos waits for the acknowledgements of
// those in it before it closes the input, whose final commit covers them.

// drainWake wakes the drains when p is being drained and has nothing
// handed out left. Called (under Engine.mu) whenever a batch of p, current,
// is done, and when p ends (dropLocked: a drain no longer waits for it).
func (d *delivery) drainWake(p *partition) {
	if p.draining && p.pending == 0 && d.drained != nil {
		close(d.drained)
		d.drained = nil
	}
}

// drainRevoked marks the partitions of keys draining and waits until every
// batch of them handed out is done, at most RevokeDrainTimeout (and not
// past ctx or the engine stopping).
func (e *Engine) drainRevoked(ctx context.Context, keys []ranges.Key) {
	parts := map[ranges.Key]*partition{}
	e.mu.Lock()
	for _, k := range keys {
		// A revoked partition still waiting for its watermarks waits no
		// more: started during the drain it would be read as a new,
		// non-draining incarnation while the next owner reads it too.
		e.unwaitLocked(k)
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
	// replay: looked for again now and then, it is dropped too.
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
func (t *partTable) undrained(parts map[ranges.Key]*partition) (left, batches int) {
	for k, p := range parts {
		if t.cur(k) == p && p.pending > 0 {
			left++
			batches += p.pending
		}
	}
	return left, batches
}
