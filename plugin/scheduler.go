package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// How ranges move through the input:
//
//   - The scheduler goroutine takes a range from the planner whenever a
//     max_in_flight slot is free and starts a reader goroutine for it.
//   - The reader reads the range through a leased consumer. Ranges of one
//     partition are read in parallel, but each partition emits its ranges to
//     ReadBatch in offset order: a range's batches wait (queued) until every
//     earlier range of its partition has emitted all of its own. So what
//     Benthos has seen of a partition is always a prefix of it, and after a
//     graceful stop (Benthos acknowledges everything it was given) the
//     acknowledged records form a prefix too, which one committed offset
//     describes exactly: a restart re-delivers nothing that was acknowledged.
//   - Each batch covers a span of its range; acknowledgements may arrive in
//     any order. A range is complete once it is read and all its batches are
//     acknowledged; the tracker then moves the partition's frontier. Within
//     the first incomplete range the acknowledged prefix of batches counts
//     too, so committed progress never waits for a whole range.
//   - With a consumer group, a range keeps its slot until a commit covers it,
//     so at most max_in_flight ranges lie past the committed offset: a crash
//     re-reads at most max_in_flight x max_range_records records. When every
//     slot is held by ranges waiting for a commit, the committer is woken to
//     commit at once instead of at the next commit_period.

// readAheadBytes is how many value bytes a range that is not yet its
// partition's turn to emit reads ahead before it waits.
const readAheadBytes = 4 << 20

// partition is the input's state for one partition. Guarded by input.mu.
type partition struct {
	open      map[int64]*rangeState // ranges launched and not complete, by start offset
	emitFrom  int64                 // start of the range whose turn it is to emit
	committed int64                 // offset last committed to the group; -1 if none
	held      []int64               // ends of complete ranges whose slot waits for a commit
}

func newPartition(start, committed int64) *partition {
	return &partition{open: map[int64]*rangeState{}, emitFrom: start, committed: committed}
}

// rangeState follows one range in flight. Guarded by input.mu, except
// queued, which only the range's reader touches.
type rangeState struct {
	r           ranges.Range
	pending     int           // batches emitted and not yet acknowledged
	readDone    bool          // read and every batch emitted
	spans       []span        // the range's batches in offset order
	acked       int           // spans[:acked] are acknowledged
	turn        chan struct{} // closed when every earlier range of the partition has emitted everything
	queued      []*emitted    // batches read before the range's turn (reader only)
	queuedBytes int64         // value bytes in queued (reader only)
	ackSig      chan struct{} // ordered mode: buffered 1, signalled by each batch's acknowledgement
}

// span is what one batch of a range covers: up to end (exclusive).
type span struct {
	end  int64
	done bool
}

// prefix returns the offset up to which the range's records are all
// acknowledged.
func (st *rangeState) prefix() int64 {
	if st.acked == 0 {
		return st.r.Start
	}
	return st.spans[st.acked-1].end
}

// schedule is the scheduler goroutine: it starts a reader for every range the
// planner yields while a max_in_flight slot is free, refreshes watermarks
// when caught up, and closes the batches channel once nothing more will be
// read.
func (in *input) schedule() {
	defer in.wg.Done()
	ctx, cancel := in.shut.SoftStopCtx(context.Background())
	defer cancel()

	var readers sync.WaitGroup
	defer func() {
		cancel()
		readers.Wait()
		close(in.batches)
	}()

	poll := time.NewTicker(in.conf.PollInterval)
	defer poll.Stop()
	for {
		if in.failed() {
			return
		}
		in.launch(ctx, &readers)
		if in.finished() {
			in.log.Infof("Read every range up to the end offsets snapshotted at start")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-in.wake:
		case <-poll.C:
			if in.conf.StopAt == stopNever && in.caughtUp() {
				in.refresh(ctx)
			}
		}
	}
}

