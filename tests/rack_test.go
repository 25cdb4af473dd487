package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
)

// TestRackFetchesFromTheReplicaInItsRack reads with follower fetching (KIP-392) from a 3-node
// cluster whose nodes kafka.sh puts in racks rack-1, rack-2 and rack-3, with the rack-aware
// replica selector. The engine runs in-process (the binary's summary and metrics do not show
// replica fetches), with rack_id the rack of a broker that is not the partition's leader:
//
//   - in its rack: a topic of one partition with 3 replicas, min.insync.replicas 3 and the ISR
//     holding all 3, 20,000 records read to the end right after they were produced (so the
//     follower's high watermark may still lag behind the leader's): every record arrives
//     exactly once, in order, and after the leader's first answer (a redirect) of each cursor
//     every fetch goes to the replica in the rack, none to the third broker.
//   - replica killed: the replica in the rack is SIGKILLed mid-read; the read goes on from the
//     leader once the controller has fenced the dead broker and the leader stops pointing at
//     it, with every record exactly once, in order. Until then every read the leader points at
//     the dead broker fails (a connection error, retried by the engine: the cache's
//     Invalidations count them), so the read stalls for a few seconds.
//
// The killed case runs last: it leaves the cluster with a node down.
func TestRackFetchesFromTheReplicaInItsRack(t *testing.T) {
	t.Parallel()
	const records = 20_000
	c := newOwnCluster(t, 3)
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(100*time.Millisecond)))

	t.Run("in its rack", func(t *testing.T) {
		topic, leader, prod := c.rackTopic(t, adm, records)
		rack, third := otherNodes(leader)
		r := startRackRead(t, c, topic, rack, 2)
		r.drain(t, 45*time.Second, nil)
		r.close(t)

		requireInOrder(t, prod, r.offsets, r.values)
		sum := r.eng.Summary()
		t.Logf("leader %d, rack node %d: fetch requests by node %v; %s; replica fetches %d, new cursors %d, fetches %d",
			leader, rack, r.counter.all(), sum, sum.Cache.ReplicaFetches, sum.Cache.NewCursors, sum.Cache.Fetches)
		assert.Positive(t, sum.Cache.ReplicaFetches, "no fetch went to the replica in rack-%d", rack)
		assert.Equal(t, r.counter.to(rack), sum.Cache.ReplicaFetches, "fetch requests to broker %d (the rack's) against Stats.ReplicaFetches", rack)
		assert.LessOrEqualf(t, r.counter.to(leader), sum.Cache.NewCursors,
			"fetch requests to the leader %d: at most each cursor's first, which the leader redirects", leader)
		assert.Zero(t, r.counter.to(third), "fetch requests to broker %d, neither leader nor in the rack", third)
		assert.Zero(t, sum.Cache.Invalidations, "a read failed")
		assert.Empty(t, r.log.warnings(), "warnings of the engine")
	})

	t.Run("replica killed", func(t *testing.T) {
		topic, leader, prod := c.rackTopic(t, adm, records)
		rack, third := otherNodes(leader)
		r := startRackRead(t, c, topic, rack, 2)
		var killedAt time.Time
		var atKill replicaCounts
		r.drain(t, 50*time.Second, func(delivered int) {
			if delivered < records/5 || !killedAt.IsZero() {
				return
			}
			atKill = replicaCounts{delivered, r.counter.to(leader), r.counter.to(rack), r.eng.Summary().Cache.ReplicaFetches}
			killedAt = time.Now()
			c.node(rack).kill(t)
		})
		took := time.Since(killedAt)
		r.close(t)

		require.False(t, killedAt.IsZero(), "the read ended before a fifth of it was delivered")
		requireInOrder(t, prod, r.offsets, r.values)
		sum := r.eng.Summary()
		t.Logf("leader %d, rack node %d killed after %d records delivered (leader %d, replica %d fetch requests, %d replica fetches); "+
			"read on %s after the kill; fetch requests by node %v; %s; replica fetches %d, invalidations %d; warnings:\n%s",
			leader, rack, atKill.delivered, atKill.leader, atKill.replica, atKill.replicaFetches, took.Round(time.Millisecond),
			r.counter.all(), sum, sum.Cache.ReplicaFetches, sum.Cache.Invalidations, strings.Join(r.log.warnings(), "\n"))
		assert.Positive(t, atKill.replicaFetches, "no fetch went to the replica in rack-%d before it was killed", rack)
		assert.Greater(t, r.counter.to(leader), atKill.leader, "no fetch went to the leader %d after the replica was killed", leader)
		assert.Zero(t, r.counter.to(third), "fetch requests to broker %d, neither leader nor in the rack", third)
	})
}

// replicaCounts are the records delivered and the fetch counts at one moment.
type replicaCounts struct {
	delivered                       int
	leader, replica, replicaFetches int64
}

