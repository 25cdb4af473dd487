package engine

import (
	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The partition table: what the engine knows of each partition across its
// incarnations, one record per partition (Engine.partRecords), changed only
// by the transitions below and by the few named fields' owners. It replaces
// the maps that each had their own rule for when an entry appears and
// disappears (which partitions existed at the start, the group's committed
// offsets, the partitions start_from committed leaves unread, the batches
// in the pipeline per partition, the group's cut ranges). Still apart, as
// maps of their own: the current incarnation being read (Engine.parts), the
// partitions waiting for their watermarks (Engine.unlisted), a bounded
// group run's snapshot (snapshot, unsnapped) and the losses to log.

// record is one partition's row of the table. Guarded by Engine.mu.
type record struct {
	existed     bool  // listed when the engine started (Start): where the group has no offset it starts where start_from says (unless new to the group: groupNewLocked)
	committed   int64 // the group's committed offset as last listed; -1 if none (or not listed)
	uncommitted bool  // start_from committed and the group had no offset: not read (uncommitted.go)
	pending     int   // batches handed out by Next and not done, of every incarnation (ordered mode waits for an earlier one's)
	cut         cut   // with sharesCuts: the range cut short at an end inside its block (cuts.go); zero if none
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
	}
}
