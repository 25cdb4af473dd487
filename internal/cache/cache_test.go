package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "t"

// newCluster starts a one-broker kfake cluster with topic t of the given
// partitions and produces n records to each partition, values
// "p<partition>-<offset>".
func newCluster(t *testing.T, partitions int32, n int) *kfake.Cluster {
	t.Helper()
	return newClusterWith(t, partitions, n, kfake.NumBrokers(1))
}

// newClusterWith is newCluster with the cluster's options.
func newClusterWith(t *testing.T, partitions int32, n int, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append(opts, kfake.SeedTopics(partitions, topic))...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	if n > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		require.NoError(t, err)
		defer cl.Close()
		// One ProduceSync per batch: with nothing else in flight, each
		// call writes one batch per partition.
		for from := 0; from < n; from += batchSize {
			var recs []*kgo.Record
			for p := range partitions {
				for i := from; i < min(n, from+batchSize); i++ {
					recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, i)})
				}
			}
			require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
		}
	}
	return c
}

// batchSize is how many records newCluster writes per batch.
const batchSize = 20

// fetchCounter counts fetch requests written by the clients it hooks.
type fetchCounter struct{ n atomic.Int64 }

func (f *fetchCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.n.Add(1)
	}
}

func newCache(t *testing.T, c *kfake.Cluster, mod func(*Config)) *Cache {
	t.Helper()
	cfg := Config{Seeds: c.ListenAddrs(), Capacity: 16, IdleTimeout: time.Minute}
	if mod != nil {
		mod(&cfg)
	}
	cc, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Bounded, so a test that failed holding a lease does not hang.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cc.Close(ctx)
	})
	return cc
}