// rackTopic creates a topic of one partition with 3 replicas and min.insync.replicas 3, waits
// until its ISR holds all 3, produces n records to it (acknowledged by every replica) and
// returns it, its leader and what was produced.
func (c *ownCluster) rackTopic(t *testing.T, adm *kadm.Client, n int) (string, int32, produced) {
	t.Helper()
	topic := uniqueName(t, "kbr")
	// Each step has its own deadline: on a loaded machine the steps before
	// it may take most of a shared one (CI saw the leaders' lookup time out
	// after a 30 s creation, sync and produce).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, 1, 3, map[string]*string{"min.insync.replicas": kmsg.StringPtr("3")}, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error(), "create topic %s (rf 3) on %v", topic, c.addrs())
	c.waitInSync(t, adm, 30*time.Second, topic)
	requireReplicated(t, adm, topic, 3)
	prod := c.produce(t, topic, c.records(topic, 1, 0, n), 16<<10)
	lctx, lcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer lcancel()
	leaders, err := c.leaders(lctx, adm, topic)
	require.NoError(t, err)
	require.GreaterOrEqual(t, leaders[0], int32(1), "leader of %s/0", topic)
	return topic, leaders[0], prod
}

// otherNodes returns the two nodes of a 3-node cluster that are not leader.
func otherNodes(leader int32) (int32, int32) {
	a := leader%3 + 1
	return a, a%3 + 1
}

// rackRead is an engine reading a topic to its end with rack_id rack-<node>.
type rackRead struct {
	eng     *engine.Engine
	log     *engineLog
	counter *fetchesByNode
	offsets []int64
	values  []string
}

// startRackRead starts an engine that reads topic from its start to its end, in ranges of 500
// with maxInFlight in flight, 64 KiB a partition fetch, in rack rack-<node>.
func startRackRead(t *testing.T, c *ownCluster, topic string, node int32, maxInFlight int) *rackRead {
	t.Helper()
	r := &rackRead{log: &engineLog{}, counter: &fetchesByNode{n: map[int32]int64{}}}
	eng, err := engine.New(engine.Config{
		Seeds:           c.addrs(),
		ClientOpts:      []kgo.Opt{kgo.WithHooks(r.counter), kgo.MetadataMinAge(100 * time.Millisecond)},
		Topics:          []engine.TopicSpec{{Name: topic}},
		StartFrom:       engine.StartEarliest,
		StopAtEnd:       true,
		MaxRangeRecords: 500,
		MaxInFlight:     maxInFlight,
		PollInterval:    200 * time.Millisecond,
		Fetch: engine.FetchConfig{
			CacheCapacity:     16,
			CacheIdleTimeout:  time.Minute,
			MaxPartitionBytes: 64 << 10,
			RackID:            fmt.Sprintf("rack-%d", node),
		},
		Hooks: engine.Hooks{Logger: r.log},
	})
	require.NoError(t, err)
	r.eng = eng
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine log:\n%s", r.log)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, eng.Start(ctx))
	return r
}

// drain takes every batch until the engine ends, acknowledging each; after each batch it calls
// each (if set) with the records delivered so far.
func (r *rackRead) drain(t *testing.T, timeout time.Duration, each func(delivered int)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		b, err := r.eng.Next(ctx)
		if errors.Is(err, engine.ErrEnd) {
			require.NoError(t, r.eng.Err(), "the engine stopped on an error")
			return
		}
		require.NoErrorf(t, err, "Next after %d records (%s)", len(r.offsets), r.eng.Summary())
		for _, rec := range b.Records {
			r.offsets = append(r.offsets, rec.Offset)
			r.values = append(r.values, string(rec.Value))
		}
		b.Ack()
		if each != nil {
			each(len(r.offsets))
		}
	}
}

func (r *rackRead) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	require.NoError(t, r.eng.Close(ctx), "Close")
}

// requireInOrder requires offsets to be every offset of partition 0 in prod, each once, in
// order, with the value produced there.
func requireInOrder(t *testing.T, prod produced, offsets []int64, values []string) {
	t.Helper()
	want := prod[0]
	require.Lenf(t, offsets, len(want), "records read of %d produced", len(want))
	for i, o := range offsets {
		require.Equalf(t, int64(i), o, "record %d: lost, duplicated or out of order", i)
		require.Equalf(t, string(want[o].Value), values[i], "value at offset %d", o)
	}
}

// fetchesByNode counts the fetch requests a client wrote, by broker.
type fetchesByNode struct {
	mu sync.Mutex // guards n
	n  map[int32]int64
}

func (f *fetchesByNode) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || key != int16(kmsg.Fetch) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[meta.NodeID]++
}

func (f *fetchesByNode) to(node int32) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[node]
}

func (f *fetchesByNode) all() map[int32]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int32]int64{}
	for k, v := range f.n {
		out[k] = v
	}
	return out
}

// engineLog collects an engine's log lines.
type engineLog struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (l *engineLog) add(level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, time.Now().Format("15:04:05.000")+" "+level+" "+fmt.Sprintf(format, args...))
}

func (l *engineLog) Debugf(format string, args ...any) { l.add("DEBUG", format, args...) }
func (l *engineLog) Infof(format string, args ...any)  { l.add("INFO", format, args...) }
func (l *engineLog) Warnf(format string, args ...any)  { l.add("WARN", format, args...) }
func (l *engineLog) Errorf(format string, args ...any) { l.add("ERROR", format, args...) }

// warnings returns the WARN and ERROR lines.
func (l *engineLog) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, " WARN ") || strings.Contains(s, " ERROR ") {
			out = append(out, s)
		}
	}
	return out
}

func (l *engineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
