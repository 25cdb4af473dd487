package engine

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The partition table: what the engine knows of each partition across its
// incarnations, one record per partition (Engine.partRecords), changed only
// by the transitions below and by the few named fields' owners. It replaces
// the maps that each had their own rule for when an entry appears and
// disappears (the partitions being read, which existed at the start, the
// group's committed offsets, the partitions start_from committed leaves
// unread, the batches in the pipeline per partition, the group's cut
// ranges, the losses to log, a bounded group run's snapshot, the
// partitions waiting for their watermarks).
//
// A record's lifecycle is one stored state (record.state), changed only
// by setStateLocked, which keeps the counts of partitions read and waiting
// (Engine.nReading, Engine.nWaiting); the transitions that call it, one
// place each:
//
//	idle -> waiting          assignedLocked (the group assigned it;
//	                         listedOwnedLocked: again, as a listing shows
//	                         its topic),
//	                         topicBackLocked (its topic is back, owned),
//	                         waitLocked (Start: no watermarks yet)
//	waiting -> idle          unwaitLocked (started, revoked, lost, topic gone)
//	idle -> reading          readLocked (addPartitionLocked: an incarnation starts)
//	reading -> idle          droppedLocked (revoked, lost, topic gone: dropPartitionLocked)
//	idle -> uncommitted      skipUncommittedLocked (start_from committed, no offset)
//	uncommitted -> idle      releasedLocked (revoked, lost), topicGoneLocked
//	uncommitted -> waiting   assignedLocked (assigned again: checked again)

// record is one partition's row of the table. Guarded by Engine.mu.
type record struct {
	state     state      // the lifecycle (setStateLocked)
	cur       *partition // with stateReading: the incarnation being read (its inc says which)
	wait      waiting    // with stateWaiting: the incarnation it will start as, and its origin
	existed   bool       // listed when the engine started (Start): where the group has no offset it starts where start_from says (unless new to the group: groupNewLocked)
	committed int64      // the group's committed offset as last listed; -1 if none (or not listed): the group's, whatever incarnation
	pending   int        // batches handed out by Next and not done, of every incarnation (ordered mode waits for an earlier one's)
	cut       cut        // with sharesCuts: the range cut short at an end inside its block (cuts.go), the group's; zero if none
	losses    []lossSpan // lost spans not logged yet (SkipDataLoss; loss.go), of every incarnation: each is logged whichever saw it
	snapped   bool       // with Membership and StopAtEnd: snap is the partition's end when the engine started (or first listed)
	snap      marks      // the snapshot, if snapped: of the topic listed then (topicGoneLocked forgets it)
	snapErr   error      // with Membership and StopAtEnd: why the partition's end could not be listed yet; nil once snapped
}

// state is a partition's lifecycle as the engine sees it now
// (record.state).
type state int

const (
	// stateIdle: not read by this engine: never listed, not assigned,
	// revoked, lost, or its topic gone (and not owned again).
	stateIdle state = iota
	// stateWaiting: to be read as a new incarnation (record.wait) once its
	// watermarks are listed (startWaitingLocked).
	stateWaiting
	// stateReading: its current incarnation (record.cur) is read; a
	// bounded run keeps it there once read to its end.
	stateReading
	// stateUncommitted: start_from committed and the group had no offset
	// for it: not read (uncommitted.go).
	stateUncommitted
)

// held reports whether the engine reads s's partition or waits to.
func (s state) held() bool { return s == stateReading || s == stateWaiting }

// stateLocked returns k's lifecycle state.
func (e *Engine) stateLocked(k ranges.Key) state {
	return e.peekLocked(k).state
}

// setStateLocked moves r (k's record) to state to: the one place a state
// changes, and the counts of partitions read and waiting with it.
func (e *Engine) setStateLocked(r *record, to state) {
	count := func(s state, d int) {
		switch s {
		case stateReading:
			e.nReading += d
		case stateWaiting:
			e.nWaiting += d
		}
	}
	count(r.state, -1)
	count(to, +1)
	r.state = to
	if to != stateReading {
		r.cur = nil
	}
	if to != stateWaiting {
		r.wait = waiting{}
	}
}