// readRange reads [start, end) through l and returns the offsets delivered.
func readRange(t *testing.T, l *Lease, start, end int64) []int64 {
	t.Helper()
	var got []int64
	pos, err := l.Read(t.Context(), start, end, func(recs []*kgo.Record, _ int64) error {
		for _, r := range recs {
			got = append(got, r.Offset)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, end, pos)
	return got
}

func seq(start, end int64) []int64 {
	var out []int64
	for o := start; o < end; o++ {
		out = append(out, o)
	}
	return out
}

func TestReadDeliversExactlyTheRange(t *testing.T) {
	c := newCluster(t, 1, 500)
	cc := newCache(t, c, nil)
	tests := []struct{ start, end int64 }{{0, 100}, {100, 500}, {42, 43}, {7, 7}, {499, 500}}
	for _, tt := range tests {
		l, err := cc.Acquire(t.Context(), topic, 0, tt.start)
		require.NoError(t, err)
		got := readRange(t, l, tt.start, tt.end)
		l.Release(nil)
		assert.Equal(t, seq(tt.start, tt.end), got, "Read(%d, %d)", tt.start, tt.end)
	}
}

func TestConcurrentLeasesOfOnePartitionNeverShareAClient(t *testing.T) {
	c := newCluster(t, 2, 2000)
	cc := newCache(t, c, func(cfg *Config) { cfg.Capacity = 4 })

	l1, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	l2, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.NotSame(t, l1.cur, l2.cur, "two held leases of one partition share a client")
	l1.Release(nil)
	l2.Release(nil)

	// Many goroutines lease, read and release the same partitions; a client
	// must never be held by two of them at once.
	var (
		mu      sync.Mutex // guards holders
		holders = map[*cursor]int{}
		shared  atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, 64)
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				p := int32((g + i) % 2)
				start := int64((g*20 + i) * 10 % 1900)
				l, err := cc.Acquire(context.Background(), topic, p, start)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				holders[l.cur]++
				if holders[l.cur] > 1 {
					shared.Add(1)
				}
				mu.Unlock()
				var n int64
				_, err = l.Read(context.Background(), start, start+100, func(recs []*kgo.Record, _ int64) error {
					n += int64(len(recs))
					return nil
				})
				mu.Lock()
				holders[l.cur]--
				mu.Unlock()
				l.Release(err)
				if err != nil {
					errs <- err
					return
				}
				if n != 100 {
					errs <- fmt.Errorf("read %d records of [%d, %d), want 100", n, start, start+100)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Zero(t, shared.Load(), "a client was leased to two holders at once")
	st := cc.Stats()
	cc.mu.Lock()
	keeping := 0
	for _, all := range cc.byKey {
		for _, cur := range all {
			if cur.keptBytes > 0 {
				keeping++
			}
		}
	}
	cc.mu.Unlock()
	assert.LessOrEqual(t, keeping, 4, "idle cursors keeping records after all releases exceed capacity")
	assert.Zero(t, st.Leased)
}

func TestContinuationUsesBufferedRecordsWithoutSeekOrRefetch(t *testing.T) {
	c := newCluster(t, 1, 1000)
	fetches := &fetchCounter{}
	cc := newCache(t, c, func(cfg *Config) { cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(fetches)} })

	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seq(0, 100), readRange(t, l, 0, 100))
	first := l.cur
	l.Release(nil)
	afterFirst := fetches.n.Load()
	require.Positive(t, afterFirst)
	// The fetch kept the batch that starts at the range end.
	require.Len(t, first.buf, batchSize, "the first fetch should have buffered the batch past the range end")

	l, err = cc.Acquire(t.Context(), topic, 0, 100)
	require.NoError(t, err)
	require.Same(t, first, l.cur, "the cached client positioned at 100 was not reused")
	require.Equal(t, seq(100, 100+batchSize), readRange(t, l, 100, 100+batchSize))
	l.Release(nil)

	assert.Equal(t, afterFirst, fetches.n.Load(), "records already buffered were fetched again")
	st := cc.Stats()
	assert.Equal(t, int64(1), st.NewCursors)
	assert.Equal(t, int64(1), st.Continuations)
	assert.Zero(t, st.Seeks)
}

func TestSeekWhenTheRangeStartsElsewhere(t *testing.T) {
	c := newCluster(t, 1, 1000)
	cc := newCache(t, c, nil)

	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	readRange(t, l, 0, 100)
	l.Release(nil)

	l, err = cc.Acquire(t.Context(), topic, 0, 600)
	require.NoError(t, err)
	require.Equal(t, seq(600, 650), readRange(t, l, 600, 650))
	// Backwards too.
	require.Equal(t, seq(10, 20), readRange(t, l, 10, 20))
	l.Release(nil)

	st := cc.Stats()
	assert.Equal(t, int64(1), st.NewCursors)
	assert.Equal(t, int64(2), st.Seeks)
	assert.Zero(t, st.Continuations)
}

func TestAcquirePrefersTheClientPositionedAtStart(t *testing.T) {
	c := newCluster(t, 1, 1000)
	cc := newCache(t, c, nil)

	a, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	b, err := cc.Acquire(t.Context(), topic, 0, 500)
	require.NoError(t, err)
	readRange(t, a, 0, 100)
	readRange(t, b, 500, 600)
	a.Release(nil)
	b.Release(nil) // b is now the most recently used

	l, err := cc.Acquire(t.Context(), topic, 0, 100)
	require.NoError(t, err)
	assert.Same(t, a.cur, l.cur, "Acquire(100) did not pick the client positioned at 100")
	l.Release(nil)
}

func TestIdleEvictionNeverTouchesALeasedClient(t *testing.T) {
	c := newCluster(t, 2, 300)
	cc := newCache(t, c, func(cfg *Config) { cfg.IdleTimeout = 50 * time.Millisecond })

	idle, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	readRange(t, idle, 0, 10)
	idle.Release(nil)

	held, err := cc.Acquire(t.Context(), topic, 1, 0)
	require.NoError(t, err)
	readRange(t, held, 0, 10)

	require.Eventually(t, func() bool { return cc.Stats().EvictionsIdle == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // several more janitor rounds
	st := cc.Stats()
	assert.Equal(t, int64(1), st.EvictionsIdle, "the leased client was evicted")
	assert.Equal(t, int64(1), st.Open)
	// The held client still works and continues where it was.
	require.Equal(t, seq(10, 300), readRange(t, held, 10, 300))
	held.Release(nil)
	assert.Equal(t, int64(1), cc.Stats().Continuations)
}

func TestCapacityBoundsIdleCursorsThatKeepRecords(t *testing.T) {
	c := newCluster(t, 3, 100)
	cc := newCache(t, c, func(cfg *Config) { cfg.Capacity = 2 })

	// Three leases at once exceed the capacity: none may lose anything.
	var leases []*Lease
	for p := range int32(3) {
		l, err := cc.Acquire(t.Context(), topic, p, 0)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	assert.Equal(t, int64(3), cc.Stats().Open)
	for _, l := range leases {
		require.Equal(t, seq(0, 50), readRange(t, l, 0, 50))
	}
	assert.Zero(t, cc.Stats().EvictionsCapacity)

	// Released in order 0, 1, 2, each keeping the records past 50:
	// partition 0's cursor is the least recently used and drops its records
	// once the third is back, but keeps its position.
	for _, l := range leases {
		l.Release(nil)
	}
	st := cc.Stats()
	assert.Equal(t, int64(1), st.EvictionsCapacity)
	assert.Equal(t, int64(3), st.Open, "a cursor over capacity keeps its position")
	cc.mu.Lock()
	k0 := cc.byKey[key{topic, 0}][0].keptBytes
	k2 := cc.byKey[key{topic, 2}][0].keptBytes
	cc.mu.Unlock()
	assert.Zero(t, k0, "partition 0's cursor should have dropped its records")
	assert.Positive(t, k2, "partition 2's cursor should keep its records")

	// Partition 0 still continues at 50, fetching again.
	l, err := cc.Acquire(t.Context(), topic, 0, 50)
	require.NoError(t, err)
	require.Equal(t, seq(50, 100), readRange(t, l, 50, 100))
	l.Release(nil)
	assert.Equal(t, int64(1), cc.Stats().Continuations)
	assert.Equal(t, int64(3), cc.Stats().NewCursors)
}

func TestCapacityZeroKeepsNoRecordsPastARange(t *testing.T) {
	c := newCluster(t, 1, 100)
	cc := newCache(t, c, func(cfg *Config) { cfg.Capacity = 0 })
	for i := range 3 {
		l, err := cc.Acquire(t.Context(), topic, 0, int64(i*10))
		require.NoError(t, err)
		require.Equal(t, seq(int64(i*10), int64(i*10+10)), readRange(t, l, int64(i*10), int64(i*10+10)))
		l.Release(nil)
		assert.Zero(t, cc.Stats().Kept, "records kept past the range with capacity 0")
	}
	st := cc.Stats()
	assert.Equal(t, int64(1), st.NewCursors)
	assert.Equal(t, int64(2), st.Continuations)
}

func TestReleaseWithErrorInvalidatesTheClient(t *testing.T) {
	c := newCluster(t, 1, 100)
	cc := newCache(t, c, nil)
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	readRange(t, l, 0, 50)
	bad := l.cur
	l.Release(errors.New("broker went away"))
	l.Release(nil) // a second release does nothing

	l, err = cc.Acquire(t.Context(), topic, 0, 50)
	require.NoError(t, err)
	assert.NotSame(t, bad, l.cur, "a client released with an error was reused")
	require.Equal(t, seq(50, 100), readRange(t, l, 50, 100))
	l.Release(nil)
	st := cc.Stats()
	assert.Equal(t, int64(1), st.Invalidations)
	assert.Equal(t, int64(2), st.NewCursors)
	assert.Equal(t, int64(1), st.Open)
}

func TestRangeEndingOnTransactionMarkersCompletes(t *testing.T) {
	c := newCluster(t, 1, 0)
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx-test"),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer tx.Close()
	produceTxn := func(commit bool, vals ...string) {
		require.NoError(t, tx.BeginTransaction())
		for _, v := range vals {
			require.NoError(t, tx.ProduceSync(t.Context(), &kgo.Record{Value: []byte(v)}).FirstErr())
		}
		require.NoError(t, tx.EndTransaction(t.Context(), kgo.TransactionEndTry(commit)))
	}
	produceTxn(true, "c1", "c2")  // offsets 0, 1, marker 2
	produceTxn(false, "a1", "a2") // offsets 3, 4, marker 5
	produceTxn(true, "c3")        // offset 6, marker 7
	produceTxn(false, "a3")       // offset 8, marker 9
	adm := kadm.NewClient(tx)
	ends, err := adm.ListEndOffsets(t.Context(), topic)
	require.NoError(t, err)
	end, _ := ends.Lookup(topic, 0)
	require.Equal(t, int64(10), end.Offset)

	for _, committed := range []bool{true, false} {
		cc := newCache(t, c, func(cfg *Config) { cfg.ReadCommitted = committed })
		l, err := cc.Acquire(t.Context(), topic, 0, 0)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var vals []string
		pos, err := l.Read(ctx, 0, 10, func(recs []*kgo.Record, _ int64) error {
			for _, r := range recs {
				vals = append(vals, string(r.Value))
			}
			return nil
		})
		cancel()
		require.NoError(t, err, "read_committed=%v: the range ending on markers did not complete", committed)
		require.Equal(t, int64(10), pos)
		if committed {
			assert.Equal(t, []string{"c1", "c2", "c3"}, vals)
		} else {
			assert.Equal(t, []string{"c1", "c2", "a1", "a2", "c3", "a3"}, vals)
		}
		// A range made only of a marker completes with no records.
		vals = nil
		require.Equal(t, int64(10), mustRead(t, l, 9, 10, &vals))
		assert.Empty(t, vals)
		l.Release(nil)
	}
}

func mustRead(t *testing.T, l *Lease, start, end int64, vals *[]string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pos, err := l.Read(ctx, start, end, func(recs []*kgo.Record, _ int64) error {
		for _, r := range recs {
			*vals = append(*vals, string(r.Value))
		}
		return nil
	})
	require.NoError(t, err)
	return pos
}

func TestDeletedOffsetsAreAnErrorNotASkip(t *testing.T) {
	c := newCluster(t, 1, 100)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 40})
	resp, err := adm.DeleteRecords(t.Context(), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	cc := newCache(t, c, nil)
	l, err := cc.Acquire(t.Context(), topic, 0, 10)
	require.NoError(t, err)
	var n int
	_, err = l.Read(t.Context(), 10, 60, func(recs []*kgo.Record, _ int64) error { n += len(recs); return nil })
	l.Release(err)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	var oor *OffsetOutOfRangeError
	require.ErrorAs(t, err, &oor)
	assert.Equal(t, int64(10), oor.Offset)
	assert.Equal(t, int64(40), oor.LogStart)
	assert.Contains(t, err.Error(), "t/0: offsets [10, 40) no longer exist")
	assert.Zero(t, n, "records were delivered past deleted offsets")
}

func TestUnknownPartitionIsReported(t *testing.T) {
	c := newCluster(t, 1, 0)
	cc := newCache(t, c, nil)
	l, err := cc.Acquire(t.Context(), topic, 5, 0)
	require.NoError(t, err)
	_, err = l.Read(t.Context(), 0, 10, func([]*kgo.Record, int64) error { return nil })
	l.Release(err)
	require.ErrorIs(t, err, ErrUnknownPartition)
	assert.Contains(t, err.Error(), "t/5")
}

func TestEmitErrorStopsTheReadAtItsPosition(t *testing.T) {
	c := newCluster(t, 1, 100)
	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxPartitionBytes = 1 })
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	boom := errors.New("boom")
	var got int64 = -1
	pos, err := l.Read(t.Context(), 0, 100, func(recs []*kgo.Record, _ int64) error {
		got = recs[len(recs)-1].Offset
		return boom
	})
	l.Release(err)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, got+1, pos, "pos must be the offset after the last record handed to emit")
}

