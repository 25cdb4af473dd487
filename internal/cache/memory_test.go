package cache

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// heapAfterGC returns the live heap after garbage collection.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// steadyHeap returns the live heap once two readings 20 ms apart agree
// within 16 KiB (at most 2 s of readings). A goroutine that has not yet
// finished its step (a fetch loop still holding the round it answered, on
// a loaded machine) holds memory a moment longer. What the idle cursors
// themselves keep holds in every reading.
func steadyHeap() uint64 {
	last := heapAfterGC()
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		now := heapAfterGC()
		if max(now, last)-min(now, last) < 16<<10 {
			return now
		}
		last = now
	}
	return last
}

// TestIdleRecordsHoldOnlyWhatIsCounted: fifty idle cursors each keep one
// record of about 1 KB, read from one ~100 KB batch per partition, all
// fetched in few rounds. What dropping them frees must be about what Kept
// (and the IdleBufferBytes budget) counts: a kept record must not pin its
// whole fetch response, nor its whole decompressed batch.
func TestIdleRecordsHoldOnlyWhatIsCounted(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  kgo.Opt
	}{
		{"uncompressed", kgo.ProducerBatchCompression(kgo.NoCompression())},
		{"snappy", kgo.ProducerBatchCompression(kgo.SnappyCompression())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const parts = 50
			c := newCluster(t, parts, 0)
			for p := range int32(parts) {
				produceN(t, c, p, 100, 1000, tc.opt, kgo.ProducerLinger(20*time.Millisecond)) // one ~100 KB batch per partition
			}
			cc := newCache(t, c, func(cfg *Config) { cfg.Capacity = 64; cfg.IdleBufferBytes = 256 << 10 })
			// Every partition's cursor reads [0, 99) and keeps record 99.
			var leases []*Lease
			for p := range int32(parts) {
				l, err := cc.Acquire(t.Context(), topic, p, 0)
				require.NoError(t, err)
				leases = append(leases, l)
			}
			errs := make(chan error, parts)
			for _, l := range leases {
				go func() {
					_, err := l.Read(t.Context(), 0, 99, func([]*kgo.Record, int64) error { return nil })
					errs <- err
				}()
			}
			for range leases {
				require.NoError(t, <-errs)
			}
			for _, l := range leases {
				l.Release(nil)
			}
			st := cc.Stats()
			require.Equal(t, int64(parts), st.Open)
			before := steadyHeap()
			for p := range int32(parts) {
				cc.Drop(topic, p)
			}
			held := int64(before) - int64(steadyHeap())
			t.Logf("Kept %d bytes in %d idle cursors, %d fetches; dropping them freed %d bytes (%.1fx Kept)",
				st.Kept, st.Open, st.Fetches, held, float64(held)/float64(st.Kept))
			assert.Less(t, held, 4*st.Kept, "idle cursors hold far more memory than Kept counts")
		})
	}
}

// TestFollowersStayWithinIdleBufferBytes: twenty followers at the tail of
// empty partitions, then a burst of 200 KB on each: what the idle cursors
// keep must stay within IdleBufferBytes (the loop trims after each answer,
// not only at a release), and the followers that dropped their records
// still follow their partitions.
func TestFollowersStayWithinIdleBufferBytes(t *testing.T) {
	const parts = 20
	c := newCluster(t, parts, 0)
	var h highs
	const budget = 64 << 10
	cc := newCache(t, c, func(cfg *Config) {
		cfg.IdleBufferBytes = budget
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.OnHigh = h.on
	})
	for p := range int32(parts) {
		cc.Watch(topic, p, 0)
	}
	require.Eventually(t, func() bool { return cc.Stats().Following == parts }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the followers long-poll the empty tails
	for p := range int32(parts) {
		produceN(t, c, p, 200, 1000)
	}
	reported := func() int {
		n := 0
		for p := range int32(parts) {
			if h.get(p) == 200 {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return reported() == parts }, 10*time.Second, 10*time.Millisecond, "bursts reported: %d/%d", reported(), parts)
	time.Sleep(200 * time.Millisecond) // answers in flight arrive
	st := cc.Stats()
	t.Logf("IdleBufferBytes %d, Kept %d (%.2fx), following %d", budget, st.Kept, float64(st.Kept)/budget, st.Following)
	assert.LessOrEqual(t, st.Kept, int64(budget), "idle cursors keep more than IdleBufferBytes")
	assert.Equal(t, int64(parts), st.Following, "a follower that dropped its records stopped following")

	// A follower that dropped its records reads them again when leased.
	for p := range int32(parts) {
		l, err := cc.Acquire(t.Context(), topic, p, 0)
		require.NoError(t, err)
		require.Len(t, readRange(t, l, 0, 200), 200, "partition %d", p)
		l.Release(nil)
	}
	assert.LessOrEqual(t, cc.Stats().Kept, int64(budget))
}

// TestFollowersDoNotCountAgainstCapacity: Capacity bounds the idle cursors
// that keep records past their range; a follower keeps what arrives at its
// partition's tail for the next lease, bounded by IdleBufferBytes only, so
// a release over Capacity neither drops a follower's records nor stops it
// following.
func TestFollowersDoNotCountAgainstCapacity(t *testing.T) {
	const parts = 4
	c := newCluster(t, parts, 0)
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.Capacity = 1
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.OnHigh = h.on
	})
	for p := range int32(parts - 1) {
		cc.Watch(topic, p, 0)
	}
	require.Eventually(t, func() bool { return cc.Stats().Following == parts-1 }, 5*time.Second, 5*time.Millisecond)
	for p := range int32(parts) {
		produceN(t, c, p, 40, 100)
	}
	require.Eventually(t, func() bool { return h.get(0) == 40 && h.get(1) == 40 && h.get(2) == 40 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return cc.Stats().Kept > 0 }, 5*time.Second, time.Millisecond)

	// Two cursors released keeping records: Capacity 1 drops one's.
	for _, p := range []int32{3, 3} {
		l, err := cc.Acquire(t.Context(), topic, p, 0)
		require.NoError(t, err)
		readRange(t, l, 0, 5)
		l.Release(nil)
	}
	st := cc.Stats()
	assert.Equal(t, int64(parts-1), st.Following)
	cc.mu.Lock()
	for p := range int32(parts - 1) {
		f := cc.followerLocked(key{topic, p})
		if assert.NotNil(t, f, "partition %d has no follower", p) {
			assert.Positive(t, f.keptBytes, "partition %d's follower dropped its records", p)
		}
	}
	cc.mu.Unlock()
}

