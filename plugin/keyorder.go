package plugin

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// ordering: key (keyOrder) hands a partition's records out in batches of one
// key bucket each. A record's bucket is its key's FNV-1a hash modulo
// key_buckets. Records without a key share one more bucket of their own, so
// they keep partition order among themselves. A bucket's next batch goes out
// only once its previous one is acknowledged, or rejected and delivered
// again (a rejected batch is replayed here, before anything later of its
// bucket, with a backoff, not by the engine). The buckets of a partition run
// in parallel, up to the pipeline's threads. The engine reads and hands out
// each partition's batches in offset order (unordered mode: ranges are read
// in parallel, emitted in order), so the batches of one bucket are cut in
// offset order, and a gate per (partition, bucket), across incarnations,
// keeps them in order through the pipeline. Each engine batch is split
// (engine.Batch.Split) wherever its next record goes to another bucket batch,
// so every part belongs to exactly one bucket batch and is acknowledged with
// it. The commit stays the partition's contiguous acknowledged run, and the
// offsets acknowledged above it are exact (the engine commits them in the
// commit's metadata, so a restart reads again only what was not
// acknowledged). The cost is an engine batch per run of one bucket's
// records, one per record where keys alternate.
//
// Benthos calls ReadBatch from one goroutine. Acknowledgements come from any
// goroutine. Everything below is guarded by keyOrder.mu but the engine
// batches' own Ack and Nack, which are called outside it.

// keyOrderMaxRecords is the most records one bucket batch gathers while it
// waits for its bucket, without a batching count.
const keyOrderMaxRecords = 500

// noKeyBucket marks the bucket of records without a key (after the
// key_buckets hashed ones).
const noKeyBucket = -1

// bucketID is one key bucket of one partition, across incarnations: the
// unit of order.
type bucketID struct {
	k      ranges.Key
	bucket int
}

// keyBatch is a batch of one bucket: its messages, and how many of its
// records each engine batch gave it.
type keyBatch struct {
	id       bucketID
	msgs     service.MessageBatch
	parts    []*engine.Batch // its records' engine batches, each wholly its own
	first    int64           // offset of its first record
	last     int64           // offset of its last record
	bytes    int             // its records' value bytes
	attempts int             // deliveries so far
	due      time.Time       // a rejected batch goes out again from then on
	since    time.Time       // when it was cut: how long its bucket kept it waiting
	out      bool            // handed out and not finished
}

// keyOrder is ordering: key's hand-out.
type keyOrder struct {
	buckets    int
	maxRecords int // the most records a bucket batch gathers
	maxBytes   int // the most value bytes (0: no bound)
	replay     bool
	msgs       messages
	metrics    keyOrderMetrics

	mu        sync.Mutex
	ready     []*keyBatch // cut, not handed out (or rejected, to go again), oldest first
	busy      map[bucketID]*keyBatch
	last      map[bucketID]int64 // the last offset handed out of each bucket (first deliveries)
	interrupt context.CancelFunc // ends ReadBatch's wait in Next: a bucket is free again
	ended     bool               // the engine said ErrEnd: nothing more comes
}

// keyOrderMetrics are ordering: key's metrics.
type keyOrderMetrics struct {
	inFlight   *service.MetricGauge   // buckets with a batch in the pipeline
	longest    *service.MetricGauge   // the longest a batch waits for its bucket, milliseconds
	violations *service.MetricCounter // first deliveries of a bucket out of offset order: never
}

func newKeyOrder(c Config, res *service.Resources, msgs messages) *keyOrder {
	k := &keyOrder{
		buckets:    c.KeyBuckets,
		maxRecords: keyOrderMaxRecords,
		replay:     c.AutoReplayNacks,
		msgs:       msgs,
		busy:       map[bucketID]*keyBatch{},
		last:       map[bucketID]int64{},
	}
	if c.Batching.Count > 0 {
		k.maxRecords = c.Batching.Count
	}
	k.maxBytes = c.Batching.ByteSize
	if res != nil {
		m := res.Metrics()
		k.metrics = keyOrderMetrics{
			inFlight:   m.NewGauge("kafka_batched_ranges_key_buckets_in_flight"),
			longest:    m.NewGauge("kafka_batched_ranges_key_bucket_wait_ms"),
			violations: m.NewCounter("kafka_batched_ranges_key_order_violations"),
		}
	}
	return k
}

// bucketOf returns the bucket of a record's key.
func (k *keyOrder) bucketOf(key []byte) int {
	if len(key) == 0 {
		return noKeyBucket
	}
	h := fnv.New32a()
	_, _ = h.Write(key)
	return int(h.Sum32() % uint32(k.buckets))
}

