package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// delivery is the way batches go to Next and back. It holds the readers'
// channel, the replays of rejected batches, the end markers, the drains' wake and
// the pause's hold. batches, wake and building are channels (their own
// rules), set by New and Start. The rest is guarded by Engine.mu.
type delivery struct {
	batches  chan *Batch   // readers -> Next; closed once no reader is left
	wake     chan struct{} // buffered 1: Next should look again (a batch was queued for replay or finished, an end marker queued, partitions released, the engine stops)
	building chan struct{} // semaphore: readers running Prepare or holding a prepared batch

	replay  []*Batch      // nacked batches waiting for another delivery, by due time
	ends    []*Batch      // with RangeEnds: end markers for Next, in the order their readers finished
	drained chan struct{} // closed and replaced when a partition being drained has nothing handed out left (drain.go)
	closed  bool          // batches is closed: no reader is left, nothing new comes
	pause   pauseGuard    // with Membership: new batches held after the process did not run for a while (pause.go)
	settle  settleHold    // with Membership and Group.Settle: the first batches held until the group's assignment settles (drain.go)
}

// signal wakes Next (and a pause's hold). A batch was queued for replay or
// finished, an end marker is queued, partitions were released, the engine
// stops.
func (d *delivery) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// readersGone records that the batches channel is closed. No reader is left,
// nothing new comes.
func (d *delivery) readersGone() { d.closed = true }

// queueEnd queues the end marker b for Next (RangeEnds), after every batch
// its reader handed out.
func (d *delivery) queueEnd(b *Batch) { d.ends = append(d.ends, b) }

// Batch is a slice of one range's records on its way through the pipeline.
// Exactly one of Ack, or Nack until it is acknowledged, finishes it. Both are
// safe to call more than once and from any goroutine. A batch belongs to one
// incarnation of its partition (Incarnation). Once that is over (revoked,
// lost, its topic deleted or recreated), its Ack and Nack are dropped and
// counted, and a nacked batch is not delivered again.
type Batch struct {
	Records  []*kgo.Record
	High     int64        // the partition's high watermark at the fetch that returned Records (also under read_committed): a record's lag is High - Offset - 1
	Range    ranges.Range // the range the batch belongs to
	Span     ranges.Range // the offsets the batch covers: [first record, last record + 1), or with AlignRanges the whole range
	Attempts int          // deliveries so far, counting this one
	Prepared any          // Config.Hooks.Prepare's result, for the first delivery only
	// RangeEnd marks an end marker (Config.RangeEnds), with no records and
	// no span.
	// Range and Incarnation say which range's reader is done. Its Ack and
	// Nack do nothing.
	RangeEnd bool

	e     *Engine
	st    *rangeState // its range, and through it the incarnation
	bytes int64       // its records' value bytes, taken before Prepare (which may release them)
	done  atomic.Bool
	due   time.Time // when a nacked batch is delivered again
}

// Incarnation returns the incarnation of its partition the batch belongs to.
// It is a number unique within the engine, new each time the partition is
// assigned, lost and assigned again, or its topic recreated.
func (b *Batch) Incarnation() uint64 { return b.st.part.inc }

// Scratch returns a slot the caller may keep state of the batch's range
// in across its batches. There is one slot per range (and per reader, since
// a range read again is a range of its own), shared by its batches, the parts Split
// makes of them and its end marker. Only Hooks.Prepare, which the range's
// reader runs on its batches one after the other, and then the taker of
// the range's end marker (Config.RangeEnds), which the reader queues once
// it is done, may use it. The engine never looks at it. It goes when the
// range's last batch does.
func (b *Batch) Scratch() *any { return &b.st.scratch }

// Split cuts the batch before its record i (0 < i < len(Records), else it
// panics) and returns the second part as a batch of its own. b
// keeps Records[:i] and its span up to the offset after Records[i-1], the
// new batch the rest of the records and of the span. Each part is then
// finished on its own (Ack, Nack), and a rejected part is replayed alone.
// The engine waits for both parts, so a commit never passes a part that is not
// acknowledged. Prepared stays with b. Split a batch only before finishing
// it, from the goroutine that took it from Next. Never an end marker.
func (b *Batch) Split(i int) *Batch {
	if b.RangeEnd || i <= 0 || i >= len(b.Records) {
		panic(fmt.Sprintf("split of a batch of %d records of %s before record %d", len(b.Records), b.Range, i))
	}
	cut := b.Records[i-1].Offset + 1
	n := len(b.Records)
	tail := &Batch{
		Records:  b.Records[i:n:n],
		Range:    b.Range,
		Span:     ranges.Range{Topic: b.Span.Topic, Partition: b.Span.Partition, Start: cut, End: b.Span.End},
		Attempts: b.Attempts,
		High:     b.High,
		e:        b.e,
		st:       b.st,
	}
	b.Records = b.Records[:i:i]
	b.Span.End = cut
	b.e.mu.Lock()
	b.e.parts.handedOut(tail.Range.Key(), tail.st.part) // Next ends only once this part is done too
	b.e.mu.Unlock()
	return tail
}

