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
	align      AlignMode // 0: unaligned
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

// AlignMode says how an aligned Planner (NewAlignedPlanner) treats the block
// its partition's end lies in.
//
// An aligned Planner cuts every partition into blocks of maxRecords offsets,
// [k·maxRecords, (k+1)·maxRecords), and no range crosses a block boundary: a
// range is the part of one block from the partition's next offset on. So the
// ranges of a partition depend only on its offsets, not on when it was
// planned, and a run resumed from the end of a range plans the same ranges
// again. Only where the next offset lies inside a block (a partition's first
// offset, an offset SkipTo moved to, or the end of a range cut short by
// CutAtEnd and later extended) does a range start inside a block; it still
// ends at the block's end.
type AlignMode uint8

// How an aligned Planner plans the block its partition's end lies in.
const (
	// CutAtEnd plans the part of the block below the end, so the last range
	// of a partition may be short. For ends that are targets (a snapshot end
	// or stop offset that does not move): the same end gives the same ranges.
	CutAtEnd AlignMode = iota + 1
	// WholeBlocks plans a block only once the end has reached the block's
	// end, so every range ends on a block boundary. For ends that grow (high
	// watermarks of a continuous read): the offsets of an incomplete block
	// wait until it is complete, whatever the end was when it was listed.
	WholeBlocks
)

// String returns the mode's name.
func (m AlignMode) String() string {
	switch m {
	case CutAtEnd:
		return "CutAtEnd"
	case WholeBlocks:
		return "WholeBlocks"
	}
	return fmt.Sprintf("AlignMode(%d)", uint8(m))
}

// NewAlignedPlanner returns a Planner whose ranges are aligned to blocks of
// maxRecords offsets (see AlignMode). It panics if maxRecords <= 0 or mode is
// not CutAtEnd or WholeBlocks: the caller validates its configuration.
func NewAlignedPlanner(maxRecords int64, mode AlignMode) *Planner {
	if mode != CutAtEnd && mode != WholeBlocks {
		panic(fmt.Sprintf("ranges: NewAlignedPlanner: invalid mode %v", mode))
	}
	p := NewPlanner(maxRecords)
	p.align = mode
	return p
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
// nothing ready (see Ready) and those for which skip returns true (skip may
// be nil). The range is [next, min(next+maxRecords, end)), or for an aligned
// Planner [next, min(end of next's block, end)), and the partition's next
// offset advances to its End. ok is false when no partition that passes skip
// has a range ready.
func (p *Planner) Next(skip func(Key) bool) (r Range, ok bool) {
	n := len(p.parts)
	for i := 1; i <= n; i++ {
		idx := (p.last + i) % n
		pp := p.parts[idx]
		if pp.next >= pp.end || p.align == WholeBlocks && !p.ready(pp) {
			continue
		}
		if skip != nil && skip(pp.key) {
			continue
		}
		end := pp.end
		if room := p.room(pp.next); end-pp.next > room { // no overflow: 0 <= next < end
			end = pp.next + room
		}
		r = Range{Topic: pp.key.Topic, Partition: pp.key.Partition, Start: pp.next, End: end}
		pp.next = end
		p.last = idx
		return r, true
	}
	return Range{}, false
}

// room returns the most offsets a range starting at next may hold: up to the
// end of next's block when aligned.
func (p *Planner) room(next int64) int64 {
	if p.align == 0 {
		return p.maxRecords
	}
	return p.maxRecords - next%p.maxRecords
}

// ready reports whether pp has a range to plan: offsets pending and, with
// WholeBlocks, the end at or past the end of next's block.
func (p *Planner) ready(pp *plannedPartition) bool {
	if pp.next >= pp.end {
		return false
	}
	return p.align != WholeBlocks || pp.end-pp.next >= p.room(pp.next)
}

// Ready reports whether Next could plan a range of k now, skip aside: it has
// offsets pending and, with WholeBlocks, its next block is complete below its
// end. It is false for an unknown key.
func (p *Planner) Ready(k Key) bool {
	pp, ok := p.byKey[k]
	return ok && p.ready(pp)
}

// Pending returns how many offsets are left to plan for k (end-next), and 0
// for an unknown key. With WholeBlocks they may not be ready yet.
func (p *Planner) Pending(k Key) int64 {
	pp, ok := p.byKey[k]
	if !ok {
		return 0
	}
	return pp.end - pp.next
}

// Done reports whether every partition is planned up to its end. A Planner
// without partitions is done; with WholeBlocks, one whose last block is
// incomplete is not.
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
