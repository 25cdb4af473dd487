package engine

import (
	"context"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/group"
)

// A group member whose process did not run for a while (SIGSTOP, a long
// garbage collection, a frozen VM) may have lost its session meanwhile. The
// coordinator gave its partitions to other members, who read them already.
// It learns so only from its next heartbeat's answer, and until then its
// readers' batches, fetched before the pause, would be handed out as if it
// still owned the partitions. Commits are fenced, so the cost is only
// duplicates (twice 3,300 records in a review). So, as Kafka's Java consumer checks its
// session before poll returns records, the engine notices such a gap
// (pauseGuard) and hands out no new batch, of any partition, until the
// group confirms this member (group.Member.Confirm lists its ID, asked after
// the gap), the member lost its session since (Handler.Lost, after which
// the batches of the ended incarnations are dropped when they come up, as
// always), or the engine stops. Batches handed out before the pause are the pipeline's
// and finish as usual.
//
// One pause is one gap and one hold. Whoever sees the gap first (the
// reporter's beat, Next, a batch received from a reader, the hold's own
// confirmation) takes it, and the process counts as running from then on.
// A gap noticed during a hold (the process stopped again while a
// confirmation was asked) makes any answer asked before it stale. The hold
// asks again. Nothing else ends a hold. A partition revoked or moved does
// not (another partition's ownership may be over all the same). Nor does a
// commit the coordinator refused (under KIP-848 UNKNOWN_MEMBER_ID ends that one
// partition's incarnation, commit.go, and it may be assigned again at once,
// before the member's heartbeat hears that its whole session is over).
//
// Two cases remain. One is a batch handed out just before the process
// stopped. The other is one handed out after the confirmation but before a coordinator that ends the
// session right after it is heard of (a heartbeat interval at most).

// pauseGuard notices gaps in the process's run and holds new batches until
// the group confirms the member. Guarded by Engine.mu.
type pauseGuard struct {
	group  string        // the group's name, for the log (set by New)
	log    limitedLog    // set by New
	alive  time.Time     // when the process was last seen running (sawRunning)
	since  time.Time     // while batches are held: when the hold began; zero otherwise
	gap    time.Duration // the hold's longest gap
	gaps   uint64        // gaps noticed so far: a confirmation counts only if none was noticed while it was asked
	losses uint64        // sessions lost so far (sessionLost)
	lostAt uint64        // losses when the last gap was noticed
	held   []*Batch      // batches received from the readers while held, in order: handed out (took) once the hold ends
}

// pauseLimit is the longest gap in the run that is not taken for a pause
// that may have cost the session. It is a third of the session timeout,
// within [2 s, 10 s]. The reporter runs every second, so a gap of 2 s is
// already unusual. A false alarm costs one DescribeGroups. Under the consumer group
// protocol (KIP-848) the session timeout is the broker's, as the member read
// it (group.Member.SessionTimeout).
func pauseLimit(m *group.Member) time.Duration {
	if m == nil {
		return 0
	}
	return min(max(m.SessionTimeout()/3, 2*time.Second), 10*time.Second)
}

// tick is the reporter's beat (under Engine.mu). It sees a gap as Next
// does, so a pause is noticed within reportEvery of the resume even while
// nothing calls Next. Pass time.Now(), not the tick's value. After a
// SIGSTOP, Go's ticker delivers the tick that fell due during the stop with
// the time it fell due, which is before the gap (an older now than the last
// seen running is ignored). m is the group member, nil without one.
func (g *pauseGuard) tick(now time.Time, m *group.Member) { g.sawRunning(now, m) }

// holding reports whether new batches are held. It first sees
// whether the process did not run since it was last seen running
// (sawRunning).
func (g *pauseGuard) holding(now time.Time, m *group.Member) bool {
	g.sawRunning(now, m)
	return !g.since.IsZero()
}