// Stale reports whether the batch's incarnation is over (its partition
// revoked, lost, or its topic deleted or recreated) or its partition is
// being drained. Its acknowledgement is dropped and a rejection of it is
// not delivered again. The partition's next owner, or the next run, reads
// it.
func (b *Batch) Stale() bool {
	b.e.mu.Lock()
	defer b.e.mu.Unlock()
	return !b.e.parts.current(b.st) || b.st.part.draining
}

// Done reports whether the batch is finished. It is finished when
// acknowledged, rejected without a replay to come, or dropped (its incarnation ended, or it was rejected
// while the engine stopped). A rejected batch waiting for its replay is not
// done.
func (b *Batch) Done() bool { return b.done.Load() }

// Next returns the next batch. That is a nacked batch whose replay is due,
// or a new batch of some range. It returns ErrEnd once nothing more will be read and
// every batch handed out is done, ErrNotStarted before Start, and ctx's
// error when ctx ends first. While the engine says the cluster is
// unreachable (Reachable) it returns that error, an ErrUnreachable, and
// hands out nothing, not even batches read before the outage, so the input
// is reported not ready exactly while the log says so. Next may be called
// again.
func (e *Engine) Next(ctx context.Context) (*Batch, error) {
	for {
		unreachable := e.Reachable() // before mu: it may log
		e.mu.Lock()
		if !e.started {
			e.mu.Unlock()
			return nil, ErrNotStarted
		}
		if unreachable != nil && !e.out.ended(e.parts.nPending) {
			// No broker answers. The batches read already wait for one
			// (the plugin reports the input not connected meanwhile).
			e.mu.Unlock()
			return nil, unreachable
		}
		if len(e.out.ends) > 0 {
			b := e.out.ends[0]
			e.out.ends[0] = nil
			e.out.ends = e.out.ends[1:]
			e.mu.Unlock()
			return b, nil
		}
		if e.out.pause.holding(time.Now(), e.group.member) {
			e.mu.Unlock()
			if err := e.confirmMember(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if len(e.out.pause.held) > 0 {
			b := e.out.pause.held[0]
			e.out.pause.held[0] = nil
			e.out.pause.held = e.out.pause.held[1:]
			e.mu.Unlock()
			if b = e.took(b, true); b != nil {
				return b, nil
			}
			continue
		}
		var wait time.Duration
		if e.dropStaleReplaysLocked() {
			e.sched.signal() // in ordered mode a new incarnation may have waited for them
		}
		if len(e.out.replay) > 0 {
			b := e.out.replay[0]
			if wait = time.Until(b.due); wait <= 0 {
				e.out.replay = e.out.replay[1:]
				e.mu.Unlock()
				b.Attempts++
				e.obs.RangeReplayed(b.Range)
				return b, nil
			}
		}
		if e.out.ended(e.parts.nPending) {
			e.mu.Unlock()
			return nil, ErrEnd
		}
		if e.out.settling(&e.cfg) {
			// Members started together. Nothing is handed out until the
			// group's first assignment settled (drain.go).
			e.mu.Unlock()
			if err := e.settle(ctx); err != nil {
				return nil, err
			}
			continue
		}
		ch := e.out.batches
		if e.out.closed {
			ch = nil // wait for acknowledgements and replays only
		}
		e.mu.Unlock()

		var due <-chan time.Time
		var timer *time.Timer
		if wait > 0 {
			timer = time.NewTimer(wait)
			due = timer.C
		}
		b, err := e.await(ctx, ch, due)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, err
		}
		if b != nil {
			return b, nil
		}
	}
}

// ended reports whether Next has ended. No reader is left (the
// batches channel is closed) and every batch handed out is done. Next then
// returns ErrEnd, reachable cluster or not.
func (d *delivery) ended(pending int) bool {
	return d.closed && pending == 0
}

// Ended reports whether Next has ended (it returns ErrEnd). The plugin's
// Connect lets a run that has ended go to its end while no broker answers.
func (e *Engine) Ended() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.ended(e.parts.nPending)
}