// partLocked returns k's incarnation being read, or nil if it is not read.
func (e *Engine) partLocked(k ranges.Key) *partition {
	if r := e.partRecords[k]; r != nil {
		return r.cur
	}
	return nil
}

// readingLocked yields every partition being read and its current
// incarnation, in no order.
func (e *Engine) readingLocked() iter.Seq2[ranges.Key, *partition] {
	return func(yield func(ranges.Key, *partition) bool) {
		for k, r := range e.partRecords {
			if r.cur != nil && !yield(k, r.cur) {
				return
			}
		}
	}
}

// ownedLocked returns how many partitions the engine reads or waits to.
func (e *Engine) ownedLocked() int { return e.nReading + e.nWaiting }

// readLocked starts incarnation p of k (addPartitionLocked).
func (e *Engine) readLocked(k ranges.Key, p *partition) {
	r := e.recordLocked(k)
	e.setStateLocked(r, stateReading)
	r.cur = p
}

// droppedLocked ends k's incarnation being read (dropPartitionLocked).
func (e *Engine) droppedLocked(k ranges.Key) {
	if r := e.partRecords[k]; r != nil && r.state == stateReading {
		e.setStateLocked(r, stateIdle)
	}
}

// assignedLocked is the group's assignment of k: unless it is read or
// waits already, it waits to start as a new incarnation, from where
// start_from says if it existed at the start (or from its first offset if
// it is new to the group: groupNewLocked), else from its first offset.
func (e *Engine) assignedLocked(k ranges.Key) {
	if e.stateLocked(k).held() {
		return
	}
	from := fromFirst
	if e.peekLocked(k).existed {
		from = fromConfig // or new to the group: groupNewLocked
	}
	e.waitLocked(k, from)
}

// releasedLocked is the revocation or loss of k: it no longer waits, and
// the skip of start_from committed is checked again if it is assigned
// again. It returns its incarnation being read, if any, for the caller to
// commit and drop (dropPartitionLocked).
func (e *Engine) releasedLocked(k ranges.Key) *partition {
	e.unwaitLocked(k)
	r := e.recordLocked(k)
	if r.state == stateUncommitted {
		e.setStateLocked(r, stateIdle)
	}
	return r.cur
}

// listedOwnedLocked is a listing's sight of partitions the group assigned
// to this member, of a topic the listing shows to exist: each that is
// neither read nor waiting (its wait ended when an earlier listing saw the
// topic missing) is assigned again.
func (e *Engine) listedOwnedLocked(owned []ranges.Key) {
	for _, k := range owned {
		if e.stateLocked(k) == stateIdle && e.fatal == nil {
			e.assignedLocked(k)
			e.listNow = true
		}
	}
}

// topicBackLocked is a listing's sight of k, owned by this member, as a
// partition of a topic created again: it waits to be read from its first
// offset.
func (e *Engine) topicBackLocked(k ranges.Key) {
	e.waitLocked(k, fromNewTopic)
}

// recordLocked returns k's record, adding an empty one if there is none.
func (e *Engine) recordLocked(k ranges.Key) *record {
	r := e.partRecords[k]
	if r == nil {
		if e.partRecords == nil {
			e.partRecords = map[ranges.Key]*record{}
		}
		r = &record{committed: -1}
		e.partRecords[k] = r
	}
	return r
}

// peekLocked returns k's record, or an empty one (not added) if there is
// none: for reads that must not grow the table.
func (e *Engine) peekLocked(k ranges.Key) record {
	if r := e.partRecords[k]; r != nil {
		return *r
	}
	return record{committed: -1}
}

// listedAtStartLocked records the partitions Start listed, with the
// group's offsets then.
func (e *Engine) listedAtStartLocked(p plan) {
	for _, k := range p.all {
		e.recordLocked(k).existed = true
	}
	for k, c := range p.committed {
		e.recordLocked(k).committed = c
	}
	e.snapshots = p.snapshot != nil
	for k, m := range p.snapshot {
		e.snappedLocked(k, m)
	}
	for k, err := range p.unsnapped {
		e.recordLocked(k).snapErr = err
	}
}

