package ranges

import (
	"fmt"
	"sort"
)

// Tracker records acknowledgements that may arrive in any order and reports,
// per partition, the frontier: the first offset that is not acknowledged.
// Every offset below it is. The frontier never decreases and never passes an
// unacknowledged offset, so it is the offset that is safe to commit.
//
// Ranges are registered with Add as they are planned. Acknowledgements come at
// the granularity the caller delivers: any sub-span of a registered range may
// be acknowledged once, for example one span per message batch plus a last
// span for the offsets at the end of the range that held no record. Ack
// reports when a range's every offset is acknowledged, which is when the
// range is complete. The frontier moves over acknowledged spans of the range
// it is in, or with NewWholeRangeTracker only over complete ranges.
//
// A Tracker is not safe for concurrent use: the caller holds a lock.
type Tracker struct {
	parts map[Key]*trackedPartition
	// whole moves frontiers only over complete ranges (NewWholeRangeTracker).
	whole bool
}

// trackedPartition is the acknowledgement state of one partition.
//
// Ranges are added contiguously, so the ranges beyond the frontier form one
// gapless queue: queue[head:] holds them in offset order, the first holding
// the frontier and the last ending at added. A range is popped once all of its
// offsets are acknowledged and every range before it is popped.
type trackedPartition struct {
	frontier int64          // every offset below is acknowledged
	added    int64          // end of the last added range, or the start offset
	queue    []trackedRange // ranges holding offsets in [frontier, added), in offset order
	head     int            // queue[:head] is popped; its entries keep their acked buffers for reuse
}

// trackedRange is one added range that is not popped yet.
type trackedRange struct {
	start, end int64
	acked      []span // acknowledged sub-spans, sorted, disjoint and never adjacent
}

// span is the half-open offset span [start, end).
type span struct{ start, end int64 }

// complete reports whether every offset of the range is acknowledged.
func (tr *trackedRange) complete() bool {
	return len(tr.acked) == 1 && tr.acked[0] == span{tr.start, tr.end}
}

// prefix returns the first offset of the range that is not acknowledged.
func (tr *trackedRange) prefix() int64 {
	if len(tr.acked) > 0 && tr.acked[0].start == tr.start {
		return tr.acked[0].end
	}
	return tr.start
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{parts: make(map[Key]*trackedPartition)}
}

// NewWholeRangeTracker returns an empty Tracker whose frontier moves only
// over complete ranges: it is always the start offset or the end of an added
// range, never inside one, however a range's acknowledgements are cut. A
// restart from it re-reads a partly acknowledged range whole, from its start,
// which is what aligned ranges need (see AlignMode): a re-run plans the same
// ranges, so it rewrites each range's output whole.
func NewWholeRangeTracker() *Tracker {
	t := NewTracker()
	t.whole = true
	return t
}

// Start begins tracking k with its frontier at offset, the first offset that
// will be planned. A negative offset returns an error wrapping
// ErrInvalidRange; starting a key twice returns an error.
func (t *Tracker) Start(k Key, offset int64) error {
	if offset < 0 {
		return fmt.Errorf("start %s at %d: %w", k, offset, ErrInvalidRange)
	}
	if _, ok := t.parts[k]; ok {
		return fmt.Errorf("partition %s already started", k)
	}
	t.parts[k] = &trackedPartition{frontier: offset, added: offset}
	return nil
}

// Add registers a planned range. The ranges of one key are added contiguously
// and in order: r.Start must equal the End of the range added before (or the
// start offset for the first one). A non-contiguous, empty or inverted range
// returns an error wrapping ErrInvalidRange; an unknown key an error wrapping
// ErrUnknownPartition.
func (t *Tracker) Add(r Range) error {
	tp, ok := t.parts[r.Key()]
	if !ok {
		return fmt.Errorf("add %s: %w", r, ErrUnknownPartition)
	}
	if r.Start >= r.End {
		return fmt.Errorf("add %s: empty or inverted: %w", r, ErrInvalidRange)
	}
	if r.Start != tp.added {
		return fmt.Errorf("add %s: expected start %d: %w", r, tp.added, ErrInvalidRange)
	}
	if tp.head == len(tp.queue) {
		// Everything added so far is popped: reuse the whole buffer.
		tp.queue, tp.head = tp.queue[:0], 0
	} else if len(tp.queue) == cap(tp.queue) && tp.head > 0 {
		// Move the live entries down before append would grow the buffer.
		// Swapping (not copying) keeps each acked buffer owned by one entry.
		n := len(tp.queue) - tp.head
		for i := range n {
			tp.queue[i], tp.queue[tp.head+i] = tp.queue[tp.head+i], tp.queue[i]
		}
		tp.queue, tp.head = tp.queue[:n], 0
	}
	if n := len(tp.queue); n < cap(tp.queue) {
		tp.queue = tp.queue[:n+1] // reuse the entry's acked buffer
		e := &tp.queue[n]
		e.start, e.end, e.acked = r.Start, r.End, e.acked[:0]
	} else {
		tp.queue = append(tp.queue, trackedRange{start: r.Start, end: r.End})
	}
	tp.added = r.End
	return nil
}

