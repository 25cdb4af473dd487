package cache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// twoBrokers returns a two-broker cluster whose partition 0 is led by
// broker 0 and partition 1 by broker 1.
func twoBrokers(t *testing.T, n int) *kfake.Cluster {
	t.Helper()
	c := newClusterWith(t, 2, n, kfake.NumBrokers(2))
	require.NoError(t, c.MoveTopicPartition(topic, 0, 0))
	require.NoError(t, c.MoveTopicPartition(topic, 1, 1))
	return c
}

// TestFollowersKeepReportingWhenTheIdleBudgetFills: partition 0's follower
// (broker 0) fetches a burst over IdleBufferBytes, which the engine then
// reads. A follower on another broker, caught up all along, must go on
// reporting its partition's new records: a full budget stops idle cursors
// from buffering more, never from seeing the tail move.
func TestFollowersKeepReportingWhenTheIdleBudgetFills(t *testing.T) {
	c := twoBrokers(t, 0)
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.IdleBufferBytes = 32 << 10
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.OnHigh = h.on
	})
	produceN(t, c, 0, 100, 1000) // ~100 KB on partition 0: over the budget
	cc.Watch(topic, 1, 0)
	require.Eventually(t, func() bool { return cc.Stats().Following == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // partition 1's follower long-polls broker 1
	cc.Watch(topic, 0, 0)              // partition 0's follower fetches the burst
	require.Eventually(t, func() bool { return h.get(0) == 100 }, 5*time.Second, time.Millisecond)
	time.Sleep(200 * time.Millisecond) // broker 1's loop ends its round with the budget full

	produceN(t, c, 1, 10, 10)
	assert.Eventually(t, func() bool { return h.get(1) == 10 }, 5*time.Second, 10*time.Millisecond,
		"partition 1's follower stopped while the budget was full (OnHigh %d)", h.get(1))

	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seq(0, 100), readRange(t, l, 0, 100))
	l.Release(nil)

	produceN(t, c, 1, 10, 10)
	produceN(t, c, 0, 10, 10)
	assert.Eventually(t, func() bool { return h.get(1) == 20 && h.get(0) == 110 }, 5*time.Second, 10*time.Millisecond,
		"after the budget freed: OnHigh of partition 0 %d (want 110), of partition 1 %d (want 20)", h.get(0), h.get(1))
}

// TestEveryFollowerReportsItsBurst: twenty followers at the tail of empty
// partitions, then a burst of 200 KB on each, far over IdleBufferBytes:
// every partition's new end must be reported, whatever the budget lets
// the followers keep.
func TestEveryFollowerReportsItsBurst(t *testing.T) {
	const parts = 20
	c := newCluster(t, parts, 0)
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.IdleBufferBytes = 64 << 10
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
	assert.Eventually(t, func() bool { return reported() == parts }, 10*time.Second, 10*time.Millisecond,
		"partitions whose burst OnHigh reported: %d/%d", reported(), parts)
}

// TestLeaseOnOneBrokerLeavesOtherLoopsLongPolling: a loop polls briefly
// instead of long-polling only while a lease holder of its own broker may
// want data it cannot have until the broker answers: a holder waiting for
// a fetch from broker 1 is not delayed by broker 0's long poll (another
// connection), so broker 0's loop, with one idle follower, keeps
// long-polling.
func TestLeaseOnOneBrokerLeavesOtherLoopsLongPolling(t *testing.T) {
	c := twoBrokers(t, 0)
	counter := newRequestCounter()
	cc := newCache(t, c, func(cfg *Config) { cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(counter)} })
	cc.Watch(topic, 0, 0) // a follower in broker 0's loop
	require.Eventually(t, func() bool { return counter.fetches(0) > 0 }, 5*time.Second, time.Millisecond)

	time.Sleep(200 * time.Millisecond)
	before := counter.fetches(0)
	time.Sleep(1200 * time.Millisecond)
	idle := counter.fetches(0) - before

	// A holder of partition 1 waits for its fetch on broker 1.
	l, err := cc.Acquire(t.Context(), topic, 1, 0)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
	defer cancel()
	before = counter.fetches(0)
	_, rerr := l.Read(ctx, 0, 1, func([]*kgo.Record, int64) error { return nil })
	busy := counter.fetches(0) - before
	l.Release(rerr)
	require.ErrorIs(t, rerr, context.DeadlineExceeded, "partition 1 is empty: the read waits")
	t.Logf("fetches to broker 0 (one idle follower) per 1.2 s: %d with no lease, %d while a lease waits on broker 1", idle, busy)
	assert.Less(t, busy, 4*max(idle, 3), "a holder on broker 1 made broker 0's loop poll briefly")
}