// snappedLocked records m as k's snapshot: the end a bounded group run
// reads it to.
func (e *Engine) snappedLocked(k ranges.Key, m marks) {
	r := e.recordLocked(k)
	r.snapped, r.snap, r.snapErr = true, m, nil
}

// snapKeysLocked returns the partitions with a snapshot, sorted.
func (e *Engine) snapKeysLocked() []ranges.Key {
	return e.recordKeysLocked(func(r *record) bool { return r.snapped })
}

// unsnappedKeysLocked returns the partitions whose snapshot could not be
// listed yet, sorted.
func (e *Engine) unsnappedKeysLocked() []ranges.Key {
	return e.recordKeysLocked(func(r *record) bool { return r.snapErr != nil })
}

// recordKeysLocked returns the partitions whose record satisfies f, sorted.
func (e *Engine) recordKeysLocked(f func(*record) bool) []ranges.Key {
	var keys []ranges.Key
	for k, r := range e.partRecords {
		if f(r) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, ranges.Key.Compare)
	return keys
}

// groupListedLocked records the group's committed offset of k as listed
// now (ok false: the group has none).
func (e *Engine) groupListedLocked(k ranges.Key, c int64, ok bool) {
	if !ok {
		c = -1
	}
	e.recordLocked(k).committed = c
}

// groupNewLocked reports whether partition k, about to start with origin
// from at the group's listing l, is new to the group: it existed when this
// process started (from is fromConfig), the group has no offset for it but
// has offsets (of any topic: it has been running), and start_from would
// start it elsewhere than its first offset (latest, timestamp). The group
// read before the partition (or its whole topic) was created, or its first
// owner died before committing it, so every record of it is new to the
// group: it is read from its first offset, like the partitions created
// after this process started, whichever member the group assigns it to. The
// cost: a long-standing topic added to a running group's topics is read
// from its first offset too.
func (e *Engine) groupNewLocked(k ranges.Key, from origin, l group.Listing) bool {
	if from != fromConfig || (e.cfg.StartFrom != StartLatest && e.cfg.StartFrom != StartTimestamp) {
		return false
	}
	_, committed := l.Offsets[k]
	return !committed && len(l.Topics) > 0
}

// classifyLocked decides, once per incarnation, whether waiting partition k
// is new to the group (groupNewLocked), at the first listing of the group's
// offsets after it began to wait, and keeps the decision in its wait: a
// later listing (once its watermarks could be listed) sees the group's
// offsets this member committed meanwhile for its other partitions, which
// say nothing of k. It returns k's wait as decided.
func (e *Engine) classifyLocked(k ranges.Key, l group.Listing) waiting {
	r := e.recordLocked(k)
	if r.state != stateWaiting || r.wait.classified {
		return r.wait
	}
	r.wait.classified = true
	if e.groupNewLocked(k, r.wait.from, l) {
		r.wait.from = fromGroupNew
	}
	return r.wait
}

// topicGoneLocked forgets what the records of topic name say about the
// topic that is gone (deleted, or deleted and created again): the group's
// offsets (the coordinator deletes them too), the skip of start_from
// committed (checked again), the cuts, and that its partitions existed at
// the start (a topic of that name assigned later was created since: read
// from its first offset). Batches still in the pipeline stay counted.
func (e *Engine) topicGoneLocked(name string) {
	for k, r := range e.partRecords {
		if k.Topic != name {
			continue
		}
		r.existed, r.committed, r.cut = false, -1, cut{}
		r.snapped, r.snap, r.snapErr = false, marks{}, nil
		if r.state == stateUncommitted {
			e.setStateLocked(r, stateIdle) // checked again
		}
	}
}

// origin says where a partition starts when it has no committed offset to
// resume from.
type origin int

