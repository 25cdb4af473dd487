package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestLeadershipMovesMidRead reads a topic through the engine on a
// three-broker cluster while partition leadership moves between brokers every
// few milliseconds: every record arrives exactly once and the read ends.
func TestLeadershipMovesMidRead(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(3), kfake.SeedTopics(4, "t"))
	produce(t, c, "t", 4, 3000)
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 4096, 4096
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	shuffled := make(chan int)
	go func() {
		n := 0
		defer func() { shuffled <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				c.ShufflePartitionLeaders()
				n++
			}
		}
	}()
	seen := map[string]int{}
	dups := 0
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err)
		for _, r := range b.Records {
			k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
			if seen[k]++; seen[k] > 1 {
				dups++
			}
		}
		b.Ack()
	}
	close(stop)
	moves := <-shuffled
	require.NoError(t, e.Err())
	assert.Len(t, seen, 4*3000, "records delivered")
	assert.Zero(t, dups, "records delivered twice")
	assert.Greater(t, moves, 10, "leadership hardly moved during the read")
}

// TestFailingPartitionsLeaveSlotsToHealthyOnes: with max_in_flight 4 and 6
// partitions of which 2 cannot be read (every fetch answered
// NOT_LEADER_FOR_PARTITION, as when their broker is down), the healthy
// partitions are read to their end while the failing ones keep failing
// (defect: the planner kept planning ranges of the failing partitions, each
// holding a slot while its reader backed off, until every slot was theirs and
// nothing was delivered). Once the failing partitions can be read again,
// every record of them arrives too.
func TestFailingPartitionsLeaveSlotsToHealthyOnes(t *testing.T) {
	const perPart = 2000
	c := newKafka(t, 6, perPart, "t")
	var broken atomic.Bool
	broken.Store(true)
	fetchError(c, "t", 1, kerr.NotLeaderForPartition.Code, broken.Load)
	fetchError(c, "t", 4, kerr.NotLeaderForPartition.Code, broken.Load)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 4
		cfg.MaxRangeRecords = 100 // 20 ranges a partition: slots turn over many times
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	healthy := func(got map[string]int) int {
		return got["t/0"] + got["t/2"] + got["t/3"] + got["t/5"]
	}
	got := map[string]int{}
	for healthy(got) < 4*perPart {
		// Without a limit on the failing partitions' ranges this waits
		// until ctx ends: every slot is held by a reader backing off.
		b, err := e.Next(ctx)
		require.NoErrorf(t, err, "Next with %d of %d records of the healthy partitions delivered (%v)", healthy(got), 4*perPart, got)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	assert.Zero(t, got["t/1"]+got["t/4"], "records of the failing partitions")
	e.mu.Lock()
	failingOpen := len(e.parts.cur(ranges.Key{Topic: "t", Partition: 1}).open) + len(e.parts.cur(ranges.Key{Topic: "t", Partition: 4}).open)
	e.mu.Unlock()
	assert.LessOrEqual(t, failingOpen, 2, "ranges of the failing partitions in flight (at most one each)")
	assert.Eventually(t, func() bool {
		l := log.String()
		return strings.Contains(l, "Reading t/1[") && strings.Contains(l, "Reading t/4[")
	}, 15*time.Second, 10*time.Millisecond, "the failing partitions' reads were logged")

	broken.Store(false)
	rest, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	for k, n := range rest {
		got[k] += n
	}
	assert.Equal(t, map[string]int{"t/0": perPart, "t/1": perPart, "t/2": perPart, "t/3": perPart, "t/4": perPart, "t/5": perPart}, got)
	require.NoError(t, e.Err())
}

// TestPartitionFailingMidReadGivesItsSlotsBack: a partition that holds every
// slot (its ranges in flight, read ahead, waiting for their turn) and then
// cannot be read any more keeps one slot: the others go back, so a
// partition that gets records meanwhile is read. Once the failing partition
// reads again, its ranges take their slots back and everything arrives.
func TestPartitionFailingMidReadGivesItsSlotsBack(t *testing.T) {
	old := readAheadBytes
	readAheadBytes = 1 // a range not at its turn reads one fetch, then waits
	t.Cleanup(func() { readAheadBytes = old })
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	produceEach(t, c, "t", 0, 0, 400)
	var broken atomic.Bool
	fetchError(c, "t", 0, kerr.NotLeaderForPartition.Code, broken.Load)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.MaxInFlight = 4
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1 // one record a fetch
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, err := e.Next(ctx) // held: [0,100) waits to hand over its next batch
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		p := e.parts.cur(ranges.Key{Topic: "t", Partition: 0})
		return p != nil && len(p.open) == 4 && p.stalled == 0
	}, 10*time.Second, 5*time.Millisecond, "partition 0 did not take every slot\n%s", log)

	broken.Store(true)
	first.Ack()
	produceTo(t, c, "t", 1, 50)
	got := map[string]int{}
	for got["t/1"] < 50 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "%d of partition 1's 50 records arrived while partition 0 failed\n%s", got["t/1"], log)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	e.mu.Lock()
	inflight := e.sched.slots.used
	e.mu.Unlock()
	assert.LessOrEqual(t, inflight, 4)

	broken.Store(false)
	for got["t/0"] < 400-len(first.Records) {
		b, err := e.Next(ctx)
		require.NoError(t, err, "partition 0 did not recover: %v\n%s", got, log)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	require.NoError(t, e.Err())
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sched.slots.used == 0
	}, 10*time.Second, 10*time.Millisecond, "slots left taken once everything was read")
}

