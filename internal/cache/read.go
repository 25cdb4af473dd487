package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/backoff"
)

// cursor is one read position of one partition. It holds where the next
// record will come from, the records fetched past it, and what the
// partition's leader and leader epoch were when it last looked. It is not a
// client. Every cursor fetches through its broker's fetch loop on the cache's client.
//
// A cursor has one holder at a time. That is the lease holder while leased,
// the revival goroutine while it relearns its leader, else nobody (idle). Who
// holds it, and what it keeps for whom, is its state (state.go), changed
// only by Cache.transitionLocked. The holder's fields are touched only by
// the holder, or under Cache.mu while it has none. The shared ones always
// under Cache.mu, since the fetch loop reads and writes them too.
type cursor struct {
	topic     string
	partition int32

	// Shared, under Cache.mu.
	state   cursorState // its lifecycle: see state.go
	topicID [16]byte
	leader  int32 // -1: unknown, learn it before fetching
	epoch   int32
	replica int32 // preferred read replica (KIP-392); -1: the leader
	// replicaFails counts the replica's failures in a row. Until
	// racklessUntil, and for racklessLeft more fetches, the cursor
	// fetches from the leader without the rack (racklessAt).
	replicaFails  int
	racklessUntil time.Time
	racklessLeft  int
	gen           uint64 // bumped by every seek and reset: answers to older fetches are dropped
	fetchAt       int64  // the offset the loop fetches next: past the queue; -1 until the queue is decoded
	want          int64  // the loop fetches while fetchAt < want (MaxInt64 while it follows the tail)
	queue         []*rawFetch
	// queueBytes is the size of the record batches in queue.
	queueBytes int64
	// decoding is the answer its holder took last, while it shares a
	// response. The records decoded from it lie in the response until they
	// are delivered, so its hold ends only at the holder's next take (buf
	// is then empty) or when the lease ends (release owns buf's records
	// first). Under Cache.mu.
	decoding  *rawFetch
	inFlight  bool          // part of a fetch under way
	lastRound uint64        // the loop round that last fetched it
	err       error         // for the holder: what the loop (or Close) saw instead of records; what a failed or truncated cursor keeps for its next lease
	sig       chan struct{} // buffered 1: the queue grew or err was set
	loop      *loop         // the fetch loop it is in; nil if none
	high      int64         // the partition's end as the last fetch showed it
	emitting  atomic.Bool   // its holder is inside emit, so wants no data now
	revivals  int           // revivals since a fetch last served it (see startRevivalLocked)
	started   bool          // created by Watch and not in a loop yet: a partition started (see joinLoopLocked)
	elem      *list.Element // on the idle list (listed states), else nil
	keptBytes int64         // while idle: what it keeps (idleList.bytes counts it)
	counted   bool          // counted in idleList.keeping (idleList.recount)
	lastUsed  time.Time
	needSince time.Time // metadata older than this is stale for it
	// laneless says an answer on a lane brought no record, so it fetches on
	// its broker's loop until an answer does, or its next lease (lanes.go).
	laneless bool
	// offsetBytes is the bytes per offset of its last answer with records
	// (0 if none yet), to tell a backlog worth a lane (backlogged).
	offsetBytes float64
	// batchBytes is the largest record batch of that answer, in bytes
	// (leftAsk).
	batchBytes int32

	// The holder's own. next is the offset from which every later record
	// will be delivered (-1 if nothing was read yet). buf holds the records
	// decoded but not delivered, all at offsets >= next. fetched is where
	// the next decoded batch starts. No record outside buf exists in
	// [next, fetched).
	next    int64
	fetched int64
	buf     []*kgo.Record
	// bufHigh is the partition's high watermark as the fetch whose records
	// buf holds saw it. decode fills buf only once it is empty, so they all
	// come from one fetch.
	bufHigh int64
	// Truncation detection (KIP-320). lastEpoch is the leader epoch of the
	// last record batch below fetched (-1 if nothing was fetched since the
	// last seek). validate is set by a leadership error. Before fetching
	// again, the new leader must confirm that its log still holds every offset
	// below fetched.
	lastEpoch int32
	validate  bool
	// stalls counts the fetches in a row that returned record bytes but
	// advanced nothing.
	stalls int
}

