package cache

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkShares checks the shared responses' accounting under cc.mu: only
// leased cursors queue answers that share a response, each response's
// holds are at least the queued and decoding answers that refer to it
// (exactly, when quiet: no holder is between its take and recording the
// answer it took), and pinned is at least the sum of the responses they
// hold (exactly, when quiet), within FetchMaxBytes.
func checkShares(t *testing.T, cc *Cache, quiet bool) {
	t.Helper()
	refs := map[*sharedResp]int{}
	for _, all := range cc.byKey {
		for _, cur := range all {
			if raw := cur.decoding; raw != nil && raw.shared != nil {
				require.True(t, cur.leased(), "a %s cursor holds a shared response", cur.state)
				refs[raw.shared]++
			}
			for _, raw := range cur.queue {
				if raw.shared == nil {
					continue
				}
				require.True(t, cur.leased(), "a %s cursor queues an answer that shares its response", cur.state)
				refs[raw.shared]++
			}
		}
	}
	var pinned int64
	for sh, n := range refs {
		if quiet {
			require.Equal(t, n, sh.refs, "holds of a shared response")
		} else {
			require.GreaterOrEqual(t, sh.refs, n, "holds of a shared response")
		}
		pinned += sh.bytes
	}
	if quiet {
		require.Equal(t, pinned, cc.pinned, "pinned is not the sum of the shared responses held")
	} else {
		require.GreaterOrEqual(t, cc.pinned, pinned, "pinned is less than the shared responses held")
	}
	require.LessOrEqual(t, cc.pinned, int64(cc.cfg.FetchMaxBytes), "pinned past FetchMaxBytes")
}

// readShared reads [0, n) of partition p in one lease through cc and
// returns the offsets delivered.
func readShared(t *testing.T, cc *Cache, p int32, n int64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := cc.Acquire(ctx, topic, p, 0)
	require.NoError(t, err)
	var got []int64
	pos, err := l.Read(ctx, 0, n, func(recs []*kgo.Record, _ int64) error {
		for _, r := range recs {
			got = append(got, r.Offset)
		}
		return nil
	})
	l.Release(err)
	require.NoErrorf(t, err, "Read at %d", pos)
	return got
}

