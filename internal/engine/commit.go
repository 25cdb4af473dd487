package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/backoff"
	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// groupState is the engine's side of its consumer group. It is not Kafka's
// group coordinator, the broker the group talks to. It holds the committer
// and the commit lock. With Membership it also holds the member and what
// the engine knows of its ownership.
//
// token is the commit lock (lock, unlock). A commit holds it from taking
// its offsets until the commit is answered, so commits land in the order
// their offsets were taken. It is a channel, not a mutex, so that waiting
// for it ends with the waiter's context. It is taken before Engine.mu, never
// under it. now is a channel with its own rules. name, offsets and resumes
// are set by New and Start, then only read. Engine.mu guards the rest.
// joinGroup sets member and committer.
type groupState struct {
	name    string         // the group's name (Config.Group.Name)
	token   chan struct{}  // buffered 1: the commit lock
	now     chan struct{}  // buffered 1: every slot waits for a commit (the committer commits at once)
	offsets *group.Offsets // the group's offset store; nil without a group
	resumes bool           // partitions resume from the group's committed offsets (set by Start)

	committer committer     // member, or offsets for pinned partitions; nil without a group
	member    *group.Member // with Membership
	assigned  bool          // with Membership: the group assigned partitions at least once
	done      bool          // with Membership and StopAtEnd: the group committed every partition to its snapshot end
	ended     *session      // with Membership, classic: the session a commit was refused under (UNKNOWN_MEMBER_ID); its revocations are losses
}

// commitLoop is the committer goroutine. Every commit period, and at once
// when every slot waits for a commit, it commits each partition's
// acknowledged progress.
func (e *Engine) commitLoop() {
	defer e.wg.Done()
	ctx, cancel := e.shut.SoftStopCtx(context.Background())
	defer cancel()
	t := time.NewTicker(e.cfg.Group.CommitPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.group.now:
		}
		err := e.commit(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // stopping: the commit was cut short, the final commit makes it
		case permanent(err):
			return // the stopping error, logged by fail; the final commit tries once more
		default:
			e.log.warn("commit", "Committing offsets failed, retrying in %s: %v", e.cfg.Group.CommitPeriod, err)
		}
	}
}

// commit commits every partition whose frontier moved since its last
// commit (the timer's commit and the final commit). A revocation takes its
// offsets as it releases its partitions, then sends them the same way.
func (e *Engine) commit(ctx context.Context) error {
	if e.group.committer == nil {
		return nil
	}
	if err := e.group.lock(ctx); err != nil {
		return err
	}
	defer e.group.unlock()
	e.mu.Lock()
	c := newCommitTake()
	for k, p := range e.parts.reading() {
		at, _ := e.parts.tracker.Frontier(k)
		c.takeDue(k, p, at, true)
	}
	e.mu.Unlock()
	return e.sendCommit(ctx, c)
}

// commitTake is one commit's offsets, taken under Engine.mu. Each
// partition's offset and the incarnation it was taken from.
type commitTake struct {
	offsets   map[ranges.Key]int64
	owner     map[ranges.Key]*incarnation // the incarnation each offset belongs to
	ackedSent []*incarnation              // the incarnations whose acknowledged offsets above the frontier the commit carries (acked.go)
}

func newCommitTake() commitTake {
	return commitTake{offsets: map[ranges.Key]int64{}, owner: map[ranges.Key]*incarnation{}}
}

// takeDue takes at, the frontier of k's incarnation p, if a commit of it is
// due. This is the one offset rule of every commit. A commit is due when the
// frontier moved since p's last commit, or a cut range was launched since
// (cuts.go). With withAcked, it is also due when offsets above the frontier
// were acknowledged since (acked.go). A revocation takes without them. Its
// commit is sent once its incarnation ended, so it carries no acknowledged
// offsets above the frontier.
func (c *commitTake) takeDue(k ranges.Key, p *incarnation, at int64, withAcked bool) {
	if at == p.committed && !p.cutUnsent && !(withAcked && p.ackedUnsent) {
		return
	}
	c.offsets[k], c.owner[k] = at, p
	p.cutUnsent = false // sent now (cuts.go); again if this commit fails
	if withAcked && p.ackedUnsent {
		p.ackedUnsent = false // sent now (acked.go); again if this commit fails
		c.ackedSent = append(c.ackedSent, p)
	}
}

