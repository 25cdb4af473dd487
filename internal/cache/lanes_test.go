package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
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

// fetchConns counts the connections its dialer opens and, of them, those
// that carried a fetch request with a partition in it (the lanes' empty
// fetch that opens their connection does not count), by reading the
// request frames written to each.
type fetchConns struct {
	mu       sync.Mutex // guards opened, fetching
	opened   int
	fetching map[*frameConn]bool
}

func (f *fetchConns) dialer() kgo.Opt {
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.opened++
		return &frameConn{Conn: conn, f: f}, nil
	})
}

// counts returns the connections opened and those that fetched records.
func (f *fetchConns) counts() (opened, fetching int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, len(f.fetching)
}

// frameConn reads the request frames written on a connection: a 4-byte
// size, then the request header (API key first), then the body; a fetch
// request's body (v4 and later: replica ID, max wait, min bytes, max
// bytes, isolation level, then on v7+ the session ID and epoch, then the
// topics) is decoded for its partitions.
type frameConn struct {
	net.Conn
	f   *fetchConns
	buf []byte
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	for len(c.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(c.buf))
		if len(c.buf) < 4+size {
			break
		}
		frame := c.buf[4 : 4+size]
		c.buf = c.buf[4+size:]
		if len(frame) < 4 || int16(binary.BigEndian.Uint16(frame)) != kmsg.Fetch.Int16() {
			continue
		}
		req := kmsg.NewPtrFetchRequest()
		req.Version = int16(binary.BigEndian.Uint16(frame[2:]))
		// The header: key, version, correlation ID, client ID (nullable
		// string), and on flexible versions (fetch v12+) tagged fields.
		at := 8
		if len(frame) < at+2 {
			continue
		}
		if n := int(int16(binary.BigEndian.Uint16(frame[at:]))); n > 0 {
			at += n
		}
		at += 2
		if req.IsFlexible() {
			at++ // no tagged fields in the header
		}
		if at > len(frame) || req.ReadFrom(frame[at:]) != nil {
			continue
		}
		n := 0
		for _, rt := range req.Topics {
			n += len(rt.Partitions)
		}
		if n > 0 {
			c.f.mu.Lock()
			if c.f.fetching == nil {
				c.f.fetching = map[*frameConn]bool{}
			}
			c.f.fetching[c] = true
			c.f.mu.Unlock()
		}
	}
	return c.Conn.Write(p)
}

// lanesOfLeases returns, per lane of the cache's leased cursors now, how
// many of them fetch on it (0 is the brokers' loops).
func lanesOfLeases(cc *Cache) map[int]int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	out := map[int]int{}
	for h := range cc.holders {
		if h.loop != nil {
			out[laneOf(h.loop)]++
		}
	}
	return out
}

// laneOf is the number of l's lane, 0 for a broker's loop.
func laneOf(l *loop) int {
	if ln, ok := l.conn.(*lane); ok {
		return ln.n
	}
	return 0
}

