package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
//     Next in offset order: a range's batches wait (queued) until every
//     earlier range of its partition has emitted all of its own. So what the
//     pipeline has seen of a partition is always a prefix of it, and after a
//     graceful stop (everything handed out acknowledged) the acknowledged
//     records form a prefix too, which one committed offset describes
//     exactly.
//   - Each batch covers a span of its range: from where the previous batch
//     ended to its last record + 1. Once the range is read, its reader
//     acknowledges the rest of it (offsets that held no record: transaction
//     markers, aborted or compacted records). The tracker is the one record
//     of what is acknowledged: the partition's frontier is what is committed,
//     and a range is complete once its every offset is acknowledged.
//   - Batches are counted only once Next has handed them out, and uncounted
//     when they are done, so a reader that stops while waiting to send leaves
//     nothing behind that Next would wait for.
//   - With a group, a complete range keeps its slot until a commit covers it,
//     so at most max-in-flight ranges lie past the committed offset: a crash
//     re-reads at most max-in-flight x max-range-records records. When every
//     slot waits for a commit, the committer commits at once.

// readAheadBytes is how many bytes of records (cache.RecordBytes) a range
// that is not yet its partition's turn to emit reads ahead before it waits:
// in practice its whole range (which max_in_flight's memory bound counts), so
// a partition's later ranges are read while the earlier ones are emitted; the
// cap only matters for very large records.
var readAheadBytes int64 = 64 << 20 // a variable only so tests can make it small

// partition is the engine's state for one partition. Guarded by Engine.mu.
type partition struct {
	open      map[int64]*rangeState // ranges launched and not complete, by start offset
	first     int64                 // where reading started (progress counts from here)
	endBack   bool                  // the last listing put the end below the planned offsets
	skipped   map[int64]int64       // spans skipped as lost ([from, to) by from) that no range emits
	emitFrom  int64                 // start of the range whose turn it is to emit
	committed int64                 // offset last committed to the group; -1 if none
	ownCommit int64                 // highest offset this process committed in this ownership (0: none); no commit goes below it
	held      []int64               // ends of complete ranges whose slot waits for a commit
	ctx       context.Context       // the readers' context: cancelled when the partition is revoked
	cancel    context.CancelFunc
}

// passTurnLocked moves the partition's turn to emit to offset, over any
// skipped span that starts there, and opens the turn of the range starting
// where it lands.
func (p *partition) passTurnLocked(offset int64) {
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
	readDone bool          // read and every batch handed to Next
	turn     chan struct{} // closed when every earlier range of the partition has emitted everything
	ackSig   chan struct{} // ordered mode: buffered 1, signalled by each batch's end
	sent     atomic.Int64  // end of the last batch handed to Next: what the pipeline has seen

	// The reader's own.
	queued      []*Batch // batches read before the range's turn
	queuedBytes int64    // cache.RecordBytes of queued
	emitted     int64    // end of the span of the last batch built
}

