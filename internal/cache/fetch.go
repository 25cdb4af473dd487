package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// isLeaderErr reports the partition errors that mean "ask someone else, or
// later". The client refreshes metadata and retries, at most
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

// decode decodes raw, the next fetched batches of cur, into its buffer. Only
// the batches the range to end needs and one more, so a well-compressed
// backlog is not decoded whole. The rest goes back to the head of the queue.
// A corrupt batch buffers the records before it, moves fetched to it, and
// returns an error wrapping ErrCorrupt. The holder's.
func (c *Cache) decode(cur *cursor, raw *rawFetch, end int64) error {
	if raw.gen != cur.genNow(c) || raw.at != cur.fetched {
		// Fetched for a position the holder has since left.
		c.mu.Lock()
		cur.resetQueueLocked(cur.fetched)
		c.mu.Unlock()
		return nil
	}
	part := raw.part
	all := part.RecordBatches
	head := trimBatches(all, end)
	part.RecordBatches = head
	opts := kgo.ProcessFetchPartitionOpts{
		Offset:    cur.fetched,
		Topic:     cur.topic,
		Partition: cur.partition,
	}
	if c.cfg.ReadCommitted {
		opts.IsolationLevel = kgo.ReadCommitted()
	}
	fp, next := kgo.ProcessFetchPartition(opts, &part, decompressor, nil)
	if fp.Err != nil {
		// Keep what precedes the failing batch, never what follows it.
		// The position stops at the failing batch, whatever
		// ProcessFetchPartition moved its offset to.
		at := corruptAt(head, cur.fetched, next)
		cur.bufHigh = part.HighWatermark
		for _, r := range fp.Records {
			if r.Offset >= cur.fetched && r.Offset < at {
				cur.buf = append(cur.buf, r)
			}
		}
		cur.noteEpoch(head, at)
		cur.fetched = max(cur.fetched, at)
		c.mu.Lock()
		cur.resetQueueLocked(cur.fetched) // the next range meets the batch again
		c.mu.Unlock()
		return fmt.Errorf("%s/%d: %w at offset %d: %w", cur.topic, cur.partition, ErrCorrupt, cur.fetched, fp.Err)
	}
	before := cur.fetched
	cur.bufHigh = part.HighWatermark
	cur.buf = keepFrom(cur.buf, fp.Records, cur.fetched)
	if next > cur.fetched {
		cur.noteEpoch(head, next)
		cur.fetched = next
	}
	if len(head) > 0 && cur.fetched == before && len(fp.Records) == 0 {
		// Record bytes that advance nothing and report no error. kgo
		// could not decode the batch (fewer records than it claims).
		// Refetching may fix a response cut short. A batch broken on
		// disk stays broken.
		cur.stalls++
		c.mu.Lock()
		cur.resetQueueLocked(cur.fetched)
		c.mu.Unlock()
		if cur.stalls > maxStalls {
			return fmt.Errorf("%s/%d: %w at offset %d: %d fetches returned %d bytes of batches but no record", cur.topic, cur.partition, ErrCorrupt, cur.fetched, cur.stalls, len(head))
		}
		return nil
	}
	cur.stalls = 0
	c.mu.Lock()
	defer c.mu.Unlock()
	if rest := all[len(head):]; len(rest) > 0 && raw.gen == cur.gen {
		// Not needed by this range. It is first in line for the next one.
		part.RecordBatches = rest
		part.AbortedTransactions = abortsLeft(part.AbortedTransactions, head)
		// It pins the whole buffer of raw, and is counted so.
		back := &rawFetch{part: part, at: cur.fetched, gen: raw.gen, bytes: raw.bytes, shared: raw.shared}
		raw.shared = nil // its hold on a shared response passes to back
		cur.queue = append([]*rawFetch{back}, cur.queue...)
		cur.queueBytes += back.bytes
	} else if len(cur.queue) == 0 && !cur.inFlight && cur.fetchAt != cur.fetched {
		// The loop's idea of where the batches end (from their headers)
		// and the decoder's differ. The decoder's wins.
		cur.resetQueueLocked(cur.fetched)
	}
	if cur.fetchAt < 0 && len(cur.queue) == 0 && !cur.inFlight {
		cur.fetchAt = cur.fetched
	}
	return nil
}