// readConcurrently reads each range of ranges (offsets of one partition)
// through a lease of its own, all at once, emit called with each lease's
// records, and returns the offsets each read delivered.
func readConcurrently(t *testing.T, cc *Cache, p int32, ranges [][2]int64, emit func(i int)) [][]int64 {
	t.Helper()
	got := make([][]int64, len(ranges))
	errs := make(chan error, len(ranges))
	var wg sync.WaitGroup
	for i, r := range ranges {
		wg.Go(func() {
			l, err := cc.Acquire(t.Context(), topic, p, r[0])
			if err != nil {
				errs <- err
				return
			}
			_, err = l.Read(t.Context(), r[0], r[1], func(recs []*kgo.Record, _ int64) error {
				for _, rec := range recs {
					got[i] = append(got[i], rec.Offset)
				}
				if emit != nil {
					emit(i)
				}
				return nil
			})
			l.Release(err)
			if err != nil {
				errs <- fmt.Errorf("range %v: %w", r, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return got
}

// produceSmallBatches writes n records of about 1 KB to partition p in
// batches of about 16 KiB: a fetch returns at least one batch whole
// (KIP-74), so FetchMaxPartitionBytes bounds what it returns only when
// batches are smaller.
func produceSmallBatches(t *testing.T, c *kfake.Cluster, p int32, n int) {
	t.Helper()
	produceN(t, c, p, n, 1000, kgo.ProducerBatchMaxBytes(16<<10))
}

// splitRanges cuts [0, n) into k ranges.
func splitRanges(n, k int64) [][2]int64 {
	var out [][2]int64
	for i := range k {
		out = append(out, [2]int64{i * n / k, (i + 1) * n / k})
	}
	return out
}

// TestRangesOfAPartitionReadOverSeveralConnections: eight ranges of one
// partition read at once, each with a backlog of many fetches: once their
// first answers showed the backlog, lanes open (three together,
// FetchConnections 4 allowing three), the leased
// cursors of the partition fetch on different ones at the same time, and
// their fetches go over that many connections to the one broker besides
// the broker's loop's. Every range gets its records, in order. With
// FetchConnections 1 every fetch goes on one connection.
func TestRangesOfAPartitionReadOverSeveralConnections(t *testing.T) {
	const n, ranges = 4000, 8
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	var conns fetchConns
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1                   // kfake on loopback, taken for a distant broker
		cfg.FetchMaxPartitionBytes = 16 << 10 // ~30 fetches per range
		cfg.LanePartitionBytes = 16 << 10     // as many fetches on a lane
		cfg.FetchConnections = 4
		cfg.ClientOpts = []kgo.Opt{conns.dialer()}
	})
	var most atomic.Int64 // the most lanes with a leased cursor at once
	got := readConcurrently(t, cc, 0, splitRanges(n, ranges), func(int) {
		busy := int64(0)
		for lane, k := range lanesOfLeases(cc) {
			if lane > 0 && k > 0 {
				busy++
			}
		}
		if busy > most.Load() {
			most.Store(busy)
		}
		time.Sleep(time.Millisecond) // the ranges overlap
	})
	for i, r := range splitRanges(n, ranges) {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	st := cc.Stats()
	opened, fetching := conns.counts()
	t.Logf("stats %+v; connections opened %d, of them fetching %d; most lanes busy at once %d", st, opened, fetching, most.Load())
	assert.Equal(t, int64(3), st.LanesOpened, "lanes opened: FetchConnections-1, together")
	assert.GreaterOrEqual(t, most.Load(), int64(2), "leased cursors of the partition on different lanes at once")
	assert.Positive(t, st.LaneFetches)
	assert.Equal(t, 4, fetching, "connections that carried a fetch of the partition: the broker's loop's and the lanes'")

	// One connection per broker without lanes.
	var one fetchConns
	cc1 := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxPartitionBytes = 16 << 10
		cfg.LanePartitionBytes = 16 << 10 // as many fetches on a lane
		cfg.FetchConnections = 1
		cfg.ClientOpts = []kgo.Opt{one.dialer()}
	})
	got = readConcurrently(t, cc1, 0, splitRanges(n, ranges), nil)
	for i, r := range splitRanges(n, ranges) {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v, FetchConnections 1", r)
	}
	_, fetching = one.counts()
	assert.Equal(t, 1, fetching, "fetch connections with FetchConnections 1")
	assert.Zero(t, cc1.Stats().LanesOpened)
}

// TestSmallBacklogsOpenNoLane: ranges whose backlog is under laneBacklog
// fetches (ten records a partition over four partitions, as an assignment's
// first ranges of a quiet topic) open no lane, even to a distant broker: a
// connection of its own would cost more than it brings.
func TestSmallBacklogsOpenNoLane(t *testing.T) {
	c := newCluster(t, 4, 10)
	var conns fetchConns
	cc := newCache(t, c, func(cfg *Config) { cfg.LaneMinRTT = -1; cfg.ClientOpts = []kgo.Opt{conns.dialer()} })
	var wg sync.WaitGroup
	for p := range int32(4) {
		wg.Go(func() {
			l, err := cc.Acquire(t.Context(), topic, p, 0)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
			l.Release(nil)
		})
	}
	wg.Wait()
	assert.Zero(t, cc.Stats().LanesOpened)
	_, fetching := conns.counts()
	assert.Equal(t, 1, fetching)
}

// TestLaneCursorGoesBackToTheBrokersLoop: a leased follower reads the
// partition's backlog on a lane (with a second lease, so a lane opens);
// once it fetched up to the partition's end it is caught up, leaves its lane
// (a lane never waits) and goes on fetching ahead on the broker's loop,
// which long-polls it: a record produced then is reported (OnHigh) and read
// by the same lease. Released, it follows the tail there.
func TestLaneCursorGoesBackToTheBrokersLoop(t *testing.T) {
	const n = 2000
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	var h highs
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1
		cfg.FetchMaxPartitionBytes = 16 << 10
		cfg.LanePartitionBytes = 16 << 10 // as many fetches on a lane
		cfg.FetchMaxWait = 200 * time.Millisecond
		cfg.OnHigh = h.on
	})
	cc.Watch(topic, 0, 0)
	require.Eventually(t, func() bool { return h.get(0) == n }, 5*time.Second, time.Millisecond)
	follower, err := cc.Acquire(t.Context(), topic, 0, 0) // the follower, at its position
	require.NoError(t, err)
	require.True(t, follower.cur.follows(), "the lease took the follower")
	other, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)

	var onLane atomic.Bool
	lane := func(l *Lease) int {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if l.cur.loop == nil {
			return -1
		}
		return laneOf(l.cur.loop)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		assert.Equal(t, seq(0, n), readRange(t, other, 0, n))
		other.Release(nil)
	})
	got := []int64{}
	_, err = follower.Read(t.Context(), 0, n, func(recs []*kgo.Record, _ int64) error {
		for _, r := range recs {
			got = append(got, r.Offset)
		}
		if lane(follower) > 0 {
			onLane.Store(true)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, seq(0, n), got)
	wg.Wait()
	assert.True(t, onLane.Load(), "the follower's lease never fetched on a lane")
	require.Eventually(t, func() bool { return lane(follower) == 0 }, 5*time.Second, time.Millisecond,
		"caught up, the leased follower is on lane %d", lane(follower))

	produceN(t, c, 0, 5, 100)
	require.Eventually(t, func() bool { return h.get(0) == n+5 }, 5*time.Second, time.Millisecond, "the broker's loop did not report the new records")
	assert.Equal(t, seq(n, n+5), readRange(t, follower, n, n+5))
	follower.Release(nil)
	assert.Equal(t, 0, lane(follower), "released, the follower follows on the broker's loop")
	assert.EqualValues(t, 1, cc.Stats().Following)
}

// TestLaneRequestInFlightMeetsALeaderChange: four ranges of one partition
// read on lanes of broker 0 (three brokers); kfake holds a lane's fetch
// while the partition's leader moves to another broker, then answers it
// (NOT_LEADER_OR_FOLLOWER). The cursor relearns its leader through the
// broker's loop's path and reads on from the new leader, whose lanes then
// take the backlog: every range gets every record once, in order.
func TestLaneRequestInFlightMeetsALeaderChange(t *testing.T) {
	const n, ranges = 3000, 4
	c := newClusterWith(t, 1, 0, kfake.NumBrokers(3))
	require.NoError(t, c.MoveTopicPartition(topic, 0, 0))
	produceSmallBatches(t, c, 0, n)
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1
		cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 16<<10, 16<<10
	})
	var held atomic.Bool
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis != 0 || len(req.Topics) == 0 || cc.Stats().Lanes == 0 || held.Swap(true) {
			return nil, nil, false // not a lane's, or one was held already
		}
		c.DropControl()
		moved := make(chan struct{})
		go func() {
			defer close(moved)
			assert.NoError(t, c.MoveTopicPartition(topic, 0, 1))
		}()
		c.SleepControl(func() { <-moved })
		return nil, nil, false // answered as the broker now is: not the leader
	})
	got := readConcurrently(t, cc, 0, splitRanges(n, ranges), func(int) { time.Sleep(time.Millisecond) })
	for i, r := range splitRanges(n, ranges) {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	require.True(t, held.Load(), "no lane fetch was held")
	assert.Equal(t, int32(1), c.LeaderFor(topic, 0))
	t.Logf("stats %+v", cc.Stats())
}