// sendCommit sends the offsets c took, with the commit lock held. It is the
// one commit path of the timer, the final commit and a revocation. The
// commit lock serialises commits, so an older frontier never lands after a
// newer one. A partition's frontier only grows within its incarnation, so
// its commits never go backwards. A commit's result applies only to the
// incarnation it was taken from. There its committed offset moves, and the
// slots of the ranges the commit covers are freed. A commit refused for
// good (permanent) stops the engine.
func (e *Engine) sendCommit(ctx context.Context, c commitTake) error {
	offsets, owner := c.offsets, c.owner
	failed, err := e.group.committer.Commit(ctx, offsets)
	defer func(failed map[ranges.Key]error, err error) {
		e.mu.Lock()
		e.parts.sendAgain(c, failed, err)
		e.mu.Unlock()
	}(failed, err)
	if len(offsets) > 0 {
		e.obs.Committed(err == nil && len(failed) == 0)
	}
	if err != nil {
		if permanent(err) {
			e.fail(e.group.refusedErr(sortedKeys(offsets), err))
		}
		return err
	}
	if !e.cfg.Group.Membership {
		for _, k := range sortedKeys(failed) {
			if fenced(failed[k]) {
				// A group with live members rejects commits from outside
				// it. Nothing this input acknowledges could be stored.
				e.fail(fmt.Errorf("%w: consumer_group %q now has live members, which reject the commits of pinned partitions (name:partitions) from outside the group; name the topics whole to join the group, or use another group", failed[k], e.cfg.Group.Name))
				return failed[k]
			}
		}
	}
	if err := e.group.refusedForGood(failed); err != nil {
		e.fail(err)
		return err
	}
	e.endRefusedOwnerships(owner, failed)
	e.mu.Lock()
	e.group.noteSessionEnded(failed)
	released := 0
	for k, at := range offsets {
		if p := owner[k]; failed[k] == nil && e.parts.cur(k) == p {
			p.committed = at
		}
	}
	for _, p := range e.parts.reading() {
		released += e.sched.slots.releaseCommitted(p)
	}
	e.mu.Unlock()
	if released > 0 {
		e.sched.signal()
	}
	return joinKeyErrs(failed)
}

// groupDone records that the group committed every partition to its
// snapshot end (Membership and StopAtEnd).
func (c *groupState) groupDone() { c.done = true }

// lock takes the commit lock, waiting at most as long as ctx. So a commit in
// flight (a revocation's, retried for up to 30 s) does not hold up the
// final commit past its limit. A free lock is taken whatever ctx: only the
// wait is bounded. A member's leave revokes its partitions with a context
// the leave has ended, after its final commit, and that revocation has
// nothing to wait for (a select between the free lock and the ended context
// picked either, and half the time warned that the commit failed).
func (c *groupState) lock(ctx context.Context) error {
	select {
	case c.token <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.token <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the commit in flight: %w", ctx.Err())
	}
}

// unlock gives the commit lock back.
func (c *groupState) unlock() { <-c.token }

// commitSoon asks the committer to commit at once (every slot waits for a
// commit, or the group's end waits for this member's).
func (c *groupState) commitSoon() {
	select {
	case c.now <- struct{}{}:
	default:
	}
}

