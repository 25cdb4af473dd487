package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The partition table: what the engine knows of each partition across its
// incarnations, one record per partition (Engine.partRecords), changed only
// by the transitions below and by the few named fields' owners. It replaces
// the maps that each had their own rule for when an entry appears and
// disappears (which partitions existed at the start, the group's committed
// offsets, the partitions start_from committed leaves unread, the batches
// in the pipeline per partition, the group's cut ranges, the losses to
// log, a bounded group run's snapshot, the partitions waiting for their
// watermarks). Still apart, as a map of its own: the current incarnation
// being read (Engine.parts).

// record is one partition's row of the table. Guarded by Engine.mu.
type record struct {
	existed     bool       // listed when the engine started (Start): where the group has no offset it starts where start_from says (unless new to the group: groupNewLocked)
	committed   int64      // the group's committed offset as last listed; -1 if none (or not listed)
	uncommitted bool       // start_from committed and the group had no offset: not read (uncommitted.go)
	pending     int        // batches handed out by Next and not done, of every incarnation (ordered mode waits for an earlier one's)
	cut         cut        // with sharesCuts: the range cut short at an end inside its block (cuts.go); zero if none
	losses      []lossSpan // lost spans not logged yet (SkipDataLoss; loss.go)
	snapped     bool       // with Membership and StopAtEnd: snap is the partition's end when the engine started (or first listed)
	snap        marks      // the snapshot, if snapped
	snapErr     error      // with Membership and StopAtEnd: why the partition's end could not be listed yet; nil once snapped
	waits       bool       // to be read as a new incarnation (wait) once its watermarks are listed (waitLocked, unwaitLocked; counted in Engine.nWaiting)
	wait        waiting    // with waits: the incarnation it will start as, and its origin
}

// state is a partition's lifecycle as the engine sees it now (stateLocked).
type state int

const (
	// stateIdle: not read by this engine: never listed, not assigned,
	// revoked, lost, or its topic gone (and not owned again).
	stateIdle state = iota
	// stateWaiting: to be read as a new incarnation once its watermarks
	// are listed (record.waits: waitLocked, startWaitingLocked).
	stateWaiting
	// stateReading: its current incarnation is read (Engine.parts:
	// addPartitionLocked); a bounded run keeps it there once read to its
	// end.
	stateReading
	// stateUncommitted: start_from committed and the group had no offset
	// for it: not read (record.uncommitted, uncommitted.go).
	stateUncommitted
)

// held reports whether the engine reads s's partition or waits to.
func (s state) held() bool { return s == stateReading || s == stateWaiting }

// stateLocked returns k's lifecycle state: the one place that says which
// of the engine's views holds the partition.
func (e *Engine) stateLocked(k ranges.Key) state {
	if e.parts[k] != nil {
		return stateReading
	}
	if e.peekLocked(k).waits {
		return stateWaiting
	}
	if e.peekLocked(k).uncommitted {
		return stateUncommitted
	}
	return stateIdle
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
// has for other partitions of its topic, and start_from would start it
// elsewhere than its first offset (latest, timestamp). The group read the
// topic before the partition was created (or its first owner died before
// committing it), so every record of it is new to the group: it is read
// from its first offset, like the partitions created after this process
// started, whichever member the group assigns it to.
func (e *Engine) groupNewLocked(k ranges.Key, from origin, l group.Listing) bool {
	if from != fromConfig || (e.cfg.StartFrom != StartLatest && e.cfg.StartFrom != StartTimestamp) {
		return false
	}
	_, committed := l.Offsets[k]
	return !committed && l.Topics[k.Topic]
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
		r.existed, r.committed, r.uncommitted, r.cut = false, -1, false, cut{}
		r.snapped, r.snap, r.snapErr = false, marks{}, nil
	}
}

// origin says where a partition starts when it has no committed offset to
// resume from.
type origin int

// waiting is a partition to read whose watermarks are not listed yet.
type waiting struct {
	inc  uint64 // the incarnation it will start as
	from origin
}

// nextIncLocked returns a new incarnation number.
func (e *Engine) nextIncLocked() uint64 {
	e.incs++
	return e.incs
}

// waitLocked queues k to be listed and read as a new incarnation.
func (e *Engine) waitLocked(k ranges.Key, from origin) {
	r := e.recordLocked(k)
	if !r.waits {
		e.nWaiting++
	}
	r.waits, r.wait = true, waiting{inc: e.nextIncLocked(), from: from}
}

// unwaitLocked ends k's wait for its watermarks (started, revoked, its
// topic gone).
func (e *Engine) unwaitLocked(k ranges.Key) {
	if r := e.partRecords[k]; r != nil && r.waits {
		r.waits, r.wait = false, waiting{}
		e.nWaiting--
	}
}

// waitingLocked returns the partitions waiting for their watermarks.
func (e *Engine) waitingLocked() map[ranges.Key]waiting {
	m := map[ranges.Key]waiting{}
	for k, r := range e.partRecords {
		if r.waits {
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
	e.parts[k] = &partition{inc: inc, open: map[int64]*rangeState{}, first: start, began: time.Now(), emitFrom: start, extendTo: end, committed: committed, ctx: ctx, cancel: cancel}
	e.watchLocked(k)
	return nil
}