// TestLaneConnectionDroppedWithARequestInFlight: the broker closes a
// lane's connection with a fetch in flight (kfake answers it with a closed
// connection). The reads on it fail with a retriable error naming the
// partition, as a read on the broker's loop would; read again from where
// they stopped (as the engine does) every range gets every record once.
func TestLaneConnectionDroppedWithARequestInFlight(t *testing.T) {
	const n, ranges = 3000, 4
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1
		cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 16<<10, 16<<10
	})
	var dropped atomic.Bool
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis != 0 || len(req.Topics) == 0 || cc.Stats().Lanes == 0 || dropped.Swap(true) {
			return nil, nil, false
		}
		c.DropControl()
		return nil, errors.New("connection dropped by the test"), true
	})
	var failures atomic.Int64
	got := make([][]int64, ranges)
	var wg sync.WaitGroup
	for i, r := range splitRanges(n, ranges) {
		wg.Go(func() {
			for pos := r[0]; pos < r[1]; {
				l, err := cc.Acquire(t.Context(), topic, 0, pos)
				if !assert.NoError(t, err) {
					return
				}
				pos, err = l.Read(t.Context(), pos, r[1], func(recs []*kgo.Record, _ int64) error {
					for _, rec := range recs {
						got[i] = append(got[i], rec.Offset)
					}
					time.Sleep(time.Millisecond)
					return nil
				})
				l.Release(err)
				if err != nil {
					assert.False(t, Permanent(err), "a dropped connection is retriable: %v", err)
					assert.Contains(t, err.Error(), "t/0")
					failures.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i, r := range splitRanges(n, ranges) {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	require.True(t, dropped.Load(), "no lane connection was dropped")
	assert.Positive(t, failures.Load(), "no read saw the dropped connection")
	t.Logf("failures %d, stats %+v", failures.Load(), cc.Stats())
}

// cacheGoroutines returns the stacks of the goroutines running this
// package's code or a franz-go client's.
func cacheGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "internal/cache.(*") || strings.Contains(g, "franz-go/pkg/kgo.(*Client)") {
			out = append(out, g)
		}
	}
	return out
}

// TestCloseWaitsForBusyLanes: Close while leases read on lanes (their
// holders inside emit, lanes with fetches in flight) waits for the leases,
// then stops every loop and lane and closes every client it created, lanes'
// included: no goroutine of the cache or of a franz-go client is left.
func TestCloseWaitsForBusyLanes(t *testing.T) {
	const n, ranges = 4000, 8
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	before := len(cacheGoroutines())
	cc, err := New(Config{Seeds: c.ListenAddrs(), LaneMinRTT: -1, FetchMaxPartitionBytes: 16 << 10})
	require.NoError(t, err)

	release := make(chan struct{})
	var reading sync.WaitGroup
	var wg sync.WaitGroup
	for _, r := range splitRanges(n, ranges) {
		reading.Add(1)
		wg.Go(func() {
			l, err := cc.Acquire(t.Context(), topic, 0, r[0])
			if !assert.NoError(t, err) {
				reading.Done()
				return
			}
			emits := 0
			_, err = l.Read(t.Context(), r[0], r[1], func([]*kgo.Record, int64) error {
				if emits++; emits == 1 {
					reading.Done()
					<-release // the holder sits in emit while Close starts
				}
				return nil
			})
			l.Release(err)
		})
	}
	reading.Wait()
	require.Eventually(t, func() bool { return cc.Stats().Lanes > 0 }, 5*time.Second, time.Millisecond, "no lane opened")
	closed := make(chan error, 1)
	go func() { closed <- cc.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned with leases held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	require.NoError(t, <-closed)
	assert.Zero(t, cc.Stats().Lanes)
	require.Eventually(t, func() bool { return len(cacheGoroutines()) <= before }, 5*time.Second, 10*time.Millisecond,
		"goroutines left after Close:\n%s", strings.Join(cacheGoroutines(), "\n\n"))
}

// TestHeapWithinTheMemoryBoundOnLanes: sixteen leases read ranges of one
// partition of 32 MB on lanes (1 MiB a range per fetch there, 256 KiB on
// the broker's loop), their holders slow, so every lane round is in
// flight and every queue full: the live heap stays within
// Config.MemoryBound for one broker and sixteen leases (kfake serves from
// this process: its responses in flight, as large as the cache's, are
// allowed for).
func TestHeapWithinTheMemoryBoundOnLanes(t *testing.T) {
	const (
		n      = 32000
		leases = 16
	)
	c := newCluster(t, 1, 0)
	for range 8 {
		produceN(t, c, 0, n/8, 1000, kgo.ProducerBatchMaxBytes(64<<10))
	}
	cfg := Config{Seeds: c.ListenAddrs(), LaneMinRTT: -1, FetchMaxPartitionBytes: 256 << 10, LanePartitionBytes: 1 << 20, FetchMaxBytes: 4 << 20, IdleBufferBytes: 1 << 20}
	bound := cfg.MemoryBound(1, leases, leases)
	kfakeInFlight := int64(maxRounds)*int64(cfg.FetchMaxBytes) + leases*int64(cfg.LanePartitionBytes)
	base := heapAfterGC()
	cc, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	var peak atomic.Int64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if held := int64(heapAfterGC()) - int64(base); held > peak.Load() {
				peak.Store(held)
			}
		}
	}()
	got := readConcurrently(t, cc, 0, splitRanges(n, leases), func(int) {
		time.Sleep(2 * time.Millisecond) // slow holders: full queues
	})
	close(stop)
	<-stopped
	for i, r := range splitRanges(n, leases) {
		require.Equal(t, r[1]-r[0], int64(len(got[i])), "range %v", r)
	}
	st := cc.Stats()
	t.Logf("peak heap %.1f MiB over the cluster's, bound %.1f MiB (+%.1f MiB for kfake); lanes opened %d, lane fetches %d of %d",
		float64(peak.Load())/(1<<20), float64(bound)/(1<<20), float64(kfakeInFlight)/(1<<20), st.LanesOpened, st.LaneFetches, st.Fetches)
	require.Positive(t, st.LanesOpened)
	assert.LessOrEqual(t, peak.Load(), bound+kfakeInFlight, "the heap is over the stated bound")
}

// TestLanesOpenOnlyToADistantBroker: the same backfill of eight ranges
// opens no lane to a broker on loopback (a probe answer or a fetch answered
// under the default LaneMinRTT proves it near, and slow answers of a busy
// machine count for nothing: the package's Distance), and opens lanes once
// kfake answers every request 10 ms late, as a broker 10 ms away would.
func TestLanesOpenOnlyToADistantBroker(t *testing.T) {
	const n, ranges = 4000, 8
	for _, delay := range []time.Duration{0, 10 * time.Millisecond} {
		t.Run(fmt.Sprintf("rtt+%s", delay), func(t *testing.T) {
			c := newCluster(t, 1, 0)
			produceSmallBatches(t, c, 0, n)
			if delay > 0 {
				c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					time.Sleep(delay)
					return nil, nil, false
				})
			}
			cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 16<<10, 16<<10 })
			var distant atomic.Bool // a lease was distant while reading
			got := readConcurrently(t, cc, 0, splitRanges(n, ranges), func(int) {
				cc.mu.Lock()
				if cc.distantLocked(0) {
					distant.Store(true)
				}
				cc.mu.Unlock()
				time.Sleep(time.Millisecond)
			})
			for i, r := range splitRanges(n, ranges) {
				require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
			}
			st := cc.Stats()
			cc.mu.Lock()
			r := *cc.brokers[0].rtt
			cc.mu.Unlock()
			t.Logf("least answer %s, %d quiet, distant %v; stats %+v", r.least, r.quiet, r.distant, st)
			if delay == 0 {
				assert.Zero(t, st.LanesOpened, "lanes to a broker on loopback")
				assert.False(t, distant.Load(), "a broker on loopback judged distant while reading")
				return
			}
			assert.GreaterOrEqual(t, r.least, defaultLaneMinRTT)
			assert.True(t, r.distant, "a broker 10 ms away judged near")
			assert.Positive(t, st.LanesOpened, "no lane to a broker 10 ms away")
		})
	}
}

