package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// handler receives the group member's assignment changes (group.Handler).
// Its methods run on franz-go's group management goroutine, and the
// rebalance waits for them.
type handler Engine

// Assigned queues the partitions for the scheduler, which lists their
// watermarks and the group's committed offsets and starts reading them. Each
// assignment is a new incarnation of its partition, so whatever is still in
// the pipeline from an earlier ownership (under an eager balancer every
// rebalance revokes everything and hands the kept partitions back) is
// dropped when it comes back, never applied to this one. A partition
// created after the engine started, or new to the group (the group has
// offsets of other partitions, not of it: groupNew), is
// read from its first offset where the group has no offset for it, whatever
// start_from says. The cursors learn the leaders of the assigned topics at
// once (cache.Learn), while the scheduler lists the partitions.
func (h *handler) Assigned(_ context.Context, keys []ranges.Key) {
	e := (*Engine)(h)
	if len(keys) == 0 {
		return
	}
	e.mu.Lock()
	for _, k := range keys {
		e.group.assigned = true
		e.failLocked(e.parts.assigned(k))
	}
	e.group.done = false
	e.sched.lookSoon()
	e.out.settle.changedAt(time.Now()) // the first batches wait until the assignment settles (drain.go)
	owned := e.parts.owned()
	c := e.kafka.cache
	e.mu.Unlock()
	if c != nil {
		// The cursors' leaders are learnt while the partitions are listed
		// (committed offsets, watermarks), so that their first fetch goes
		// as soon as they are started.
		learnt := map[string]bool{}
		for _, k := range keys {
			if !learnt[k.Topic] {
				learnt[k.Topic] = true
				c.Learn(k.Topic)
			}
		}
	}
	named, all := keySummary(keys)
	e.log.Infof("Group %q assigned %d partitions to this member (%s); it owns %d now", e.cfg.Group.Name, len(keys), named, owned)
	if !all {
		e.log.Debugf("Group %q assigned %s", e.cfg.Group.Name, allKeys(keys))
	}
	e.sched.signal()
}

// Revoked first drains the partitions (drain.go). It waits, at most
// RevokeDrainTimeout, until their batches handed out are done, and the
// rebalance waits for it, so the next owner starts where this member's
// pipeline got to.
//
// Revoked stops reading the partitions, commits their acknowledged progress
// while this member still owns them, and forgets them: acknowledgements that
// arrive later are dropped, never committed for a partition this member no
// longer owns. The commit waits for one in flight (groupState.lock), so it lands
// last. If ctx ends first, nothing is committed.
func (h *handler) Revoked(ctx context.Context, keys []ranges.Key) {
	e := (*Engine)(h)
	// franz-go rejoins from the commit's answer, before the commit returns.
	// The commit in flight is waited for, so its refusal is known here.
	ended := false
	if e.group.lock(ctx) == nil {
		e.mu.Lock()
		ended = e.group.sessionEnded()
		e.mu.Unlock()
		e.group.unlock()
	}
	if ended {
		e.log.Infof("Group %q: a commit was answered UNKNOWN_MEMBER_ID, so this member's session is over; the %d partitions revoked as it rejoins are handed over as lost (no drain, no commit)", e.cfg.Group.Name, len(keys))
		h.Lost(ctx, keys)
		return
	}
	e.drainRevoked(ctx, keys)
	lockErr := e.group.lock(ctx)
	c := e.release(keys, lockErr == nil)
	err := lockErr
	if len(c.offsets) > 0 {
		// offsets are of partitions being read, so the scheduler, started
		// after the committer was stored, runs. e.group.committer is set.
		err = e.sendCommit(ctx, c)
	}
	if lockErr == nil {
		e.group.unlock()
	}
	if err != nil && !permanent(err) { // a permanent one is logged as the stopping error
		e.log.Warnf("Committing revoked partitions failed; the next owner reads from the group's previous offsets: %v", err)
	}
	e.mu.Lock()
	owned := e.parts.owned()
	e.mu.Unlock()
	e.log.owned(e.cfg.Group.Name, "revoked", keys, owned)
}

// Lost forgets the partitions without committing or draining: the member's
// session ended, so another member may read them already and commits are
// rejected.
func (h *handler) Lost(_ context.Context, keys []ranges.Key) {
	e := (*Engine)(h)
	e.release(keys, false)
	e.mu.Lock()
	e.out.pause.sessionLost() // after the release: a pause's hold ends once their batches are stale
	e.mu.Unlock()
	e.out.signal() // a hold ends (confirmMember)
	e.mu.Lock()
	owned := e.parts.owned()
	e.mu.Unlock()
	e.log.owned(e.cfg.Group.Name, "lost", keys, owned)
}

// Failed stops the engine. The member cannot run the group protocol asked
// for (group.Handler).
func (h *handler) Failed(err error) { (*Engine)(h).fail(err) }

// release stops planning and reading keys, frees the slots of their ranges,
// closes their idle cached clients, and returns the acknowledged frontier of
// each whose commit is due (when commit is set: commitTake.takeDue).
func (e *Engine) release(keys []ranges.Key, commit bool) commitTake {
	c := newCommitTake()
	e.mu.Lock()
	e.out.settle.changedAt(time.Now())
	for _, k := range keys {
		p := e.parts.cur(k)
		if p == nil {
			e.failLocked(e.parts.transition(k, evReleased, change{}))
			continue
		}
		if f, ok := e.parts.tracker.Frontier(k); ok && commit {
			c.takeDue(k, p, f, false)
		}
		e.dropLocked(k, p)
	}
	e.mu.Unlock()
	for _, k := range keys {
		if e.kafka.cache != nil { // none in the table's model walk
			e.kafka.cache.Drop(k.Topic, k.Partition)
		}
		e.obs.PartitionGone(k)
	}
	e.sched.signal()
	e.out.signal() // Next looks again: batches of ended incarnations are dropped
	return c
}

// owned logs what the group did to keys (assigned, revoked, lost) and how
// many partitions this member owns now.
func (l limitedLog) owned(group, what string, keys []ranges.Key, owned int) {
	if len(keys) == 0 {
		return
	}
	named, all := keySummary(keys)
	l.Infof("Group %q %s %d partitions of this member (%s); it owns %d now", group, what, len(keys), named, owned)
	if !all {
		l.Debugf("Group %q %s %s", group, what, allKeys(keys))
	}
}

func keyList(keys []ranges.Key) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.String()
	}
	s := strings.Join(parts, ", ")
	if len(s) > 300 {
		s = s[:300] + fmt.Sprintf("... (%d in all)", len(keys))
	}
	return s
}
