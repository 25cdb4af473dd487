package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/backoff"
	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// How ranges move through the engine:
//
//   - The scheduler goroutine takes a range from the planner whenever a
//     max-in-flight slot is free and starts a reader goroutine for it.
//   - The reader reads the range through a leased consumer. Ranges of one
//     partition are read in parallel, but each partition emits its ranges to
//     Next in offset order. A range's batches wait (queued) until every
//     earlier range of its partition has emitted all of its own. So what the
//     pipeline has seen of a partition is always a prefix of it, and after a
//     graceful stop (everything handed out acknowledged) the acknowledged
//     records form a prefix too, which one committed offset describes
//     exactly.
//   - Each batch covers a span of its range, from where the previous batch
//     ended to its last record + 1. Once the range is read, its reader
//     acknowledges the rest of it. Those are offsets that held no record
//     (transaction markers, aborted or compacted records). The tracker is
//     the one record of what is acknowledged. The partition's frontier is
//     what is committed, and a range is complete once its every offset is
//     acknowledged.
//   - With AlignRanges a range is instead gathered while it is read and
//     emitted once read, as one batch spanning the whole range (none if it
//     held no record), and the tracker's frontier moves over whole ranges
//     only. What is committed is always a range end. Ranges lie on blocks
//     of MaxRangeRecords offsets, so a re-run plans and emits the
//     ranges the run before it did.
//   - Batches are counted only once Next has handed them out, and uncounted
//     when they are done, so a reader that stops while waiting to send leaves
//     nothing behind that Next would wait for.
//   - With a group, a complete range keeps its slot until a commit covers it,
//     so at most max-in-flight ranges lie past the committed offset. A
//     crash re-reads at most max-in-flight x max-range-records records. When every
//     slot waits for a commit, the committer commits at once.

// readAheadBytes is how many bytes of records (cache.RecordBytes) a range
// that is not yet its partition's turn to emit reads ahead before it waits.
// In practice that is its whole range (which max_in_flight's memory bound counts), so
// a partition's later ranges are read while the earlier ones are emitted. The
// cap only matters for very large records.
var readAheadBytes int64 = 64 << 20 // a variable only so tests can make it small

// scheduler is the state of the scheduler goroutine (Engine.schedule) and
// of the readers it starts. It holds the max-in-flight slots, the count of
// readers running and the refresh's own state. Engine.mu guards slots,
// readers, listNow, stop and reachedEnd. found, missing and refreshes are
// the scheduler goroutine's own. Start sets them before it starts the
// goroutine. Start sets baseCtx and baseCancel, which are then only read.
// wake is a channel with its own rules.
type scheduler struct {
	slots      slots              // the max-in-flight count (slots.go)
	readers    int                // ranges whose reader runs (launch, read)
	listNow    bool               // partitions were assigned, or a reader saw its topic vanish: look before the next poll
	stop       context.CancelFunc // ends the scheduler's context (set by the scheduler): a stopping error ends a refresh in progress
	reachedEnd bool               // with StopAtEnd: the scheduler read every range to the end (readToEnd)

	found     discovery        // with RegexpTopics: the last match of the patterns
	missing   map[string]error // the topic entries of a continuous run that named what did not exist at start, and why, until it exists (missing.go)
	refreshes int              // the refreshes so far: every followedListEvery-th lists the followed partitions too

	baseCtx    context.Context    // parent of every partition's context; cancelled when the scheduler stops
	baseCancel context.CancelFunc // set by Start
	wake       chan struct{}      // buffered 1: the scheduler has something to do (signal)
}

// lookSoon asks the scheduler to look at the cluster before its next poll.
// partitions were assigned, or a reader saw its topic vanish.
func (s *scheduler) lookSoon() { s.listNow = true }