// TestLanesFetchLanePartitionBytes: a lane asks LanePartitionBytes of each
// range per fetch (a backlog brings that much per round trip), the
// broker's loop FetchMaxPartitionBytes; by default LanePartitionBytes is
// 8 MiB, or FetchMaxPartitionBytes if larger.
func TestLanesFetchLanePartitionBytes(t *testing.T) {
	const n, ranges = 4000, 8
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	var mu sync.Mutex
	asked := map[int32]int{} // PartitionMaxBytes of the fetches' partitions
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				asked[rp.PartitionMaxBytes]++
			}
		}
		return nil, nil, false
	})
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1 // lanes to any broker
		cfg.FetchMaxPartitionBytes = 16 << 10
		cfg.LanePartitionBytes = 48 << 10
	})
	got := readConcurrently(t, cc, 0, splitRanges(n, ranges), func(int) { time.Sleep(time.Millisecond) })
	for i, r := range splitRanges(n, ranges) {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	st := cc.Stats()
	require.Positive(t, st.LaneFetches)
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, asked[48<<10], "fetches by PartitionMaxBytes: %v", asked)
	assert.Positive(t, asked[16<<10], "fetches by PartitionMaxBytes: %v", asked)
	assert.Len(t, asked, 2, "fetches by PartitionMaxBytes: %v", asked)

	for _, tc := range []struct{ part, lane, want int32 }{{1 << 20, 0, 8 << 20}, {16 << 20, 0, 16 << 20}, {1 << 20, 2 << 20, 2 << 20}} {
		cfg := Config{FetchMaxPartitionBytes: tc.part, LanePartitionBytes: tc.lane}.withDefaults()
		assert.Equal(t, tc.want, cfg.LanePartitionBytes, "FetchMaxPartitionBytes %d, LanePartitionBytes %d", tc.part, tc.lane)
	}
}

