package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Regression tests of partition incarnations: whatever flows back from an
// ownership of a partition that is over (revoked and assigned back, a lost
// session, an eager rebalance, a recreated topic) is dropped and counted,
// never applied to the partition's current state.

// balancers are the four group balancers the input offers.
var balancers = []struct {
	name string
	b    func() kgo.GroupBalancer
}{
	{"cooperative_sticky", kgo.CooperativeStickyBalancer},
	{"sticky", kgo.StickyBalancer},
	{"range", kgo.RangeBalancer},
	{"roundrobin", kgo.RoundRobinBalancer},
}

// memberConfig configures an engine as a member of group g on topic t.
func memberConfig(b kgo.GroupBalancer) func(*Config) {
	return func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(b), kgo.HeartbeatInterval(100 * time.Millisecond)}
		cfg.MaxInFlight = 2
	}
}

// holdFirst takes batches until it holds one of each of n partitions (acking
// the others) and returns them.
func holdFirst(ctx context.Context, t *testing.T, e *Engine, n int) map[int32]*Batch {
	t.Helper()
	held := map[int32]*Batch{}
	for len(held) < n {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if held[b.Range.Partition] != nil {
			b.Ack()
			continue
		}
		held[b.Range.Partition] = b
	}
	return held
}

// committed returns the group's committed offset of t/p, or -1.
func committed(ctx context.Context, t *testing.T, adm *kadm.Client, group, topic string, p int32) int64 {
	t.Helper()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return -1
	}
	o, ok := offs.Lookup(topic, p)
	if !ok {
		return -1
	}
	return o.At
}

// drainInBackground acknowledges every batch until ctx ends; the returned
// function stops it and returns the records per partition.
func drainInBackground(ctx context.Context, e *Engine) func() map[string]int {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var got map[string]int
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, _ = drain(ctx, e)
	}()
	return func() map[string]int {
		cancel()
		wg.Wait()
		return got
	}
}

// readToTheEnd acknowledges every batch until group g committed both
// partitions of t to 300, and checks the engine did not stop.
func readToTheEnd(ctx context.Context, t *testing.T, c *kfake.Cluster, e *Engine, log *testLogger) {
	t.Helper()
	stop := drainInBackground(ctx, e)
	adm := kadm.NewClient(kgoClient(t, c))
	require.Eventually(t, func() bool {
		return committed(ctx, t, adm, "g", "t", 0) == 300 && committed(ctx, t, adm, "g", "t", 1) == 300
	}, 20*time.Second, 20*time.Millisecond, "the partitions were not committed to their end\n%s", log)
	stop()
	require.NoError(t, e.Err())
}

// owns reports whether the engine reads (or is about to read) every key.
func owns(e *Engine, keys ...ranges.Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range keys {
		if e.parts.cur(k) == nil {
			return false
		}
	}
	return true
}

func incOf(e *Engine, k ranges.Key) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.parts.cur(k); p != nil {
		return p.inc
	}
	return 0
}

// TestLateAckAfterPartitionComesBack: batches handed out, their partition
// revoked (a second member joins) and assigned back (it leaves), then the
// batches acknowledged: under every balancer (eager ones revoke everything
// and hand the kept partitions back) the acknowledgements are dropped as
// stale, the engine goes on, and every partition is committed to its end.
// Before incarnations the late ack was applied to the new state and stopped
// the engine ("no added range holds it", "already acknowledged").
func TestLateAckAfterPartitionComesBack(t *testing.T) {
	for _, bal := range balancers {
		t.Run(bal.name, func(t *testing.T) {
			c := newKafka(t, 2, 300, "t")
			e, log := newEngine(t, c, memberConfig(bal.b()))
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
			held := holdFirst(ctx, t, e, 2)

			other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
				kgo.Balancers(bal.b()), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond))
			require.NoError(t, err)
			pollCtx, stopPoll := context.WithCancel(ctx)
			var polling sync.WaitGroup
			polling.Add(1)
			go func() {
				defer polling.Done()
				for pollCtx.Err() == nil {
					other.PollFetches(pollCtx)
				}
			}()
			require.Eventually(t, func() bool { return !owns(e, k0, k1) }, 20*time.Second, 10*time.Millisecond,
				"no partition was revoked\n%s", log)
			revoked := k0
			if owns(e, k0) {
				revoked = k1
			}
			stopPoll()
			polling.Wait()
			other.Close() // leaves: everything comes back
			require.Eventually(t, func() bool { return owns(e, k0, k1) }, 20*time.Second, 10*time.Millisecond,
				"the partitions did not come back\n%s", log)
			require.NotEqual(t, held[revoked.Partition].Incarnation(), incOf(e, revoked), "%s came back as the same incarnation", revoked)

			for _, b := range held {
				b.Ack() // late: from the incarnation that was revoked
			}
			readToTheEnd(ctx, t, c, e, log)
			assert.GreaterOrEqual(t, e.Summary().Stale, int64(1), "the late acknowledgement was not counted as stale")
		})
	}
}

// TestSessionLostOnceGoesOn: one heartbeat answered UNKNOWN_MEMBER_ID loses
// the member's session (franz-go: partitions lost, rejoin); batches of the
// lost session acknowledged afterwards are dropped, and the member goes on
// reading everything.
func TestSessionLostOnceGoesOn(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	obs := &staleObserver{}
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.Observer = obs
	})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 2)

	var lose atomic.Bool
	lose.Store(true)
	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !lose.Swap(false) {
			return nil, nil, false
		}
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "lost 2 partitions") }, 20*time.Second, 10*time.Millisecond,
		"the session was not lost\n%s", log)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool { return owns(e, k0, k1) }, 20*time.Second, 10*time.Millisecond,
		"the partitions did not come back\n%s", log)
	for _, b := range held {
		b.Ack()
	}
	readToTheEnd(ctx, t, c, e, log)
	assert.GreaterOrEqual(t, e.Summary().Stale, int64(2))
	require.Eventually(t, func() bool { return obs.stale.Load() == e.Summary().Stale }, 5*time.Second, 50*time.Millisecond,
		"the observer saw %d stale acknowledgements of %d", obs.stale.Load(), e.Summary().Stale)
}

