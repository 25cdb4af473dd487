package engine

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// emit turns one slice of a range's records into a batch and sends it to
// Next, or queues it until the range's turn. With AlignRanges it only
// gathers them. The range is emitted whole once it is read (sendGathered).
func (rd *reader) emit(ctx context.Context, recs []*kgo.Record, high int64) error {
	e, st := rd.e, rd.st
	if len(recs) == 0 {
		return nil
	}
	if recs = st.part.unacked(recs); len(recs) == 0 {
		return nil // acknowledged before this incarnation's commit: the next span, or the range's tail, acknowledges them
	}
	if e.cfg.AlignRanges {
		st.gathered = append(st.gathered, recs...)
		st.gatheredHi = max(st.gatheredHi, high)
		return nil
	}
	end := recs[len(recs)-1].Offset + 1
	b := &Batch{
		Records: recs,
		High:    high,
		Range:   st.r,
		Span:    ranges.Range{Topic: st.r.Topic, Partition: st.r.Partition, Start: st.emitted, End: end},
		e:       e,
		st:      st,
	}
	st.emitted = end
	early := e.cfg.Hooks.Prepare != nil && e.cfg.Hooks.PrepareEarly
	var held int64 // cache.RecordBytes of recs, taken before an early Prepare may release them
	if early {
		b.bytes = valueBytes(recs)
		for _, r := range recs {
			held += cache.RecordBytes(r)
		}
		b.Prepared = e.cfg.Hooks.Prepare(b)
	}

	select {
	case <-st.turn:
	default:
		st.queued = append(st.queued, b)
		if !early {
			for _, r := range recs {
				held += cache.RecordBytes(r) // keys, headers and tombstones count too
			}
		}
		st.queuedBytes += held
		if st.queuedBytes < readAheadBytes {
			return nil
		}
		// Read far enough ahead. Wait for the turn before fetching more,
		// so memory follows the ranges being emitted, not the backlog.
		select {
		case <-st.turn:
		case <-ctx.Done():
			return ctx.Err()
		}
		return rd.flush(ctx)
	}
	if err := rd.flush(ctx); err != nil {
		return err
	}
	return rd.send(ctx, b)
}

// sendGathered sends, with AlignRanges, the records of st's range (read
// whole, its turn come) as one batch spanning the whole range, so its
// acknowledgement completes the range and a re-run emits the same batch. A
// range without records (transaction markers, aborted or compacted records)
// sends nothing. The reader acknowledges it as it does the offsets after a
// range's last record.
func (rd *reader) sendGathered(ctx context.Context) error {
	e, st := rd.e, rd.st
	if len(st.gathered) == 0 {
		return nil
	}
	b := &Batch{Records: st.gathered, High: st.gatheredHi, Range: st.r, Span: st.r, e: e, st: st}
	if e.cfg.Hooks.Prepare != nil && e.cfg.Hooks.PrepareEarly {
		b.bytes = valueBytes(b.Records)
		b.Prepared = e.cfg.Hooks.Prepare(b)
	}
	st.gathered, st.gatheredHi = nil, 0
	st.emitted = st.r.End
	return rd.send(ctx, b)
}

// flush sends the batches queued before the range's turn.
func (rd *reader) flush(ctx context.Context) error {
	st := rd.st
	for len(st.queued) > 0 {
		if err := rd.send(ctx, st.queued[0]); err != nil {
			return err
		}
		st.queued[0] = nil
		st.queued = st.queued[1:]
	}
	st.queued, st.queuedBytes = nil, 0
	return nil
}

// send hands one batch to Next. In ordered mode it then waits for the batch
// to be done. The pipeline may process batches in parallel, so the next
// batch of the partition goes only once this one is through.
func (rd *reader) send(ctx context.Context, b *Batch) error {
	e, st := rd.e, rd.st
	// Prepare runs only now, and in at most cap(e.out.building) readers at a
	// time. A batch waiting for its turn or for Next holds just its records.
	select {
	case e.out.building <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !e.cfg.Hooks.PrepareEarly { // early: counted and prepared as it was read
		if e.cfg.Hooks.Prepare != nil {
			b.Prepared = e.cfg.Hooks.Prepare(b)
		}
		b.bytes = valueBytes(b.Records)
	}
	// Once handed out, b is the taker's (Split changes it). What is
	// counted is taken now.
	end, records, n := b.Span.End, int64(len(b.Records)), b.bytes
	select {
	case e.out.batches <- b:
		st.sentTo(end)
		<-e.out.building
		e.stats.records.Add(records)
		e.stats.bytes.Add(n)
		e.obs.Delivered(st.r.Topic, records, n)
	case <-ctx.Done():
		<-e.out.building
		b.Prepared = nil
		return ctx.Err()
	}
	if st.ackSig == nil {
		return nil
	}
	select {
	case <-st.ackSig:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ackLocked records the acknowledgement of span s of st's range and, when it
// completes the range, frees or holds the range's slot. It reports whether
// the range is now complete. An acknowledgement of an incarnation that is
// over (the partition was revoked, lost, or its topic deleted or recreated
// since the range was planned) is dropped and counted, never applied.
func (e *Engine) ackLocked(st *rangeState, s ranges.Range) bool {
	if !e.parts.current(st) {
		e.stats.dropStale(e.log, st, "acknowledgement of "+s.String())
		return false
	}
	frontier, complete, err := e.parts.tracker.Ack(s)
	if err != nil {
		// The incarnation is current, so its tracker entry is too. The
		// engine and the tracker disagree, a bug never to paper over.
		e.failLocked(fmt.Errorf("acknowledge %s of %s (incarnation %d): %w", s, st.r, st.part.inc, err))
		return false
	}
	if frontier < s.End && e.group.committer != nil && !e.cfg.AlignRanges {
		st.part.ackedUnsent = true // acknowledged above the frontier: the next commit carries it (acked.go)
	}
	if !complete {
		return false
	}
	p := st.part
	// Read while its partition failed elsewhere. It takes its slot back, so
	// completing it frees (or holds) one as usual.
	e.sched.slots.reclaimOne(st)
	delete(p.open, st.r.Start)
	e.stats.ranges.Add(1)
	if e.group.committer == nil {
		e.sched.slots.give()
		return true
	}
	e.sched.slots.hold(p, st.r.End)
	if e.sched.slots.full(e.cfg.MaxInFlight) {
		e.group.commitSoon()
	}
	return true
}

// dropStale counts and logs (at debug) something that came back from an
// incarnation that is over. What is not applied.
func (o *observation) dropStale(log Logger, st *rangeState, what string) {
	o.stale.Add(1)
	log.Debugf("Dropped the %s: incarnation %d of %s is over (revoked, lost, or its topic deleted or recreated)", what, st.part.inc, st.r.Key())
}

// late logs (at debug) something the engine itself produced for an
// incarnation that is over (a reader's result, a loss it saw, a batch sent
// as the incarnation ended). Such a thing is dropped, not applied and not
// counted, since the pipeline sent nothing back.
func (l limitedLog) late(st *rangeState, what string) {
	l.Debugf("Dropped the %s: incarnation %d of %s is over", what, st.part.inc, st.r.Key())
}

func valueBytes(recs []*kgo.Record) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Value))
	}
	return n
}
