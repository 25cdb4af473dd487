package engine

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Tests of AlignRanges: ranges on blocks of MaxRangeRecords offsets, each
// emitted as one batch, commits on range ends only.

// takeBatches takes n batches from e, acknowledging each unless hold is
// set, and checks what every aligned batch must be: its span is its whole
// range, and it holds the range's records in offset order.
func takeBatches(ctx context.Context, t *testing.T, e *Engine, n int, ack bool) []*Batch {
	t.Helper()
	var out []*Batch
	for range n {
		b, err := e.Next(ctx)
		require.NoError(t, err, "batch %d of %d", len(out)+1, n)
		require.Equal(t, b.Range, b.Span, "an aligned batch covers its whole range")
		require.NotEmpty(t, b.Records, "an empty batch of %v", b.Range)
		for i, r := range b.Records {
			require.True(t, r.Offset >= b.Range.Start && r.Offset < b.Range.End, "record %d at %d outside %v", i, r.Offset, b.Range)
			if i > 0 {
				require.Greater(t, r.Offset, b.Records[i-1].Offset, "records of %v out of order", b.Range)
			}
		}
		if ack {
			b.Ack()
		}
		out = append(out, b)
	}
	return out
}

// newSmallBatchKafka starts a kfake cluster with topic "t" of partitions
// and writes n records to each in producer batches of about 20 records, so
// that with one-byte fetch limits a range arrives in many fetches.
func newSmallBatchKafka(t *testing.T, partitions int32, n int) *kfake.Cluster {
	t.Helper()
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(512), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: "t", Partition: p, Value: fmt.Appendf(nil, "t-%d-%d", p, i)})
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	return c
}

func rangeOf(p int32, start, end int64) ranges.Range {
	return ranges.Range{Topic: "t", Partition: p, Start: start, End: end}
}

// recordingCommitter records every offset committed through it.
type recordingCommitter struct {
	committer
	mu   sync.Mutex // guards seen
	seen map[ranges.Key][]int64
}

func (r *recordingCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	r.mu.Lock()
	for k, o := range offsets {
		r.seen[k] = append(r.seen[k], o)
	}
	r.mu.Unlock()
	return r.committer.Commit(ctx, offsets)
}

// TestAlignedBoundedRangesAreWholeBatches: a bounded read with AlignRanges
// plans ranges on blocks of 100 offsets (a partition resuming inside a block
// first reads to the block's end), cut at the snapshot end, and emits each
// range as one batch although it arrives in many small fetches; with a
// group every commit is a range end. Without AlignRanges the ranges start
// at the committed offset and come in several batches each.
func TestAlignedBoundedRangesAreWholeBatches(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			c := newSmallBatchKafka(t, 2, 250)
			adm := kadm.NewClient(kgoClient(t, c))
			offs := kadm.Offsets{}
			offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 37, LeaderEpoch: -1})
			_, err := adm.CommitOffsets(t.Context(), "g", offs)
			require.NoError(t, err)
			rec := &recordingCommitter{seen: map[ranges.Key][]int64{}}
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0, 1}}}
				cfg.Group.Name = "g"
				cfg.StopAtEnd = true
				cfg.AlignRanges = true
				cfg.Ordered = ordered
				cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1 // one producer batch per fetch
				cfg.Group.wrapCommitter = func(cm committer) committer { rec.committer = cm; return rec }
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			bs := takeBatches(ctx, t, e, 6, true)
			_, err = e.Next(ctx)
			require.ErrorIs(t, err, ErrEnd, "more than one batch per range\n%s", log)

			got, n := spans(bs)
			want := []ranges.Range{
				rangeOf(0, 37, 100), rangeOf(0, 100, 200), rangeOf(0, 200, 250),
				rangeOf(1, 0, 100), rangeOf(1, 100, 200), rangeOf(1, 200, 250),
			}
			require.Equal(t, want, got, "aligned ranges")
			for _, r := range want {
				assert.Equal(t, int(r.Len()), n[r], "records of %v", r)
			}
			require.NoError(t, e.Close(ctx))
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for k, seen := range rec.seen {
				for _, o := range seen {
					assert.True(t, o%100 == 0 || o == 250 || (k.Partition == 0 && o == 37), "%v committed %d, not a range end (commits %v)", k, o, seen)
				}
			}
			assert.Equal(t, int64(250), committedOf(t, c, "g", 0))
			assert.Equal(t, int64(250), committedOf(t, c, "g", 1))
		})
	}
}