// sawRunning records that the process runs at now. A gap since it
// was last seen running longer than pauseLimit is a pause. It starts a
// hold, or, during one, makes the confirmations asked before it stale.
// Each gap is seen once. The process counts as running from now on.
func (g *pauseGuard) sawRunning(now time.Time, m *group.Member) {
	last := g.alive
	if now.Before(last) {
		return // a late tick's time, or a clock read before the last
	}
	g.alive = now
	limit := pauseLimit(m)
	if limit == 0 || last.IsZero() {
		return
	}
	gap := now.Sub(last)
	if gap <= limit {
		return
	}
	g.gaps++
	g.lostAt = g.losses
	g.gap = max(g.gap, gap)
	if g.since.IsZero() {
		g.since = now
		session := m.SessionTimeout().String()
		if from := m.SessionTimeoutSource(); from != "" {
			session += ": " + from
		}
		g.log.Warnf("Group %q: this process did not run for %s (paused: SIGSTOP, a long garbage collection, a frozen VM?), longer than %s (a third of the session timeout, within 2s and 10s; the session timeout is %s); holding new batches until the group confirms this member still owns its partitions",
			g.group, gap.Round(100*time.Millisecond), limit.Round(100*time.Millisecond), session)
		return
	}
	g.log.Warnf("Group %q: this process did not run for %s again while holding new batches; asking the group again whether it still lists this member",
		g.group, gap.Round(100*time.Millisecond))
}

// sessionLost records that the member lost its session (Handler.Lost),
// after its partitions were released. A hold ends, since what the member
// read before is dropped and what it reads from now on it was assigned
// again.
func (g *pauseGuard) sessionLost() { g.losses++ }

// confirmMember ends a hold once the group confirms this member (asked after
// the last gap), the member lost its session since the last gap, or the
// engine stops. It asks the coordinator every confirmEvery, and logs a
// failing question at most once per lineEvery. It returns ctx's error if
// ctx ends first (the hold stays).
func (e *Engine) confirmMember(ctx context.Context) error {
	for {
		e.mu.Lock()
		g := &e.out.pause
		m, gaps, lost := e.group.member, g.gaps, g.losses != g.lostAt
		e.mu.Unlock()
		why := ""
		switch {
		case lost:
			why = "this member lost its session since (its partitions were lost): what it read of them before is dropped"
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
				e.mu.Lock()
				held := time.Since(e.out.pause.since)
				e.mu.Unlock()
				e.log.warn("confirm", "Group %q: asking the coordinator whether this member is still in the group failed (new batches held for %s), retrying: %v",
					e.cfg.Group.Name, held.Round(100*time.Millisecond), err)
			}
		}
		e.mu.Lock()
		ended := why != "" && e.out.pause.endHold(gaps, why, time.Now(), e.group.member)
		e.mu.Unlock()
		if ended {
			return nil
		}
		if why != "" {
			continue // a gap while the answer was asked: ask again
		}
		t := time.NewTimer(confirmEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-e.out.wake: // signalled when partitions are released, a session is lost, the engine stops, ...
		case <-t.C:
		}
		t.Stop()
	}
}

// endHold ends the hold for why, unless a gap was noticed since gaps, and
// reports whether it did. The answer may be from before such a gap. The
// hold's own look at the clock counts, for a process stopped while it
// waited for the answer.
func (g *pauseGuard) endHold(gaps uint64, why string, now time.Time, m *group.Member) bool {
	g.sawRunning(now, m)
	if g.gaps != gaps {
		return false
	}
	held, gap := time.Since(g.since), g.gap
	g.since, g.gap = time.Time{}, 0
	g.log.Infof("Group %q: handing out batches again after %s (the process did not run for %s): %s", g.group, held.Round(time.Millisecond), gap.Round(100*time.Millisecond), why)
	return true
}

// confirmEvery is how often a hold asks the coordinator.
const confirmEvery = 200 * time.Millisecond