// keepFrom appends the records of recs at or past offset from to buf.
// Decoded records ascend by offset, and decode fills an empty buffer, so
// there they become the buffer as they are, with no copy of the slice kgo
// made.
func keepFrom(buf, recs []*kgo.Record, from int64) []*kgo.Record {
	i := 0
	for i < len(recs) && recs[i].Offset < from {
		i++
	}
	if len(buf) == 0 {
		clear(recs[:i]) // what precedes from is not the cursor's to keep
		return recs[i:len(recs):len(recs)]
	}
	return append(buf, recs[i:]...)
}

// genNow reads cur.gen under the cache's lock.
func (cur *cursor) genNow(c *Cache) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cur.gen
}

var decompressor = kgo.DefaultDecompressor()

// Offsets of record batch (magic 2) header fields.
const (
	batchLengthAt      = 8  // int32: bytes after this field
	batchEpochAt       = 12 // int32: partition leader epoch
	batchMagicAt       = 16 // int8
	batchAttrsAt       = 21 // int16: attributes (0x10 transactional, 0x20 control)
	batchLastDeltaAt   = 23 // int32: last offset delta
	batchHeaderMinimum = 27 // bytes needed to read the fields above
	batchProducerAt    = 43 // int64: producer ID
)

// abortsLeft returns the aborted transactions of a fetch answer that are
// still open after its batches in head were decoded. Each transactional
// control batch in head (a producer's abort marker) closes that producer's
// earliest aborted transaction that began before it, as kgo's aborter pops
// them. The rest of the answer, decoded later for the next range, gets only
// these. With the closed ones, kgo would drop the producer's later committed
// records as aborted.
func abortsLeft(aborted []kmsg.FetchResponseTopicPartitionAbortedTransaction, head []byte) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	if len(aborted) == 0 {
		return aborted
	}
	open := map[int64][]int64{}
	for _, a := range aborted {
		open[a.ProducerID] = append(open[a.ProducerID], a.FirstOffset)
	}
	for pid := range open {
		slices.Sort(open[pid])
	}
	batches(head, func(base int64, b []byte) bool {
		if len(b) < batchProducerAt+8 || b[batchMagicAt] != 2 {
			return true
		}
		attrs := binary.BigEndian.Uint16(b[batchAttrsAt:])
		if attrs&0x30 != 0x30 { // not a transactional control batch
			return true
		}
		pid := int64(binary.BigEndian.Uint64(b[batchProducerAt:]))
		if firsts := open[pid]; len(firsts) > 0 && firsts[0] <= base {
			open[pid] = firsts[1:]
		}
		return true
	})
	var left []kmsg.FetchResponseTopicPartitionAbortedTransaction
	for _, a := range aborted {
		if firsts := open[a.ProducerID]; slices.Contains(firsts, a.FirstOffset) {
			left = append(left, a)
		}
	}
	return left
}

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
// or past end. The batches a range needs, and one more for the next range.
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
// below upTo. That is the epoch in which the offsets below the new fetch
// position were written.
func (cur *cursor) noteEpoch(raw []byte, upTo int64) {
	batches(raw, func(base int64, b []byte) bool {
		if base >= upTo {
			return false
		}
		if len(b) >= batchHeaderMinimum && b[batchMagicAt] == 2 {
			cur.lastEpoch = int32(binary.BigEndian.Uint32(b[batchEpochAt:]))
		}
		return true
	})
}

// corruptAt returns the offset of the batch that kgo.ProcessFetchPartition
// failed on, given the offset it was asked for and the one it returned. It
// is usually the returned offset, which stops before the failing batch. After
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

