package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
)

// TestLanesSurviveALeaderKill reads eight ranges of one partition (replication factor 3) at
// once through the cursor cache on a 3-node cluster of the test's own, its lanes open (the
// cluster is on loopback: LaneMinRTT -1 takes it for a distant one), and SIGKILLs the
// partition's leader while the lanes have fetches in flight. The reads on the dead broker's
// lanes fail with retriable errors; read again from where they stopped, as the engine does,
// they learn the new leader and every range gets every record once, in order. Close then
// returns once the lanes and their clients are done.
func TestLanesSurviveALeaderKill(t *testing.T) {
	t.Parallel()
	const (
		records = 20000
		ranges  = 8
	)
	c := newOwnCluster(t, 3)
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(100*time.Millisecond)))
	topic := c.createTopic(t, adm, 1, 3)
	c.produce(t, topic, c.records(topic, 1, 0, records), 16<<10)

	cc, err := cache.New(cache.Config{
		Seeds:                  c.addrs(),
		LaneMinRTT:             -1,
		FetchConnections:       4,
		FetchMaxPartitionBytes: 4 << 10, // many fetches per range (the batches are snappy-compressed)
		LanePartitionBytes:     4 << 10, // on the lanes too
	})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var (
		read     atomic.Int64
		failures atomic.Int64
		got      = make([][]int64, ranges)
		wg       sync.WaitGroup
	)
	for i := range int64(ranges) {
		lo, hi := i*records/ranges, (i+1)*records/ranges
		wg.Go(func() {
			for pos, attempt := lo, 1; pos < hi; attempt++ {
				l, err := cc.Acquire(ctx, topic, 0, pos)
				if !assert.NoError(t, err, "acquire [%d, %d) at %d", lo, hi, pos) {
					return
				}
				pos, err = l.Read(ctx, pos, hi, func(recs []*kgo.Record, _ int64) error {
					for _, r := range recs {
						got[i] = append(got[i], r.Offset)
					}
					read.Add(int64(len(recs)))
					time.Sleep(20 * time.Millisecond) // a slow pipeline: the read spans the kill
					return nil
				})
				l.Release(err)
				if err == nil {
					continue
				}
				if !assert.False(t, cache.Permanent(err), "range [%d, %d) at %d: %v", lo, hi, pos, err) || ctx.Err() != nil {
					return
				}
				failures.Add(1)
				time.Sleep(min(time.Duration(attempt)*100*time.Millisecond, time.Second))
			}
		})
	}
	require.Truef(t, waitUntil(60*time.Second, 10*time.Millisecond, func() bool {
		return cc.Stats().Lanes > 0 && read.Load() > records/10
	}), "no lane opened, or a tenth not read: %d read, stats %+v", read.Load(), cc.Stats())
	leaders, err := c.leaders(ctx, adm, topic)
	require.NoError(t, err)
	before, readAtKill := cc.Stats(), read.Load()
	c.node(leaders[0]).kill(t)
	wg.Wait()
	st := cc.Stats()
	t.Logf("killed leader %d with %d of %d records read; reads failed %d times; lanes opened %d (before the kill %d), lane fetches %d of %d",
		leaders[0], readAtKill, records, failures.Load(), st.LanesOpened, before.LanesOpened, st.LaneFetches, st.Fetches)
	for i := range int64(ranges) {
		lo, hi := i*records/ranges, (i+1)*records/ranges
		want := make([]int64, 0, hi-lo)
		for o := lo; o < hi; o++ {
			want = append(want, o)
		}
		require.Equal(t, want, got[i], "range [%d, %d): offsets missing, repeated or out of order", lo, hi)
	}
	assert.Positive(t, failures.Load(), "no read met the killed leader")
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer closeCancel()
	require.NoError(t, cc.Close(closeCtx))
	assert.Zero(t, cc.Stats().Lanes, "lanes left after Close")
}