func TestCloseClosesEverythingAndLeavesNoGoroutine(t *testing.T) {
	c := newCluster(t, 4, 200)
	// The producer's goroutines wind down after its Close.
	require.Eventually(t, func() bool { return len(clientGoroutines()) == 0 }, 20*time.Second, 20*time.Millisecond,
		"kgo goroutines running before the test")

	cc, err := New(Config{Seeds: c.ListenAddrs(), Capacity: 8, IdleTimeout: time.Minute})
	require.NoError(t, err)
	var leases []*Lease
	for p := range int32(4) {
		l, err := cc.Acquire(t.Context(), topic, p, 0)
		require.NoError(t, err)
		readRange(t, l, 0, 200)
		leases = append(leases, l)
	}
	for _, l := range leases[:3] {
		l.Release(nil)
	}
	// One lease is still held: Close waits for it until its context ends,
	// then closes the client under the holder.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	err = cc.Close(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = leases[3].Read(t.Context(), 200, 300, func([]*kgo.Record, int64) error { return nil })
	require.Error(t, err, "reading through a client closed by Close should fail")
	leases[3].Release(err)
	require.NoError(t, cc.Close(t.Context()), "second Close")

	_, err = cc.Acquire(t.Context(), topic, 0, 0)
	require.ErrorIs(t, err, ErrClosed)
	assert.Zero(t, cc.Stats().Open)

	var left []string
	require.Eventually(t, func() bool { left = clientGoroutines(); return len(left) == 0 }, 20*time.Second, 20*time.Millisecond,
		"goroutines of kgo clients or the cache left after Close:\n%s", strings.Join(left, "\n\n"))
}