// staleObserver counts what the engine reports as stale.
type staleObserver struct {
	nopObserver
	stale atomic.Int64
}

func (o *staleObserver) Stale(n int64) { o.stale.Add(n) }

// TestRecreatedTopicAckDoesNotCommitTheNewTopic: a batch of a topic that is
// then deleted and recreated (on_data_loss: skip, with a group) and
// acknowledged afterwards must not count for the new topic: the new topic is
// read from its first offset and its commit only follows what of it was
// acknowledged. Before, the old batch's ack marked the new topic's [0,10)
// acknowledged and the group committed 10 with nothing of it handed out.
func TestRecreatedTopicAckDoesNotCommitTheNewTopic(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.SkipDataLoss = true
		cfg.MaxRangeRecords = 10
	})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 1)[0]
	require.Equal(t, int64(0), held.Span.Start)
	oldInc := held.Incarnation()

	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.DeleteTopics(ctx, "t")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := adm.CreateTopic(ctx, 1, 1, nil, "t")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	produce(t, c, "t", 1, 10)
	k := ranges.Key{Topic: "t", Partition: 0}
	require.Eventually(t, func() bool { inc := incOf(e, k); return inc != 0 && inc != oldInc }, 20*time.Second, 10*time.Millisecond,
		"the recreated topic is not read as a new incarnation\n%s", log)

	held.Ack() // of the old topic
	// Take the new topic's batches but do not acknowledge them.
	var fresh []*Batch
	for n := 0; n < 10; {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if b.Incarnation() == oldInc {
			b.Ack() // more of the old topic, handed out before it went
			continue
		}
		fresh = append(fresh, b)
		n += len(b.Records)
	}
	assert.Equal(t, int64(0), fresh[0].Span.Start, "the new topic is not read from its first offset")
	time.Sleep(300 * time.Millisecond) // several commit periods
	assert.LessOrEqual(t, committed(ctx, t, adm, "g", "t", 0), int64(0), "the group committed offsets of the new topic that nothing acknowledged\n%s", log)
	for _, b := range fresh {
		b.Ack()
	}
	require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 10 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, e.Err())
}

// produceEach writes n records to t/p, one record batch each, so a fetch of
// one byte returns one record.
func produceEach(t *testing.T, c *kfake.Cluster, topic string, p int32, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	require.NoError(t, err)
	defer cl.Close()
	for i := from; i < from+n; i++ {
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d", i)}).FirstErr())
	}
}

// TestSkippedLossBeforeItsTurnDoesNotStall: offsets deleted under a range
// that is not yet its partition's turn to emit (on_data_loss: skip) are
// skipped, and the partition goes on to its end. Before, the lost range was
// acknowledged whole at once, left the open ranges before its turn, and the
// turn to emit never passed it: the bounded run never ended.
func TestSkippedLossBeforeItsTurnDoesNotStall(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produceEach(t, c, "t", 0, 0, 500)
	// Fetches from offset 200 on fail (retriably) until the deletion, so
	// [200,300) is read only after it; the highest offset fetched below 200
	// tells when [100,200) is read.
	var block atomic.Bool
	var below200 atomic.Int64
	block.Store(true)
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset < 200 {
					if rp.FetchOffset > below200.Load() {
						below200.Store(rp.FetchOffset)
					}
					continue
				}
				if !block.Load() {
					continue
				}
				resp := fr.ResponseKind().(*kmsg.FetchResponse)
				st := kmsg.NewFetchResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotLeaderForPartition.Code
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
				resp.Topics = append(resp.Topics, st)
				return resp, nil, true
			}
		}
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.SkipDataLoss = true
		cfg.MaxInFlight = 3
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Hold the first batch of [0,100): its reader waits to hand over the
	// next, so [100,200), once read, waits for its turn.
	first, err := e.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), first.Span.Start)
	require.Eventually(t, func() bool { return below200.Load() == 199 }, 10*time.Second, 5*time.Millisecond, "[100,200) was not read")
	time.Sleep(100 * time.Millisecond) // the last fetch's answer reaches the reader

	adm := kadm.NewClient(kgoClient(t, c))
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "t", Partition: 0, At: 350})
	_, err = adm.DeleteRecords(ctx, del)
	require.NoError(t, err)
	block.Store(false)
	require.Eventually(t, func() bool { return e.stats.lost.Load() > 0 }, 10*time.Second, 5*time.Millisecond, "the deletion was not seen")

	first.Ack()
	rest, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "the run did not end\n%s", log)
	// Every offset was delivered once or lost: [200,350) lost, and of
	// [0,100) whatever its reader had not fetched yet.
	lost := e.Summary().Lost
	assert.Equal(t, int64(500), int64(len(first.Records)+rest["t/0"])+lost, "records delivered and offsets lost")
	assert.GreaterOrEqual(t, lost, int64(150), "lost offsets")
	assert.GreaterOrEqual(t, rest["t/0"], 100+150, "[100,200) and [350,500) delivered")
	require.NoError(t, e.Err())
}