// TestLoopOfABrokerGoneFromTheMetadataStops: a broker removed from the
// cluster loses its partitions to the others; its loop, left with no
// cursor, stops, and the partition's follower follows on the new leader.
func TestLoopOfABrokerGoneFromTheMetadataStops(t *testing.T) {
	c := newClusterWith(t, 1, 0, kfake.NumBrokers(3))
	require.NoError(t, c.MoveTopicPartition(topic, 0, 2))
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = 50 * time.Millisecond
		cfg.OnHigh = h.on
	})
	cc.Watch(topic, 0, 0)
	loopOf := func(id int32) bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		b := cc.brokers[id]
		return b != nil && b.loop != nil
	}
	require.Eventually(t, func() bool { return loopOf(2) }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.RemoveNode(2))
	assert.Eventually(t, func() bool { return !loopOf(2) }, 10*time.Second, 10*time.Millisecond, "broker 2's loop still runs")
	produceN(t, c, 0, 10, 10)
	assert.Eventually(t, func() bool { return h.get(0) == 10 }, 10*time.Second, 10*time.Millisecond, "the follower stopped (OnHigh %d)", h.get(0))
}

// TestLoopWithoutCursorsStops: the loop of a broker whose cursors were all
// released (none follows) stops; the next lease starts it again.
func TestLoopWithoutCursorsStops(t *testing.T) {
	c := newCluster(t, 1, 100)
	cc := newCache(t, c, nil)
	for _, r := range [][2]int64{{0, 50}, {50, 100}} {
		l, err := cc.Acquire(t.Context(), topic, 0, r[0])
		require.NoError(t, err)
		require.Equal(t, seq(r[0], r[1]), readRange(t, l, r[0], r[1]))
		l.Release(nil)
		assert.Eventually(t, func() bool {
			cc.mu.Lock()
			defer cc.mu.Unlock()
			for _, b := range cc.brokers {
				if b.loop != nil {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond, "a loop with no cursor still runs")
	}
}

// TestPartitionsLeftOutOfAFullResponseAreFetchedAgain: a broker may leave
// out of a fetch response the partitions it had no room for once
// FetchMaxBytes was reached (kfake does; Kafka answers them empty). That
// is no error: such a partition is asked again in the next round, and
// every concurrent read completes.
func TestPartitionsLeftOutOfAFullResponseAreFetchedAgain(t *testing.T) {
	const parts = 20
	c := newCluster(t, parts, 0)
	for p := range int32(parts) {
		produceN(t, c, p, 20, 1000) // one ~20 KB batch
	}
	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxBytes = 8 << 10 }) // one batch per response
	errs := make(chan error, parts)
	for p := range int32(parts) {
		go func() {
			l, err := cc.Acquire(t.Context(), topic, p, 0)
			if err != nil {
				errs <- err
				return
			}
			_, err = l.Read(t.Context(), 0, 20, func([]*kgo.Record, int64) error { return nil })
			l.Release(err)
			errs <- err
		}()
	}
	for range parts {
		assert.NoError(t, <-errs)
	}
}

// TestFollowerBacksOffFromABrokerThatDropsItsFetches: broker 0,
// still the leader of partition 0 in the metadata, closes every fetch
// connection (a broker going down: after an unclean crash the metadata
// names it leader until its session expires, 9 s on KRaft, and a closed
// port refuses at once). The idle follower of partition 0 fails (a request
// error), revives (one metadata request, answered at once and naming
// broker 0 again), rejoins a loop, which sends at once (a cursor just
// joined: a 5 ms poll) on a new connection, and fails again, with no pause
// anywhere in the cycle: a revival backs off only while it cannot learn a
// leader, never when the leader it learns keeps failing, and franz-go's
// Broker.Request neither retries nor backs off a dial.
//
// Over one second that is hundreds of reconnects to the failing broker and
// as many metadata requests, from one idle partition; every follower of
// the broker does the same (the metadata request is shared per topic). The
// revival's own backoff (100 ms doubling to 5 s), kgo's consumer and the
// Java consumer (reconnect.backoff.ms, retry.backoff.ms) would make it a
// handful.
func TestFollowerBacksOffFromABrokerThatDropsItsFetches(t *testing.T) {
	c := twoBrokers(t, 0) // partition 0 led by broker 0, partition 1 by broker 1
	counter := newRequestCounter()
	var dials atomic.Int64
	cc := newCache(t, c, func(cfg *Config) {
		cfg.ClientOpts = []kgo.Opt{kgo.DisableClientMetrics(), kgo.WithHooks(counter, connectHook(func() { dials.Add(1) }))}
	})
	cc.Watch(topic, 0, 0)
	require.Eventually(t, func() bool { return following(cc, 1) }, 5*time.Second, time.Millisecond)
	time.Sleep(600 * time.Millisecond) // the follower long-polls

	var dropped atomic.Int64
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() != 0 {
			return nil, nil, false
		}
		dropped.Add(1)
		return nil, errors.New("broker 0 is going down"), true // kfake closes the connection
	})
	meta0, dials0 := counter.key(kmsg.Metadata), dials.Load()
	time.Sleep(time.Second)
	meta, fails, opened := counter.key(kmsg.Metadata)-meta0, dropped.Load(), dials.Load()-dials0
	t.Logf("in 1 s: %d fetches to broker 0 dropped, %d connections opened, %d metadata requests (stats %+v)", fails, opened, meta, cc.Stats())
	assert.LessOrEqual(t, fails, int64(50), "fetches, each on a new connection, to the failing broker in 1 s from one idle follower")
	assert.LessOrEqual(t, opened, int64(50), "connections opened in 1 s (franz-go dials the failing broker for every fetch)")
	assert.LessOrEqual(t, meta, 50, "metadata requests in 1 s from one idle follower whose leader drops its fetches")
}

