package ranges

import (
	"fmt"
	"slices"
)

// Planner yields ranges of at most maxRecords offsets, round-robin across
// partitions. For every partition it knows the next offset not yet planned and
// the end it may plan up to; each offset in between is planned exactly once.
//
// A Planner is not safe for concurrent use: the caller holds a lock.
type Planner struct {
	maxRecords int64
	// parts holds the partitions sorted by key, which is the planning order.
	parts []*plannedPartition
	// byKey indexes parts.
	byKey map[Key]*plannedPartition
	// last is the index in parts of the partition served last, or -1.
	last int
}

// plannedPartition is the planning state of one partition.
type plannedPartition struct {
	key  Key
	next int64 // first offset not planned yet
	end  int64 // nothing at or past end is planned
}

// NewPlanner returns a Planner that cuts ranges of at most maxRecords offsets.
// It panics if maxRecords <= 0: the caller validates its configuration.
func NewPlanner(maxRecords int64) *Planner {
	if maxRecords <= 0 {
		panic(fmt.Sprintf("ranges: NewPlanner: maxRecords must be > 0, got %d", maxRecords))
	}
	return &Planner{
		maxRecords: maxRecords,
		byKey:      make(map[Key]*plannedPartition),
		last:       -1,
	}
}

// Add starts planning partition k: its next range starts at start and nothing
// is planned at or past end. A negative start or start > end returns an error
// wrapping ErrInvalidRange; adding a key twice returns an error.
func (p *Planner) Add(k Key, start, end int64) error {
	if start < 0 || start > end {
		return fmt.Errorf("add %s [%d,%d): %w", k, start, end, ErrInvalidRange)
	}
	if _, ok := p.byKey[k]; ok {
		return fmt.Errorf("partition %s already added", k)
	}
	pp := &plannedPartition{key: k, next: start, end: end}
	i, _ := slices.BinarySearchFunc(p.parts, k, func(e *plannedPartition, k Key) int {
		return e.key.Compare(k)
	})
	p.parts = slices.Insert(p.parts, i, pp)
	if i <= p.last {
		p.last++ // keep the cursor on the partition it pointed at
	}
	p.byKey[k] = pp
	return nil
}

// SetEnd sets the end of partition k, typically to a new high watermark or
// last stable offset. An end below the partition's next unplanned offset
// returns an error wrapping ErrEndMovedBack; an end below the previous end but
// not below the next offset is accepted and shrinks the unplanned tail. An
// unknown key returns an error wrapping ErrUnknownPartition.
func (p *Planner) SetEnd(k Key, end int64) error {
	pp, ok := p.byKey[k]
	if !ok {
		return fmt.Errorf("set end of %s: %w", k, ErrUnknownPartition)
	}
	if end < pp.next {
		return fmt.Errorf("set end of %s to %d, below next unplanned offset %d: %w", k, end, pp.next, ErrEndMovedBack)
	}
	pp.end = end
	return nil
}

// SkipTo moves partition k's next unplanned offset forward to offset (but
// not past its end), for offsets that can no longer be read, and returns the
// span it skipped, [from, to): empty (from == to) when nothing was. The
// caller accounts for the skipped offsets (a Tracker needs them added and
// acknowledged to move its frontier past them). An unknown key returns an
// error wrapping ErrUnknownPartition.
func (p *Planner) SkipTo(k Key, offset int64) (from, to int64, err error) {
	pp, ok := p.byKey[k]
	if !ok {
		return 0, 0, fmt.Errorf("skip %s to %d: %w", k, offset, ErrUnknownPartition)
	}
	from, to = pp.next, min(max(offset, pp.next), pp.end)
	pp.next = to
	return from, to, nil
}

// Next returns the next range to read. It visits the partitions round-robin,
// starting after the partition it served last, and skips partitions with
// nothing pending and those for which skip returns true (skip may be nil). The
// range is [next, min(next+maxRecords, end)) and the partition's next offset
// advances to its End. ok is false when no partition that passes skip has
// anything to plan.
func (p *Planner) Next(skip func(Key) bool) (r Range, ok bool) {
	n := len(p.parts)
	for i := 1; i <= n; i++ {
		idx := (p.last + i) % n
		pp := p.parts[idx]
		if pp.next >= pp.end {
			continue
		}
		if skip != nil && skip(pp.key) {
			continue
		}
		end := pp.end
		if end-pp.next > p.maxRecords { // no overflow: 0 <= next < end
			end = pp.next + p.maxRecords
		}
		r = Range{Topic: pp.key.Topic, Partition: pp.key.Partition, Start: pp.next, End: end}
		pp.next = end
		p.last = idx
		return r, true
	}
	return Range{}, false
}

// Pending returns how many offsets are left to plan for k (end-next), and 0
// for an unknown key.
func (p *Planner) Pending(k Key) int64 {
	pp, ok := p.byKey[k]
	if !ok {
		return 0
	}
	return pp.end - pp.next
}

// Done reports whether every partition is planned up to its end. A Planner
// without partitions is done.
func (p *Planner) Done() bool {
	for _, pp := range p.parts {
		if pp.next < pp.end {
			return false
		}
	}
	return true
}

// Position returns the next unplanned offset and the end of partition k; ok
// is false for an unknown key.
func (p *Planner) Position(k Key) (next, end int64, ok bool) {
	pp, ok := p.byKey[k]
	if !ok {
		return 0, 0, false
	}
	return pp.next, pp.end, true
}

// Keys returns the partitions in planning order: sorted by topic, then by
// partition. The slice is a copy the caller owns.
func (p *Planner) Keys() []Key {
	keys := make([]Key, len(p.parts))
	for i, pp := range p.parts {
		keys[i] = pp.key
	}
	return keys
}

// Remove stops planning partition k, for example when it is revoked. Removing
// an unknown key does nothing. Round-robin continues with the partition that
// followed k.
func (p *Planner) Remove(k Key) {
	if _, ok := p.byKey[k]; !ok {
		return
	}
	delete(p.byKey, k)
	i, _ := slices.BinarySearchFunc(p.parts, k, func(e *plannedPartition, k Key) int {
		return e.key.Compare(k)
	})
	p.parts = slices.Delete(p.parts, i, i+1)
	if i <= p.last {
		// Removing the last-served partition moves the cursor to the one
		// before it, so the partition that followed it is served next.
		p.last--
	}
}