// signal wakes the scheduler. It has something to do (a slot freed, a
// partition may be planned, partitions were assigned).
func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// incarnation is the engine's state for one incarnation of one partition.
// An incarnation is one ownership of the partition (from an assignment, or
// from the start without a group) of one topic (by topic ID). Revoking,
// losing or dropping a partition ends its incarnation. Adding it again
// starts a new one with a new inc. Whatever flows back from an older one
// (acks, nacks, replays, reader results, losses) is dropped and counted
// (observation.dropStale), never applied. Engine.mu guards it.
type incarnation struct {
	inc         uint64                // the incarnation: unique within the engine, never reused
	open        map[int64]*rangeState // ranges launched and not complete, by start offset
	first       int64                 // where reading started (progress counts from here)
	began       time.Time             // when the incarnation started reading
	endBackAt   time.Time             // since when listings put the end below the planned offsets; zero if not
	skipped     map[int64]int64       // spans skipped as lost ([from, to) by from) that no range emits
	emitFrom    int64                 // start of the range whose turn it is to emit
	committed   int64                 // offset last committed to the group; -1 if none
	preAcked    []ranges.Range        // offsets acknowledged above the commit it started from (acked.go): not handed out; set before its readers start, never changed
	held        []int64               // ends of complete ranges whose slot waits for a commit
	pending     int                   // batches of this incarnation handed out by Next and not done
	extendTo    int64                 // the end to plan to once the first range is launched (cuts.go: the group's cut range comes first)
	cutUnsent   bool                  // a cut range was launched since the last commit (cuts.go)
	ackedUnsent bool                  // offsets above the frontier were acknowledged since the last commit (acked.go)
	highAt      time.Time             // when a fetch last moved the planned end (onHigh): a listing asked before it does not move it back
	ctx         context.Context       // the readers' context: cancelled when the partition is revoked
	cancel      context.CancelFunc
	draining    bool // revoked: nothing more of it is read or handed out while Revoked waits for pending to reach 0 (drain.go)

	// stalled counts the partition's readers that have not read a record
	// since they started or since their last failed attempt (backing off
	// before the next). While unreadLimit of them are, no more of its
	// ranges are planned. failing counts the readers backing off after a
	// failed read. From the first one on, no range of the partition is
	// planned and every other open range gives its max-in-flight slot back
	// (released) until the partition reads again. So a partition that
	// cannot be read (no leader, its broker down) holds one slot, not every
	// slot it had or that frees.
	stalled, failing, released int

	// reads is set once a reader of this incarnation read (records, or its
	// range to its end) from a distant broker (cache.Lease.Distant) while
	// none failed, and cleared by a failed read or a read from a near
	// broker. A partition known to read from afar gets up to
	// maxUnreadRanges ranges whose readers have not read yet (unreadLimit),
	// so a backlog's ranges are fetched at once over the broker's lanes
	// instead of one round trip after the other. Any other gets one (near,
	// the broker's loop takes one range of a partition per round, so more
	// would only be read ahead and held in memory).
	reads bool

	// straddles is set when readers of this incarnation end their ranges
	// inside record batches that hold, on average, an eighth of a range or
	// more past their end (cache.Lease.DecodedAhead, ahead), and cleared
	// once that falls under a sixteenth. Kafka returns record batches
	// whole. So a range started on a second cursor while the one before it
	// is read decodes that batch again from its start, and the first
	// cursor throws away what it decoded past its end: at 100 B records in
	// batches of about 6,000, a third more decoding. A partition that
	// straddles and is not known to read from afar reads its ranges one
	// after the other on its cursor (rangeState.after). Any other reads the
	// next range while the one before it is read, on cores of its own.
	straddles bool
	ahead     int64 // the records its readers decoded past their range's end, a moving average (noteAhead)
	aheads    int   // how many readers' ahead were taken into ahead
}

// maxUnreadRanges is how many ranges of a partition known to read may wait
// for their first records at once (incarnation.reads). It is enough to keep
// the backlog lanes of a distant broker busy (each range is one fetch in
// flight on a lane). It is few enough that a partition that stops reading
// (its leader gone) holds little. max_in_flight bounds them anyway.
const maxUnreadRanges = 16

// unreadLimit is how many of p's ranges may wait for their first records
// at once before no more of them is planned.
func (p *incarnation) unreadLimit() int {
	if p.reads {
		return maxUnreadRanges
	}
	return 1
}

// straddlesAt is the share of a range (in records past its end, 1 in
// straddlesAt) from which a partition straddles (incarnation.straddles),
// and straddlesUntil the share under which it no longer does.
const (
	straddlesAt    = 8
	straddlesUntil = 16
)