// metaFetch is one metadata request for one topic, shared by every cursor
// of the topic that needs it. A thousand cursors created at once ask once.
type metaFetch struct {
	started time.Time
	done    chan struct{}
	resp    *kmsg.MetadataResponseTopic // nil if the topic is missing
	err     error
}

// metaTimeout bounds one metadata request of the cursors.
const metaTimeout = 5 * time.Second

// metaFresh is how old metadata a new cursor takes. A cursor that saw a
// leadership error takes only metadata requested after the error.
const metaFresh = time.Second

// topicMetadata returns the metadata of topic requested at or after since
// (or within metaFresh, for since zero), sharing one request among callers.
func (c *Cache) topicMetadata(ctx context.Context, topic string, since time.Time) (*metaFetch, error) {
	c.mu.Lock()
	f := c.metaFetchLocked(topic, since)
	c.mu.Unlock()
	select {
	case <-f.done:
		return f, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// metaFetchLocked returns the metadata request of topic made at or after
// since (within metaFresh, for since zero), starting one if there is none.
func (c *Cache) metaFetchLocked(topic string, since time.Time) *metaFetch {
	if since.IsZero() {
		since = time.Now().Add(-metaFresh)
	}
	f := c.metas[topic]
	if f != nil && !f.started.Before(since) {
		return f
	}
	f = &metaFetch{started: time.Now(), done: make(chan struct{})}
	c.metas[topic] = f
	c.counts.metaRequests.Add(1)
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		defer close(f.done)
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		// Bounded, since franz-go retries a metadata request while no broker
		// answers, and a holder waiting here says nothing. After
		// metaTimeout its read fails, retriably, and is logged.
		ctx, cancel := context.WithTimeout(c.ctx, metaTimeout)
		defer cancel()
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			f.err = err
			return
		}
		c.mu.Lock()
		c.noteBrokersLocked(resp.Brokers)
		c.mu.Unlock()
		for i := range resp.Topics {
			if t := &resp.Topics[i]; t.Topic != nil && *t.Topic == topic {
				f.resp = t
			}
		}
	}()
	return f
}

// Learn requests the metadata of topic now without waiting for it, so that
// the cursors of its partitions created within a second (metaFresh) find
// their leaders in it instead of asking once they exist. The engine calls
// it when a group member joins (for the topics it subscribes to) and when
// partitions are assigned. Their leaders are learnt while it lists their
// committed offsets and watermarks, and the first fetch goes as soon as
// they are listed (at 300 partitions the request took 4 to 9 ms after the
// listings on a loaded machine, before the first fetch could go). Once the
// metadata is answered, the fetch connection of every leader without a
// fetch loop is opened too (dialAhead).
// The round trip to each of those leaders is measured too, if due
// (measureLeaders).
func (c *Cache) Learn(topic string) { c.learn(topic, true) }

// Measure requests the metadata of topic now without waiting for it, as
// Learn does, and once it is answered measures the round trip to each of
// its partitions' leaders, if due (measureLeaders). It opens no fetch
// connection, so it holds up no request to those leaders: the engine calls
// it as a run without a group lists its partitions.
func (c *Cache) Measure(topic string) { c.learn(topic, false) }

func (c *Cache) learn(topic string, dial bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	f := c.metaFetchLocked(topic, time.Time{})
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		select {
		case <-f.done:
		case <-c.ctx.Done():
			return
		}
		if f.err != nil || f.resp == nil {
			return
		}
		c.measureLeaders(f.resp)
		if dial {
			c.dialAhead(f.resp)
		}
	}()
}