// launch starts readers for planned ranges while max_in_flight allows.
func (in *input) launch(ctx context.Context, readers *sync.WaitGroup) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.inflight < in.conf.MaxInFlight {
		r, ok := in.planner.Next(in.skip)
		if !ok {
			return
		}
		if err := in.tracker.Add(r); err != nil {
			// The planner and the tracker disagree: a bug, never data to skip.
			in.failLocked(fmt.Errorf("track planned range %s: %w", r, err))
			return
		}
		st := &rangeState{r: r, turn: make(chan struct{})}
		if in.conf.Ordered {
			st.ackSig = make(chan struct{}, 1)
		}
		p := in.parts[r.Key()]
		p.open[r.Start] = st
		if p.emitFrom == r.Start {
			close(st.turn)
		}
		in.inflight++
		in.reading++
		readers.Add(1)
		go func() {
			defer readers.Done()
			in.read(ctx, st)
		}()
	}
}

func (in *input) finished() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.conf.StopAt == stopEnd && in.planner.Done() && in.reading == 0
}

func (in *input) caughtUp() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.planner.Done()
}

func (in *input) failed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fatal != nil
}

// read is a reader goroutine: it reads one range through a leased consumer,
// retrying from where it stopped (with a new client) after errors until ctx
// ends, and hands its batches to ReadBatch in turn.
func (in *input) read(ctx context.Context, st *rangeState) {
	r := st.r
	pos := r.Start
	backoff := 100 * time.Millisecond
	emit := func(recs []*kgo.Record) error { return in.emit(ctx, st, recs) }
	defer in.abandonQueued(st)
	for {
		lease, err := in.cache.Acquire(ctx, r.Topic, r.Partition, pos)
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
		if isFatal(err) {
			in.fail(fmt.Errorf("read %s: %w", r, err))
			return
		}
		in.warn("read:"+r.Key().String(), "Reading %s stopped at offset %d, retrying in %s: %v", r, pos, backoff, err)
		if sleep(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 10*time.Second)
	}
	// The lease is back in the cache; wait for the range's turn to emit
	// what was read ahead.
	select {
	case <-st.turn:
	case <-ctx.Done():
		return
	}
	if err := in.flush(ctx, st); err != nil {
		return
	}

	in.mu.Lock()
	st.readDone = true
	in.reading--
	p := in.parts[r.Key()]
	p.emitFrom = r.End
	if next := p.open[r.End]; next != nil {
		close(next.turn)
	}
	if st.pending == 0 {
		in.completeLocked(st)
	}
	in.mu.Unlock()
	in.signal()
}

// emit turns one slice of a range's records into a batch and sends it to
// ReadBatch, or queues it until the range's turn.
func (in *input) emit(ctx context.Context, st *rangeState, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	in.mu.Lock()
	idx := len(st.spans)
	st.spans = append(st.spans, span{end: recs[len(recs)-1].Offset + 1})
	st.pending++
	in.unacked++
	in.mu.Unlock()
	e := &emitted{recs: recs, r: st.r}
	e.ack = func() { in.batchAcked(st, idx) }

	select {
	case <-st.turn:
	default:
		st.queued = append(st.queued, e)
		st.queuedBytes += valueBytes(recs)
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
		return in.flush(ctx, st)
	}
	if err := in.flush(ctx, st); err != nil {
		return err
	}
	return in.send(ctx, st, e)
}

// flush sends the batches queued before the range's turn.
func (in *input) flush(ctx context.Context, st *rangeState) error {
	for len(st.queued) > 0 {
		if err := in.send(ctx, st, st.queued[0]); err != nil {
			return err
		}
		st.queued = st.queued[1:]
	}
	st.queued = nil
	return nil
}