// TestHeapWithinTheMemoryBound reads 1,000 partitions with a follower on
// every one and compares the process's live heap (after GC) with what
// Config.MemoryBound states, at three moments: once the followers fetched
// what the idle budget lets them keep, while sixteen leases at a time read
// all but the last record of every partition (one batch of 48 KB each, 48
// MB in all), and once every partition is followed from its last record,
// which its cursor keeps. Kept records that pinned their fetch's response
// would hold most of the 48 MB, three times the bound. kfake serves from
// the same process, so its response buffers in flight (as large as the
// cache's) are allowed for, and what the cluster stores is measured before
// the cache starts.
func TestHeapWithinTheMemoryBound(t *testing.T) {
	const (
		parts   = 1000
		records = 48
		leases  = 16
	)
	c := newCluster(t, parts, 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	require.NoError(t, err)
	value := make([]byte, 1000)
	for from := int32(0); from < parts; from += 100 {
		var recs []*kgo.Record
		for p := from; p < from+100; p++ {
			for range records {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: value})
			}
		}
		require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	}
	cl.Close()

	cfg := Config{
		Seeds:                  c.ListenAddrs(),
		Capacity:               parts, // every cursor may keep its last record
		IdleTimeout:            time.Minute,
		IdleBufferBytes:        2 << 20,
		FetchMaxBytes:          4 << 20,
		FetchMaxPartitionBytes: 64 << 10,
		FetchMaxWait:           100 * time.Millisecond,
	}
	bound := cfg.MemoryBound(1, leases, parts)
	kfakeInFlight := int64(maxRounds) * int64(cfg.FetchMaxBytes)
	base := heapAfterGC()
	cache, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cache.Close(context.Background()) })
	check := func(when string) {
		t.Helper()
		held := int64(heapAfterGC()) - int64(base)
		t.Logf("%s: heap %.1f MiB over the cluster's, bound %.1f MiB (+%.1f MiB for kfake), Kept %.1f MiB",
			when, float64(held)/(1<<20), float64(bound)/(1<<20), float64(kfakeInFlight)/(1<<20), float64(cache.Stats().Kept)/(1<<20))
		assert.LessOrEqual(t, held, bound+kfakeInFlight, "%s: the heap is over the stated bound", when)
	}

	for p := range int32(parts) {
		cache.Watch(topic, p, 0)
	}
	require.Eventually(t, func() bool { return cache.Stats().Following == parts }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(time.Second) // the followers fetch what the budget lets them keep
	check("1,000 followers")

	sem := make(chan struct{}, leases)
	errs := make(chan error, parts)
	var wg sync.WaitGroup
	for p := range int32(parts) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l, err := cache.Acquire(t.Context(), topic, p, 0)
			if err != nil {
				errs <- err
				return
			}
			n := 0
			_, err = l.Read(t.Context(), 0, records-1, func(recs []*kgo.Record, _ int64) error { n += len(recs); return nil })
			l.Release(err)
			if err == nil && n != records-1 {
				err = fmt.Errorf("partition %d: %d records, want %d", p, n, records-1)
			}
			if err != nil {
				errs <- err
			}
		}()
		if p == parts/2 {
			check("reading, 16 leases at a time")
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for p := range int32(parts) {
		cache.Watch(topic, p, records-1)
	}
	require.Eventually(t, func() bool { return cache.Stats().Following == parts }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(time.Second)
	check("1,000 followers, each keeping its last record")
}
