package cache

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// highs records what OnHigh reported, per partition.
type highs struct {
	mu sync.Mutex // guards m
	m  map[int32]int64
}

func (h *highs) on(_ string, p int32, high int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[int32]int64{}
	}
	if high > h.m[p] {
		h.m[p] = high
	}
}

func (h *highs) get(p int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[p]
}

// produceN writes n records of about size bytes to partition p,
// uncompressed unless opts say otherwise (kgo compresses with snappy by
// default, which shrinks these values to almost nothing).
func produceN(t *testing.T, c *kfake.Cluster, p int32, n int, size int, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression())}, opts...)...)
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Appendf(nil, "v%d-", i)
		for len(v) < size {
			v = append(v, 'x')
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: v})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
}

// TestLeasedFollowerDropsAStaleFetchError: a follower is leased for the
// records it already holds; while its holder is in emit, the loop (which
// fetches ahead for a leased follower) gets NOT_LEADER_FOR_PARTITION. The
// range completes from the queue, so Read never takes that error. Released,
// the cursor must relearn its leader and go on following (OnHigh reports
// the next records), and the next range must read them, not fail with the
// stale error on a healthy cluster.
func TestLeasedFollowerDropsAStaleFetchError(t *testing.T) {
	c := newCluster(t, 1, 10)
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.OnHigh = h.on
	})
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
	l.Release(nil)

	cc.Watch(topic, 0, 10)
	produceN(t, c, 0, 10, 10) // offsets 10..19
	require.Eventually(t, func() bool { return h.get(0) >= 20 }, 5*time.Second, 5*time.Millisecond, "the follower never reported 20")

	l, err = cc.Acquire(t.Context(), topic, 0, 10)
	require.NoError(t, err)
	cur := l.cur
	var faulted bool
	pos, err := l.Read(t.Context(), 10, 20, func(recs []*kgo.Record, _ int64) error {
		if faulted {
			return nil
		}
		faulted = true
		// While the holder is in emit, the loop fetches ahead at 20.
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 1})
		require.Eventually(t, func() bool {
			cc.mu.Lock()
			defer cc.mu.Unlock()
			return cur.err != nil
		}, 5*time.Second, time.Millisecond, "the fault did not reach the cursor")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(20), pos)
	l.Release(nil)
	cc.Watch(topic, 0, 20) // what the engine does after a range that ends caught up

	produceN(t, c, 0, 10, 10) // offsets 20..29
	assert.Eventually(t, func() bool { return h.get(0) >= 30 }, 5*time.Second, 10*time.Millisecond,
		"the partition's follower never fetched again: OnHigh stuck at %d after records 20..29 were written", h.get(0))

	l, err = cc.Acquire(t.Context(), topic, 0, 20)
	require.NoError(t, err)
	got := readRange(t, l, 20, 30)
	l.Release(nil)
	assert.Equal(t, seq(20, 30), got)
}

// TestFollowerOutOfRangeIsAnOffsetOutOfRangeError: a follower whose fetch
// position was deleted keeps the broker's answer for its next lease, which
// continues at that position and must get the same *OffsetOutOfRangeError
// as a read that fetches it itself (permanent, naming what is gone).
func TestFollowerOutOfRangeIsAnOffsetOutOfRangeError(t *testing.T) {
	c := newCluster(t, 1, 100)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 40})
	resp, err := admin(t, c).DeleteRecords(t.Context(), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxWait = 50 * time.Millisecond })
	cc.Watch(topic, 0, 10)
	require.Eventually(t, func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		for _, cur := range cc.byKey[key{topic, 0}] {
			if cur.err != nil {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "the follower never fetched at 10")

	l, err := cc.Acquire(t.Context(), topic, 0, 10)
	require.NoError(t, err)
	_, err = l.Read(t.Context(), 10, 60, func([]*kgo.Record, int64) error { return nil })
	l.Release(err)
	assert.Equal(t, int64(1), cc.Stats().Continuations)
	var oor *OffsetOutOfRangeError
	require.ErrorAs(t, err, &oor)
	assert.True(t, Permanent(err))
	assert.Equal(t, int64(10), oor.Offset)
	assert.Equal(t, int64(40), oor.LogStart)
}

// TestRangeElsewhereLeavesTheFollowerAtTheTail: a range in the middle of a
// partition whose follower waits at the tail must not take (and move) the
// follower: the follower stays at the tail and reports new records, and
// the cursor that read the range does not become a follower
// mid-partition, fetching ahead without bound.
func TestRangeElsewhereLeavesTheFollowerAtTheTail(t *testing.T) {
	c := newCluster(t, 1, 1000)
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.FetchMaxPartitionBytes = 2048
		cfg.OnHigh = h.on
	})
	cc.Watch(topic, 0, 1000)
	require.Eventually(t, func() bool { return h.get(0) == 1000 }, 5*time.Second, time.Millisecond)
	l, err := cc.Acquire(t.Context(), topic, 0, 100)
	require.NoError(t, err)
	require.Equal(t, seq(100, 200), readRange(t, l, 100, 200))
	l.Release(nil)
	cc.mu.Lock()
	f := cc.followerLocked(key{topic, 0})
	var fnext int64 = -1
	if f != nil {
		fnext = f.next
	}
	cc.mu.Unlock()
	assert.Equal(t, int64(1000), fnext, "the partition's follower is at the tail")

	produceN(t, c, 0, 10, 10) // offsets 1000..1009
	assert.Eventually(t, func() bool { return h.get(0) == 1010 }, 5*time.Second, 10*time.Millisecond,
		"new records at the tail were never reported (OnHigh %d)", h.get(0))
}

// TestSeekedFollowerStopsFetchingAtItsRangeEnd: a lease that took the
// follower at its position but reads a range elsewhere seeks; a cursor
// sought for a range wants that range, not the tail: it does not fetch
// ahead without bound, and after its release it does not follow from the
// middle of the partition.
func TestSeekedFollowerStopsFetchingAtItsRangeEnd(t *testing.T) {
	c := newCluster(t, 1, 1000)
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.FetchMaxPartitionBytes = 2048
	})
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
	l.Release(nil)
	cc.Watch(topic, 0, 10) // that cursor follows from 10
	l, err = cc.Acquire(t.Context(), topic, 0, 10)
	require.NoError(t, err)
	require.True(t, l.cur.follows(), "the lease took the follower")
	require.Equal(t, seq(500, 600), readRange(t, l, 500, 600))
	assert.False(t, l.cur.follows(), "a cursor sought for [500, 600) wants the tail")
	cur := l.cur
	l.Release(nil)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	assert.False(t, cur.follower(), "the sought cursor follows from the middle of the partition")
}