// rawFetch is one partition's part of a fetch response, not decoded yet.
// Its record batches start at or after at.
type rawFetch struct {
	part  kmsg.FetchResponseTopicPartition
	at    int64
	gen   uint64
	bytes int64
	// shared is the response whose buffer part's record batches lie in,
	// when they were not copied out of it (a leased cursor's answer, see
	// loop.dispatch). nil when they are the raw's own.
	shared *sharedResp
}

// dropDecodingLocked ends the hold of the answer cur's holder decoded last
// on its shared response, if any. Under Cache.mu.
func (cur *cursor) dropDecodingLocked() {
	if cur.decoding != nil {
		cur.decoding.releaseLocked()
		cur.decoding = nil
	}
}

// releaseLocked drops raw's hold on the response it shares, if any. The
// last hold gives the response's bytes back to Cache.pinned. Under
// Cache.mu.
func (raw *rawFetch) releaseLocked() {
	sh := raw.shared
	if sh == nil {
		return
	}
	raw.shared = nil
	if sh.refs--; sh.refs == 0 {
		*sh.pinned -= sh.bytes
	}
}

func newCursor(topic string, partition int32) *cursor {
	return &cursor{
		topic: topic, partition: partition,
		leader: -1, epoch: -1, replica: -1,
		next: -1, fetchAt: -1, lastEpoch: -1, high: -1,
		sig: make(chan struct{}, 1),
	}
}

// seekLocked moves every position of cur to offset and drops what it
// buffered. Under Cache.mu, by the holder (or for an idle cursor).
func (cur *cursor) seekLocked(offset int64) {
	clear(cur.buf)
	cur.buf = nil
	cur.next, cur.fetched = offset, offset
	cur.lastEpoch = -1
	cur.validate = false
	cur.stalls = 0
	cur.resetQueueLocked(offset)
	cur.err = nil
}

// dropBufferedLocked drops what cur fetched past its position, decoded or
// queued, and keeps the position with its leader epoch and any pending
// validation. Dropping records is not a seek, and the next fetch after a
// leader change must still validate what was delivered. lastEpoch stays the
// epoch of the last batch fetched, which is at or after the batch of the
// last delivered offset (epochs only grow along the log), so the check
// against the new leader's end is never weaker. Under Cache.mu, for a
// cursor without a holder.
func (cur *cursor) dropBufferedLocked() {
	clear(cur.buf)
	cur.buf = nil
	cur.fetched = cur.next
	cur.stalls = 0
	cur.resetQueueLocked(cur.next)
}

// resetQueueLocked drops the fetched batches not decoded yet, and any fetch
// under way. The loop fetches again from offset.
func (cur *cursor) resetQueueLocked(offset int64) {
	cur.gen++
	for _, raw := range cur.queue {
		raw.releaseLocked()
	}
	cur.queue, cur.queueBytes = nil, 0
	cur.inFlight = false
	cur.fetchAt = offset
}

func (cur *cursor) setErrLocked(err error) {
	cur.err = err
	cur.signal()
}

func (cur *cursor) signal() {
	select {
	case cur.sig <- struct{}{}:
	default:
	}
}

// maxLeaderRetries bounds how often one Read relearns the leader after a
// leadership error before giving the error to the caller.
const maxLeaderRetries = 10

// maxStalls bounds the fetches in a row that return record bytes but
// neither a record nor a new position (a batch kgo cannot decode without
// saying why) before Read reports the batch as corrupt.
const maxStalls = 2