// schedule is the scheduler goroutine: it starts a reader for every range the
// planner yields while a slot is free, lists watermarks again when caught up
// (and partitions whose watermarks are missing, and topics that may have
// vanished), and closes the batches channel once nothing more will be read.
func (e *Engine) schedule() {
	defer e.wg.Done()
	ctx, cancel := e.shut.SoftStopCtx(context.Background())
	defer cancel()

	var readers sync.WaitGroup
	defer func() {
		cancel()
		e.baseCancel()
		readers.Wait()
		close(e.batches)
	}()

	poll := time.NewTicker(e.cfg.PollInterval)
	defer poll.Stop()
	for {
		if e.Err() != nil {
			return
		}
		e.launch(ctx, &readers)
		if e.finished() {
			e.log.Infof("Read every range up to the end offsets snapshotted at start")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-poll.C:
			if e.needRefresh() {
				e.refresh(ctx)
			}
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
	for e.inflight < e.cfg.MaxInFlight {
		r, ok := e.planner.Next(e.skipLocked)
		if !ok {
			return
		}
		if err := e.tracker.Add(r); err != nil {
			// The planner and the tracker disagree: a bug, never data to skip.
			e.failLocked(fmt.Errorf("track planned range %s: %w", r, err))
			return
		}
		st := &rangeState{r: r, turn: make(chan struct{}), emitted: r.Start}
		st.sent.Store(r.Start)
		if e.cfg.Ordered {
			st.ackSig = make(chan struct{}, 1)
		}
		p := e.parts[r.Key()]
		p.open[r.Start] = st
		if p.emitFrom == r.Start {
			close(st.turn)
		}
		e.inflight++
		e.reading++
		planned = append(planned, r)
		readers.Add(1)
		go func(ctx context.Context) {
			defer readers.Done()
			e.read(ctx, st)
		}(p.ctx)
	}
}

// skipLocked is the planner's filter: in ordered mode a partition has at most
// one range in flight.
func (e *Engine) skipLocked(k ranges.Key) bool {
	return e.cfg.Ordered && len(e.parts[k].open) > 0
}

// finished reports a bounded run read to its end: every partition read to
// its snapshot and, with Membership, the whole group committed to it (so a
// member whose own partitions are done stays, and takes over partitions of a
// member that dies, until everything is read).
func (e *Engine) finished() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ownWorkDoneLocked() && (!e.cfg.Membership || e.groupDone)
}

func (e *Engine) ownWorkDoneLocked() bool {
	return e.cfg.StopAtEnd && e.planner.Done() && e.reading == 0 && len(e.unlisted) == 0
}

func (e *Engine) needRefresh() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recheck || len(e.unlisted) > 0 || (!e.cfg.StopAtEnd && e.planner.Done()) ||
		(e.cfg.Membership && e.ownWorkDoneLocked())
}