// noteAhead takes what the reader of a range of length n of p decoded past
// its end (ahead records) into p.straddles. A range ends anywhere in a
// batch, so what is past it varies from none to a whole batch. p.ahead
// averages it (the first range's, then a quarter of each new one), and a
// gap between the two shares keeps an average near one of them from
// flipping p.straddles.
func (p *incarnation) noteAhead(ahead, n int64) {
	if p.aheads++; p.aheads == 1 {
		p.ahead = ahead
	} else {
		p.ahead = (3*p.ahead + ahead) / 4
	}
	switch {
	case p.ahead*straddlesAt >= n:
		p.straddles = true
	case p.ahead*straddlesUntil < n:
		p.straddles = false
	}
}

// openEndingAt returns p's range in flight that ends at offset, or nil.
func (p *incarnation) openEndingAt(offset int64) *rangeState {
	for _, st := range p.open {
		if st.r.End == offset {
			return st
		}
	}
	return nil
}

// passTurnLocked moves the partition's turn to emit to offset, over any
// skipped span that starts there, and opens the turn of the range starting
// where it lands.
func (p *incarnation) passTurnLocked(offset int64) {
	p.emitFrom = offset
	for {
		to, ok := p.skipped[p.emitFrom]
		if !ok {
			break
		}
		delete(p.skipped, p.emitFrom)
		p.emitFrom = to
	}
	if next := p.open[p.emitFrom]; next != nil {
		close(next.turn)
	}
}

// rangeState follows one range in flight. Guarded by Engine.mu, except the
// fields marked as the reader's own.
type rangeState struct {
	r        ranges.Range
	part     *incarnation    // the incarnation the range belongs to
	stalled  bool            // counted in part.stalled: its reader has not read a record yet, or failed since
	failing  bool            // counted in part.failing: its reader backs off after a failed read
	released bool            // counted in part.released: its slot was given back while its partition fails
	readDone bool            // read and every batch handed to Next
	turn     chan struct{}   // closed when every earlier range of the partition has emitted everything
	ackSig   chan struct{}   // ordered mode: buffered 1, signalled by each batch's end
	sent     atomic.Int64    // end of the last batch handed to Next: what the pipeline has seen (only grows: sentTo)
	after    <-chan struct{} // the fetched of the range before it, whose reader it waits for before it reads (waitForBefore); nil: none. Set at launch (not the state: a chain of them would keep every range ever read)
	fetched  chan struct{}   // closed once its reader stopped reading (fetchRange returned)

	// The reader's own.
	queued      []*Batch      // batches read before the range's turn
	queuedBytes int64         // cache.RecordBytes of queued
	emitted     int64         // end of the span of the last batch built
	gathered    []*kgo.Record // with AlignRanges: the range's records read so far, emitted as one batch once it is read
	gatheredHi  int64         // with AlignRanges: the high watermark of the last fetch gathered (the batch's High)

	// scratch is the caller's slot for the range (Batch.Scratch). It is
	// written by Hooks.Prepare on the reader, and read by whoever takes the
	// range's end marker once the reader is done.
	scratch any
}