// Read delivers the records of [start, end) of the leased partition to emit,
// in offset order, in one or more slices (one per fetched batch set). emit
// owns each slice. With each slice it gets high, the partition's high
// watermark as the fetch that returned the slice's records saw it (the high
// watermark under read_committed too, not the last stable offset). A
// record's lag then is high - offset - 1, 0 for the record at the tail.
// Records read ahead keep their fetch's watermark, however much later they
// are delivered. Read returns when the read position reaches end, which
// happens even if the last offsets of the range are transaction markers,
// aborted or compacted records. pos is the position reached. It is end on
// success. On error it is the offset from which a retry must resume (every
// record below pos was given to emit). An error from emit is returned as is. The
// others are classified by Permanent and described in the package doc.
func (l *Lease) Read(ctx context.Context, start, end int64, emit func(recs []*kgo.Record, high int64) error) (pos int64, err error) {
	if l.released.Load() {
		return start, errors.New("read on a released lease")
	}
	c, cur := l.c, l.cur
	if start > end {
		return start, fmt.Errorf("read %s/%d: invalid range [%d, %d)", cur.topic, cur.partition, start, end)
	}
	c.mu.Lock()
	ferr := c.startReadLocked(cur, start, end)
	c.mu.Unlock()
	if ferr != nil {
		// Seen while it followed the tail at start (a truncation, an
		// offset out of range). Reading on from there would be wrong. It
		// is classified like any fetch error. A leadership error only has
		// the leader learnt again, by take below.
		if _, err := c.fetchFailed(ctx, cur, ferr); err != nil {
			return start, err
		}
	}

	// A holder inside emit wants no data (see loop.build).
	inner := emit
	emit = func(recs []*kgo.Record, high int64) error {
		cur.emitting.Store(true)
		defer cur.emitting.Store(false)
		return inner(recs, high)
	}
	leaderRetries := 0
	for {
		if err := cur.deliver(end, emit); err != nil {
			return cur.next, err
		}
		if len(cur.buf) > 0 || cur.fetched >= end {
			// The position reached end. The next buffered record is at or
			// past end, or every offset below fetched was delivered or holds
			// no record. Offsets in [end, fetched) outside the buffer hold
			// no record either, so the next range continues from end.
			cur.next = end
			return end, nil
		}
		if err := ctx.Err(); err != nil {
			return cur.next, err
		}
		raw, leaderErr, err := c.take(ctx, cur)
		if err == nil && leaderErr == nil {
			err = c.decode(cur, raw, end)
			if errors.Is(err, ErrCorrupt) {
				// What precedes the corrupt batch was buffered. Deliver it,
				// so pos is the corrupt batch's offset.
				if derr := cur.deliver(end, emit); derr != nil {
					return cur.next, derr
				}
				if cur.fetched >= end {
					continue // the range ends before the corrupt batch
				}
			}
			if err == nil {
				leaderRetries = 0
				continue
			}
		}
		if err != nil {
			return cur.next, err
		}
		leaderRetries++
		if leaderRetries > maxLeaderRetries {
			return cur.next, fmt.Errorf("read %s/%d at %d: %w (still after %d metadata refreshes)", cur.topic, cur.partition, cur.fetched, leaderErr, maxLeaderRetries)
		}
		if err := backoff.Wait(ctx, time.Duration(leaderRetries)*20*time.Millisecond); err != nil {
			return cur.next, err
		}
	}
}

// startReadLocked moves the leased cursor cur to start for a read of
// [start, end). A continuation keeps its position and returns (and clears)
// the error it kept for this lease, if any. Anything else seeks.
func (c *Cache) startReadLocked(cur *cursor, start, end int64) (held error) {
	switch {
	case cur.next == start:
		c.counts.continuations.Add(1)
		held, cur.err = cur.err, nil
	case cur.next >= 0:
		c.counts.seeks.Add(1)
		cur.seekLocked(start)
		cur.want = end // a follower sought elsewhere no longer follows
	default:
		cur.seekLocked(start)
		cur.want = end
	}
	if cur.want < end {
		cur.want = end
	}
	return held
}