// TestEmptyLaneAnswersLeaveTheRangeOnItsBrokersLoop (issue 52): a lane
// asks only for offsets known to exist, so an answer without records
// there (a broker that has not the records yet where a follower answered
// the high watermark, a fetch answered empty at its size limit) is not
// the lane's to wait for: the cursor goes back to its broker's loop, which
// polls, and stays there until an answer brings records (laneless). Here
// every fetch on a lane (MaxWaitMillis 0 with partitions: the lanes'
// rounds never wait) is answered empty: each range is read whole through
// lane 0, and no cursor goes round between a lane and its empty answers.
func TestEmptyLaneAnswersLeaveTheRangeOnItsBrokersLoop(t *testing.T) {
	const n, ranges = 2000, 8
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	var empty, served atomic.Int64 // lane fetches answered empty, other fetches of the partition
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if len(req.Topics) == 0 {
			return nil, nil, false // a lane's first, empty fetch: its connection
		}
		if req.MaxWaitMillis > 0 {
			served.Add(1)
			return nil, nil, false
		}
		empty.Add(1)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = n, n, 0
				sp.RecordBatches = []byte{}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1 // lanes to kfake on loopback
		cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 2<<10, 2<<10
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := make([][]int64, ranges)
	var wg sync.WaitGroup
	errs := make([]error, ranges)
	for i, r := range splitRanges(n, ranges) {
		wg.Go(func() {
			l, err := cc.Acquire(ctx, topic, 0, r[0])
			if err != nil {
				errs[i] = err
				return
			}
			_, err = l.Read(ctx, r[0], r[1], func(recs []*kgo.Record, _ int64) error {
				for _, rec := range recs {
					got[i] = append(got[i], rec.Offset)
				}
				return nil
			})
			l.Release(err)
			errs[i] = err
		})
	}
	wg.Wait()
	st := cc.Stats()
	t.Logf("lane fetches answered empty %d, lane 0 fetches %d; stats %+v", empty.Load(), served.Load(), st)
	for i, r := range splitRanges(n, ranges) {
		require.NoError(t, errs[i], "range %v", r)
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	require.Positive(t, st.LanesOpened, "no lane opened: the test tests nothing")
	// A cursor leaves its lane at an empty answer and comes back only
	// after lane 0 brought it records: at most one empty answer per lane 0
	// fetch, and one per range to start.
	assert.LessOrEqual(t, empty.Load(), served.Load()+ranges, "empty lane answers: cursors went round between a lane and its empty answers")
}

// TestSeekDropsALaneAnswerInFlight (issue 52): a lease whose cursor has a
// fetch in flight on a lane seeks (its holder reads another range): the
// seek starts a new fetch generation, so the answer to the old position,
// when it comes, is dropped, and the new range is read exactly from its
// start. kfake answers every fetch on a lane 20 ms late, so one is in
// flight when the first read stops.
func TestSeekDropsALaneAnswerInFlight(t *testing.T) {
	const n = 4000
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := kreq.(*kmsg.FetchRequest); req.MaxWaitMillis == 0 && len(req.Topics) > 0 {
			time.Sleep(20 * time.Millisecond) // a lane's fetch (in kfake's run loop)
		}
		return nil, nil, false
	})
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1 // lanes to kfake on loopback
		cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 2<<10, 2<<10
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	other, err := cc.Acquire(ctx, topic, 0, 2000) // a second backlog: the broker's lane opens for two
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := other.Read(ctx, 2000, n, func([]*kgo.Record, int64) error { time.Sleep(time.Millisecond); return nil })
		other.Release(err)
		assert.NoError(t, err)
	})
	defer wg.Wait()

	l, err := cc.Acquire(ctx, topic, 0, 1000)
	require.NoError(t, err)
	defer l.Release(nil)
	errStop := errors.New("stop")
	var gen uint64 // the cursor's fetch generation when the read stopped
	pos, err := l.Read(ctx, 1000, 2000, func([]*kgo.Record, int64) error {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if l.cur.loop != nil && laneOf(l.cur.loop) > 0 && l.cur.inFlight {
			gen = l.cur.gen
			return errStop // with a fetch in flight on a lane
		}
		time.Sleep(time.Millisecond)
		return nil
	})
	require.ErrorIs(t, err, errStop, "the read ended at %d without a fetch in flight on a lane", pos)
	got := readRange(t, l, 0, 500) // a seek
	assert.Equal(t, seq(0, 500), got, "the range read after the seek")
	cc.mu.Lock()
	assert.Greater(t, l.cur.gen, gen, "the seek kept the fetch generation")
	cc.mu.Unlock()
}