// waiting is a partition to read whose watermarks are not listed yet.
type waiting struct {
	inc        uint64 // the incarnation it will start as
	from       origin
	classified bool // from says whether it is new to the group, decided at the first listing of the group's offsets (classifyLocked)
}

// nextIncLocked returns a new incarnation number.
func (e *Engine) nextIncLocked() uint64 {
	e.incs++
	return e.incs
}

// waitLocked queues k to be listed and read as a new incarnation.
func (e *Engine) waitLocked(k ranges.Key, from origin) {
	r := e.recordLocked(k)
	e.setStateLocked(r, stateWaiting)
	r.wait = waiting{inc: e.nextIncLocked(), from: from}
}

// unwaitLocked ends k's wait for its watermarks (started, revoked, its
// topic gone).
func (e *Engine) unwaitLocked(k ranges.Key) {
	if r := e.partRecords[k]; r != nil && r.state == stateWaiting {
		e.setStateLocked(r, stateIdle)
	}
}

// waitingLocked returns the partitions waiting for their watermarks.
func (e *Engine) waitingLocked() map[ranges.Key]waiting {
	m := map[ranges.Key]waiting{}
	for k, r := range e.partRecords {
		if r.state == stateWaiting {
			m[k] = r.wait
		}
	}
	return m
}

// addPartitionLocked starts incarnation inc of partition k, with watermarks
// m: it is read from the group's committed offset if there is one (and the
// origin allows it), otherwise from where the origin says. A committed
// offset that can no longer be read is returned as data loss and k is not
// added; one at or past an end that is a target (a snapshot end, a time
// window's stop offset) means k is done, not truncated.
func (e *Engine) addPartitionLocked(k ranges.Key, m marks, from origin, inc uint64) error {
	start := m.start
	if from == fromConfig {
		switch e.cfg.StartFrom {
		case StartLatest:
			start = m.end
		case StartTimestamp:
			start = max(m.from, m.start)
		}
	}
	committed := int64(-1)
	if c := e.peekLocked(k).committed; c >= 0 && from != fromNewTopic {
		committed = c
		switch {
		case c < m.start && e.cfg.SkipDataLoss:
			e.loseLocked(k, c, m.start, fmt.Sprintf("were deleted before they were read (group %q had committed offset %d)", e.cfg.Group, c))
			c = m.start
		case c < m.start:
			return fmt.Errorf("%s: group %q committed offset %d but the log now starts at %d: offsets [%d, %d) were deleted before they were read", k, e.cfg.Group, c, m.start, c, m.start)
		case c > m.high && e.cfg.ReadCommitted:
			// Above the last stable offset: an open transaction, or a
			// commit by a read_uncommitted consumer. Valid: wait until
			// the last stable offset passes it.
			e.log.Infof("Partition %s: group %q committed offset %d is above the last stable offset %d; waiting for open transactions to end", k, e.cfg.Group, c, m.high)
			m.end = max(m.end, c)
		case c > m.high:
			return fmt.Errorf("%s: group %q committed offset %d is past the partition's end %d: the log was truncated or the topic recreated", k, e.cfg.Group, c, m.high)
		}
		// At or past a target end (c > m.end): nothing is left to read.
		start = c
	}
	end := max(start, m.end)
	planEnd := end
	if to, ok := e.cutEndLocked(k, start); ok {
		// The group cut the range from start there: plan the same range
		// first, then the rest (launch extends the end).
		planEnd, end = to, max(end, to)
	}
	if err := e.planner.Add(k, start, planEnd); err != nil {
		return fmt.Errorf("plan %s: %w", k, err)
	}
	if err := e.tracker.Start(k, start); err != nil {
		e.planner.Remove(k)
		return fmt.Errorf("track %s: %w", k, err)
	}
	ctx, cancel := context.WithCancel(e.baseCtx)
	e.readLocked(k, &partition{inc: inc, open: map[int64]*rangeState{}, first: start, began: time.Now(), emitFrom: start, extendTo: end, committed: committed, ctx: ctx, cancel: cancel})
	e.watchLocked(k)
	return nil
}