// TestOrderedWaitsForEarlierIncarnation (review 4, finding 1): docs/configuration.md
// "ordered: one range per partition in flight, so each partition arrives in
// offset order". A member holds a batch of t/0 (the pipeline is slow on it)
// and gets t/0 back as a new incarnation: after a lost session, and at an
// eager rebalance (range, roundrobin and sticky revoke everything and hand
// the kept partitions back; here a second member joins for another topic).
// The new incarnation must hand out nothing of t/0 while the old batch is
// still in the pipeline (a changelog table would end with an older value),
// and once it is done, t/0 is read to its end.
func TestOrderedWaitsForEarlierIncarnation(t *testing.T) {
	cases := []struct {
		name     string
		balancer func() kgo.GroupBalancer
		handover func(t *testing.T, c *kfake.Cluster, bal func() kgo.GroupBalancer)
	}{
		{"lost_session", kgo.CooperativeStickyBalancer, func(_ *testing.T, c *kfake.Cluster, _ func() kgo.GroupBalancer) { loseSessionOnce(c) }},
	}
	for _, bal := range balancers {
		if bal.name == "cooperative_sticky" {
			continue // a join revokes only what moves: t/0 stays the same incarnation
		}
		cases = append(cases, struct {
			name     string
			balancer func() kgo.GroupBalancer
			handover func(t *testing.T, c *kfake.Cluster, bal func() kgo.GroupBalancer)
		}{"rebalance_" + bal.name, bal.b, joinForOtherTopic})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 1, 300, "t", "other")
			e, log := newEngine(t, c, func(cfg *Config) {
				memberConfig(tc.balancer())(cfg)
				cfg.Ordered = true
			})
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			k0 := ranges.Key{Topic: "t", Partition: 0}
			old, err := e.Next(ctx) // the pipeline is slow on this one: not acknowledged yet
			require.NoError(t, err)
			oldInc := old.Incarnation()

			tc.handover(t, c, tc.balancer)
			require.Eventually(t, func() bool { return owns(e, k0) && incOf(e, k0) != oldInc }, 20*time.Second, 10*time.Millisecond,
				"t/0 did not come back as a new incarnation\n%s", log)

			// The old batch is still in the pipeline: nothing more of t/0.
			var overtook []ranges.Range
			nctx, ncancel := context.WithTimeout(ctx, 2*time.Second)
			for {
				b, err := e.Next(nctx)
				if err != nil {
					break
				}
				if !old.Done() {
					overtook = append(overtook, b.Span)
				}
				b.Ack()
			}
			ncancel()
			assert.Empty(t, overtook, "ordered mode handed out batches of t/0 while its batch %s of incarnation %d was still in the pipeline", old.Span, oldInc)

			old.Ack() // late: stale, and the new incarnation may go on
			end := int64(0)
			for end < 300 {
				b, err := e.Next(ctx)
				require.NoError(t, err, "t/0 was not read to its end after the old batch was done (read to %d)\n%s", end, log)
				assert.Equal(t, incOf(e, k0), b.Incarnation())
				end = max(end, b.Span.End)
				b.Ack()
			}
			assert.NoError(t, e.Err())
		})
	}
}

