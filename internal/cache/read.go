package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/backoff"
)

// consumer is one franz-go client pinned to one partition. Its read state is
// touched only by the lease holder, so it needs no lock; the cache's fields
// (elem, lastUsed) are guarded by Cache.mu.
type consumer struct {
	cl        *kgo.Client
	topic     string
	partition int32

	// Where the partition lives, learned from metadata; leader < 0 means
	// unknown (load before the next fetch).
	topicID [16]byte
	leader  int32
	epoch   int32

	// Read position. next is the offset from which every later record will
	// be delivered (-1: nothing read yet). buf holds the records fetched but
	// not delivered, all at offsets >= next; fetched is the offset the next
	// fetch asks for. No record outside buf exists in [next, fetched).
	next    int64
	fetched int64
	buf     []*kgo.Record

	// Truncation detection (KIP-320). lastEpoch is the leader epoch of the
	// last record batch below fetched (-1: nothing fetched since the last
	// seek). validate is set by a leadership error: before fetching again,
	// the new leader must confirm that its log still holds every offset
	// below fetched.
	lastEpoch int32
	validate  bool
	// stalls counts the fetches in a row that returned record bytes but
	// advanced nothing.
	stalls int

	elem     *list.Element // position in Cache.lru while idle
	bufBytes int64         // RecordBytes of buf while idle (Cache.idleBuf counts it)
	lastUsed time.Time     // when it was last released
}

func newConsumer(cl *kgo.Client, topic string, partition int32) *consumer {
	return &consumer{cl: cl, topic: topic, partition: partition, leader: -1, epoch: -1, next: -1, lastEpoch: -1}
}

// maxLeaderRetries bounds how often one Read refreshes metadata after a
// leadership error before giving the error to the caller.
const maxLeaderRetries = 5

// maxStalls bounds the fetches in a row that return record bytes but
// neither a record nor a new position (a batch kgo cannot decode without
// saying why) before Read reports the batch as corrupt.
const maxStalls = 2

// Read delivers the records of [start, end) of the leased partition to emit,
// in offset order, in one or more slices (one per fetch). emit owns each
// slice. Read returns when the read position reaches end, which happens even
// if the last offsets of the range are transaction markers, aborted or
// compacted records. pos is the position reached: end on success; on error,
// the offset from which a retry must resume (every record below pos was
// given to emit). An error from emit is returned as is; the others are
// classified by Permanent and described in the package doc.
func (l *Lease) Read(ctx context.Context, start, end int64, emit func([]*kgo.Record) error) (pos int64, err error) {
	if l.released.Load() {
		return start, errors.New("read on a released lease")
	}
	c, cons := l.c, l.cons
	if start > end {
		return start, fmt.Errorf("read %s/%d: invalid range [%d, %d)", cons.topic, cons.partition, start, end)
	}
	switch {
	case cons.next == start:
		c.continuations.Add(1)
	case cons.next >= 0:
		c.seeks.Add(1)
		cons.seek(start)
	default:
		cons.seek(start)
	}

	leaderRetries := 0
	for {
		if err := cons.deliver(end, emit); err != nil {
			return cons.next, err
		}
		if len(cons.buf) > 0 || cons.fetched >= end {
			// The position reached end: the next buffered record is at or
			// past end, or every offset below fetched was delivered or holds
			// no record. Offsets in [end, fetched) outside the buffer hold
			// no record either, so the next range continues from end.
			cons.next = end
			return end, nil
		}
		if err := ctx.Err(); err != nil {
			return cons.next, err
		}
		leaderErr, err := cons.fetch(ctx, c.cfg, end)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				// What precedes the corrupt batch was buffered: deliver it,
				// so pos is the corrupt batch's offset.
				if derr := cons.deliver(end, emit); derr != nil {
					return cons.next, derr
				}
			}
			return cons.next, err
		}
		if leaderErr != nil {
			leaderRetries++
			if leaderRetries > maxLeaderRetries {
				return cons.next, fmt.Errorf("read %s/%d at %d: %w (still after %d metadata refreshes)", cons.topic, cons.partition, cons.fetched, leaderErr, maxLeaderRetries)
			}
			if err := backoff.Wait(ctx, time.Duration(leaderRetries)*100*time.Millisecond); err != nil {
				return cons.next, err
			}
			continue
		}
		leaderRetries = 0
	}
}

// deliver hands the buffered records below end to emit and moves the
// position past them.
func (cons *consumer) deliver(end int64, emit func([]*kgo.Record) error) error {
	n := cons.bufferedBelow(end)
	if n == 0 {
		return nil
	}
	out := make([]*kgo.Record, n)
	copy(out, cons.buf[:n])
	clear(cons.buf[:n])
	cons.buf = cons.buf[n:]
	if len(cons.buf) == 0 {
		cons.buf = nil
		cons.next = cons.fetched
	} else {
		cons.next = out[n-1].Offset + 1
	}
	return emit(out)
}

func (cons *consumer) seek(offset int64) {
	clear(cons.buf)
	cons.buf = nil
	cons.next = offset
	cons.fetched = offset
	cons.lastEpoch = -1
	cons.validate = false
}

// bufferedBelow returns how many buffered records have offsets below end.
func (cons *consumer) bufferedBelow(end int64) int {
	n := 0
	for n < len(cons.buf) && cons.buf[n].Offset < end {
		n++
	}
	return n
}
