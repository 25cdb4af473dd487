package engine

import (
	"context"
	"time"
)

// A group member whose process did not run for a while (SIGSTOP, a long
// garbage collection, a frozen VM) may have lost its session meanwhile: the
// coordinator gave its partitions to other members, who read them already.
// It learns so only from its next heartbeat's answer, and until then its
// readers' batches, fetched before the pause, would be handed out as if it
// still owned the partitions (commits are fenced, so only duplicates: twice
// 3,300 records in a review). So, as Kafka's Java consumer checks its
// session before poll returns records, the engine notices such a gap
// (pauseGuard) and hands out no new batch, of any partition, until the
// group confirms this member (group.Member.Confirm lists its ID) or an
// ownership ended since (a revocation or a loss: the batches of the ended
// incarnations are then dropped when they come up, as always). Batches
// handed out before the pause are the pipeline's and finish as usual.
//
// What remains: a batch handed out just before the process stopped, and one
// handed out after the confirmation but before a coordinator that ends the
// session right after it is heard of (a heartbeat interval at most).

// pauseGuard notices gaps in the process's run and holds new batches until
// the group confirms the member. Guarded by Engine.mu.
type pauseGuard struct {
	alive time.Time // when the reporter last ran (tickAliveLocked)
	since time.Time // while batches are held: when the gap was noticed; zero otherwise
	gap   time.Duration
	ends  uint64   // coordinator.ownershipEnds when the gap was noticed
	held  []*Batch // batches received from the readers while held, in order: handed out (took) once the hold ends
}

// pauseLimit is the longest gap in the run that is not taken for a pause
// that may have cost the session: a third of the session timeout, within
// [2 s, 10 s] (the reporter runs every second, so a gap of 2 s is already
// unusual; a false alarm costs one DescribeGroups).
func (c *coordinator) pauseLimit() time.Duration {
	if c.member == nil {
		return 0
	}
	return min(max(c.member.SessionTimeout()/3, 2*time.Second), 10*time.Second)
}

// tickAliveLocked is the reporter's beat: a gap since the last one longer
// than pauseLimit holds new batches.
func (e *Engine) tickAliveLocked(now time.Time) {
	e.holdingLocked(now)
	e.out.pause.alive = now
}

// holdingLocked reports whether new batches are held: a gap noticed now
// (since the reporter's last beat, longer than pauseLimit) starts a hold.
func (e *Engine) holdingLocked(now time.Time) bool {
	limit := e.coord.pauseLimit()
	if limit == 0 || !e.out.pause.since.IsZero() || e.out.pause.alive.IsZero() {
		return !e.out.pause.since.IsZero()
	}
	if gap := now.Sub(e.out.pause.alive); gap > limit {
		e.out.pause.since, e.out.pause.gap, e.out.pause.ends = now, gap, e.coord.ownershipEnds
		e.log.Warnf("Group %q: this process did not run for %s (paused: SIGSTOP, a long garbage collection, a frozen VM?), longer than %s; holding new batches until the group confirms this member still owns its partitions",
			e.cfg.Group.Name, gap.Round(100*time.Millisecond), limit)
	}
	return !e.out.pause.since.IsZero()
}

// confirmMember ends a hold once the group confirms this member, an
// ownership ended since the gap, or the engine stops; it asks the
// coordinator every confirmEvery. It returns ctx's error if ctx ends first
// (the hold stays).
func (e *Engine) confirmMember(ctx context.Context) error {
	for {
		e.mu.Lock()
		m, ended := e.coord.member, e.coord.ownershipEnds != e.out.pause.ends
		e.mu.Unlock()
		why := ""
		switch {
		case ended:
			why = "an ownership ended since (its partitions were revoked or lost): what it read of them before is dropped"
		case e.stopping():
			why = "the input is stopping"
		default:
			cctx, cancel := context.WithTimeout(ctx, confirmEvery*10)
			ok, err := m.Confirm(cctx)
			cancel()
			switch {
			case ok:
				why = "the group lists this member"
			case err != nil && ctx.Err() == nil:
				e.warn("confirm", "Group %q: asking the coordinator whether this member is still in the group failed, retrying: %v", e.cfg.Group.Name, err)
			}
		}
		if why != "" {
			e.mu.Lock()
			held := time.Since(e.out.pause.since)
			e.out.pause.since = time.Time{}
			e.mu.Unlock()
			e.log.Infof("Group %q: handing out batches again after %s: %s", e.cfg.Group.Name, held.Round(time.Millisecond), why)
			return nil
		}
		t := time.NewTimer(confirmEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-e.out.replayed: // signalled when partitions are released, the engine stops, ...
		case <-t.C:
		}
		t.Stop()
	}
}

// confirmEvery is how often a hold asks the coordinator.
const confirmEvery = 200 * time.Millisecond