// read is a reader goroutine: it reads one range through a leased consumer,
// retrying retriable errors from where it stopped (with a new client) until
// ctx ends, and hands its batches to Next in turn. A permanent error stops
// the engine.
func (e *Engine) read(ctx context.Context, st *rangeState) {
	began := time.Now()
	defer func() {
		e.mu.Lock()
		e.reading--
		e.mu.Unlock()
		e.signal()
	}()
	r := st.r
	pos := r.Start
	delay := 100 * time.Millisecond
	emit := func(recs []*kgo.Record) error { return e.emit(ctx, st, recs) }
	for attempt := 1; ; attempt++ {
		lease, err := e.cache.Acquire(ctx, r.Topic, r.Partition, pos)
		if err == nil {
			pos, err = lease.Read(ctx, pos, r.End, emit)
			lease.Release(err)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return // abandoned: never acknowledged, so never committed
		}
		var oor *cache.OffsetOutOfRangeError
		if e.cfg.SkipDataLoss && errors.As(err, &oor) && oor.LogStart > pos {
			// Deleted before it was read: skip to the new log start.
			pos = e.skipLost(st, pos, oor.LogStart)
			if pos >= r.End {
				break
			}
			continue
		}
		if vanished(err) {
			// Not permanent yet: the scheduler lists the topics at its next
			// poll and handles a deleted topic with the span it lost.
			e.mu.Lock()
			e.recheck = true
			e.mu.Unlock()
		} else if permanent(err) {
			e.fail(fmt.Errorf("read %s at offset %d: %w", r, pos, err))
			return
		}
		e.warn("read:"+r.Key().String(), "Reading %s stopped at offset %d (attempt %d), retrying in %s: %v", r, pos, attempt, delay, err)
		if backoff.Wait(ctx, delay) != nil {
			return
		}
		delay = backoff.Double(delay, 10*time.Second)
	}
	// The lease is back in the cache; wait for the range's turn to emit
	// what was read ahead.
	select {
	case <-st.turn:
	case <-ctx.Done():
		return
	}
	if err := e.flush(ctx, st); err != nil {
		return
	}
	e.obs.RangeRead(r, time.Since(began))

	e.mu.Lock()
	p := e.parts[r.Key()]
	if p == nil || ctx.Err() != nil {
		e.mu.Unlock()
		return // revoked while the last batch went out: nothing more is tracked
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

// skipLost handles offsets of st's range deleted below logStart before they
// were read from pos: they are recorded as lost and acknowledged, and so are
// the partition's unplanned offsets below logStart. It returns where reading
// goes on.
func (e *Engine) skipLost(st *rangeState, pos, logStart int64) int64 {
	r := st.r
	to := min(logStart, r.End)
	const why = "were deleted before they were read"
	e.mu.Lock()
	e.loseLocked(r.Key(), pos, to, why)
	complete := false
	if st.emitted < to {
		// [emitted, pos) held no record (markers); [pos, to) is lost.
		complete = e.ackLocked(st, ranges.Range{Topic: r.Topic, Partition: r.Partition, Start: st.emitted, End: to})
		st.emitted = to
	}
	if logStart > r.End && e.parts[r.Key()] != nil {
		e.skipPlannedLocked(r.Key(), logStart, why)
	}
	e.mu.Unlock()
	if complete {
		e.obs.RangeAcked(r)
	}
	return to
}

// emit turns one slice of a range's records into a batch and sends it to
// Next, or queues it until the range's turn.
func (e *Engine) emit(ctx context.Context, st *rangeState, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	end := recs[len(recs)-1].Offset + 1
	b := &Batch{
		Records: recs,
		Range:   st.r,
		Span:    ranges.Range{Topic: st.r.Topic, Partition: st.r.Partition, Start: st.emitted, End: end},
		e:       e,
		st:      st,
	}
	st.emitted = end

	select {
	case <-st.turn:
	default:
		st.queued = append(st.queued, b)
		for _, r := range recs {
			st.queuedBytes += cache.RecordBytes(r) // keys, headers and tombstones count too
		}
		if st.queuedBytes < readAheadBytes {
			return nil
		}
		// Read far enough ahead: wait for the turn before fetching more,
		// so memory follows the ranges being emitted, not the backlog.
		select {
		case <-st.turn:
		case <-ctx.Done():
			return ctx.Err()
		}
		return e.flush(ctx, st)
	}
	if err := e.flush(ctx, st); err != nil {
		return err
	}
	return e.send(ctx, st, b)
}

// flush sends the batches queued before the range's turn.
func (e *Engine) flush(ctx context.Context, st *rangeState) error {
	for len(st.queued) > 0 {
		if err := e.send(ctx, st, st.queued[0]); err != nil {
			return err
		}
		st.queued[0] = nil
		st.queued = st.queued[1:]
	}
	st.queued, st.queuedBytes = nil, 0
	return nil
}

// send hands one batch to Next. In ordered mode it then waits for the batch
// to be done: the pipeline may process batches in parallel, so the next
// batch of the partition goes only once this one is through.
func (e *Engine) send(ctx context.Context, st *rangeState, b *Batch) error {
	// Prepare runs only now, and in at most cap(e.building) readers at a
	// time: a batch waiting for its turn or for Next holds just its records.
	select {
	case e.building <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.cfg.Prepare != nil {
		b.Prepared = e.cfg.Prepare(b)
	}
	select {
	case e.batches <- b:
		st.sent.Store(b.Span.End)
		<-e.building
		n := valueBytes(b.Records)
		e.records.Add(int64(len(b.Records)))
		e.bytes.Add(n)
		e.obs.Delivered(b.Range.Topic, int64(len(b.Records)), n)
	case <-ctx.Done():
		<-e.building
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
// the range is now complete.
func (e *Engine) ackLocked(st *rangeState, s ranges.Range) bool {
	_, complete, err := e.tracker.Ack(s)
	if err != nil {
		if errors.Is(err, ranges.ErrUnknownPartition) {
			return false // the partition was revoked or its topic deleted
		}
		e.failLocked(fmt.Errorf("acknowledge %s of %s: %w", s, st.r, err))
		return false
	}
	if !complete {
		return false
	}
	p := e.parts[st.r.Key()]
	delete(p.open, st.r.Start)
	e.ranges.Add(1)
	if e.committer == nil {
		e.inflight--
		return true
	}
	p.held = append(p.held, st.r.End)
	if e.inflight >= e.cfg.MaxInFlight {
		select {
		case e.commitNow <- struct{}{}:
		default:
		}
	}
	return true
}

// refresh lists the topics again (new partitions of whole topics, deleted
// topics), the watermarks of partitions that had none, and, in a continuous
// run, the new end offsets of every partition.
func (e *Engine) refresh(ctx context.Context) {
	e.mu.Lock()
	e.recheck = false
	known := e.planner.Keys()
	unlisted := sortedKeys(e.unlisted)
	e.mu.Unlock()

	all, ids, topicErrs, err := e.cluster.resolve(ctx, e.cfg.Topics)
	if err != nil {
		e.warn("refresh", "Listing topics failed, retrying in %s: %v", e.cfg.PollInterval, err)
		return
	}
	for _, name := range slices.Sorted(maps.Keys(ids)) {
		e.mu.Lock()
		old, known := e.topicIDs[name]
		e.mu.Unlock()
		if known && old != ids[name] && old != ([16]byte{}) && ids[name] != ([16]byte{}) {
			e.topicGone(name, nil) // recreated: what is left of the old one
		}
		e.mu.Lock()
		e.topicIDs[name] = ids[name]
		e.mu.Unlock()
		e.cache.SetTopicID(name, ids[name])
	}
	for name, terr := range topicErrs {
		if errors.Is(terr, errMissing) {
			e.topicGone(name, terr)
		} else {
			e.warn("refresh:"+name, "Listing topic %q failed, retrying in %s: %v", name, e.cfg.PollInterval, terr)
		}
	}

	// What to list watermarks for: partitions waiting for theirs, new
	// partitions of whole topics (continuous runs only: a bounded run reads
	// what existed at start), and, in a continuous run, every known one.
	want := unlisted
	var added []ranges.Key
	if !e.cfg.StopAtEnd {
		if !e.cfg.Membership { // a member's partitions come assigned
			e.mu.Lock()
			for _, k := range all {
				if _, ok := e.parts[k]; !ok && !e.unlisted[k] {
					added = append(added, k)
				}
			}
			e.mu.Unlock()
		}
		want = append(append(want, added...), known...)
	}
	if e.cfg.Membership && e.cfg.StopAtEnd {
		e.checkGroupDone(ctx)
	}
	if len(want) == 0 {
		return
	}
	if e.offsets != nil && len(unlisted) > 0 && !e.cfg.ResetOffsets {
		// Where a partition starts depends on the group's offset now (a
		// previous owner committed it when the partition was revoked).
		committed, cErrs, err := e.offsets.Committed(ctx, unlisted)
		if err == nil && len(cErrs) > 0 {
			err = joinKeyErrs(cErrs)
		}
		if err != nil {
			e.warn("refresh", "Listing the group's committed offsets failed, retrying in %s: %v", e.cfg.PollInterval, err)
			return
		}
		e.mu.Lock()
		for _, k := range unlisted {
			if c, ok := committed[k]; ok {
				e.committed[k] = c
			} else {
				delete(e.committed, k)
			}
		}
		e.mu.Unlock()
	}
	wm, wmErrs, err := e.cluster.watermarks(ctx, want)
	if err != nil {
		e.warn("refresh", "Listing watermarks failed, retrying in %s: %v", e.cfg.PollInterval, err)
		return
	}
	for _, k := range sortedKeys(wmErrs) {
		e.warn("watermarks:"+k.String(), "Listing the offsets of %s failed, retrying in %s: %v", k, e.cfg.PollInterval, wmErrs[k])
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range unlisted {
		m, ok := wm[k]
		if !ok || !e.unlisted[k] {
			continue
		}
		delete(e.unlisted, k)
		if e.snapshot != nil {
			snap, ok := e.snapshot[k]
			if !ok {
				e.log.Infof("Partition %s was created after this bounded run started; it is not read", k)
				continue
			}
			m.end = max(m.start, snap.end)
		}
		if err := e.addPartitionLocked(k, m, true); err != nil {
			e.failLocked(err)
			return
		}
		next, end, _ := e.planner.Position(k)
		e.log.Infof("Reading partition %s from offset %d (end %d)", k, next, end)
	}
	for _, k := range added {
		// A partition added while running is read from its beginning.
		m, ok := wm[k]
		if !ok {
			continue
		}
		if err := e.addPartitionLocked(k, m, false); err != nil {
			e.failLocked(fmt.Errorf("new partition: %w", err))
			return
		}
		e.log.Infof("Partition %s appeared; reading it from offset %d", k, m.start)
	}
	if e.cfg.StopAtEnd {
		return
	}
	for _, k := range known {
		m, ok := wm[k]
		if !ok {
			continue
		}
		p, still := e.parts[k]
		if !still {
			continue
		}
		err := e.planner.SetEnd(k, m.end)
		switch {
		case err == nil:
			p.endBack = false
		case e.cfg.ReadCommitted:
			// The last stable offset is below where reading was told to
			// start (a group offset inside an open transaction): wait.
		case !p.endBack:
			// Trusted only once a second listing says the same.
			p.endBack = true
			e.log.Warnf("Partition %s: the broker lists end offset %d, below offsets already planned; checking again in %s", k, m.end, e.cfg.PollInterval)
		default:
			next, _, _ := e.planner.Position(k)
			e.failLocked(fmt.Errorf("%s: the end offset moved back to %d, below offset %d already planned: the log was truncated (unclean leader election) and offsets [%d, %d) no longer exist as they were read: %w", k, m.end, next, m.end, next, err))
			return
		}
	}
}

// checkGroupDone asks, once this member's own partitions are read, whether
// the group committed every partition to the end snapshotted at start.
func (e *Engine) checkGroupDone(ctx context.Context) {
	e.mu.Lock()
	ready := e.ownWorkDoneLocked() && !e.groupDone
	e.mu.Unlock()
	if !ready {
		return
	}
	keys := sortedKeys(e.snapshot)
	committed, _, err := e.offsets.Committed(ctx, keys)
	if err != nil {
		e.warn("group-done", "Listing the group's committed offsets failed, retrying in %s: %v", e.cfg.PollInterval, err)
		return
	}
	var behind []string
	ownBehind := false
	e.mu.Lock()
	owned := len(e.parts) + len(e.unlisted)
	for _, k := range keys {
		snap := e.snapshot[k]
		c, ok := committed[k]
		if (ok && c < snap.end) || (!ok && snap.end > snap.start) {
			if e.parts[k] != nil {
				ownBehind = true // this member's own commit is due
			} else {
				behind = append(behind, k.String())
			}
		}
	}
	e.mu.Unlock()
	if ownBehind {
		select {
		case e.commitNow <- struct{}{}:
		default:
		}
		return
	}
	if len(behind) > 0 {
		if owned == 0 { // not assigned yet, or its partitions were lost
			e.infoEvery("group-done", "This member owns no partitions; waiting for the group to commit %d more partitions to their end (%s)", len(behind), strings.Join(behind, ", "))
		} else {
			e.infoEvery("group-done", "This member's partitions are read; waiting for other members to commit %d more partitions to their end (%s)", len(behind), strings.Join(behind, ", "))
		}
		return
	}
	e.mu.Lock()
	e.groupDone = true
	e.mu.Unlock()
	e.signal()
}

// topicGone handles a topic that no longer exists (why: the listing's
// error) or was recreated (why: nil; its new partitions are then read as new
// ones). A partition whose every planned offset was read is no longer read,
// with a warning, once its batches are done. One with offsets never read is
// data loss: it stops the engine naming the span, or with SkipDataLoss the
// span is counted as lost and the partition dropped at once.
func (e *Engine) topicGone(name string, why error) {
	what := "was deleted"
	if why == nil {
		what = "was recreated"
	}
	var gone []ranges.Key
	defer func() {
		for _, k := range gone {
			e.cache.Drop(k.Topic, k.Partition)
			e.obs.PartitionGone(k)
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.unlisted {
		if k.Topic == name {
			delete(e.unlisted, k)
		}
	}
	for _, k := range e.planner.Keys() {
		if k.Topic != name {
			continue
		}
		next, end, _ := e.planner.Position(k)
		p := e.parts[k]
		unread := min(next, end)
		for _, st := range p.open {
			if sent := st.sent.Load(); !st.readDone && sent < unread {
				unread = sent
			}
		}
		switch {
		case unread < end && !e.cfg.SkipDataLoss:
			if why == nil {
				why = fmt.Errorf("topics: topic %q %s", name, what)
			}
			e.failLocked(fmt.Errorf("%s: %v: offsets [%d, %d) of partition %d were never read: data loss", k, why, unread, end, k.Partition))
			return
		case unread < end:
			e.loseLocked(k, unread, end, "were never read: the topic "+what)
		case len(p.open) > 0:
			continue // read, but batches are still in the pipeline: wait for them
		default:
			e.log.Warnf("Topic %q %s; partition %d was read up to its end %d, so it is no longer read", name, what, k.Partition, end)
		}
		e.dropPartitionLocked(k, p)
		gone = append(gone, k)
	}
}

func valueBytes(recs []*kgo.Record) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Value))
	}
	return n
}