func TestCloseWaitsForLeasesReleasedInTime(t *testing.T) {
	c := newCluster(t, 1, 10)
	cc := newCache(t, c, nil)
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	readRange(t, l, 0, 10)
	go func() {
		time.Sleep(50 * time.Millisecond)
		l.Release(nil)
	}()
	require.NoError(t, cc.Close(t.Context()))
	assert.Zero(t, cc.Stats().Open)
	assert.Zero(t, cc.Stats().Leased)
}

// clientGoroutines returns the stacks of goroutines running franz-go client
// code (not the kfake broker's) or this package's non-test code.
func clientGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "franz-go/pkg/kgo.") || strings.Contains(g, "internal/cache.(*Cache)") {
			out = append(out, g)
		}
	}
	return out
}

func TestTrimBatches(t *testing.T) {
	batch := func(base int64, bodyLen int) []byte {
		b := make([]byte, 12+bodyLen)
		binary.BigEndian.PutUint64(b, uint64(base))
		binary.BigEndian.PutUint32(b[8:], uint32(bodyLen))
		return b
	}
	a, b, c := batch(0, 20), batch(10, 20), batch(20, 20)
	raw := slices.Concat(a, b, c)
	tests := []struct {
		end  int64
		want int // bytes kept
	}{
		{end: 5, want: len(a) + len(b)},  // needs a, keeps b for the next range
		{end: 10, want: len(a) + len(b)}, // b starts at end: kept, c dropped
		{end: 15, want: len(raw)},        // needs b, keeps c
		{end: 100, want: len(raw)},       // needs everything
		{end: 0, want: len(a)},           // the first batch is always kept
		{end: -1, want: len(a)},          // even if it starts past end
	}
	for _, tt := range tests {
		got := trimBatches(raw, tt.end)
		assert.Len(t, got, tt.want, "trimBatches(end %d) kept %d bytes, want %d", tt.end, len(got), tt.want)
	}
	truncated := raw[:len(raw)-5] // the last batch cut short by the broker
	assert.Len(t, trimBatches(truncated, 100), len(truncated))
}