// measureLeaders starts a measure of the round trip to every leader of t's
// partitions whose measure is due (broker.measure), if lanes are allowed
// (FetchConnections over 1). A backlog's ranges then find their broker
// judged. A measure takes rttSamples answers at least rttSpacing apart,
// and reads of a distant broker start their ranges at once and open their
// lanes only once it is judged: from the first fetch on, that was a
// quarter of a 410 MB read 50 ms away. Measured from the topic's listing
// on, the verdict comes with the first records or soon after.
func (c *Cache) measureLeaders(t *kmsg.MetadataResponseTopic) {
	if c.cfg.FetchConnections <= 1 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range t.Partitions {
		if id := p.Leader; !c.closed && id >= 0 {
			c.brokerLocked(id).measure()
		}
	}
}

// dialAgain is how long a fetch connection dialled ahead is taken to be
// open still. franz-go closes a connection idle for 30 s (ConnIdleTimeout).
const dialAgain = 10 * time.Second

// dialAhead opens the fetch connection to every leader of t's partitions
// that has no fetch loop (so no fetch connection in use) and was not
// dialled ahead within dialAgain, with an empty fetch, which the broker
// answers at once (no partitions, no wait). Else the first fetch of a start
// opens it after the listings. That costs a dial and an ApiVersions
// exchange (and a TLS handshake and SASL login where configured). We
// measured 1 to 22 ms at a start of 300 partitions on a loaded machine. franz-go keeps one fetch
// connection per broker, which the loop's fetches then find open. It sends
// a broker's requests one at a time and opens a connection in that turn,
// so a connection opened while the broker is asked something else delays
// that (see the engine's Start, where members learn their topics as they
// join).
func (c *Cache) dialAhead(t *kmsg.MetadataResponseTopic) {
	ids := map[int32]bool{}
	c.mu.Lock()
	now := time.Now()
	for _, p := range t.Partitions {
		if id := p.Leader; !c.closed && id >= 0 && !ids[id] {
			if b := c.brokerLocked(id); b.loop == nil && now.Sub(b.dialled) >= dialAgain {
				ids[id] = true
				b.dialled = now
			}
		}
	}
	c.workers.Add(len(ids))
	c.mu.Unlock()
	for id := range ids {
		go func() {
			defer c.workers.Done()
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID = -1
			req.MaxWaitMillis = 0
			req.MaxBytes = 1
			req.SessionID = 0
			req.SessionEpoch = -1 // no fetch session, as the loops' fetches
			ctx, cancel := context.WithTimeout(c.ctx, metaTimeout)
			defer cancel()
			if _, err := c.cl.Broker(int(id)).Request(ctx, req); err == nil {
				c.counts.dialledAhead.Add(1)
			}
		}()
	}
}

// locate learns cur's leader, leader epoch and topic ID from metadata
// requested at or after since, then, if a leadership error asked for it,
// validates the position against the new leader's log. A topic or
// partition that the metadata says does not exist is an error wrapping
// ErrUnknownPartition. A topic whose ID changed, ErrTopicRecreated. The
// holder's.
func (c *Cache) locate(ctx context.Context, cur *cursor, since time.Time) (leaderErr, err error) {
	f, err := c.topicMetadata(ctx, cur.topic, since)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	p, leaderErr, err := c.partitionLocked(f, cur)
	if p != nil {
		setLeaderLocked(cur, f.resp.TopicID, p)
	}
	c.mu.Unlock()
	if p == nil {
		return leaderErr, err
	}
	if cur.validate {
		return c.validatePosition(ctx, cur, p.Leader, p.LeaderEpoch)
	}
	return nil, nil
}

