package cache

import (
	"errors"
	"fmt"
)

// cursorState is who holds a cursor, and what it keeps for whom. It is the
// cursor's one lifecycle field. The package doc draws the transitions between states
// (TestStateDiagramMatchesTheTable keeps the drawing and the table in step).
// transitionLocked applies them.
type cursorState uint8

const (
	// stateNew: just created, about to be leased (Acquire) or to follow
	// (Watch).
	stateNew cursorState = iota
	// stateLeased: held by a lease. Its position is the holder's. It may
	// still be in a loop (a leased follower fetches ahead).
	stateLeased
	// stateIdle: no holder, out of every loop (unless its revival found
	// it wanting more). It keeps its position, and what it fetched past it,
	// for the next lease.
	stateIdle
	// stateFollowing: no holder, in its broker's loop, following its
	// partition's tail (Watch). One per partition, with stateRevivingFollower.
	stateFollowing
	// stateReviving: held by its revival goroutine, which learns the
	// leader (and validates the position). Back to idle when it ends.
	stateReviving
	// stateRevivingFollower: the same for the partition's follower. Back
	// to following when it ends.
	stateRevivingFollower
	// stateFailed: no holder, an error for its next lease (err), which a
	// new cursor would meet again (an offset out of range, an unknown or
	// recreated topic, an authorisation failure, a failed metadata request).
	stateFailed
	// stateTruncated: no holder, a truncation its revival detected (err, a
	// *LogTruncatedError) for the next lease at its position. Only this
	// cursor knows it (a new one has no epoch), so neither the janitor nor
	// a lease elsewhere in the partition takes it.
	stateTruncated
	// stateGone: forgotten by the cache.
	stateGone
	numStates
)

var stateNames = [numStates]string{
	stateNew:              "new",
	stateLeased:           "leased",
	stateIdle:             "idle",
	stateFollowing:        "following",
	stateReviving:         "reviving",
	stateRevivingFollower: "revivingFollower",
	stateFailed:           "failed",
	stateTruncated:        "truncated",
	stateGone:             "gone",
}

func (s cursorState) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// cursorEvent is what happens to a cursor, the second half of a transition.
type cursorEvent uint8

const (
	evLease         cursorEvent = iota // Acquire takes it
	evRelease                          // released with no error: idle, out of its loop
	evReleaseFollow                    // released with no error, following the tail (it did before, or hands over)
	evReleaseFailed                    // released with no error but holding what its fetch ahead saw, an error of the data
	evDiscard                          // released with an error, or after Close: forgotten
	evFollow                           // Watch makes it the partition's follower
	evUnfollow                         // another cursor of the partition follows now
	evRevive                           // its leader must be learnt again: a revival goroutine holds it
	evRevived                          // the revival ended: leader learnt (or the cache closed)
	evFail                             // an error for its next lease, which a new cursor would meet too
	evTruncate                         // its revival detected a truncation of the log below its position
	evEvict                            // the janitor: idle longer than IdleTimeout
	evForget                           // Drop, a recreated topic, Close, or a follower's handover
	numEvents
)

var eventNames = [numEvents]string{
	evLease:         "lease",
	evRelease:       "release",
	evReleaseFollow: "releaseFollow",
	evReleaseFailed: "releaseFailed",
	evDiscard:       "discard",
	evFollow:        "follow",
	evUnfollow:      "unfollow",
	evRevive:        "revive",
	evRevived:       "revived",
	evFail:          "fail",
	evTruncate:      "truncate",
	evEvict:         "evict",
	evForget:        "forget",
}

func (e cursorEvent) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

type transition struct {
	from cursorState
	ev   cursorEvent
}