// TestLaneThatCannotConnectGivesTheBrokerNoLane (issue 52): "one whose
// connection fails gives the broker no lane for 10 s" (package doc), and
// its ranges read on as without lanes. Once the cache's own connections
// are open, every new connection to the broker is refused: the lanes
// opened together for a backfill of eight ranges cannot connect; no other
// opens during the backfill (well under 10 s), no read fails, and every range
// gets every record once, in order, through the broker's loop.
func TestLaneThatCannotConnectGivesTheBrokerNoLane(t *testing.T) {
	const n, ranges = 4000, 8
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	var refuse atomic.Bool
	var refused atomic.Int64
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1 // lanes to kfake on loopback
		cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 16<<10, 16<<10
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			if refuse.Load() {
				refused.Add(1)
				return nil, errors.New("connection refused by the test")
			}
			return (&net.Dialer{}).DialContext(ctx, network, host)
		}))
	})
	// The cache's connections: metadata, and the fetch connection (a read).
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	require.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
	l.Release(nil)
	refuse.Store(true)

	start := time.Now()
	got := readConcurrently(t, cc, 0, splitRanges(n, ranges), func(int) { time.Sleep(time.Millisecond) })
	took := time.Since(start)
	for i, r := range splitRanges(n, ranges) {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	st := cc.Stats()
	t.Logf("backfill in %s, connections refused %d; stats %+v", took, refused.Load(), st)
	require.Positive(t, refused.Load(), "no lane tried to connect: the test tests nothing")
	require.Less(t, took, laneRetry, "the backfill took laneRetry or more: another lane may try")
	assert.EqualValues(t, 3, st.LanesOpened, "lanes opened: the three opened together (FetchConnections 4), none within laneRetry of one that could not connect")
	assert.Zero(t, st.Lanes, "lanes open")
	assert.Zero(t, st.LaneFetches, "fetches on lanes")
}

