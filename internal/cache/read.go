package cache

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumer is one franz-go client pinned to one partition. Its read state is
// touched only by the lease holder, so it needs no lock; the cache's fields
// (elem, lastUsed) are guarded by Cache.mu.
type consumer struct {
	id        uint64
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

	elem     *list.Element // position in Cache.lru while idle
	lastUsed time.Time     // when it was last released
}

// OffsetOutOfRangeError reports offsets a range needs that the partition no
// longer holds (deleted by retention or compaction of whole segments) or does
// not hold (the log was truncated). It wraps ErrOffsetOutOfRange.
type OffsetOutOfRangeError struct {
	Topic     string
	Partition int32
	Offset    int64 // the offset that was asked for
	LogStart  int64 // the partition's first offset now (-1 if unknown)
	LogEnd    int64 // the partition's high watermark now (-1 if unknown)
}

func (e *OffsetOutOfRangeError) Error() string {
	if e.LogStart >= 0 && e.Offset < e.LogStart {
		return fmt.Sprintf("%s/%d: offsets [%d, %d) no longer exist (log start is now %d): data was deleted before it was read",
			e.Topic, e.Partition, e.Offset, e.LogStart, e.LogStart)
	}
	return fmt.Sprintf("%s/%d: offset %d is out of range (log start %d, high watermark %d)",
		e.Topic, e.Partition, e.Offset, e.LogStart, e.LogEnd)
}

// Unwrap makes errors.Is(err, ErrOffsetOutOfRange) true.
func (e *OffsetOutOfRangeError) Unwrap() error { return ErrOffsetOutOfRange }

// maxLeaderRetries bounds how often one Read refreshes metadata after a
// leadership error before giving the error to the caller.
const maxLeaderRetries = 5

// Read delivers the records of [start, end) of the leased partition to emit,
// in offset order, in one or more slices (one per fetch). emit owns each
// slice. Read returns when the read position reaches end, which happens even
// if the last offsets of the range are transaction markers, aborted or
// compacted records. pos is the position reached: end on success; on error,
// the offset from which a retry must resume (every record below pos was
// given to emit). An error from emit is returned as is.
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
		// Deliver what is buffered below end.
		if n := cons.bufferedBelow(end); n > 0 {
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
			if err := emit(out); err != nil {
				return cons.next, err
			}
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
		retry, err := cons.fetch(ctx, c.cfg, end)
		if err != nil {
			return cons.next, err
		}
		if retry {
			leaderRetries++
			if leaderRetries > maxLeaderRetries {
				return cons.next, fmt.Errorf("read %s/%d at %d: leader unavailable after %d metadata refreshes", cons.topic, cons.partition, cons.fetched, maxLeaderRetries)
			}
			if err := sleep(ctx, time.Duration(leaderRetries)*100*time.Millisecond); err != nil {
				return cons.next, err
			}
			continue
		}
		leaderRetries = 0
	}
}

func (cons *consumer) seek(offset int64) {
	clear(cons.buf)
	cons.buf = nil
	cons.next = offset
	cons.fetched = offset
}

// bufferedBelow returns how many buffered records have offsets below end.
func (cons *consumer) bufferedBelow(end int64) int {
	n := 0
	for n < len(cons.buf) && cons.buf[n].Offset < end {
		n++
	}
	return n
}

