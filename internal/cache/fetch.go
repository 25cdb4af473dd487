package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// isLeaderErr reports the partition errors that mean "ask someone else, or
// later": the client refreshes metadata and retries, at most
// maxLeaderRetries times per Read.
func isLeaderErr(err error) bool {
	for _, target := range []error{
		kerr.NotLeaderForPartition,
		kerr.FencedLeaderEpoch,
		kerr.UnknownLeaderEpoch,
		kerr.LeaderNotAvailable,
		kerr.ReplicaNotAvailable,
		kerr.UnknownTopicOrPartition, // metadata then says whether it exists
		kerr.UnknownTopicID,
		kerr.OffsetNotAvailable,
		kerr.KafkaStorageError,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// fetch issues one fetch at cons.fetched and appends what it returns to the
// buffer. leaderErr is set, with err nil, after a leadership error: metadata
// is reloaded before the next fetch, and the fetch position is validated
// against the new leader's log first. A corrupt batch buffers the records
// before it, moves fetched to it, and returns an error wrapping ErrCorrupt.
func (cons *consumer) fetch(ctx context.Context, cfg Config, end int64) (leaderErr, err error) {
	if cons.leader < 0 {
		if err := cons.loadMetadata(ctx); err != nil {
			return nil, err
		}
	}
	if cons.validate {
		if leaderErr, err := cons.validatePosition(ctx); leaderErr != nil || err != nil {
			return leaderErr, err
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
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
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
		return nil, fmt.Errorf("fetch %s/%d at %d: partition missing from the fetch response", cons.topic, cons.partition, cons.fetched)
	}

	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		switch {
		case errors.Is(err, kerr.OffsetOutOfRange):
			return nil, cons.outOfRange(ctx, part)
		case isLeaderErr(err):
			cons.leaderChanged()
			return fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err), nil
		default:
			// Authorisation failures and every other broker error: at
			// once, never retried here.
			return nil, fmt.Errorf("fetch %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
		}
	}

	// Decode only what the range needs plus a little: a fetch is limited in
	// compressed bytes, so a well-compressed response can hold far more
	// records than the range, and decoding them all would hold the
	// partition's backlog in memory.
	raw := trimBatches(part.RecordBatches, end)
	part.RecordBatches = raw

	opts := kgo.ProcessFetchPartitionOpts{
		Offset:    cons.fetched,
		Topic:     cons.topic,
		Partition: cons.partition,
	}
	if cfg.ReadCommitted {
		opts.IsolationLevel = kgo.ReadCommitted()
	}
	fp, next := kgo.ProcessFetchPartition(opts, part, decompressor, nil)
	if fp.Err != nil {
		// Keep what precedes the failing batch, never what follows it:
		// the position stops at the failing batch, whatever
		// ProcessFetchPartition moved its offset to.
		at := corruptAt(raw, cons.fetched, next)
		for _, r := range fp.Records {
			if r.Offset >= cons.fetched && r.Offset < at {
				cons.buf = append(cons.buf, r)
			}
		}
		cons.noteEpoch(raw, at)
		cons.fetched = max(cons.fetched, at)
		if cons.fetched >= end {
			// The range ends before the corrupt batch: it completes, and
			// the next range's first fetch meets the batch again.
			return nil, nil
		}
		return nil, fmt.Errorf("%s/%d: %w at offset %d: %w", cons.topic, cons.partition, ErrCorrupt, cons.fetched, fp.Err)
	}
	before := cons.fetched
	for _, r := range fp.Records {
		if r.Offset >= cons.fetched {
			cons.buf = append(cons.buf, r)
		}
	}
	if next > cons.fetched {
		cons.noteEpoch(raw, next)
		cons.fetched = next
	}
	if len(raw) > 0 && cons.fetched == before && len(fp.Records) == 0 {
		// Record bytes that advance nothing and report no error: kgo
		// could not decode the batch (fewer records than it claims).
		// Refetching may fix a response cut short; a batch broken on
		// disk stays broken.
		cons.stalls++
		if cons.stalls > maxStalls {
			return nil, fmt.Errorf("%s/%d: %w at offset %d: %d fetches returned %d bytes of batches but no record", cons.topic, cons.partition, ErrCorrupt, cons.fetched, cons.stalls, len(raw))
		}
	} else {
		cons.stalls = 0
	}
	return nil, nil
}

var decompressor = kgo.DefaultDecompressor()

// leaderChanged forgets the leader after a leadership error; if records
// were fetched, the next fetch first validates the position against the
// new leader's log.
func (cons *consumer) leaderChanged() {
	cons.leader = -1
	if cons.lastEpoch >= 0 {
		cons.validate = true
	}
}

// Offsets of record batch (magic 2) header fields.
const (
	batchLengthAt      = 8  // int32: bytes after this field
	batchEpochAt       = 12 // int32: partition leader epoch
	batchMagicAt       = 16 // int8
	batchLastDeltaAt   = 23 // int32: last offset delta
	batchHeaderMinimum = 27 // bytes needed to read the fields above
)

// batches calls fn with the base offset and the bytes of each complete
// batch in raw, in order, until fn returns false.
func batches(raw []byte, fn func(base int64, b []byte) bool) {
	for len(raw) >= 12 {
		base := int64(binary.BigEndian.Uint64(raw))
		length := int(int32(binary.BigEndian.Uint32(raw[batchLengthAt:]))) + 12
		if length < 12 || length > len(raw) {
			return
		}
		if !fn(base, raw[:length]) {
			return
		}
		raw = raw[length:]
	}
}

// trimBatches cuts raw record batches after the first batch that starts at
// or past end: the batches a range needs, and one more for the next range.
// The first batch is always kept, so the read position always advances. A
// truncated last batch is left for kgo.ProcessFetchPartition to skip.
func trimBatches(raw []byte, end int64) []byte {
	i := 0
	cut := false
	batches(raw, func(base int64, b []byte) bool {
		i += len(b)
		cut = base >= end
		return !cut
	})
	if cut {
		return raw[:i]
	}
	return raw
}

// noteEpoch records the leader epoch of the last v2 batch that starts
// below upTo: the epoch in which the offsets below the new fetch position
// were written.
func (cons *consumer) noteEpoch(raw []byte, upTo int64) {
	batches(raw, func(base int64, b []byte) bool {
		if base >= upTo {
			return false
		}
		if len(b) >= batchHeaderMinimum && b[batchMagicAt] == 2 {
			cons.lastEpoch = int32(binary.BigEndian.Uint32(b[batchEpochAt:]))
		}
		return true
	})
}

// corruptAt returns the offset of the batch that kgo.ProcessFetchPartition
// failed on, given the offset it was asked for and the one it returned:
// usually the returned offset, which stops before the failing batch; after
// a batch of unknown magic kgo moves one past that batch's base offset, so
// the failing batch is the one based just below it.
func corruptAt(raw []byte, asked, next int64) int64 {
	at := next
	batches(raw, func(base int64, b []byte) bool {
		if base >= next {
			return false
		}
		if base == next-1 && base >= asked && len(b) > batchMagicAt && b[batchMagicAt] > 2 {
			at = base
			return false
		}
		return true
	})
	return at
}

// loadMetadata learns the partition's leader, leader epoch and topic ID. A
// topic or partition that the metadata says does not exist is an error
// wrapping ErrUnknownPartition; a topic whose ID changed, ErrTopicRecreated.
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

// validatePosition checks, after a leader change, that the new leader's log
// still holds every offset below cons.fetched (KIP-320): it asks the leader
// (OffsetForLeaderEpoch, fenced by the current leader epoch) where the epoch
// of the last fetched batch ends there. An end below fetched means the log
// was truncated under the reader: a *LogTruncatedError. A leader that does
// not know that epoch at all (Kafka answers so only for epochs newer than
// its own; kfake also when nothing was written since) is checked by its log
// end instead.
func (cons *consumer) validatePosition(ctx context.Context) (leaderErr, err error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = cons.topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition = cons.partition
	rp.CurrentLeaderEpoch = cons.epoch
	rp.LeaderEpoch = cons.lastEpoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cons.cl.Broker(int(cons.leader)).Request(ctx, req)
	if err != nil {
		cons.leader = -1
		return nil, fmt.Errorf("validate %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
	}
	resp := kresp.(*kmsg.OffsetForLeaderEpochResponse)
	var part *kmsg.OffsetForLeaderEpochResponseTopicPartition
	for i := range resp.Topics {
		if resp.Topics[i].Topic != cons.topic {
			continue
		}
		for j := range resp.Topics[i].Partitions {
			if resp.Topics[i].Partitions[j].Partition == cons.partition {
				part = &resp.Topics[i].Partitions[j]
			}
		}
	}
	if part == nil {
		return nil, fmt.Errorf("validate %s/%d at %d: partition missing from the offset for leader epoch response", cons.topic, cons.partition, cons.fetched)
	}
	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		if isLeaderErr(err) {
			cons.leader = -1
			return fmt.Errorf("validate %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err), nil
		}
		return nil, fmt.Errorf("validate %s/%d at %d: %w", cons.topic, cons.partition, cons.fetched, err)
	}
	end := part.EndOffset
	if end < 0 {
		var leaderErr error
		if end, leaderErr, err = cons.logEnd(ctx); leaderErr != nil || err != nil {
			return leaderErr, err
		}
	}
	if end < cons.fetched {
		return nil, &LogTruncatedError{
			Topic: cons.topic, Partition: cons.partition,
			Epoch: cons.lastEpoch, EndOffset: end, Fetched: cons.fetched,
			Leader: cons.leader, NewEpoch: cons.epoch,
		}
	}
	cons.validate = false
	return nil, nil
}

// logEnd asks the leader for the partition's high watermark (ListOffsets
// latest, fenced by the current leader epoch). Kafka answers
// OFFSET_NOT_AVAILABLE while a new leader's high watermark has not caught up
// with its predecessor's; that is retried like a leadership error.
func (cons *consumer) logEnd(ctx context.Context) (end int64, leaderErr, err error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = cons.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = cons.partition
	rp.Timestamp = -1
	rp.CurrentLeaderEpoch = cons.epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cons.cl.Broker(int(cons.leader)).Request(ctx, req)
	if err != nil {
		cons.leader = -1
		return 0, nil, fmt.Errorf("log end of %s/%d: %w", cons.topic, cons.partition, err)
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, nil, fmt.Errorf("log end of %s/%d: %d topics in the list offsets response", cons.topic, cons.partition, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		if isLeaderErr(err) {
			cons.leader = -1
			return 0, fmt.Errorf("log end of %s/%d: %w", cons.topic, cons.partition, err), nil
		}
		return 0, nil, fmt.Errorf("log end of %s/%d: %w", cons.topic, cons.partition, err)
	}
	return p.Offset, nil, nil
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