// partitionLocked returns cur's partition in f, the answered metadata of
// its topic, if it has a leader. Else it returns why not. That is a
// leadership error (retried) or an error. A topic or partition that does
// not exist wraps ErrUnknownPartition. A topic whose ID changed wraps
// ErrTopicRecreated.
func (c *Cache) partitionLocked(f *metaFetch, cur *cursor) (p *kmsg.MetadataResponseTopicPartition, leaderErr, err error) {
	if f.err != nil {
		return nil, nil, fmt.Errorf("metadata for %s/%d: %w", cur.topic, cur.partition, f.err)
	}
	t := f.resp
	if t == nil {
		return nil, nil, fmt.Errorf("metadata for %s/%d: %w: topic missing from the metadata response", cur.topic, cur.partition, ErrUnknownPartition)
	}
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, nil, fmt.Errorf("metadata for %s/%d: %w: %w", cur.topic, cur.partition, ErrUnknownPartition, err)
		}
		if isLeaderErr(err) {
			return nil, fmt.Errorf("metadata for %s/%d: %w", cur.topic, cur.partition, err), nil
		}
		return nil, nil, fmt.Errorf("metadata for %s/%d: %w", cur.topic, cur.partition, err)
	}
	if id := cur.topicID; id != ([16]byte{}) && t.TopicID != ([16]byte{}) && t.TopicID != id {
		return nil, nil, fmt.Errorf("%s/%d: %w (topic id changed)", cur.topic, cur.partition, ErrTopicRecreated)
	}
	for i := range t.Partitions {
		if t.Partitions[i].Partition == cur.partition {
			p = &t.Partitions[i]
		}
	}
	if p == nil {
		if c.metas[cur.topic] == f { // a partition just added: the next look asks anew
			delete(c.metas, cur.topic)
		}
		return nil, nil, fmt.Errorf("metadata for %s/%d: %w: the topic has %d partitions", cur.topic, cur.partition, ErrUnknownPartition, len(t.Partitions))
	}
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil && p.Leader < 0 {
		return nil, fmt.Errorf("metadata for %s/%d: %w", cur.topic, cur.partition, err), nil
	}
	if p.Leader < 0 {
		return nil, fmt.Errorf("metadata for %s/%d: no leader", cur.topic, cur.partition), nil
	}
	return p, nil, nil
}

// setLeaderLocked takes cur's leader, leader epoch and topic ID from its
// partition's metadata.
func setLeaderLocked(cur *cursor, id [16]byte, p *kmsg.MetadataResponseTopicPartition) {
	cur.topicID = id
	cur.leader = p.Leader
	cur.epoch = p.LeaderEpoch
	cur.replica = -1
}

// knownLeaderLocked sets the leader of cur, a cursor about to join a fetch
// loop without one, from its topic's metadata if that is answered already
// (Learn's request, or another cursor's) and fresh enough for it, and cur's
// position needs no validation. It reports whether it did. A partition
// started then joins its loop at once, within a Hold, instead of from a
// revival goroutine of its own after the Hold ended. Otherwise the revival
// learns the leader (and says what is wrong).
func (c *Cache) knownLeaderLocked(cur *cursor) bool {
	f := c.metas[cur.topic]
	if cur.validate || cur.reviving() || f == nil || time.Since(f.started) > metaFresh || f.started.Before(cur.needSince) {
		return false
	}
	select {
	case <-f.done:
	default:
		return false
	}
	p, _, _ := c.partitionLocked(f, cur)
	if p == nil {
		return false
	}
	setLeaderLocked(cur, f.resp.TopicID, p)
	return true
}

// forgetLeader marks cur's leader unknown. The next take learns it again
// from metadata requested after now.
func (c *Cache) forgetLeader(cur *cursor) {
	c.mu.Lock()
	cur.leader = -1
	cur.needSince = time.Now()
	c.leaveLoopLocked(cur)
	c.mu.Unlock()
}