// take returns the next fetched batches of cur for its holder, waiting for
// the fetch loop as long as ctx allows. It puts cur into its leader's loop,
// learning the leader first if it has to. leaderErr, with err nil, is a
// leadership error. The caller backs off and takes again.
func (c *Cache) take(ctx context.Context, cur *cursor) (raw *rawFetch, leaderErr, err error) {
	c.mu.Lock()
	for {
		if len(cur.queue) > 0 {
			raw = cur.queue[0]
			cur.queue[0] = nil
			cur.queue = cur.queue[1:]
			cur.dropDecodingLocked()
			if raw.shared != nil {
				cur.decoding = raw
			}
			cur.queueBytes -= raw.bytes
			if cur.loop != nil {
				cur.loop.kick() // room for the next fetch
			}
			c.mu.Unlock()
			return raw, nil, nil
		}
		if cur.err != nil {
			ferr := cur.err
			cur.err = nil
			c.mu.Unlock()
			leaderErr, err := c.fetchFailed(ctx, cur, ferr)
			return nil, leaderErr, err
		}
		if c.closed && c.ctx.Err() != nil {
			c.mu.Unlock()
			return nil, nil, ErrClosed
		}
		if cur.loop == nil && cur.leader < 0 {
			since := cur.needSince
			c.mu.Unlock()
			if leaderErr, err := c.locate(ctx, cur, since); leaderErr != nil || err != nil {
				return nil, leaderErr, err
			}
			c.mu.Lock()
			continue
		}
		c.joinLoopLocked(cur)
		sig := cur.sig
		c.mu.Unlock()
		select {
		case <-sig:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		c.mu.Lock()
	}
}

// fetchFailed turns what the loop saw instead of records into the holder's
// result. That is a leadership error to retry after relearning the leader,
// or an error to return.
func (c *Cache) fetchFailed(ctx context.Context, cur *cursor, ferr error) (leaderErr, err error) {
	var fe *fetchError
	if !errors.As(ferr, &fe) {
		return nil, ferr // ErrClosed
	}
	switch {
	case fe.part == nil:
		// The request failed (a connection error). The caller retries
		// with a new cursor, after learning the leader again.
		return nil, fe
	case errors.Is(fe.err, kerr.OffsetOutOfRange):
		return nil, cur.outOfRange(ctx, c.cl, fe.part)
	case isLeaderErr(fe.err):
		cur.leaderChanged()
		return fe, nil
	default:
		// Authorisation failures and every other broker error are returned
		// at once, never retried here.
		return nil, fe
	}
}

// fetchError is a fetch that brought no records. Either the request failed
// (part nil) or the broker answered the partition with an error.
type fetchError struct {
	topic     string
	partition int32
	offset    int64
	broker    int32
	part      *kmsg.FetchResponseTopicPartition
	err       error
}

func (e *fetchError) Error() string {
	return fmt.Sprintf("fetch %s/%d at %d from broker %d: %v", e.topic, e.partition, e.offset, e.broker, e.err)
}

func (e *fetchError) Unwrap() error { return e.err }

// leaderChanged forgets the leader after a leadership error. If records
// were fetched, the next fetch first validates the position against the
// new leader's log. The holder's.
func (cur *cursor) leaderChanged() {
	if cur.lastEpoch >= 0 {
		cur.validate = true
	}
}

// deliver hands the buffered records below end to emit and moves the
// position past them.
func (cur *cursor) deliver(end int64, emit func([]*kgo.Record, int64) error) error {
	n := cur.bufferedBelow(end)
	if n == 0 {
		return nil
	}
	if n == len(cur.buf) {
		// Everything buffered is handed over, the buffer itself.
		out := cur.buf[:n:n]
		cur.buf = nil
		cur.next = cur.fetched
		return emit(out, cur.bufHigh)
	}
	// A part is a copy, so that what stays buffered does not pin the records
	// handed over (the slice's array is the cursor's until it is empty).
	out := make([]*kgo.Record, n)
	copy(out, cur.buf[:n])
	clear(cur.buf[:n])
	cur.buf = cur.buf[n:]
	cur.next = out[n-1].Offset + 1
	return emit(out, cur.bufHigh)
}

// bufferedBelow returns how many buffered records have offsets below end.
func (cur *cursor) bufferedBelow(end int64) int {
	n := 0
	for n < len(cur.buf) && cur.buf[n].Offset < end {
		n++
	}
	return n
}

// follows reports whether a released cursor was following the tail before
// its lease (it still wants everything).
func (cur *cursor) follows() bool { return cur.want == math.MaxInt64 }