// transitions is every state change a cursor may make. transitionLocked
// refuses the others. The package doc draws the same table.
var transitions = map[transition]cursorState{
	{stateNew, evLease}:  stateLeased,
	{stateNew, evFollow}: stateFollowing,

	{stateLeased, evRelease}:       stateIdle,
	{stateLeased, evReleaseFollow}: stateFollowing,
	{stateLeased, evReleaseFailed}: stateFailed,
	{stateLeased, evDiscard}:       stateGone,

	{stateIdle, evLease}:  stateLeased,
	{stateIdle, evFollow}: stateFollowing,
	{stateIdle, evRevive}: stateReviving,
	{stateIdle, evFail}:   stateFailed,
	{stateIdle, evEvict}:  stateGone,
	{stateIdle, evForget}: stateGone,

	{stateFollowing, evLease}:    stateLeased,
	{stateFollowing, evUnfollow}: stateIdle,
	{stateFollowing, evRevive}:   stateRevivingFollower,
	{stateFollowing, evFail}:     stateFailed,
	{stateFollowing, evForget}:   stateGone,

	{stateReviving, evRevived}:  stateIdle,
	{stateReviving, evFail}:     stateFailed,
	{stateReviving, evTruncate}: stateTruncated,
	{stateReviving, evEvict}:    stateGone,
	{stateReviving, evForget}:   stateGone,

	{stateRevivingFollower, evRevived}:  stateFollowing,
	{stateRevivingFollower, evUnfollow}: stateReviving,
	{stateRevivingFollower, evFail}:     stateFailed,
	{stateRevivingFollower, evTruncate}: stateTruncated,
	{stateRevivingFollower, evForget}:   stateGone,

	{stateFailed, evLease}:  stateLeased,
	{stateFailed, evEvict}:  stateGone,
	{stateFailed, evForget}: stateGone,

	{stateTruncated, evLease}:  stateLeased,
	{stateTruncated, evForget}: stateGone,
}

// Named predicates on the state, for the call sites.

// leased reports a cursor held by a lease.
func (cur *cursor) leased() bool { return cur.state == stateLeased }

// gone reports a cursor the cache forgot.
func (cur *cursor) gone() bool { return cur.state == stateGone }

// reviving reports a cursor held by its revival goroutine.
func (cur *cursor) reviving() bool {
	return cur.state == stateReviving || cur.state == stateRevivingFollower
}

// follower reports the partition's follower (Watch), in its loop or
// relearning its leader.
func (cur *cursor) follower() bool {
	return cur.state == stateFollowing || cur.state == stateRevivingFollower
}

// listed reports a cursor without a lease holder that the cache keeps. Such
// a cursor is on the idle list, and its kept bytes count in idleList.bytes.
func (cur *cursor) listed() bool {
	switch cur.state {
	case stateIdle, stateFollowing, stateReviving, stateRevivingFollower, stateFailed, stateTruncated:
		return true
	}
	return false
}

// holdsErr reports an idle cursor that keeps an error for its next lease.
func (cur *cursor) holdsErr() bool {
	return cur.state == stateFailed || cur.state == stateTruncated
}

// leasable reports whether Acquire may take cur for a read at start. It may
// take an idle cursor without a holder. It takes the follower only at its
// position, since it stays at the tail. It takes a detected truncation only
// at its position, since a lease elsewhere would seek past it and forget
// it.
func (cur *cursor) leasable(start int64) bool {
	switch cur.state {
	case stateIdle, stateFailed:
		return true
	case stateFollowing, stateTruncated:
		return cur.next == start
	}
	return false
}

// evictable reports whether the janitor may forget cur once it has been
// idle for IdleTimeout. It may not while it follows, nor while it holds a
// truncation it detected. The transition table says the same (evEvict).
func (cur *cursor) evictable() bool {
	_, ok := transitions[transition{cur.state, evEvict}]
	return ok
}

// fetchable reports whether the loop should put cur into its next round.
// It has a reason to fetch (a lease, a follower, an idle cursor its
// revival found wanting more), no fetch under way, no error waiting for
// its holder, room in its queue, and a known position below what it wants.
func (cur *cursor) fetchable() bool {
	switch cur.state {
	case stateLeased, stateFollowing, stateIdle:
	default:
		return false
	}
	return !cur.inFlight && cur.err == nil && cur.fetchAt >= 0 && cur.fetchAt < cur.want && len(cur.queue) < maxQueued
}