// TestLaneAsksNoMoreThanItsRangeNeeds (issue 54): a lane's fetch asks up
// to LanePartitionBytes of a range, and no more than what is left of it
// and the batch in which it ends (leftAsk), so ranges of one partition
// read at once each fetch their own records, not the next range's again
// (asked 4 MiB each, ranges of 10,000 records of 1 KiB fetched a fifth
// more bytes than they read through a 50 ms proxy). Eight ranges of 1,700
// records of about 1 KB in batches of 16 KiB, read at once from a broker
// taken for distant, lanes asking up to 512 KiB: a lane's fetch (one that
// asks more than FetchMaxPartitionBytes) asks no more than 1,100 bytes per
// record left in its range, plus a batch and roundSlack. Every range gets
// its records once, in order.
func TestLaneAsksNoMoreThanItsRangeNeeds(t *testing.T) {
	const n, k = 13600, 8 // a range's last lane fetch, about 500 records after the one before, has 150 to 400 left
	c := newCluster(t, 1, 0)
	produceSmallBatches(t, c, 0, n)
	rs := splitRanges(n, k)
	var mu sync.Mutex
	var over []string
	laneAsks := 0
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.PartitionMaxBytes <= 16<<10 {
					continue // the broker's loop's
				}
				laneAsks++
				for _, r := range rs {
					if rp.FetchOffset >= r[0] && rp.FetchOffset < r[1] {
						if most := (r[1]-rp.FetchOffset)*1100 + 16<<10 + roundSlack; int64(rp.PartitionMaxBytes) > most {
							over = append(over, fmt.Sprintf("at %d of [%d, %d): %d bytes, over %d", rp.FetchOffset, r[0], r[1], rp.PartitionMaxBytes, most))
						}
					}
				}
			}
		}
		return nil, nil, false
	})
	cc := newCache(t, c, func(cfg *Config) {
		cfg.LaneMinRTT = -1 // kfake on loopback, taken for a distant broker
		cfg.FetchMaxPartitionBytes = 16 << 10
		cfg.LanePartitionBytes = 512 << 10
	})
	got := readConcurrently(t, cc, 0, rs, nil)
	for i, r := range rs {
		require.Equal(t, seq(r[0], r[1]), got[i], "range %v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("lane fetches %d; stats %+v", laneAsks, cc.Stats())
	require.Positive(t, laneAsks, "no fetch on a lane: the test tests nothing")
	assert.Empty(t, over, "lane fetches that asked past their range's end and its last batch")
}