// read returns the next bucket batch that may go out, taking engine batches
// from eng while none may. Its errors are Next's. ErrEnd only once every
// bucket batch cut went out and was finished. While the engine says no
// broker answers, bucket batches cut already wait too, as Next's do.
func (k *keyOrder) read(ctx context.Context, eng *engine.Engine) (service.MessageBatch, service.AckFunc, error) {
	for {
		if err := eng.Reachable(); err != nil && !eng.Ended() {
			return nil, nil, err
		}
		k.mu.Lock()
		kb, wait := k.takeLocked(time.Now())
		if kb != nil {
			k.mu.Unlock()
			return kb.msgs, k.ackFunc(kb), nil
		}
		if k.ended {
			if len(k.ready) == 0 && len(k.busy) == 0 {
				k.mu.Unlock()
				return nil, nil, engine.ErrEnd
			}
			if wait == 0 {
				wait = time.Second // for a bucket to be free again (interrupt ends it sooner)
			}
		}
		var wctx context.Context
		var cancel context.CancelFunc
		if wait > 0 {
			wctx, cancel = context.WithTimeout(ctx, wait)
		} else {
			wctx, cancel = context.WithCancel(ctx)
		}
		k.interrupt = cancel
		ended := k.ended
		k.mu.Unlock()

		var b *engine.Batch
		var err error
		if ended {
			<-wctx.Done()
			err = wctx.Err()
		} else {
			b, err = eng.Next(wctx)
		}
		k.mu.Lock()
		k.interrupt = nil
		k.mu.Unlock()
		cancel()
		switch {
		case errors.Is(err, engine.ErrEnd):
			k.mu.Lock()
			k.ended = true
			k.mu.Unlock()
			continue
		case err != nil:
			if ctx.Err() == nil && wctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				continue // a bucket is free, or a replay is due
			}
			return nil, nil, err
		}
		k.add(b)
	}
}

// add cuts engine batch b into the bucket batches of its records, in offset
// order. A bucket's records join its last batch still waiting to go out, up
// to the bounds. b is split wherever its next record goes to another bucket
// batch, each part given to its bucket batch.
func (k *keyOrder) add(b *engine.Batch) {
	if b.RangeEnd {
		return
	}
	msgs, ok := b.Prepared.(service.MessageBatch)
	b.Prepared = nil
	if !ok || len(msgs) != len(b.Records) {
		msgs = k.msgs.batch(b.Records, b.Range, b.High)
	}
	key := b.Range.Key()
	now := time.Now()
	type run struct {
		kb *keyBatch
		n  int
	}
	var runs []run              // b's records by bucket batch, in offset order
	open := map[int]*keyBatch{} // this engine batch's bucket batches, by bucket
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, r := range b.Records {
		bucket := k.bucketOf(r.Key)
		kb := open[bucket]
		switch {
		case kb == nil:
			if kb = k.joinableLocked(bucketID{key, bucket}, r); kb == nil {
				kb = &keyBatch{id: bucketID{key, bucket}, first: r.Offset, since: now}
				k.ready = append(k.ready, kb)
			}
			open[bucket] = kb
		case k.fullLocked(kb, r):
			kb = &keyBatch{id: bucketID{key, bucket}, first: r.Offset, since: now}
			k.ready = append(k.ready, kb)
			open[bucket] = kb
		}
		kb.msgs = append(kb.msgs, msgs[i])
		kb.last = r.Offset
		kb.bytes += len(r.Value)
		if n := len(runs); n > 0 && runs[n-1].kb == kb {
			runs[n-1].n++
		} else {
			runs = append(runs, run{kb: kb, n: 1})
		}
	}
	// None of these bucket batches is handed out yet (the ReadBatch
	// goroutine hands out, and it is here), so their parts are set now.
	for i, ru := range runs {
		part := b
		if i < len(runs)-1 {
			b = b.Split(ru.n)
		}
		ru.kb.parts = append(ru.kb.parts, part)
	}
}

// joinableLocked returns the last batch of bucket id still waiting to go out
// for the first time, if record r may join it.
func (k *keyOrder) joinableLocked(id bucketID, r *kgo.Record) *keyBatch {
	for i := len(k.ready) - 1; i >= 0; i-- {
		kb := k.ready[i]
		if kb.id != id {
			continue
		}
		if kb.attempts > 0 || k.fullLocked(kb, r) {
			return nil
		}
		return kb
	}
	return nil
}

// fullLocked reports whether record r would take kb past its bounds.
func (k *keyOrder) fullLocked(kb *keyBatch, r *kgo.Record) bool {
	if len(kb.msgs) == 0 {
		return false
	}
	if len(kb.msgs) >= k.maxRecords {
		return true
	}
	if k.maxBytes <= 0 {
		return false
	}
	return kb.bytes+len(r.Value) > k.maxBytes
}