// slowMetadata makes every Metadata request take d in the broker
// while slow is set. (A plain sleep in the control function: the cluster
// answers nothing else meanwhile, which only slows the test's reads down;
// kfake's SleepControl, which would not, has a data race of its own when
// several slept requests overlap.)
func slowMetadata(c *kfake.Cluster, d time.Duration, slow *atomic.Bool, n *atomic.Int64) {
	c.ControlKey(kmsg.Metadata.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slow.Load() {
			n.Add(1)
			time.Sleep(d)
		}
		return nil, nil, false
	})
}

// TestBoundedRunEndsWhenRefreshesOverlap: a bounded run (stop_at:
// end) whose refresh (one topic listing) takes a little longer than
// poll_interval never ends. The scheduler checks whether the run is done
// only while no refresh runs (!refreshing && e.finished()); a poll tick that
// comes during a refresh sets again, and when that refresh is over the
// next one starts at once, before the loop comes back to that check. So
// while every refresh outlasts one poll interval (a slow or remote cluster,
// a broker under load, a small poll_interval), refreshes follow each other
// back to back and the check never runs: every record is read and
// acknowledged, and Next never returns ErrEnd.
func TestBoundedRunEndsWhenRefreshesOverlap(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	var slow atomic.Bool
	var listings atomic.Int64
	slowMetadata(c, 120*time.Millisecond, &slow, &listings)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.PollInterval = 100 * time.Millisecond
	})
	slow.Store(true) // from now on a refresh takes ~120 ms, a poll interval is 100 ms

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	t.Logf("records read: %v; Next ended with: %v; %d topic listings (Metadata) in %s", got, err, listings.Load(), 10*time.Second)
	require.Equal(t, 100, got["t/0"], "every record read\n%s", log)
	assert.ErrorIs(t, err, ErrEnd, "a bounded run read and acknowledged everything, and still did not end after 10 s\n%s", log)
}

// joinForOtherTopic makes a second member join group g for topic "other"
// only: an eager balancer revokes every partition of the first member and
// hands t/0 back to it.
func joinForOtherTopic(t *testing.T, c *kfake.Cluster, bal func() kgo.GroupBalancer) {
	joinOther(t.Context(), t, c, "other", bal())
}