// schedule is the scheduler goroutine. It starts a reader for every range the
// planner yields while a slot is free, lists watermarks again when caught up
// (and partitions whose watermarks are missing, and topics that may have
// vanished), and closes the batches channel once nothing more will be read.
func (e *Engine) schedule() {
	defer e.wg.Done()
	ctx, cancel := e.shut.SoftStopCtx(context.Background())
	defer cancel()
	e.mu.Lock()
	e.sched.stop = cancel // a stopping error ends a refresh in progress too
	e.mu.Unlock()

	var readers, refreshes sync.WaitGroup
	defer func() {
		cancel()
		e.sched.baseCancel()
		refreshes.Wait()
		readers.Wait()
		close(e.out.batches)
		// No reader is left, so the closed channel holds nothing. Next
		// need not receive from it to know (it does not while no broker
		// answers, and a run that read everything still ends).
		e.mu.Lock()
		e.out.readersGone()
		e.mu.Unlock()
		e.out.signal()
	}()

	// A refresh runs on a goroutine of its own, one at a time, so the
	// scheduler goes on launching while it waits for the cluster. A record
	// a follower reports during a listing (at 300 partitions one listing
	// takes several round trips) is read at once, not once it is answered.
	refreshed := make(chan struct{}, 1)
	refreshing, again := false, false
	refresh := func() {
		if refreshing {
			again = true // once this one is over
			return
		}
		refreshing = true
		refreshes.Add(1)
		go func() {
			defer refreshes.Done()
			(&refresher{e: e}).run(ctx)
			refreshed <- struct{}{}
		}()
	}
	// readToEnd reports a bounded run read to its end. That is every
	// partition read to its snapshot and, with Membership, the whole group committed to it
	// (so a member whose own partitions are done stays, and takes over
	// partitions of a member that dies, until everything is read).
	readToEnd := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.parts.ownWorkDone(e.sched.readers) && (!e.cfg.Group.Membership || e.group.done)
	}
	poll := time.NewTicker(e.cfg.PollInterval)
	defer poll.Stop()
	for {
		if e.Err() != nil {
			return
		}
		e.launch(ctx, &readers)
		if !refreshing && readToEnd() {
			e.mu.Lock()
			e.sched.reachedEnd = true
			e.mu.Unlock()
			e.log.Infof("Read every range up to the end offsets snapshotted at start")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-e.sched.wake:
			e.mu.Lock()
			lookNow := e.sched.listNow
			e.mu.Unlock()
			if lookNow {
				refresh() // partitions were assigned: start them now
			}
		case <-poll.C:
			// A tick during a refresh queues nothing. The next tick comes
			// anyway, and refreshes that outlast poll_interval must not run
			// back to back, or a bounded run's end is never checked.
			if !refreshing {
				refresh()
			}
		case <-refreshed:
			refreshing = false
			if again && !readToEnd() {
				refresh() // partitions were assigned during it
			}
			again = false
		}
	}
}