// send hands one batch to ReadBatch. In ordered mode it then waits for the
// batch's acknowledgement: Benthos may process batches in parallel, so the
// next batch of the partition goes only once this one is through.
func (in *input) send(ctx context.Context, st *rangeState, e *emitted) error {
	// Messages are built only now, and by at most cap(in.building) readers
	// at a time: a batch waiting for its turn or for ReadBatch holds just
	// its records, not a message and a metadata map per record.
	select {
	case in.building <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.batch = newBatch(e.recs, e.r)
	select {
	case in.batches <- e:
		<-in.building
		in.records.Add(int64(len(e.recs)))
		in.bytes.Add(valueBytes(e.recs))
	case <-ctx.Done():
		<-in.building
		e.batch = nil
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

// abandonQueued forgets the batches of a reader that stops before sending
// them, so ReadBatch does not wait for their acknowledgement.
func (in *input) abandonQueued(st *rangeState) {
	if len(st.queued) == 0 {
		return
	}
	in.mu.Lock()
	in.unacked -= len(st.queued)
	st.pending -= len(st.queued)
	in.mu.Unlock()
	st.queued = nil
	in.signalReplay()
}

// batchAcked records the acknowledgement of batch idx of st.
func (in *input) batchAcked(st *rangeState, idx int) {
	in.mu.Lock()
	st.pending--
	st.spans[idx].done = true
	for st.acked < len(st.spans) && st.spans[st.acked].done {
		st.acked++
	}
	if st.readDone && st.pending == 0 {
		in.completeLocked(st)
	}
	in.mu.Unlock()
	if st.ackSig != nil {
		st.ackSig <- struct{}{}
	}
	in.signal()
}

// completeLocked marks a range read and acknowledged. Without a consumer
// group its slot is free at once; with one, once a commit covers it.
func (in *input) completeLocked(st *rangeState) {
	if _, _, err := in.tracker.Ack(st.r); err != nil {
		in.failLocked(fmt.Errorf("acknowledge %s: %w", st.r, err))
		return
	}
	p := in.parts[st.r.Key()]
	delete(p.open, st.r.Start)
	in.done.Add(1)
	if in.conf.ConsumerGroup == "" {
		in.inflight--
		return
	}
	p.held = append(p.held, st.r.End)
	if in.inflight >= in.conf.MaxInFlight {
		select {
		case in.commitNow <- struct{}{}:
		default:
		}
	}
}

// refresh lists watermarks again (and partitions of whole topics) and lets
// the planner plan up to the new ends.
func (in *input) refresh(ctx context.Context) {
	var dynamic []TopicSpec
	for _, t := range in.conf.Topics {
		if t.Partitions == nil {
			dynamic = append(dynamic, t)
		}
	}
	in.mu.Lock()
	keys := in.planner.Keys()
	in.mu.Unlock()

	var added []ranges.Key
	if len(dynamic) > 0 {
		all, err := in.cluster.resolve(ctx, dynamic)
		if err != nil {
			in.warn("refresh", "Listing partitions failed, retrying in %s: %v", in.conf.PollInterval, err)
			return
		}
		in.mu.Lock()
		for _, k := range all {
			if _, ok := in.parts[k]; !ok {
				added = append(added, k)
			}
		}
		in.mu.Unlock()
	}
	wm, err := in.cluster.watermarks(ctx, append(keys, added...))
	if err != nil {
		in.warn("refresh", "Listing watermarks failed, retrying in %s: %v", in.conf.PollInterval, err)
		return
	}

	in.mu.Lock()
	defer in.mu.Unlock()
	for _, k := range added {
		// A partition added while running is read from its beginning.
		m := wm[k]
		if err := in.planner.Add(k, m.start, m.end); err != nil {
			in.failLocked(fmt.Errorf("plan new partition %s: %w", k, err))
			return
		}
		if err := in.tracker.Start(k, m.start); err != nil {
			in.failLocked(fmt.Errorf("track new partition %s: %w", k, err))
			return
		}
		in.parts[k] = newPartition(m.start, -1)
		in.log.Infof("Partition %s appeared; reading it from offset %d", k, m.start)
	}
	for _, k := range keys {
		m, ok := wm[k]
		if !ok {
			continue
		}
		if err := in.planner.SetEnd(k, m.end); err != nil {
			in.failLocked(fmt.Errorf("partition %s end offset moved back to %d (truncated or recreated): %w", k, m.end, err))
			return
		}
	}
}

func (in *input) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}