// TestRoundShareOfItsLeasedCursors: a round on a broker's connection asks
// each leased cursor for the larger of FetchMaxPartitionBytes and
// RoundBytes shared among the partitions its leased cursors read
// (Config.RoundBytes), less only near a range's end: one partition read
// alone asks RoundBytes, four partitions read at once 1/4 of it each
// (never below FetchMaxPartitionBytes), and without RoundBytes every fetch
// asks FetchMaxPartitionBytes. Every range reads its records in order,
// once.
func TestRoundShareOfItsLeasedCursors(t *testing.T) {
	const n, part, round = 2000, 16 << 10, 128 << 10
	for _, tc := range []struct {
		name       string
		parts      int32
		roundBytes int32
		want       int32 // what a round of every leased cursor asks of each
	}{
		{"one partition", 1, round, round},
		{"four partitions", 4, round, round / 4},
		{"eight partitions, never below FetchMaxPartitionBytes", 8, 2 * part, part},
		{"without RoundBytes", 1, 0, part},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.parts, 0)
			for p := range tc.parts {
				produceSmallBatches(t, c, p, n)
			}
			var mu sync.Mutex
			// PartitionMaxBytes of the fetches of partitions not at their
			// end (a follower asks FetchMaxPartitionBytes): asked of every
			// round, full of the rounds of all tc.parts partitions. The
			// partitions may split between the two rounds in flight for
			// the whole read, so a full round may never come.
			asked, full := map[int32]int{}, map[int32]int{}
			c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				var ps []kmsg.FetchRequestTopicPartition
				for _, rt := range req.(*kmsg.FetchRequest).Topics {
					ps = append(ps, rt.Partitions...)
				}
				reading := true
				for _, rp := range ps {
					reading = reading && rp.FetchOffset < n
				}
				if reading {
					mu.Lock()
					for _, rp := range ps {
						asked[rp.PartitionMaxBytes]++
						if len(ps) == int(tc.parts) {
							full[rp.PartitionMaxBytes]++
						}
					}
					mu.Unlock()
				}
				return nil, nil, false
			})
			cc := newCache(t, c, func(cfg *Config) {
				cfg.FetchConnections = 1
				cfg.FetchMaxPartitionBytes = part
				cfg.RoundBytes = tc.roundBytes
			})
			var wg sync.WaitGroup
			for p := range tc.parts {
				wg.Go(func() {
					got := readConcurrently(t, cc, p, [][2]int64{{0, n}}, nil)
					assert.Equal(t, seq(0, n), got[0], "partition %d", p)
				})
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			assert.Positive(t, asked[tc.want], "fetches by PartitionMaxBytes: %v", asked)
			for size := range full {
				// Less near a range's end (roundAsk), never more.
				assert.LessOrEqual(t, size, tc.want, "a round of every leased cursor asked more than its share: %v", full)
			}
		})
	}
}

// TestRoundShareStopsAtTheRangesEnd: a leased cursor's round share asks no
// more than what is left of its range by its bytes per offset so far, plus
// roundSlack: records past the range's end are the next range's, whose
// cursor fetches them again when ranges of a partition read in parallel.
// Only the first fetch, before the cursor knows its bytes per offset, asks
// the whole share.
func TestRoundShareStopsAtTheRangesEnd(t *testing.T) {
	const n, size, end = 8000, 1000, 6000 // about 8 MB of records; the range reads 6 MB of them, more than one share
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	var mu sync.Mutex
	var asks []int32
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset < end {
					mu.Lock()
					asks = append(asks, rp.PartitionMaxBytes)
					mu.Unlock()
				}
			}
		}
		return nil, nil, false
	})
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchConnections = 1
		cfg.FetchMaxPartitionBytes = 16 << 10
		cfg.RoundBytes = 4 << 20
	})
	got := readConcurrently(t, cc, 0, [][2]int64{{0, end}}, nil)
	require.Equal(t, seq(0, end), got[0])
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, len(asks), 1, "the range took one fetch: nothing to check")
	assert.Equal(t, int32(4<<20), asks[0], "the first fetch, bytes per offset unknown, asks the share: %v", asks)
	assert.Less(t, asks[1], int32(4<<20), "the second fetch asked its whole share, past the range's end: %v", asks)
}