// takeLocked removes and returns the first batch that may go out: the
// oldest of a bucket with nothing in the pipeline, due if it is a replay.
// A bucket whose first waiting batch may not go out yet blocks its later
// ones. It also returns how long until a replay passed over is due.
func (k *keyOrder) takeLocked(now time.Time) (*keyBatch, time.Duration) {
	var wait time.Duration
	var longest time.Duration
	blocked := map[bucketID]bool{}
	for i, kb := range k.ready {
		if blocked[kb.id] || k.busy[kb.id] != nil {
			blocked[kb.id] = true
			longest = max(longest, now.Sub(kb.since))
			continue
		}
		if d := kb.due.Sub(now); d > 0 {
			blocked[kb.id] = true
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		k.ready = append(k.ready[:i], k.ready[i+1:]...)
		k.busy[kb.id] = kb
		kb.out = true
		kb.attempts++
		if kb.attempts == 1 {
			if last, ok := k.last[kb.id]; ok && kb.first <= last && k.metrics.violations != nil {
				k.metrics.violations.Incr(1) // never: the gate keeps a bucket in offset order
			}
			k.last[kb.id] = kb.last
		}
		k.gaugesLocked(longest)
		return kb, wait
	}
	k.gaugesLocked(longest)
	return nil, wait
}

func (k *keyOrder) gaugesLocked(longest time.Duration) {
	if k.metrics.inFlight != nil {
		k.metrics.inFlight.Set(int64(len(k.busy)))
		k.metrics.longest.Set(longest.Milliseconds())
	}
}

// ackFunc finishes kb: acknowledged, its records count for their engine
// batches. Rejected, it goes again before anything later of its bucket
// (auto_replay_nacks), or its records count as dropped. Either way its
// bucket is free for what comes next.
func (k *keyOrder) ackFunc(kb *keyBatch) service.AckFunc {
	var once atomic.Bool // this delivery's acknowledgement runs once
	return func(_ context.Context, err error) error {
		if once.Swap(true) {
			return nil
		}
		var acks, nacks []*engine.Batch
		k.mu.Lock()
		kb.out = false
		delete(k.busy, kb.id)
		switch {
		case err != nil && k.replay && !k.staleLocked(kb):
			// Again before the bucket's later batches, after a backoff as
			// the engine's own replays.
			kb.due = time.Now().Add(min(time.Duration(kb.attempts)*100*time.Millisecond, 5*time.Second))
			k.ready = append([]*keyBatch{kb}, k.ready...)
		case err != nil:
			nacks = kb.parts // dropped (auto_replay_nacks: false), or its partition's next owner reads it
		default:
			acks = kb.parts
		}
		if k.interrupt != nil {
			k.interrupt()
		}
		k.mu.Unlock()
		// One acknowledgement of the pipeline: stale, it counts once.
		engine.AckAll(acks)
		if len(nacks) > 0 {
			engine.NackAll(nacks, err)
		}
		return nil
	}
}

// staleLocked reports whether kb's records belong to an incarnation that is
// over or being drained. A rejected batch of it is not delivered again here,
// the partition's next owner (or the next run) reads it.
func (k *keyOrder) staleLocked(kb *keyBatch) bool {
	for _, p := range kb.parts {
		if p.Stale() {
			return true
		}
	}
	return false
}

// keyOrdering is the rule across fields of ordering: ordered and ordering
// set and disagreeing. Ordering: key with what cannot keep its promise.
func keyOrdering(pc *service.ParsedConfig) []error {
	ordering, _ := pc.FieldString(fieldOrdering)
	ordered, _ := pc.FieldBool(fieldOrdered)
	var errs []error
	if ordered && ordering != "" && ordering != orderingPartition {
		errs = append(errs, fmt.Errorf("%s: true and %s: %s disagree: set one (%s: true is %s: %s)", fieldOrdered, fieldOrdering, ordering, fieldOrdered, fieldOrdering, orderingPartition))
	}
	if ordering != orderingKey {
		return errs
	}
	if aligned, _ := pc.FieldBool(fieldAlignRanges); aligned {
		errs = append(errs, fmt.Errorf("%s: %s cannot be used with %s: true, which emits each range as one whole batch", fieldOrdering, orderingKey, fieldAlignRanges))
	}
	if f, _ := pc.FieldString(fieldArchive, fieldArchiveFormat); f != "" {
		errs = append(errs, fmt.Errorf("%s: %s cannot be used with %s: an archive holds a range's records of every key", fieldOrdering, orderingKey, pathArchiveFormat))
	}
	if g, _ := pc.FieldString(fieldShareGroup); g != "" {
		errs = append(errs, fmt.Errorf("%s: %s cannot be used with %s: a share group hands a partition's records to any member, so no member can keep a key's order", fieldOrdering, orderingKey, fieldShareGroup))
	}
	if pc.Contains(fieldBatching) {
		if p, err := pc.FieldBatchPolicy(fieldBatching); err == nil {
			var set []string
			if p.Period != "" {
				set = append(set, "period")
			}
			if p.Check != "" {
				set = append(set, "check")
			}
			if procs, err := pc.FieldAnyList(fieldBatching, "processors"); err == nil && len(procs) > 0 {
				set = append(set, "processors")
			}
			if len(set) > 0 {
				errs = append(errs, fmt.Errorf("%s.%s cannot be used with %s: %s, which cuts each key bucket's batches itself (%s.count and %s.byte_size bound them)",
					fieldBatching, strings.Join(set, ", "+fieldBatching+"."), fieldOrdering, orderingKey, fieldBatching, fieldBatching))
			}
		}
	}
	return errs
}