// TestAlignedRangeRereadWholeAfterRestart: a range whose batch was never
// acknowledged (the process stopped) is read again by the next run from its
// aligned start, with the same bounds and records, while the acknowledged
// range before it is not.
func TestAlignedRangeRereadWholeAfterRestart(t *testing.T) {
	c := newSmallBatchKafka(t, 1, 250)
	cfg := func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}}}
		cfg.Group.Name = "g"
		cfg.StopAtEnd = true
		cfg.AlignRanges = true
		cfg.Ordered = true
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, _ := newTestEngine(t, c, cfg)
	require.NoError(t, first.Start(ctx))
	acked := takeBatches(ctx, t, first, 1, true)
	held := takeBatches(ctx, t, first, 1, false) // never acknowledged
	require.NoError(t, first.Close(ctx))
	assert.Equal(t, int64(100), committedOf(t, c, "g", 0), "committed after the first run")

	second, _ := newEngine(t, c, cfg)
	again := takeBatches(ctx, t, second, 2, true)
	_, err := second.Next(ctx)
	require.ErrorIs(t, err, ErrEnd)
	assert.Equal(t, rangeOf(0, 0, 100), acked[0].Range)
	assert.Equal(t, held[0].Range, again[0].Range, "the unacknowledged range is planned again, the same")
	assert.Equal(t, offsetsOf(held[0].Records), offsetsOf(again[0].Records), "and holds the same records")
	assert.Equal(t, rangeOf(0, 200, 250), again[1].Range)
}

func offsetsOf(recs []*kgo.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

// TestAlignedContinuousWaitsForWholeBlocks: a continuous read with
// AlignRanges plans a block only once its last offset is written, so a
// re-run, whatever the tail was when it listed, plans the same ranges. The
// partial block at the tail is followed by the partition's cursor: with
// listings a minute apart, the block is read as soon as the records that
// complete it are written.
func TestAlignedContinuousWaitsForWholeBlocks(t *testing.T) {
	c := newKafka(t, 1, 250, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.AlignRanges = true
		cfg.PollInterval = time.Minute
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	bs := takeBatches(ctx, t, e, 2, true)
	got, _ := spans(bs)
	require.Equal(t, []ranges.Range{rangeOf(0, 0, 100), rangeOf(0, 100, 200)}, got)

	produceTo(t, c, "t", 0, 30) // [250, 280): the block [200, 300) is still incomplete
	produceTo(t, c, "t", 0, 40) // [280, 320)
	bs = takeBatches(ctx, t, e, 1, true)
	require.Equal(t, rangeOf(0, 200, 300), bs[0].Range, "the block at the tail\n%s", log)
	require.Len(t, bs[0].Records, 100)
	e.mu.Lock()
	next, end, _ := e.parts.planner.Position(ranges.Key{Topic: "t", Partition: 0})
	e.mu.Unlock()
	assert.Equal(t, [2]int64{300, 320}, [2]int64{next, end}, "[300, 320) waits for its block")
}

// TestAlignedEmptyRangeEmitsNothing: a range without records (here every
// offset of it belongs to an aborted transaction, read_committed) emits no
// batch and still counts as done, so the commit moves past it.
func TestAlignedEmptyRangeEmitsNothing(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("x"), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	t.Cleanup(txn.Close)
	require.NoError(t, txn.BeginTransaction())
	for i := range 120 {
		require.NoError(t, txn.ProduceSync(t.Context(), &kgo.Record{Value: fmt.Appendf(nil, "aborted-%d", i)}).FirstErr())
	}
	require.NoError(t, txn.EndTransaction(t.Context(), kgo.TryAbort)) // offsets [0, 120), its marker 120
	produceTo(t, c, "t", 0, 179)                                      // [121, 300)

	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}}}
		cfg.Group.Name = "g"
		cfg.StopAtEnd = true
		cfg.Fetch.ReadCommitted = true
		cfg.AlignRanges = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	bs := takeBatches(ctx, t, e, 2, true)
	_, err = e.Next(ctx)
	require.ErrorIs(t, err, ErrEnd, "\n%s", log)
	got, n := spans(bs)
	require.Equal(t, []ranges.Range{rangeOf(0, 100, 200), rangeOf(0, 200, 300)}, got, "[0, 100) holds no record")
	assert.Equal(t, 79, n[rangeOf(0, 100, 200)])
	assert.Equal(t, 100, n[rangeOf(0, 200, 300)])
	require.NoError(t, e.Close(ctx))
	assert.Equal(t, int64(300), committedOf(t, c, "g", 0))
	assert.Equal(t, int64(3), e.Summary().Ranges, "the empty range counts as done")
}

