package ranges

import (
	"fmt"
	"sort"
)

// Tracker records acknowledgements that may arrive in any order and reports,
// per partition, the frontier: the end of the longest contiguous run of
// acknowledged ranges starting at the partition's start offset. The frontier
// never decreases and never passes an unacknowledged offset, so it is the
// offset that is safe to commit.
//
// A Tracker is not safe for concurrent use: the caller holds a lock.
type Tracker struct {
	parts map[Key]*trackedPartition
	// outstanding is the number of added-but-unacked ranges over all keys.
	outstanding int
}

// trackedPartition is the acknowledgement state of one partition.
//
// Ranges are added contiguously, so the ranges beyond the frontier form one
// gapless queue: queue[head:] holds them in offset order, the first starting
// at frontier and the last ending at added. Acked ranges stay in the queue
// until every range before them is acked too; then they are popped and the
// frontier moves to their end.
type trackedPartition struct {
	frontier    int64         // every offset below is acked
	added       int64         // end of the last added range, or the start offset
	queue       []queuedRange // ranges in [frontier, added), in offset order
	head        int           // queue[:head] is popped and unused
	outstanding int           // unacked ranges in queue[head:]
}

// queuedRange is one added range beyond the frontier.
type queuedRange struct {
	start, end int64
	acked      bool
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{parts: make(map[Key]*trackedPartition)}
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

// Add registers a planned, outstanding range. The ranges of one key are added
// contiguously and in order: r.Start must equal the End of the range added
// before (or the start offset for the first one). A non-contiguous, empty or
// inverted range returns an error wrapping ErrInvalidRange; an unknown key an
// error wrapping ErrUnknownPartition.
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
		// Everything added so far is acked: reuse the whole buffer.
		tp.queue, tp.head = tp.queue[:0], 0
	} else if len(tp.queue) == cap(tp.queue) && tp.head > 0 {
		// Reclaim the popped prefix before append would grow the buffer.
		n := copy(tp.queue, tp.queue[tp.head:])
		tp.queue, tp.head = tp.queue[:n], 0
	}
	tp.queue = append(tp.queue, queuedRange{start: r.Start, end: r.End})
	tp.added = r.End
	tp.outstanding++
	t.outstanding++
	return nil
}

// Ack marks an outstanding range acknowledged and returns the key's frontier
// after it and whether the frontier moved. When r starts at the frontier, the
// frontier advances over r and every acked range contiguous with it. Acking a
// range that is not exactly one outstanding added range, or acking it twice,
// returns an error wrapping ErrNotPlanned (and ErrUnknownPartition for an
// unknown key).
func (t *Tracker) Ack(r Range) (frontier int64, advanced bool, err error) {
	tp, ok := t.parts[r.Key()]
	if !ok {
		return 0, false, fmt.Errorf("ack %s: %w: %w", r, ErrNotPlanned, ErrUnknownPartition)
	}
	q := tp.queue[tp.head:]
	i := sort.Search(len(q), func(i int) bool { return q[i].start >= r.Start })
	if i == len(q) || q[i].start != r.Start || q[i].end != r.End {
		return 0, false, fmt.Errorf("ack %s: no outstanding range matches, frontier %d: %w", r, tp.frontier, ErrNotPlanned)
	}
	if q[i].acked {
		return 0, false, fmt.Errorf("ack %s: already acked: %w", r, ErrNotPlanned)
	}
	q[i].acked = true
	tp.outstanding--
	t.outstanding--
	if i != 0 {
		return tp.frontier, false, nil
	}
	for tp.head < len(tp.queue) && tp.queue[tp.head].acked {
		tp.frontier = tp.queue[tp.head].end
		tp.head++
	}
	return tp.frontier, true, nil
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

// Outstanding returns the number of added but unacknowledged ranges of k, and
// 0 for an unknown key.
func (t *Tracker) Outstanding(k Key) int {
	tp, ok := t.parts[k]
	if !ok {
		return 0
	}
	return tp.outstanding
}

// OutstandingTotal returns the number of added but unacknowledged ranges over
// all keys.
func (t *Tracker) OutstandingTotal() int {
	return t.outstanding
}

// Frontiers returns a copy of every key's frontier.
func (t *Tracker) Frontiers() map[Key]int64 {
	out := make(map[Key]int64, len(t.parts))
	for k, tp := range t.parts {
		out[k] = tp.frontier
	}
	return out
}

// Remove forgets k, including its outstanding ranges. Removing an unknown key
// does nothing.
func (t *Tracker) Remove(k Key) {
	tp, ok := t.parts[k]
	if !ok {
		return
	}
	t.outstanding -= tp.outstanding
	delete(t.parts, k)
}