// transitionLocked applies ev to cur. It looks (state, ev) up in
// transitions and refuses any other pair. The error, wrapping ErrInternal,
// names the partition, the state and the event. The partition's next
// Acquire returns it, and so does a leased cursor's Read. Otherwise it does
// what the transition implies. That covers the lease count and holders, the idle list and its
// kept bytes, loop membership, the revival goroutine, the error kept for
// the next lease (err, for evFail, evTruncate and evReleaseFailed), and
// forgetting. Under Cache.mu.
func (c *Cache) transitionLocked(cur *cursor, ev cursorEvent, err error) error {
	from := cur.state
	to, ok := transitions[transition{from, ev}]
	if !ok {
		return c.refuseLocked(cur, ev)
	}
	cur.state = to
	defer c.idle.recount(cur) // following or not, listed or not, keeping or not
	if from == stateLeased {
		c.leased--
		delete(c.holders, cur)
		c.ownQueueLocked(cur)
		cur.dropDecodingLocked() // release owned buf's records first
	}
	switch ev {
	case evLease:
		if cur.elem != nil {
			c.idle.remove(cur)
		}
		cur.laneless = false
		c.leased++
		c.holders[cur] = struct{}{}
	case evRelease:
		c.idle.add(cur)
		cur.want = cur.fetchAt // fetch nothing more until leased again
		c.leaveLoopLocked(cur)
	case evReleaseFollow:
		c.idle.add(cur)
		c.followLocked(cur)
	case evReleaseFailed:
		c.idle.add(cur)
		cur.want = cur.fetchAt
		c.leaveLoopLocked(cur)
	case evFollow:
		if from == stateNew {
			c.idle.add(cur)
		}
		c.followLocked(cur)
	case evUnfollow:
		cur.want = cur.fetchAt
		c.leaveLoopLocked(cur)
	case evRevive:
		c.startRevivalLocked(cur)
	case evRevived:
	case evFail, evTruncate:
		c.leaveLoopLocked(cur)
		cur.err = err
	case evEvict:
		c.removeLocked(cur)
		c.counts.idleEvictions.Add(1)
	case evDiscard, evForget:
		c.removeLocked(cur)
	}
	return nil
}

// mustTransitionLocked applies a transition its caller checked is allowed.
// A refusal is reported all the same (see refuseLocked).
func (c *Cache) mustTransitionLocked(cur *cursor, ev cursorEvent) {
	_ = c.transitionLocked(cur, ev, nil)
}

// refuseLocked reports a transition the table does not allow, a bug of the
// cache. The partition's next Acquire returns the error (and the cursor's
// Read, if it is leased), and Stats.Refused counts it. The cursor keeps
// its state.
func (c *Cache) refuseLocked(cur *cursor, ev cursorEvent) error {
	err := fmt.Errorf("%s/%d: %w: cursor state %s refuses event %s", cur.topic, cur.partition, ErrInternal, cur.state, ev)
	c.counts.refusals.Add(1)
	if c.refused == nil {
		c.refused = map[key]error{}
	}
	k := key{cur.topic, cur.partition}
	if c.refused[k] == nil {
		c.refused[k] = err
	}
	if cur.leased() {
		cur.setErrLocked(err)
	}
	return err
}

// removeLocked removes cur from the cache. It takes it off the idle list
// and out of its loop, and drops its records.
func (c *Cache) removeLocked(cur *cursor) {
	if cur.elem != nil {
		c.idle.remove(cur)
	}
	c.leaveLoopLocked(cur)
	cur.gen++
	for _, raw := range cur.queue {
		raw.releaseLocked()
	}
	cur.dropDecodingLocked()
	cur.queue, cur.queueBytes = nil, 0
	c.idle.recount(cur)
	k := key{cur.topic, cur.partition}
	all := c.byKey[k]
	for i, o := range all {
		if o == cur {
			all = append(all[:i], all[i+1:]...)
			break
		}
	}
	if len(all) == 0 {
		delete(c.byKey, k)
	} else {
		c.byKey[k] = all
	}
	c.open--
}

// revivalEndedLocked ends cur's revival. err, a truncation or another
// error, is kept for the next lease. Else the cursor goes back to idle or
// following and, if join, into its leader's loop (a follower, or an idle
// cursor that wants more). Nothing, if cur was forgotten meanwhile.
func (c *Cache) revivalEndedLocked(cur *cursor, err error, join bool) {
	switch {
	case cur.gone():
	case errors.Is(err, ErrLogTruncated):
		_ = c.transitionLocked(cur, evTruncate, err)
	case err != nil:
		_ = c.transitionLocked(cur, evFail, err)
	default:
		c.mustTransitionLocked(cur, evRevived)
		if join && (cur.follower() || cur.want > cur.fetchAt) {
			c.joinLoopLocked(cur)
		}
	}
}