// TestReadingPartitionStartsRangesBeforeTheirFirstRecords (issue 46): once a
// partition reads from a distant broker (judged so by the cache from its
// answers, 2 ms or more), several of its ranges wait for their first records
// at once (incarnation.reads, maxUnreadRanges), so a backlog is fetched over
// the broker's lanes in parallel instead of one round trip after the
// other; a partition whose reads fail goes back to one range at a time
// until it reads again. From a near broker a partition keeps one range
// waiting at a time: there its broker's loop fetches one range of it per
// round, so more would only be read ahead. Every fetch takes 150 ms here,
// failing or not, and every request 50 ms more to the distant broker (far
// past the 2 ms from which the cache judges a broker distant, so that a
// loaded machine's own delays do not leave it unjudged): the
// client's connections hold the answers (delayedAnswers), so kfake's
// SleepControl, whose sleeps one after the other on a connection race
// (kfake's bsleep.waitQueue), is not used. (TestNearReadAfterADistantRead
// has a broker that comes near.)
func TestReadingPartitionStartsRangesBeforeTheirFirstRecords(t *testing.T) {
	for _, distant := range []bool{true, false} {
		t.Run(fmt.Sprintf("distant=%v", distant), func(t *testing.T) {
			c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			produceEach(t, c, "t", 0, 0, 2000)
			var broken atomic.Bool
			var far, fetch atomic.Int64
			if distant {
				far.Store(int64(50 * time.Millisecond))
			}
			fetch.Store(int64(150 * time.Millisecond))
			fetchErrorAfter(c, "t", 0, kerr.NotLeaderForPartition.Code, broken.Load, 0)
			dial := delayedAnswers(&far, &fetch)
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				cfg.MaxInFlight = 8
				cfg.Fetch.MaxPartitionBytes = 1 // one record a fetch: no range is read in one round trip
				cfg.ClientOpts = append(cfg.ClientOpts, dial)
			})
			k := ranges.Key{Topic: "t", Partition: 0}
			unread := func() (stalled int, reads bool) {
				e.mu.Lock()
				defer e.mu.Unlock()
				p := e.parts.cur(k)
				if p == nil {
					return 0, false
				}
				return p.stalled, p.reads
			}
			most := 0
			for deadline := time.Now().Add(10 * time.Second); most < 4 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				s, _ := unread()
				most = max(most, s)
			}
			if !distant {
				assert.Equal(t, 1, most, "ranges of a partition of a near broker that waited for their first records at once\n%s", log)
				return
			}
			require.GreaterOrEqual(t, most, 4, "ranges of a reading partition that waited for their first records at once\n%s", log)

			// Reads fail: one range at a time until the partition reads again.
			broken.Store(true)
			require.Eventually(t, func() bool {
				_, reads := unread()
				return !reads
			}, 20*time.Second, 5*time.Millisecond, "a failing partition still counts as reading\n%s", log)
			e.mu.Lock()
			skipped := e.parts.skip(k)
			e.mu.Unlock()
			assert.True(t, skipped, "a partition whose reads fail is planned")
			broken.Store(false)
			require.Eventually(t, func() bool {
				_, reads := unread()
				return reads
			}, 20*time.Second, 5*time.Millisecond, "the partition reads again but is not known to\n%s", log)

			require.NoError(t, e.Err())
		})
	}
}

// TestDistanceIsMeasuredWhileListing (issue 54): a run without a group
// measures the round trip to its topics' leaders while it lists their
// partitions (cache.Measure), not once a range first fetches: a backlog
// from a distant broker then finds it judged, its ranges started at once
// and its lanes open, with its first records or soon after (from the first
// fetch on, the measure took a quarter of a 410 MB read 50 ms away). With
// every answer 20 ms late, the first probe (metadata without topics)
// reaches the broker a listing's round trip or more before the first
// fetch; measured from the first fetch on, it came with it.
func TestDistanceIsMeasuredWhileListing(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	produceEach(t, c, "t", 0, 0, 100)
	var mu sync.Mutex
	var probe, fetch time.Time // when the first of each reached the broker
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		switch r := req.(type) {
		case *kmsg.MetadataRequest:
			if len(r.Topics) == 0 && probe.IsZero() {
				probe = time.Now()
			}
		case *kmsg.FetchRequest:
			if len(r.Topics) > 0 && fetch.IsZero() {
				fetch = time.Now()
			}
		}
		return nil, nil, false
	})
	var far, slow atomic.Int64
	far.Store(int64(20 * time.Millisecond))
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.ClientOpts = append(cfg.ClientOpts, delayedAnswers(&far, &slow))
	})
	b, err := e.Next(t.Context())
	require.NoError(t, err)
	b.Ack()
	mu.Lock()
	defer mu.Unlock()
	require.False(t, probe.IsZero(), "no probe reached the broker")
	require.False(t, fetch.IsZero(), "no fetch reached the broker")
	t.Logf("the first probe came %s before the first fetch", fetch.Sub(probe))
	assert.GreaterOrEqual(t, fetch.Sub(probe), 10*time.Millisecond, "the first probe came too late before the first fetch: the distance was not measured while the partitions were listed")
}

