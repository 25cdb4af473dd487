package engine

import (
	"slices"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Data loss under SkipDataLoss. offsets deleted before they were read, or a
// topic deleted or recreated with unread offsets. The engine acknowledges
// the lost offsets (so the commit moves past them), counts them, and logs
// each contiguous lost span of a partition once. Gaps that are not loss
// (transaction markers, aborted records under read_committed, compacted
// offsets) never come here. The read position passes them as the broker's
// record batches say.

// lossSpan is a span of one partition's offsets that was lost.
type lossSpan struct {
	from, to int64
	why      string
}

// lost records [from, to) of k as lost, to be logged and reported by the
// reporter (flushLosses). It returns how many offsets it records (the
// caller counts them in observation.lost).
func (t *partTable) lost(k ranges.Key, from, to int64, why string) int64 {
	if to <= from {
		return 0
	}
	t.lose(k, lossSpan{from: from, to: to, why: why})
	return to - from
}

// skipPlanned moves k's planning past offset. The offsets it skips were
// never read, so they are recorded as lost and acknowledged in the tracker.
func (t *partTable) skipPlanned(k ranges.Key, offset int64, why string) (lost int64, err error) {
	from, to, err := t.planner.SkipTo(k, offset)
	if err != nil || from == to {
		return 0, nil
	}
	r := ranges.Range{Topic: k.Topic, Partition: k.Partition, Start: from, End: to}
	if err := t.tracker.Add(r); err == nil {
		_, _, err = t.tracker.Ack(r)
	}
	if err != nil {
		return 0, err // the planner and the tracker disagree: a bug
	}
	lost = t.lost(k, from, to, why)
	// No range emits the skipped span. The turn to emit passes over it.
	if p := t.cur(k); p != nil {
		if p.emitFrom == from {
			p.passTurnLocked(to)
		} else {
			if p.skipped == nil {
				p.skipped = map[int64]int64{}
			}
			p.skipped[from] = to
		}
	}
	return lost, nil
}

// flushLosses logs the recorded losses, adjacent spans of a partition merged
// into one line, and reports them to the observer.
func (rp *reporter) flushLosses() {
	e := rp.e
	e.mu.Lock()
	losses := e.parts.takeLosses()
	e.mu.Unlock()
	for _, k := range sortedKeys(losses) {
		spans := losses[k]
		slices.SortFunc(spans, func(a, b lossSpan) int { return int(a.from - b.from) })
		merged := spans[:1]
		for _, s := range spans[1:] {
			last := &merged[len(merged)-1]
			if s.from <= last.to && s.why == last.why {
				last.to = max(last.to, s.to)
				continue
			}
			merged = append(merged, s)
		}
		for _, s := range merged {
			e.log.Warnf("Data loss on %s: offsets [%d, %d) %s; skipping them (on_data_loss: skip)", k, s.from, s.to, s.why)
			e.obs.LostOffsets(k, s.to-s.from)
		}
	}
}