// refusedForGood returns the error of the partitions whose commit the
// group's coordinator refused for good (permanent, such as authorisation),
// which stops the engine. nil if none. Retriable refusals (the coordinator
// moving or loading, a rebalance) are retried by the next commit.
func (c *groupState) refusedForGood(failed map[ranges.Key]error) error {
	var keys []ranges.Key
	var errs []error
	for _, k := range sortedKeys(failed) {
		if permanent(failed[k]) {
			keys = append(keys, k)
			errs = append(errs, failed[k])
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return c.refusedErr(keys, errors.Join(errs...))
}

// refusedErr names the group and the partitions of a commit refused for
// good.
func (c *groupState) refusedErr(keys []ranges.Key, err error) error {
	return fmt.Errorf("group %q refused the commit of %d partitions (%s), retrying cannot fix it: %w", c.name, len(keys), keyList(keys), err)
}

// finalCommit commits once more on close, retrying for a while (a broker
// may be restarting) as long as ctx allows.
func (f *finisher) finalCommit(ctx context.Context) error {
	e := f.e
	var err error
	for attempt := range 5 {
		if err = e.commit(ctx); err == nil || permanent(err) {
			return err
		}
		e.log.Warnf("Final commit failed (attempt %d of 5): %v", attempt+1, err)
		if backoff.Wait(ctx, time.Duration(attempt+1)*time.Second) != nil {
			break
		}
	}
	return err
}

// endRefusedOwnerships ends the ownerships whose commit the coordinator
// refused because the ownership it was sent under is over
// (ownershipEnded), under the consumer group protocol (KIP-848). Each such
// incarnation is dropped as a loss drops it (its acknowledgements, in flight
// or to come, are stale and never applied), nothing of it is committed, and
// a partition the member still owns is assigned again at once, a new incarnation, read
// from the group's committed offset, if the member still owns it. If the
// broker moved it, franz-go revokes or loses it and the new owner reads it
// from there. Nothing is lost. What the ended incarnation read past the
// group's offset is read again.
func (e *Engine) endRefusedOwnerships(owner map[ranges.Key]*incarnation, failed map[ranges.Key]error) {
	var keys []ranges.Key
	var errs []error
	e.mu.Lock()
	if !e.cfg.Group.Membership || e.group.member == nil || e.group.member.Protocol() != group.ProtocolConsumer {
		e.mu.Unlock()
		return
	}
	for _, k := range sortedKeys(failed) {
		if ownershipEnded(failed[k]) && owner[k] != nil && e.parts.cur(k) == owner[k] {
			keys = append(keys, k)
			errs = append(errs, failed[k])
		}
	}
	e.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	e.release(keys, false)
	// Still owned (the member's assignment did not change yet), so assigned
	// again. Asked under mu. A loss clears the member's ownership before it
	// releases under mu, and a revocation takes it out of Owned before it
	// begins, so a partition lost or revoked meanwhile is never waited for
	// again without its owner.
	e.mu.Lock()
	for _, k := range keys {
		if slices.Contains(e.group.member.Owned(k.Topic), k) {
			e.failLocked(e.parts.assigned(k))
		}
	}
	e.sched.lookSoon()
	e.mu.Unlock()
	e.sched.signal()
	e.log.Warnf("Group %q refused the commit of %d partitions (%s): this member's ownership of them ended; what they had in flight is dropped, and they are read again from the group's committed offsets by whichever member the group assigns them to: %v",
		e.cfg.Group.Name, len(keys), keyList(keys), errors.Join(errs...))
}

// ownershipEnded reports a commit refused because the ownership it was sent
// under is over. The coordinator no longer knows the member
// (UNKNOWN_MEMBER_ID, its session ended) or its member epoch moved on
// (STALE_MEMBER_EPOCH, which franz-go already retried with the member's
// newest epoch, or FENCED_MEMBER_EPOCH).
func ownershipEnded(err error) bool {
	return errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.StaleMemberEpoch) || errors.Is(err, kerr.FencedMemberEpoch)
}

// fenced reports a commit the group coordinator rejected because the
// committer is not (or no longer) a member of the group's current generation.
func fenced(err error) bool {
	return errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.FencedInstanceID)
}

// session is a classic group session. It is the member ID and generation of
// franz-go's GroupMetadata.
type session struct {
	member     string
	generation int32
}

// noteSessionEnded records, under the classic protocol, the session a
// commit was refused under with UNKNOWN_MEMBER_ID. The coordinator no longer
// knows the member (its session timed out, e.g. a process paused past
// session_timeout). franz-go then rejoins, and an eager balancer first
// revokes every partition of the session that is over. Revoked hands those
// over as lost (sessionEnded).
func (c *groupState) noteSessionEnded(failed map[ranges.Key]error) {
	if c.member == nil || c.member.Protocol() == group.ProtocolConsumer {
		return // no member without Membership
	}
	for _, err := range failed {
		if errors.Is(err, kerr.UnknownMemberID) {
			id, gen := c.member.Client().GroupMetadata()
			c.ended = &session{id, gen}
			return
		}
	}
}

// sessionEnded reports whether the member's session is one a commit was
// refused under as unknown. partitions revoked in it are handed over as a
// lost session's (no drain, no commit), since the coordinator refuses its
// commits and other members may read them already.
func (c *groupState) sessionEnded() bool {
	if c.ended == nil || c.member == nil {
		return false
	}
	id, gen := c.member.Client().GroupMetadata()
	return *c.ended == session{id, gen}
}