// await waits for a new batch on ch, a replay signal, the next replay's due
// time or the end of ctx, and returns the batch received to hand out
// (took), if any.
func (e *Engine) await(ctx context.Context, ch <-chan *Batch, due <-chan time.Time) (*Batch, error) {
	select {
	case b, ok := <-ch:
		return e.took(b, ok), nil
	case <-e.out.wake:
	case <-due:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

// took takes batch b received from the readers (ok false means the channel
// was closed and no reader is left) and returns it counted as handed out, or nil
// if there is none to hand out.
func (e *Engine) took(b *Batch, ok bool) *Batch {
	if !ok {
		e.mu.Lock()
		e.out.closed = true
		e.mu.Unlock()
		return nil
	}
	e.mu.Lock()
	if e.out.pause.holding(time.Now(), e.group.member) {
		// The process did not run for a while. Held until the group
		// confirms this member (pause.go).
		e.out.pause.held = append(e.out.pause.held, b)
		e.mu.Unlock()
		return nil
	}
	if !e.parts.current(b.st) || b.st.part.draining || e.fatal != nil {
		// Sent as its incarnation ended or its partition was revoked (the
		// reader's send raced its cancellation). Never handed out, the next
		// owner reads it. Dropped, not counted, like a reader's result. Nor
		// once the engine stopped, since a span it reported unread (a
		// deleted topic's) may hold it.
		e.log.late(b.st, "batch "+b.Span.String())
		e.mu.Unlock()
		b.done.Store(true)
		b.Prepared = nil
		return nil
	}
	e.parts.handedOut(b.Range.Key(), b.st.part)
	b.st.sentTo(b.Span.End) // seen, before any span is taken (the reader counts it too, later)
	e.mu.Unlock()
	b.Attempts = 1
	now := time.Now().UnixNano()
	e.stats.firstOut.CompareAndSwap(0, now)
	e.stats.lastOut.Store(now)
	return b
}

// Ack finishes the batch. Its offsets count as processed. Once every offset
// before them is too, they are committed.
func (b *Batch) Ack() { b.ack(true) }

// ack is Ack. It reports whether the acknowledgement was dropped as stale,
// and counts it as such only if count is set.
func (b *Batch) ack(count bool) bool {
	if b.RangeEnd || b.done.Swap(true) {
		return false
	}
	return b.e.batchDone(b, settledAcked, count)
}

// settled is how a finished batch ends (batchDone).
type settled int

const (
	settledAcked    settled = iota // acknowledged: its offsets are processed, its records acknowledged
	settledDropped                 // rejected and dropped (ReplayNacks off): its offsets are processed, its records not acknowledged
	settledRejected                // rejected while stopping or revoked: not processed, the next run or owner reads it
)

// AckAll acknowledges bs as one acknowledgement of the pipeline (the
// engine batches that one batch of the caller's carries, as Split parts or
// several batches cut into one). Each is acknowledged as by Ack. But if they
// belong to an incarnation that is over, the dropped acknowledgement counts
// once as stale, not once per batch.
func AckAll(bs []*Batch) {
	counted := false
	for _, b := range bs {
		counted = b.ack(!counted) || counted
	}
}

// NackAll rejects bs as one rejection of the pipeline. Each is rejected as
// by Nack. But if they belong to an incarnation that is over, the dropped
// rejection counts once as stale. Without ReplayNacks the warning says the
// records of them all, the batch the pipeline rejected, not its parts.
func NackAll(bs []*Batch, err error) {
	counted := false
	var dropped []*Batch
	for _, b := range bs {
		stale, wasDropped := b.nack(err, !counted)
		counted = stale || counted
		if wasDropped {
			dropped = append(dropped, b)
		}
	}
	if len(dropped) > 0 {
		dropped[0].e.log.warnDropped(dropped, err, dropped[0].e.stats.dropped.Load())
	}
}

// warnDropped says, at most once per lineEvery, that the pipeline rejected
// one batch of its own, made of bs, which were dropped (ReplayNacks off).
// It says how many records it held, of which ranges, and how many records
// were dropped so far.
func (l limitedLog) warnDropped(bs []*Batch, err error, droppedSoFar int64) {
	records := 0
	var of []string
	for _, b := range bs {
		records += len(b.Records)
		if r := b.Range.String(); !slices.Contains(of, r) {
			of = append(of, r)
		}
	}
	l.warn("dropped", "A batch of %d records (of %s) was rejected (%v) and dropped (auto_replay_nacks: false); %d rejected records dropped so far",
		records, strings.Join(of, ", "), err, droppedSoFar)
}

// Nack reports that the pipeline rejected the batch. With ReplayNacks it is
// delivered again, whole, after a delay that grows with each attempt. Without
// it, it counts as acknowledged, since Benthos' contract says the messages
// are dropped. Once the engine is stopping, or its partition is revoked (being drained or
// gone), a nacked batch is dropped unacknowledged, so it is never committed
// and the next run or owner reads it again.
func (b *Batch) Nack(err error) { NackAll([]*Batch{b}, err) }

// nack is Nack, but for the warning of a dropped batch, which its caller
// writes (NackAll). It reports whether the rejection was dropped as stale,
// counting it as such only if count is set, and whether the batch was
// dropped (ReplayNacks off).
func (b *Batch) nack(err error, count bool) (stale, dropped bool) {
	e := b.e
	if b.RangeEnd {
		return false, false
	}
	if !e.cfg.ReplayNacks {
		if b.done.Swap(true) {
			return false, false
		}
		// Dropped, as Benthos' contract says. Counted, and said by
		// NackAll, at most once per 10 seconds.
		e.stats.dropped.Add(int64(len(b.Records)))
		e.obs.Dropped(b.Range.Topic, int64(len(b.Records)))
		return e.batchDone(b, settledDropped, count), true
	}
	if b.done.Load() {
		return false, false
	}
	if e.stopping() {
		return !b.done.Swap(true) && e.batchDone(b, settledRejected, count), false
	}
	e.mu.Lock()
	stale = !e.parts.current(b.st) || b.st.part.draining // revoked: the next owner reads it
	e.mu.Unlock()
	if stale {
		return !b.done.Swap(true) && e.batchDone(b, settledRejected, count), false // counted as stale there
	}
	wait := min(time.Duration(b.Attempts)*100*time.Millisecond, 5*time.Second)
	e.log.warn("nack", "Batch of %d records of %s rejected (%v); delivering it again in %s", len(b.Records), b.Range, err, wait)
	e.mu.Lock()
	b.due = time.Now().Add(wait)
	i := len(e.out.replay)
	for i > 0 && e.out.replay[i-1].due.After(b.due) {
		i--
	}
	e.out.replay = append(e.out.replay, nil)
	copy(e.out.replay[i+1:], e.out.replay[i:])
	e.out.replay[i] = b
	e.mu.Unlock()
	e.out.signal()
	return false, false
}

// batchDone takes a finished batch out of the count Next waits for and,
// unless it was rejected (how says), records its offsets with the tracker.
// Only an acknowledged one counts its records as acknowledged
// (Summary.Acked), a dropped one's are counted as dropped. One of an
// incarnation that is over is dropped, and counted as stale if count is
// set. It reports whether it was.
func (e *Engine) batchDone(b *Batch, how settled, count bool) (stale bool) {
	e.mu.Lock()
	if e.parts.returned(b.Range.Key(), b.st.part) {
		e.out.drainWake(b.st.part)
	}
	complete := false
	switch {
	case !e.parts.current(b.st):
		stale = true
		what := "rejection of "
		if how == settledAcked {
			what = "acknowledgement of "
		}
		if count {
			e.stats.dropStale(e.log, b.st, what+b.Span.String())
		}
	case how == settledAcked:
		e.stats.acked.Add(int64(len(b.Records)))
		complete = e.ackLocked(b.st, b.Span)
	case how == settledDropped:
		complete = e.ackLocked(b.st, b.Span)
	}
	e.mu.Unlock()
	if complete {
		e.obs.RangeAcked(b.Range)
	}
	if b.st.ackSig != nil {
		select {
		case b.st.ackSig <- struct{}{}:
		default:
		}
	}
	e.out.signal()
	e.sched.signal()
	return stale
}

// dropStaleReplaysLocked drops the queued replays of incarnations that are
// over (revoked, lost, their topic deleted or recreated, so the next owner
// reads them) or being drained (drain.go), wherever they are in the queue,
// and reports whether it dropped any.
func (e *Engine) dropStaleReplaysLocked() bool {
	kept := e.out.replay[:0]
	for _, b := range e.out.replay {
		if e.parts.current(b.st) && !b.st.part.draining {
			kept = append(kept, b)
			continue
		}
		e.stats.dropStale(e.log, b.st, "replay of "+b.Span.String())
		if e.parts.returned(b.Range.Key(), b.st.part) {
			e.out.drainWake(b.st.part)
		}
		b.done.Store(true)
	}
	dropped := len(kept) < len(e.out.replay)
	clear(e.out.replay[len(kept):])
	e.out.replay = kept
	return dropped
}