func TestCompressibleBacklogIsNotBufferedWhole(t *testing.T) {
	c := newCluster(t, 1, 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerLinger(50*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	value := bytes.Repeat([]byte("a"), 1024)
	var recs []*kgo.Record
	for range 20000 {
		recs = append(recs, &kgo.Record{Value: value})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())

	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxPartitionBytes = 1 << 20 })
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seq(0, 100), readRange(t, l, 0, 100))
	buffered := len(l.cur.buf)
	l.Release(nil)
	// 20 MB of values compress into one 1 MiB fetch; only the batches the
	// range needed and one more may be decoded and kept.
	assert.Less(t, buffered, 5000, "records buffered past the range end: %d of 19900", buffered)
}

// BenchmarkAcquireRelease measures leasing and returning a cached client of
// one partition (no reads): the cache's own cost per range.
func BenchmarkAcquireRelease(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	require.NoError(b, err)
	defer c.Close()
	cc, err := New(Config{Seeds: c.ListenAddrs(), Capacity: 16, IdleTimeout: time.Minute})
	require.NoError(b, err)
	defer func() { _ = cc.Close(context.Background()) }()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l, err := cc.Acquire(ctx, topic, int32(i%4), 0)
		if err != nil {
			b.Fatal(err)
		}
		l.Release(nil)
	}
}

// TestRecreatedTopicDetectedByNewClient: with the topic ID given by the
// caller, a client created after the topic was deleted and created again
// (no cached client remembers the old ID) fails with ErrTopicRecreated
// instead of reading the new topic from the old offset.
func TestRecreatedTopicDetectedByNewClient(t *testing.T) {
	c := newCluster(t, 1, 10)
	oldID := c.TopicInfo(topic).TopicID
	cc := newCache(t, c, func(cfg *Config) { cfg.Capacity = 0 })
	cc.SetTopicID(topic, oldID)
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	readRange(t, l, 0, 5)
	l.Release(nil) // capacity 0: closed

	require.NoError(t, c.DeleteTopic(topic))
	require.NoError(t, c.CreateTopic(topic, 1, nil))
	l, err = cc.Acquire(t.Context(), topic, 0, 5)
	require.NoError(t, err)
	_, err = l.Read(t.Context(), 5, 10, func([]*kgo.Record, int64) error { return nil })
	l.Release(err)
	require.ErrorIs(t, err, ErrTopicRecreated)
}