// fetch issues one fetch at cons.fetched and appends what it returns to the
// buffer. retry is true after a leadership error that refreshed metadata.
func (cons *consumer) fetch(ctx context.Context, cfg Config, end int64) (retry bool, err error) {
	if cons.leader < 0 {
		if err := cons.loadMetadata(ctx); err != nil {
			return false, err
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(cfg.FetchMaxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = cfg.FetchMaxBytes
	if cfg.ReadCommitted {
		req.IsolationLevel = 1
	}
	req.SessionID = 0
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = cons.topic
	rt.TopicID = cons.topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = cons.partition
	rp.FetchOffset = cons.fetched
	rp.CurrentLeaderEpoch = cons.epoch
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = cfg.FetchMaxPartitionBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	kresp, err := cons.cl.Broker(int(cons.leader)).Request(ctx, req)
	if err != nil {
		cons.leader = -1
		return false, fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return false, fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
	}
	var part *kmsg.FetchResponseTopicPartition
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != cons.topic && t.TopicID != cons.topicID {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == cons.partition {
				part = &t.Partitions[j]
			}
		}
	}
	if part == nil {
		return false, fmt.Errorf("fetch %s/%d at %d: partition missing from the fetch response", cons.topic, cons.partition, cons.fetched)
	}

	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		switch {
		case errors.Is(err, kerr.OffsetOutOfRange):
			return false, cons.outOfRange(ctx, part)
		case errors.Is(err, kerr.NotLeaderForPartition),
			errors.Is(err, kerr.FencedLeaderEpoch),
			errors.Is(err, kerr.UnknownLeaderEpoch),
			errors.Is(err, kerr.LeaderNotAvailable),
			errors.Is(err, kerr.ReplicaNotAvailable),
			errors.Is(err, kerr.UnknownTopicOrPartition),
			errors.Is(err, kerr.UnknownTopicID),
			errors.Is(err, kerr.OffsetNotAvailable),
			errors.Is(err, kerr.KafkaStorageError):
			cons.leader = -1
			return true, nil
		default:
			return false, fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
		}
	}

	// Decode only what the range needs plus a little: a fetch is limited in
	// compressed bytes, so a well-compressed response can hold far more
	// records than the range, and decoding them all would hold the
	// partition's backlog in memory.
	part.RecordBatches = trimBatches(part.RecordBatches, end)

	opts := kgo.ProcessFetchPartitionOpts{
		Offset:    cons.fetched,
		Topic:     cons.topic,
		Partition: cons.partition,
	}
	if cfg.ReadCommitted {
		opts.IsolationLevel = kgo.ReadCommitted()
	}
	fp, next := kgo.ProcessFetchPartition(opts, part, decompressor, nil)
	if fp.Err != nil && len(fp.Records) == 0 && next == cons.fetched {
		return false, fmt.Errorf("fetch %s/%d at %d: decode: %w", cons.topic, cons.partition, cons.fetched, fp.Err)
	}
	for _, r := range fp.Records {
		if r.Offset >= cons.fetched {
			cons.buf = append(cons.buf, r)
		}
	}
	if next > cons.fetched {
		cons.fetched = next
	}
	return false, nil
}

var decompressor = kgo.DefaultDecompressor()

// trimBatches cuts raw record batches after the first batch that starts at
// or past end: the batches a range needs, and one more for the next range.
// The first batch is always kept, so the read position always advances. A
// truncated last batch is left for kgo.ProcessFetchPartition to skip.
func trimBatches(raw []byte, end int64) []byte {
	i := 0
	for len(raw)-i >= 12 {
		base := int64(binary.BigEndian.Uint64(raw[i:]))
		length := int(int32(binary.BigEndian.Uint32(raw[i+8:]))) + 12
		if length < 12 || length > len(raw)-i {
			break
		}
		i += length
		if base >= end {
			return raw[:i]
		}
	}
	return raw
}

// loadMetadata learns the partition's leader, leader epoch and topic ID.
func (cons *consumer) loadMetadata(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(cons.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cons.cl)
	if err != nil {
		return fmt.Errorf("metadata for %s/%d: %w", cons.topic, cons.partition, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != cons.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("metadata for %s/%d: %w: %w", cons.topic, cons.partition, ErrUnknownPartition, err)
			}
			return fmt.Errorf("metadata for %s/%d: %w", cons.topic, cons.partition, err)
		}
		if cons.topicID != ([16]byte{}) && t.TopicID != ([16]byte{}) && t.TopicID != cons.topicID {
			return fmt.Errorf("%s/%d: %w (topic id changed)", cons.topic, cons.partition, ErrTopicRecreated)
		}
		for _, p := range t.Partitions {
			if p.Partition != cons.partition {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && p.Leader < 0 {
				return fmt.Errorf("metadata for %s/%d: %w", cons.topic, cons.partition, err)
			}
			cons.topicID = t.TopicID
			cons.leader = p.Leader
			cons.epoch = p.LeaderEpoch
			return nil
		}
		return fmt.Errorf("metadata for %s/%d: %w: the topic has %d partitions", cons.topic, cons.partition, ErrUnknownPartition, len(t.Partitions))
	}
	return fmt.Errorf("metadata for %s/%d: %w: topic missing from the metadata response", cons.topic, cons.partition, ErrUnknownPartition)
}

// outOfRange builds the error for an OFFSET_OUT_OF_RANGE answer, asking the
// broker for the partition's current bounds so the message says what is
// missing.
func (cons *consumer) outOfRange(ctx context.Context, part *kmsg.FetchResponseTopicPartition) error {
	e := &OffsetOutOfRangeError{Topic: cons.topic, Partition: cons.partition, Offset: cons.fetched, LogStart: -1, LogEnd: -1}
	if part.LogStartOffset >= 0 && part.HighWatermark >= 0 {
		e.LogStart, e.LogEnd = part.LogStartOffset, part.HighWatermark
	}
	for _, ts := range []int64{-2, -1} { // earliest, latest
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = cons.topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = cons.partition
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cons.cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			continue
		}
		if ts == -2 {
			e.LogStart = resp.Topics[0].Partitions[0].Offset
		} else {
			e.LogEnd = resp.Topics[0].Partitions[0].Offset
		}
	}
	return e
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