// TestLeasedCursorsShareTheirRoundsResponse: eight partitions read at once,
// each by a lease, come in rounds of several partitions whose answers are
// queued without a copy (pinned counts their responses), within
// FetchMaxBytes. Every record arrives once, in order, and nothing is pinned
// once the leases end.
func TestLeasedCursorsShareTheirRoundsResponse(t *testing.T) {
	const (
		partitions = 8
		n          = 400
	)
	c := newCluster(t, partitions, 0)
	for p := range int32(partitions) {
		produceN(t, c, p, n, 1000, kgo.ProducerBatchMaxBytes(16<<10))
	}
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxPartitionBytes = 16 << 10
		cfg.FetchMaxBytes = 256 << 10
	})
	stop, sampled := make(chan struct{}), make(chan struct{})
	var most int64
	go func() {
		defer close(sampled)
		for {
			func() {
				cc.mu.Lock()
				defer cc.mu.Unlock() // also when the check fails
				most = max(most, cc.pinned)
				checkShares(t, cc, false)
			}()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	var wg sync.WaitGroup
	got := make([][]int64, partitions)
	for p := range int32(partitions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[p] = readShared(t, cc, p, n)
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	for p := range partitions {
		require.Equal(t, seq(0, n), got[p], "partition %d: records lost, duplicated or out of order", p)
	}
	assert.Positive(t, most, "no response was shared")
	cc.mu.Lock()
	defer cc.mu.Unlock()
	checkShares(t, cc, true)
	assert.Zero(t, cc.pinned, "pinned after every lease ended")
}

// TestResponsesAreSharedWithinFetchMaxBytes: a response is shared only while
// the responses already pinned and it fit in FetchMaxBytes; else its
// answers are copied. A round of one partition is never counted.
func TestResponsesAreSharedWithinFetchMaxBytes(t *testing.T) {
	cc := &Cache{cfg: Config{FetchMaxBytes: 1000}}
	resp := func(sizes ...int) *kmsg.FetchResponse {
		r := kmsg.NewPtrFetchResponse()
		rt := kmsg.NewFetchResponseTopic()
		for i, n := range sizes {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = int32(i)
			rp.RecordBatches = make([]byte, n)
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
		return r
	}
	require.Nil(t, cc.shareLocked(resp(600), 1), "a round of one partition")
	first := cc.shareLocked(resp(300, 300), 2)
	require.NotNil(t, first)
	assert.Equal(t, int64(600), cc.pinned)
	assert.Nil(t, cc.shareLocked(resp(300, 200), 2), "600 + 500 > FetchMaxBytes: copied")
	second := cc.shareLocked(resp(200, 200), 2)
	require.NotNil(t, second, "600 + 400 fit")
	assert.Equal(t, int64(1000), cc.pinned)

	// Each answer holds its response; the last hold gives the bytes back.
	a, b := &rawFetch{shared: first}, &rawFetch{shared: first}
	first.refs = 2
	a.releaseLocked()
	assert.Equal(t, int64(1000), cc.pinned)
	a.releaseLocked() // a second release of the same answer is nothing
	assert.Equal(t, int64(1000), cc.pinned)
	b.releaseLocked()
	assert.Equal(t, int64(400), cc.pinned)
}

// TestSharedAnswersAreCopiedWhenTheLeaseEnds: a lease ends while its cursor
// queues an answer that shares a response: the idle cursor keeps a copy of
// its own, its kept bytes what it queues, and the response is no longer
// pinned.
func TestSharedAnswersAreCopiedWhenTheLeaseEnds(t *testing.T) {
	c := newCluster(t, 1, 0)
	cc := newCache(t, c, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := cc.Acquire(ctx, topic, 0, 0)
	require.NoError(t, err)

	buf := make([]byte, 100)
	cc.mu.Lock()
	sh := &sharedResp{bytes: 100, refs: 1, pinned: &cc.pinned}
	cc.pinned += sh.bytes
	raw := &rawFetch{at: 0, gen: l.cur.gen, bytes: 40, shared: sh}
	raw.part.RecordBatches = buf[10:50]
	l.cur.queue = append(l.cur.queue, raw)
	l.cur.queueBytes += raw.bytes
	cc.mu.Unlock()

	l.Release(nil)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	assert.Nil(t, raw.shared, "the idle cursor's answer still shares the response")
	assert.Zero(t, cc.pinned, "the response is still pinned")
	assert.Zero(t, sh.refs)
	require.Len(t, raw.part.RecordBatches, 40)
	assert.NotSame(t, &buf[10], &raw.part.RecordBatches[0], "the answer was not copied")
	assert.Equal(t, l.cur.queueBytes, l.cur.keptBytes, "kept bytes of the idle cursor")
	checkShares(t, cc, true)
}

// TestKeepingCountsIdleCursorsThatKeepRecords: idleList.keeping, which
// idleList.trim takes as the number of idle cursors that keep records and
// do not follow, follows an answer queued on a cursor after its lease
// ended (a fetch that was in flight) and its drop, which the cursor model
// does not produce.
func TestKeepingCountsIdleCursorsThatKeepRecords(t *testing.T) {
	c := newCluster(t, 1, 0)
	cc := newCache(t, c, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := cc.Acquire(ctx, topic, 0, 0)
	require.NoError(t, err)
	cur := l.cur
	l.Release(nil)

	cc.mu.Lock()
	defer cc.mu.Unlock()
	require.True(t, cur.listed())
	require.Zero(t, cur.keptBytes)
	require.Zero(t, cc.idle.keeping, "an idle cursor that keeps nothing")
	raw := &rawFetch{at: cur.fetchAt, gen: cur.gen, bytes: 100}
	raw.part.RecordBatches = make([]byte, 100)
	cc.queueLocked(cur, raw, cur.fetchAt)
	assert.Equal(t, int64(100), cur.keptBytes)
	assert.Equal(t, 1, cc.idle.keeping, "the answer that arrived after the lease ended")
	cc.dropQueueLocked(cur)
	assert.Zero(t, cur.keptBytes)
	assert.Zero(t, cc.idle.keeping, "after the drop")
	checkShares(t, cc, true)
}