// TestIdleBuffersAreBudgeted: the records idle clients keep for their next
// range are bounded by IdleBufferBytes over all clients; a client that
// dropped them still continues where its last range ended (no seek) and
// reads the same records.
func TestIdleBuffersAreBudgeted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budget   int64
		wantKept func(t *testing.T, kept int64)
	}{
		{"default keeps them", 0, func(t *testing.T, kept int64) {
			assert.Greater(t, kept, int64(4*10*recordOverhead), "each client keeps the rest of its batch")
		}},
		{"a small budget drops them", 2000, func(t *testing.T, kept int64) { assert.LessOrEqual(t, kept, int64(2000)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 4, 400)
			cc := newCache(t, c, func(cfg *Config) { cfg.IdleBufferBytes = tc.budget })
			for p := range int32(4) {
				l, err := cc.Acquire(t.Context(), topic, p, 0)
				require.NoError(t, err)
				readRange(t, l, 0, 5) // a batch holds 20: the rest is kept
				l.Release(nil)
			}
			tc.wantKept(t, cc.Stats().Kept)
			for p := range int32(4) {
				l, err := cc.Acquire(t.Context(), topic, p, 5)
				require.NoError(t, err)
				assert.Equal(t, []int64{5, 6, 7, 8, 9}, readRange(t, l, 5, 10), "partition %d after the budget", p)
				l.Release(nil)
			}
			assert.Zero(t, cc.Stats().Seeks, "continuations, not seeks")
		})
	}
}

// readHighs reads [start, end) through l and returns, per offset delivered,
// the high watermark Read gave with it.
func readHighs(t *testing.T, l *Lease, start, end int64) map[int64]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	highs := map[int64]int64{}
	pos, err := l.Read(ctx, start, end, func(recs []*kgo.Record, high int64) error {
		for _, r := range recs {
			highs[r.Offset] = high
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, end, pos)
	return highs
}

// TestReadGivesTheFetchsHighWatermark checks the high watermark Read hands
// to emit with each slice of records: the one of the fetch that returned
// them (so the record at the tail then has lag high - offset - 1 = 0), not
// the partition's current one. Records read ahead and delivered after the
// partition grew keep the watermark of their fetch.
func TestReadGivesTheFetchsHighWatermark(t *testing.T) {
	c := newCluster(t, 1, 40) // two batches, one fetch
	cc := newCache(t, c, nil)
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	defer l.Release(nil)

	want := func(start, end, high int64) map[int64]int64 {
		m := map[int64]int64{}
		for o := start; o < end; o++ {
			m[o] = high
		}
		return m
	}
	assert.Equal(t, want(0, 10, 40), readHighs(t, l, 0, 10), "the first fetch")

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for range 20 {
		recs = append(recs, &kgo.Record{Value: []byte("late")})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr()) // offsets 40..59

	assert.Equal(t, want(10, 40, 40), readHighs(t, l, 10, 40), "read ahead by the first fetch: its watermark, though the partition grew to 60")
	assert.Equal(t, want(40, 60, 60), readHighs(t, l, 40, 60), "a new fetch")
}

// TestReadCommittedGivesTheHighWatermark checks that under read_committed
// Read gives the high watermark, not the last stable offset: records of an
// open transaction count in it (they are the lag a committing producer will
// add).
func TestReadCommittedGivesTheHighWatermark(t *testing.T) {
	c := newCluster(t, 1, 10)
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx-high"),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer tx.Close()
	require.NoError(t, tx.BeginTransaction())
	for range 5 {
		require.NoError(t, tx.ProduceSync(t.Context(), &kgo.Record{Value: []byte("open")}).FirstErr()) // offsets 10..14, not committed
	}
	defer func() { _ = tx.EndTransaction(context.Background(), kgo.TryAbort) }()

	cc := newCache(t, c, func(cfg *Config) { cfg.ReadCommitted = true })
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	defer l.Release(nil)
	for o, high := range readHighs(t, l, 0, 10) {
		assert.Equal(t, int64(15), high, "offset %d: high watermark under read_committed (the last stable offset is 10)", o)
	}
}