// launch starts readers for planned ranges while slots are free.
func (e *Engine) launch(ctx context.Context, readers *sync.WaitGroup) {
	var planned []ranges.Range
	defer func() {
		for _, r := range planned {
			e.obs.RangePlanned(r)
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		st := e.launchOneLocked()
		if st == nil {
			return
		}
		planned = append(planned, st.r)
		readers.Add(1)
		go func(ctx context.Context) {
			defer readers.Done()
			(&reader{e: e, st: st}).read(ctx)
		}(st.part.ctx)
	}
}

// launchOneLocked takes a max_in_flight slot for the next planned range and
// returns its state, counted as a reader the caller starts. nil if no slot
// is free, nothing is planned, or the engine failed. The model walk starts
// ranges through it too, so it checks the scheduler's own decisions.
func (e *Engine) launchOneLocked() *rangeState {
	if !e.sched.slots.free(e.cfg.MaxInFlight) {
		return nil
	}
	r, ok := e.parts.planner.Next(e.parts.skip)
	if !ok {
		return nil
	}
	if err := e.parts.tracker.Add(r); err != nil {
		// The planner and the tracker disagree. That is a bug, never data
		// to skip.
		e.failLocked(fmt.Errorf("track planned range %s: %w", r, err))
		return nil
	}
	p := e.parts.cur(r.Key())
	e.parts.launchedCut(p, r)
	if _, end, _ := e.parts.planner.Position(r.Key()); p.extendTo > end {
		if err := e.parts.planner.SetEnd(r.Key(), p.extendTo); err != nil {
			e.failLocked(fmt.Errorf("plan %s after the group's cut range %s: %w", r.Key(), r, err))
			return nil
		}
	}
	st := &rangeState{r: r, part: p, turn: make(chan struct{}), fetched: make(chan struct{}), emitted: r.Start}
	if p.straddles && !p.reads {
		if before := p.openEndingAt(r.Start); before != nil {
			st.after = before.fetched
		}
	}
	st.sent.Store(r.Start)
	if e.cfg.Ordered {
		st.ackSig = make(chan struct{}, 1)
	}
	p.open[r.Start] = st
	st.stalled = true // until its reader reads: counted against the partition's unreadLimit
	p.stalled++
	if p.emitFrom == r.Start {
		close(st.turn)
	}
	e.sched.slots.take()
	e.sched.readers++
	return st
}

// skip is the planner's filter. A partition with a failing reader (one that
// backs off after a failed read) is not planned until it reads again. Nor is
// one with as many readers that have not read yet as its unreadLimit (one
// until it is known to read). A revoked partition being drained is not
// planned at all. In ordered mode a partition has at most one range in
// flight, and none while batches of an earlier incarnation of it (revoked,
// lost, or its topic recreated, and assigned back to this process) are
// still in the pipeline. Order holds per partition, not per ownership.
func (t *partTable) skip(k ranges.Key) bool {
	p := t.cur(k)
	return p.draining || p.failing > 0 || p.stalled >= p.unreadLimit() || (t.cfg.Ordered && (len(p.open) > 0 || t.peek(k).ended > 0))
}

func (t *partTable) ownWorkDone(readers int) bool {
	return t.cfg.StopAtEnd && t.planner.Done() && readers == 0 && t.nWaiting == 0
}

// reader is one range's reader goroutine (read). It reads st's range
// through a leased consumer and hands its batches to Next in turn. Its own
// state is st's fields marked as the reader's own. It changes the rest
// through the engine's owners under Engine.mu.
type reader struct {
	e  *Engine
	st *rangeState
}

// sentTo records that the batches up to end were handed to Next. Both the
// reader (once its send returns) and Next (under Engine.mu, before it
// returns the batch) record it, in either order.
func (st *rangeState) sentTo(end int64) {
	for {
		at := st.sent.Load()
		if at >= end || st.sent.CompareAndSwap(at, end) {
			return
		}
	}
}

// read is a reader goroutine. It reads one range through a leased consumer,
// retrying retriable errors from where it stopped (with a new client) until
// ctx ends, and hands its batches to Next in turn. A permanent error stops
// the engine.
func (rd *reader) read(ctx context.Context) {
	e, st := rd.e, rd.st
	began := time.Now()
	r := st.r
	defer func() {
		rd.note(st.readerEnded) // whatever it was, it no longer is
		e.mu.Lock()
		e.sched.readers--
		if e.cfg.RangeEnds && st.sent.Load() > r.Start {
			// After every batch it handed out (each send returned).
			e.out.queueEnd(&Batch{Range: r, Span: ranges.Range{Topic: r.Topic, Partition: r.Partition, Start: r.End, End: r.End}, RangeEnd: true, e: e, st: st})
		}
		e.mu.Unlock()
		e.out.signal() // Next waits for its markers there too
		e.sched.signal()
	}()
	read := rd.fetchRange(ctx)
	close(st.fetched)
	if !read {
		return
	}
	rd.emitRead(ctx, began)
}

// noteAhead takes what st's reader decoded past its range's end (ahead
// records) into its incarnation, if current (incarnation.straddles).
func (rd *reader) noteAhead(ahead int64) {
	e, st := rd.e, rd.st
	e.mu.Lock()
	if e.parts.current(st) {
		st.part.noteAhead(ahead, st.r.End-st.r.Start)
	}
	e.mu.Unlock()
}

// note applies f (one of st's readerFailed, readerRead, readerEnded)
// under Engine.mu, with the slots and whether st's incarnation is current,
// and wakes the scheduler when slots freed or the partition may be planned.
func (rd *reader) note(f func(s *slots, current bool) bool) {
	e, st := rd.e, rd.st
	e.mu.Lock()
	wake := f(&e.sched.slots, e.parts.current(st))
	e.mu.Unlock()
	if wake {
		e.sched.signal()
	}
}

// fetchRange reads st's range through the cache, retrying what fails, and
// emits its records as they come (emit). It returns false if the read was
// abandoned (revoked, stopped) or failed for good.
func (rd *reader) fetchRange(ctx context.Context) bool {
	e, st := rd.e, rd.st
	r := st.r
	pos := r.Start
	delay := 100 * time.Millisecond
	stalled := true      // the reader's own copy of st.stalled (launch set it)
	unknownSeen := false // a read failed as its partition was just listed (justListed)
	var lease *cache.Lease
	read := func() { // the reader read: records came, or its range is read
		distant := lease.Distant()
		rd.note(func(s *slots, current bool) bool { return st.readerRead(s, current, distant) })
		stalled = false
	}
	emit := func(recs []*kgo.Record, high int64) error {
		if stalled && len(recs) > 0 {
			read()
		}
		return rd.emit(ctx, recs, high)
	}
	if !st.waitForBefore(ctx) {
		return false
	}
	for attempt := 1; ; attempt++ {
		var err error
		lease, err = e.kafka.cache.Acquire(ctx, r.Topic, r.Partition, pos)
		if err == nil {
			pos, err = lease.Read(ctx, pos, r.End, emit)
			if err == nil {
				rd.noteAhead(int64(lease.DecodedAhead()))
			}
			lease.Release(err)
		}
		if err == nil {
			if stalled {
				read() // read to its end without a record
			}
			return true
		}
		if ctx.Err() != nil {
			return false // abandoned: never acknowledged, so never committed
		}
		var oor *cache.OffsetOutOfRangeError
		if e.cfg.SkipDataLoss && errors.As(err, &oor) && oor.LogStart > pos {
			// Deleted before it was read. Skip to the new log start.
			pos = rd.skipLost(pos, oor.LogStart)
			if pos >= r.End {
				return true
			}
			continue
		}
		if vanished(err) {
			// Not permanent yet. The scheduler lists the topics at once and
			// handles a deleted topic with the span it lost.
			e.mu.Lock()
			e.sched.lookSoon()
			e.mu.Unlock()
		} else if permanent(err) {
			e.fail(fmt.Errorf("read %s at offset %d: %w", r, pos, err))
			return false
		}
		wait := delay
		e.mu.Lock()
		justListed := st.justListed(err, e.parts.current(st))
		e.mu.Unlock()
		if justListed {
			// The listing saw the partition, the cursors' metadata not yet
			// (a partition just added). It is not a failure. It is retried
			// soon, the first time at once (the cache's next look requests metadata
			// anew).
			wait = unknownRetry
			if !unknownSeen {
				wait, unknownSeen = 0, true
			}
			e.log.Debugf("Reading %s: the cursors' metadata does not show the partition yet (attempt %d), retrying in %s: %v", r, attempt, wait, err)
		} else {
			e.log.warnRetry(ctx, "read:"+r.Key().String(), err, "Reading %s stopped at offset %d (attempt %d), retrying in %s: %v", r, pos, attempt, delay, err)
			delay = backoff.Double(delay, 10*time.Second)
		}
		rd.note(st.readerFailed)
		stalled = true
		if backoff.Wait(ctx, wait) != nil {
			return false
		}
	}
}

// emitRead finishes st's range once it was read. It waits for the range's
// turn, sends what was read ahead, and acknowledges the offsets after the
// last record.
func (rd *reader) emitRead(ctx context.Context, began time.Time) {
	e, st := rd.e, rd.st
	r := st.r
	// The cursor is back in the cache. If the range ends where the
	// partition is caught up, the cursor follows the tail from there.
	e.mu.Lock()
	if e.parts.current(st) {
		e.parts.watch(r.Key(), e.kafka.cache)
	}
	e.mu.Unlock()
	// Wait for the range's turn to emit what was read ahead.
	select {
	case <-st.turn:
	case <-ctx.Done():
		return
	}
	if err := rd.flush(ctx); err != nil {
		return
	}
	if err := rd.sendGathered(ctx); err != nil {
		return
	}
	e.obs.RangeRead(r, time.Since(began))

	e.mu.Lock()
	p := st.part
	if !e.parts.current(st) || ctx.Err() != nil {
		if !e.parts.current(st) {
			e.log.late(st, "end of "+r.String())
		}
		e.mu.Unlock()
		return // revoked while the last batch went out: its incarnation is over
	}
	st.readDone = true
	p.passTurnLocked(r.End)
	complete := false
	if st.emitted < r.End {
		// The offsets after the last record hold no record.
		complete = e.ackLocked(st, ranges.Range{Topic: r.Topic, Partition: r.Partition, Start: st.emitted, End: r.End})
	}
	e.mu.Unlock()
	if complete {
		e.obs.RangeAcked(r)
	}
}

// unknownRetry is how soon a reader retries a partition that the listing
// saw and the cursors' metadata does not show yet (justListed). It is a
// fixed short delay, not the doubling backoff of failures.
const unknownRetry = 100 * time.Millisecond

// listedGrace is how long after its incarnation started a partition
// unknown to the cursors' metadata counts as just listed (justListed).
// Later it is a failure, retried with the growing delay and logged.
const listedGrace = 10 * time.Second

// waitForBefore waits until the reader of the range before st's (after),
// if it has one, stopped reading, so that st's reader leases the
// partition's cursor where that one left it: no seek, and the records it
// fetched past its range are read, not thrown away. It reports false if ctx
// ended first.
func (st *rangeState) waitForBefore(ctx context.Context) bool {
	if st.after == nil {
		return true
	}
	select {
	case <-st.after:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitsForBefore reports whether st's reader waits for the reader of the
// range before it (waitForBefore).
func (st *rangeState) waitsForBefore() bool {
	if st.after == nil {
		return false
	}
	select {
	case <-st.after:
		return false
	default:
		return true
	}
}

// justListed reports whether err says the cursors' metadata does not know
// st's partition while the listing that started its current incarnation
// saw it within listedGrace. Such a partition was just added, and its
// metadata reaches the cursors' client a little later.
func (st *rangeState) justListed(err error, current bool) bool {
	return errors.Is(err, cache.ErrUnknownPartition) && current && time.Since(st.part.began) < listedGrace
}

// readerFailed records that st's reader backs off after a failed read. It
// is stalled (its partition gets no new range) and failing. The partition's
// first failing reader keeps its slot and goes on retrying. Every other open
// range of the partition lends its slot (s) until the partition reads
// again. current says whether st's incarnation is the current one. It
// reports whether slots were freed.
func (st *rangeState) readerFailed(s *slots, current bool) bool {
	if !current {
		return false
	}
	p := st.part
	if !st.stalled {
		st.stalled = true
		p.stalled++
	}
	if st.failing {
		return false
	}
	st.failing = true
	p.reads = false // one range at a time until it reads again
	if p.failing++; p.failing > 1 {
		return false
	}
	freed := false
	for _, o := range p.open {
		if o != st && s.lend(o) {
			freed = true
		}
	}
	return freed
}

// readerRead records that st's reader read (records arrived, or its range
// is read) from a distant broker or not. It records it as readerEnded does.
// Once no reader of the partition fails, it also records whether the
// partition is known to read from afar (incarnation.reads). It reports whether the partition may be planned
// again.
func (st *rangeState) readerRead(s *slots, current, distant bool) bool {
	changed := st.readerEnded(s, current)
	if p := st.part; current && p.failing == 0 && p.reads != distant {
		p.reads = distant
		changed = true
	}
	return changed
}

// readerEnded records that st's reader read or ended. It is neither stalled
// nor failing any more, and once no reader of the partition fails, the
// ranges that lent their slots take them back. It reports whether the
// partition may be planned again.
func (st *rangeState) readerEnded(s *slots, current bool) bool {
	p := st.part
	changed := false
	if st.stalled {
		st.stalled = false
		p.stalled--
		changed = true
	}
	if st.failing {
		st.failing = false
		p.failing--
		changed = true
		if p.failing == 0 && current {
			s.reclaim(p)
		}
	}
	return changed
}

// skipLost handles offsets of st's range deleted below logStart before they
// were read from pos. They are recorded as lost, and so are the partition's
// unplanned offsets below logStart. It returns where reading goes on. The
// lost offsets are acknowledged with the range's next batch, or with the
// rest of the range once it is read and its turn came. Acknowledging them
// now could complete the range before its turn, and the turn to emit would
// then never pass it.
func (rd *reader) skipLost(pos, logStart int64) int64 {
	e, st := rd.e, rd.st
	r := st.r
	to := min(logStart, r.End)
	const why = "were deleted before they were read"
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.parts.current(st) {
		// Revoked meanwhile. The loss is the next owner's to see.
		e.log.late(st, fmt.Sprintf("loss of %s", ranges.Range{Topic: r.Topic, Partition: r.Partition, Start: pos, End: to}))
		return to
	}
	e.stats.lost.Add(e.parts.lost(r.Key(), pos, to, why))
	if logStart > r.End {
		lost, err := e.parts.skipPlanned(r.Key(), logStart, why)
		e.stats.lost.Add(lost)
		e.failLocked(err)
	}
	return to
}