// delayedAnswers is a dialer whose connections hold each answer they read
// until far (nanoseconds, read as its request is written) after its
// request was written, and a fetch's for fetch more, as from a broker that
// far away whose fetches take that long. Requests written one after the
// other are answered as far apart, as on a network (a delay counted from
// the read of the answer before would answer a request written later than
// that delay at once). Writes are not delayed: franz-go writes a broker's
// requests from one goroutine, so a write held back would hold every
// request to the broker.
func delayedAnswers(far, fetch *atomic.Int64) kgo.Opt {
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &delayedConn{Conn: conn, far: far, fetch: fetch}, nil
	})
}

// delayedConn is a connection of delayedAnswers. It keeps when each answer
// is due, in the order its requests were written, follows the answers'
// frames (a 4-byte size, then the answer) as franz-go reads them, one
// goroutine per connection, and sleeps until the next one is due before
// reading its first byte.
type delayedConn struct {
	net.Conn
	far, fetch *atomic.Int64 // nanoseconds
	mu         sync.Mutex
	due        []time.Time // when the answers to the requests written are due, in order
	out, in    frames      // the requests written, the answers read
}

// Write keeps when the answer of each request written is due: far after
// it, and fetch more for a fetch (its API key follows its size).
func (c *delayedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.follow(p, 6, func(head []byte) {
		d := time.Duration(c.far.Load())
		if int16(binary.BigEndian.Uint16(head[4:])) == kmsg.Fetch.Int16() {
			d += time.Duration(c.fetch.Load())
		}
		c.due = append(c.due, time.Now().Add(d))
	})
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Read reads one answer frame at a time, and waits until it is due before
// its first byte.
func (c *delayedConn) Read(p []byte) (int, error) {
	if c.in.between() {
		c.mu.Lock()
		var due time.Time
		if len(c.due) > 0 {
			due, c.due = c.due[0], c.due[1:]
		}
		c.mu.Unlock()
		time.Sleep(time.Until(due))
	}
	p = p[:c.in.upTo(len(p), 4)]
	n, err := c.Conn.Read(p)
	c.in.follow(p[:n], 4, func([]byte) {})
	return n, err
}

// frames follows a stream of Kafka frames (a 4-byte size, then the frame).
type frames struct {
	head []byte // the first bytes of the frame being followed, until it has them all
	left int    // bytes of the frame still to come after its head
}

// follow takes b, the stream's next bytes, and calls onHead with each
// frame's first n bytes (its size and n-4 more) once they are all in.
func (f *frames) follow(b []byte, n int, onHead func(head []byte)) {
	for len(b) > 0 {
		if f.left > 0 {
			k := min(f.left, len(b))
			f.left -= k
			b = b[k:]
			continue
		}
		k := min(n-len(f.head), len(b))
		f.head = append(f.head, b[:k]...)
		b = b[k:]
		if len(f.head) == n {
			onHead(f.head)
			f.left = int(binary.BigEndian.Uint32(f.head)) - (n - 4)
			f.head = f.head[:0]
		}
	}
}

// between reports whether the stream is between two frames.
func (f *frames) between() bool { return f.left == 0 && len(f.head) == 0 }

// upTo is how many of most bytes may be read without passing the end of
// the frame being followed, or of its head of n bytes.
func (f *frames) upTo(most, n int) int {
	if f.left > 0 {
		return min(most, f.left)
	}
	return min(most, n-len(f.head))
}

// TestNearReadAfterADistantRead (issue 52): which read decides how many
// ranges of a partition may wait for their first records. A read from a
// distant broker lets up to maxUnreadRanges wait; the partition's next read
// from a near broker (the cache judged it near again, or the partition's
// leader moved to a near one) brings it back to one, and a distant read
// while another reader of the partition fails changes nothing until that
// one reads again.
func TestNearReadAfterADistantRead(t *testing.T) {
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 10, MaxInFlight: 8, PollInterval: time.Second})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker, e.sched.baseCtx = ranges.NewPlanner(10), ranges.NewTracker(), context.Background()
	k := ranges.Key{Topic: "t", Partition: 0}
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NoError(t, e.addPartitionLocked(k, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	p := e.parts.cur(k)
	reader := func(start int64) *rangeState {
		st := &rangeState{r: ranges.Range{Topic: "t", Partition: 0, Start: start, End: start + 10}, part: p, stalled: true}
		p.stalled++
		return st
	}
	a, b, c := reader(0), reader(10), reader(20)

	a.readerRead(&e.sched.slots, e.parts.current(a), true)
	assert.Equal(t, maxUnreadRanges, p.unreadLimit(), "ranges waiting at once after a distant read")
	b.readerRead(&e.sched.slots, e.parts.current(b), false)
	assert.Equal(t, 1, p.unreadLimit(), "ranges waiting at once after a near read that followed a distant one")

	c.readerFailed(&e.sched.slots, e.parts.current(c))
	d := reader(30)
	d.readerRead(&e.sched.slots, e.parts.current(d), true)
	assert.Equal(t, 1, p.unreadLimit(), "ranges waiting at once after a distant read while another reader fails")
	c.readerRead(&e.sched.slots, e.parts.current(c), true)
	assert.Equal(t, maxUnreadRanges, p.unreadLimit(), "ranges waiting at once once the failing reader read from afar")
	assert.Zero(t, p.stalled, "readers that have not read")
}

// TestNearPartitionReadsItsRangesOnOneCursor: a partition read from a near
// broker whose ranges end inside record batches larger than an eighth of a
// range reads its ranges one after the other on its one cursor, once its
// first range showed it. Each continues where the one before it stopped:
// after the first ranges no seek and no new cursor, with several ranges in
// flight, each read over several fetches, and every record once. Without
// it, ranges read at once on cursors of their own, each seeking into a batch
// another cursor decodes too (the scheduler's incarnation.straddles).
func TestNearPartitionReadsItsRangesOnOneCursor(t *testing.T) {
	t.Parallel()
	const partitions, perPart, rangeSize, inFlight = 2, 60000, 1500, 8
	c := newKafka(t, partitions, perPart, "t") // batches of 16 KiB: about a thousand records each
	// Each fetch answers one batch (MaxPartitionBytes 1), a few ms later: a
	// range takes a few fetches, so the next ones start while it is read.
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(3 * time.Millisecond)
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords = rangeSize
		cfg.MaxInFlight = inFlight
		cfg.Fetch.MaxPartitionBytes = 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	for p := range partitions {
		assert.Equalf(t, perPart, got[fmt.Sprintf("t/%d", p)], "records of partition %d", p)
	}
	s := e.Summary().Cache
	t.Logf("cache: %+v", s)
	// Until the first range of a partition ends, which shows its batches,
	// its next ranges start on cursors of their own: inFlight at once, and
	// a few more where the other partition's acknowledged ranges free slots
	// first (10 cursors seen with two CPU burners; without the wait, 65
	// seeks).
	ranges := int64(partitions * ((perPart + rangeSize - 1) / rangeSize))
	assert.LessOrEqual(t, s.Seeks, int64(inFlight), "seeks (%+v)", s)
	assert.LessOrEqual(t, s.NewCursors, int64(2*inFlight), "cursors (%+v)", s)
	assert.GreaterOrEqual(t, s.Continuations, ranges-int64(2*inFlight), "continuations (%+v)", s)
}

// TestStraddlingTakesMoreThanOneRange: a partition straddles once its
// ranges end, on average, an eighth of a range or more inside a record
// batch; one range that happens to end at a batch's end does not clear it,
// and ranges that keep ending there do, once the average is under a
// sixteenth.
func TestStraddlingTakesMoreThanOneRange(t *testing.T) {
	p := &incarnation{}
	for _, step := range []struct {
		ahead int64
		want  bool
	}{
		{12, false}, // the first range's ahead is the average: 12 of 100 is under an eighth
		{16, true},  // (3×12+16)/4 = 13
		{0, true},   // 9: under an eighth, not under a sixteenth
		{0, false},  // 6: under a sixteenth
		{0, false},  // 4
		{60, true},  // 18
	} {
		p.noteAhead(step.ahead, 100)
		require.Equalf(t, step.want, p.straddles, "after a range of 100 that decoded %d past its end (average now %d)", step.ahead, p.ahead)
	}
}