// validatePosition checks, after a leader change, that the new leader's log
// still holds every offset below cur.fetched (KIP-320). It asks the leader
// (OffsetForLeaderEpoch, fenced by the current leader epoch) where the epoch
// of the last fetched batch ends there. An end below fetched means the log
// was truncated under the reader, and it returns a *LogTruncatedError. A
// leader that does not know that epoch at all (Kafka answers so only for
// epochs newer than its own, kfake also when nothing was written since) is
// checked by its log end instead.
func (c *Cache) validatePosition(ctx context.Context, cur *cursor, leader, epoch int32) (leaderErr, err error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = cur.topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition = cur.partition
	rp.CurrentLeaderEpoch = epoch
	rp.LeaderEpoch = cur.lastEpoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := c.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		c.forgetLeader(cur)
		return nil, fmt.Errorf("validate %s/%d at %d: %w", cur.topic, cur.partition, cur.fetched, err)
	}
	resp := kresp.(*kmsg.OffsetForLeaderEpochResponse)
	var part *kmsg.OffsetForLeaderEpochResponseTopicPartition
	for i := range resp.Topics {
		if resp.Topics[i].Topic != cur.topic {
			continue
		}
		for j := range resp.Topics[i].Partitions {
			if resp.Topics[i].Partitions[j].Partition == cur.partition {
				part = &resp.Topics[i].Partitions[j]
			}
		}
	}
	if part == nil {
		return nil, fmt.Errorf("validate %s/%d at %d: partition missing from the offset for leader epoch response", cur.topic, cur.partition, cur.fetched)
	}
	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		if isLeaderErr(err) {
			c.forgetLeader(cur)
			return fmt.Errorf("validate %s/%d at %d: %w", cur.topic, cur.partition, cur.fetched, err), nil
		}
		return nil, fmt.Errorf("validate %s/%d at %d: %w", cur.topic, cur.partition, cur.fetched, err)
	}
	end := part.EndOffset
	if end < 0 {
		var leaderErr error
		if end, leaderErr, err = c.logEnd(ctx, cur, leader, epoch); leaderErr != nil || err != nil {
			return leaderErr, err
		}
	}
	if end < cur.fetched {
		return nil, &LogTruncatedError{
			Topic: cur.topic, Partition: cur.partition,
			Epoch: cur.lastEpoch, EndOffset: end, Fetched: cur.fetched,
			Leader: leader, NewEpoch: epoch,
		}
	}
	cur.validate = false
	return nil, nil
}

// logEnd asks the leader for the partition's high watermark (ListOffsets
// latest, fenced by the current leader epoch). Kafka answers
// OFFSET_NOT_AVAILABLE while a new leader's high watermark has not caught up
// with its predecessor's. That is retried like a leadership error.
func (c *Cache) logEnd(ctx context.Context, cur *cursor, leader, epoch int32) (end int64, leaderErr, err error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = cur.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = cur.partition
	rp.Timestamp = -1
	rp.CurrentLeaderEpoch = epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := c.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		c.forgetLeader(cur)
		return 0, nil, fmt.Errorf("log end of %s/%d: %w", cur.topic, cur.partition, err)
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, nil, fmt.Errorf("log end of %s/%d: %d topics in the list offsets response", cur.topic, cur.partition, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		if isLeaderErr(err) {
			c.forgetLeader(cur)
			return 0, fmt.Errorf("log end of %s/%d: %w", cur.topic, cur.partition, err), nil
		}
		return 0, nil, fmt.Errorf("log end of %s/%d: %w", cur.topic, cur.partition, err)
	}
	return p.Offset, nil, nil
}

// outOfRange builds the error for an OFFSET_OUT_OF_RANGE answer, asking the
// broker for the partition's current bounds so the message says what is
// missing.
func (cur *cursor) outOfRange(ctx context.Context, cl *kgo.Client, part *kmsg.FetchResponseTopicPartition) error {
	e := &OffsetOutOfRangeError{Topic: cur.topic, Partition: cur.partition, Offset: cur.fetched, LogStart: -1, LogEnd: -1}
	if part.LogStartOffset >= 0 && part.HighWatermark >= 0 {
		e.LogStart, e.LogEnd = part.LogStartOffset, part.HighWatermark
	}
	for _, ts := range []int64{-2, -1} { // earliest, latest
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = cur.topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = cur.partition
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
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