// TestReadAheadCountsWholeRecords: a range that is not yet its partition's
// turn stops reading ahead once the records it holds (keys and headers
// included) reach the read-ahead budget, also when they are tombstones with
// large keys, whose values weigh nothing.
func TestReadAheadCountsWholeRecords(t *testing.T) {
	old := readAheadBytes
	readAheadBytes = 64 << 10
	t.Cleanup(func() { readAheadBytes = old })

	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	cl := kgoClient(t, c)
	key := bytes.Repeat([]byte("k"), 4<<10)
	for i := 0; i < 2000; i += 10 { // batches of 10 tombstones with 4 KiB keys
		var recs []*kgo.Record
		for range 10 {
			recs = append(recs, &kgo.Record{Topic: "t", Key: key, Headers: []kgo.RecordHeader{{Key: "h", Value: key[:100]}}})
		}
		require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	}
	var highest atomic.Int64
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				for {
					h := highest.Load()
					if rp.FetchOffset >= 2000 {
						break // the caught-up partition's follower long-polls its end
					}
					if rp.FetchOffset <= h || highest.CompareAndSwap(h, rp.FetchOffset) {
						break
					}
				}
			}
		}
		return nil, nil, false
	})
	_, _ = newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.MaxRangeRecords = 1000
		cfg.MaxInFlight = 2
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1 // one producer batch (10 records) per fetch
	})
	// Nothing takes batches: [0, 1000) waits to hand over its first one,
	// [1000, 2000) reads ahead until its budget is full, then waits too.
	time.Sleep(time.Second)
	// 64 KiB is about 15 of these records: two fetches of 10 past 1000.
	assert.Less(t, highest.Load(), int64(1000+100), "the waiting range read far past its read-ahead budget")
	assert.GreaterOrEqual(t, highest.Load(), int64(1000), "the waiting range did not read ahead at all")
}

// TestPrepareEarly: with Hooks.PrepareEarly, Prepare runs on each batch as
// its reader reads it, the batches of a partition's later ranges too, which
// wait for the earlier ones (all prepared before Next takes anything), and
// may release the records' values: the summary counts their bytes as read.
func TestPrepareEarly(t *testing.T) {
	const n = 400
	c := newKafka(t, 1, n, "t")
	var (
		mu       sync.Mutex        // guards prepared
		prepared = map[int64]int{} // records prepared, per range start
	)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords, cfg.MaxInFlight = 100, 4
		cfg.Hooks.PrepareEarly = true
		cfg.Hooks.Prepare = func(b *Batch) any {
			mu.Lock()
			prepared[b.Range.Start] += len(b.Records)
			mu.Unlock()
			for _, r := range b.Records {
				r.Value = nil // released, as archive mode does
			}
			return nil
		}
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return prepared[100] == 100 && prepared[200] == 100 && prepared[300] == 100
	}, 10*time.Second, 10*time.Millisecond, "the later ranges' records prepared before Next took anything\n%s", log)
	got, err := drain(t.Context(), e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	assert.Equal(t, n, got["t/0"])
	var bytes int64
	for i := range n {
		bytes += int64(len(fmt.Sprintf("t-0-%d", i)))
	}
	assert.Equal(t, bytes, e.Summary().Bytes, "value bytes counted before Prepare released them")
}