// Ack marks the offsets of s acknowledged and returns the key's frontier after
// it and whether the range holding s is now complete (every offset of it
// acknowledged). s must be non-empty and lie within one added range, and none
// of its offsets may be acknowledged already; otherwise Ack changes nothing
// and returns an error wrapping ErrNotPlanned (and ErrUnknownPartition for an
// unknown key).
func (t *Tracker) Ack(s Range) (frontier int64, complete bool, err error) {
	tp, ok := t.parts[s.Key()]
	if !ok {
		return 0, false, fmt.Errorf("ack %s: %w: %w", s, ErrNotPlanned, ErrUnknownPartition)
	}
	if s.Start >= s.End {
		return 0, false, fmt.Errorf("ack %s: empty or inverted: %w", s, ErrNotPlanned)
	}
	q := tp.queue[tp.head:]
	// The last range starting at or before s.Start is the only one that can
	// hold s.
	i := sort.Search(len(q), func(i int) bool { return q[i].start > s.Start }) - 1
	if i < 0 || s.End > q[i].end {
		return 0, false, fmt.Errorf("ack %s: no added range holds it, frontier %d: %w", s, tp.frontier, ErrNotPlanned)
	}
	tr := &q[i]
	// Insert s into the sorted acked spans, rejecting any overlap and merging
	// with adjacent spans.
	j := sort.Search(len(tr.acked), func(j int) bool { return tr.acked[j].start >= s.End })
	if j > 0 && tr.acked[j-1].end > s.Start {
		return 0, false, fmt.Errorf("ack %s: already acknowledged: %w", s, ErrNotPlanned)
	}
	merged := span{s.Start, s.End}
	lo, hi := j, j // acked[lo:hi] is replaced by merged
	if j > 0 && tr.acked[j-1].end == s.Start {
		lo--
		merged.start = tr.acked[lo].start
	}
	if j < len(tr.acked) && tr.acked[j].start == s.End {
		hi++
		merged.end = tr.acked[j].end
	}
	switch hi - lo {
	case 0:
		tr.acked = append(tr.acked, span{})
		copy(tr.acked[lo+1:], tr.acked[lo:])
		tr.acked[lo] = merged
	case 1:
		tr.acked[lo] = merged
	default:
		tr.acked[lo] = merged
		tr.acked = append(tr.acked[:lo+1], tr.acked[hi:]...)
	}
	complete = tr.complete()
	if i == 0 {
		tp.advance(t.whole)
	}
	return tp.frontier, complete, nil
}

// advance pops the complete ranges at the head of the queue and moves the
// frontier over them and, unless whole, over the acknowledged prefix of the
// next range.
func (tp *trackedPartition) advance(whole bool) {
	for tp.head < len(tp.queue) && tp.queue[tp.head].complete() {
		tp.frontier = tp.queue[tp.head].end
		tp.head++
	}
	if tp.head < len(tp.queue) && !whole {
		tp.frontier = tp.queue[tp.head].prefix()
	}
}

// Frontier returns the offset that is safe to commit for k: every offset
// below it is acknowledged. ok is false for an unknown key.
func (t *Tracker) Frontier(k Key) (int64, bool) {
	tp, ok := t.parts[k]
	if !ok {
		return 0, false
	}
	return tp.frontier, true
}

// Remove forgets k, including its unacknowledged ranges, for example when its
// topic was deleted after it was read. Removing an unknown key does nothing.
func (t *Tracker) Remove(k Key) {
	delete(t.parts, k)
}
