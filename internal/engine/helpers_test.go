package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// The tests' shared set-ups, in one place: a kfake cluster with records,
// an engine on it (alone or as a group member), other members of its
// group, the faults the cluster injects, reading and acknowledging, the
// group's offsets, the engine's log lines and peeks at its state.

// --- The cluster and its records.

// kfakeCluster starts a kfake cluster with opts and closes it at cleanup.
func kfakeCluster(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(opts...)
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	return c
}

// newKafka starts a kfake cluster with the given topics of partitions each
// and produces n records to every partition of every topic.
func newKafka(t *testing.T, partitions int32, n int, topics ...string) *kfake.Cluster {
	t.Helper()
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	for _, topic := range topics {
		produce(t, c, topic, partitions, n)
	}
	return c
}

// produce writes n records to each partition of topic, values
// "<topic>-<partition>-<i>".
func produce(t *testing.T, c *kfake.Cluster, topic string, partitions int32, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(16<<10))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", topic, p, i)})
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
}

// produceTo writes n records to partition p of topic.
func produceTo(t *testing.T, c *kfake.Cluster, topic string, p int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", topic, p, i)})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
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

// kgoClient returns a plain client of c, closed at cleanup.
func kgoClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// --- Engines.

// newTestEngine creates (not starts) an engine on c with mod applied to a
// small default config.
func newTestEngine(t *testing.T, c *kfake.Cluster, mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	log := &testLogger{}
	cfg := Config{
		Seeds:           c.ListenAddrs(),
		MaxRangeRecords: 100,
		MaxInFlight:     4,
		PollInterval:    50 * time.Millisecond,
		Fetch:           FetchConfig{CacheCapacity: 16, CacheIdleTimeout: time.Minute},
		Group:           GroupConfig{CommitPeriod: 50 * time.Millisecond},
		ReplayNacks:     true,
		Hooks:           Hooks{Logger: log},
	}
	mod(&cfg)
	e, err := New(cfg)
	require.NoError(t, err)
	return e, log
}

// newEngine creates an engine on c (newTestEngine), starts it, and closes
// it at cleanup, checking that Close succeeds.
func newEngine(t *testing.T, c *kfake.Cluster, mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	e, log := newTestEngine(t, c, mod)
	started(t, e, log, 10*time.Second, true)
	return e, log
}

// startEngine starts an engine like newEngine, for tests that check Close
// themselves; it is closed at cleanup too, whatever Close returns then.
func startEngine(t *testing.T, c *kfake.Cluster, mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	e, log := newTestEngine(t, c, mod)
	started(t, e, log, 10*time.Second, false)
	return e, log
}

// startMember starts an engine on c that reads topic "t" as a member of
// group "g" (asMember), with mod (if any) applied to its config, and closes
// it at cleanup. If eng is not nil, it holds the engine before the engine
// starts (the test's broker controls and client hooks read it).
func startMember(t *testing.T, c *kfake.Cluster, eng *atomic.Pointer[Engine], mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	e, log := newTestEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		if mod != nil {
			mod(cfg)
		}
	})
	if eng != nil {
		eng.Store(e)
	}
	started(t, e, log, 30*time.Second, true)
	return e, log
}

// started starts e, waiting at most timeout, and closes it at cleanup
// (checking that Close succeeds if checkClose is set), logging e's log
// lines if the test failed.
func started(t *testing.T, e *Engine, log *testLogger, timeout time.Duration, checkClose bool) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := e.Close(ctx)
		if checkClose {
			assert.NoError(t, err, "Close")
		}
		if t.Failed() {
			t.Logf("engine log:\n%s", log)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	require.NoError(t, e.Start(ctx))
}

// asMember makes cfg a member of group "g" reading topic "t": the group
// set-up most tests start from (memberConfig, startMember).
func asMember(cfg *Config) {
	cfg.Topics = []TopicSpec{{Name: "t"}}
	cfg.Group.Name = "g"
	cfg.Group.Membership = true
}

// memberConfig configures an engine as a member of group g on topic t
// (asMember), with balancer b, heartbeats every 100 ms and two slots.
func memberConfig(b kgo.GroupBalancer) func(*Config) {
	return func(cfg *Config) {
		asMember(cfg)
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(b), kgo.HeartbeatInterval(100 * time.Millisecond)}
		cfg.MaxInFlight = 2
	}
}

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

// --- The group and the cluster's faults.

// joinOther starts a plain franz-go member of group g on topic that
// consumes (and discards) its share; the returned function makes it leave
// (at cleanup at the latest).
func joinOther(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, b kgo.GroupBalancer) (leave func()) {
	t.Helper()
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.Balancers(b), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctx)
	var polling sync.WaitGroup
	polling.Add(1)
	go func() {
		defer polling.Done()
		for ctx.Err() == nil {
			other.PollFetches(ctx)
		}
	}()
	var once sync.Once
	leave = func() {
		once.Do(func() {
			cancel()
			polling.Wait()
			other.Close()
		})
	}
	t.Cleanup(leave)
	return leave
}

// loseSessionOnce answers the group's next heartbeat with UNKNOWN_MEMBER_ID:
// the member loses its partitions and rejoins.
func loseSessionOnce(c *kfake.Cluster) {
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
}

// hideListing makes the ListOffsets answers for partition p of topic
// fail with LEADER_NOT_AVAILABLE while hidden is set; every other partition
// is answered start 0 and end n (the control function cannot ask the
// cluster).
func hideListing(c *kfake.Cluster, topic string, p int32, n int64, hidden *atomic.Bool) {
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !hidden.Load() {
			return nil, nil, false
		}
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				if rt.Topic == topic && rp.Partition == p {
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				} else {
					sp.Offset, sp.LeaderEpoch = n, 0
					if rp.Timestamp == -2 {
						sp.Offset = 0
					}
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// fetchError makes every fetch of topic's partition p fail with code, as long
// as on returns true.
func fetchError(c *kfake.Cluster, topic string, p int32, code int16, on func() bool) {
	fetchErrorAfter(c, topic, p, code, on, 0)
}

// fetchErrorAfter is fetchError with every fetch answered delay late,
// failing or not (one control: kfake's SleepControl races with itself when
// two controls sleep for the same request).
func fetchErrorAfter(c *kfake.Cluster, topic string, p int32, code int16, on func() bool, delay time.Duration) {
	id := c.TopicInfo(topic).TopicID // the control function cannot ask the cluster
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if delay > 0 {
			c.SleepControl(func() { time.Sleep(delay) })
		}
		if !on() {
			return nil, nil, false
		}
		fr := req.(*kmsg.FetchRequest)
		hit := false
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				hit = hit || (rt.Topic == topic || rt.TopicID == id) && rp.Partition == p
			}
		}
		if !hit {
			return nil, nil, false
		}
		// A fetch holds many partitions: the failing one gets the error,
		// the others an answer without records (kfake cannot serve part
		// of a request), so they fetch again in the next round.
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				if (rt.Topic == topic || rt.TopicID == id) && rp.Partition == p {
					sp.ErrorCode = code
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// writeHook calls its function with the key of every request a client
// writes.
type writeHook func(key int16)

func (h writeHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	h(key)
}

// --- Reading and acknowledging.

// drain takes and acknowledges batches until Next ends or ctx ends, and
// returns the number of records per "topic/partition".
func drain(ctx context.Context, e *Engine) (map[string]int, error) {
	got := map[string]int{}
	for {
		b, err := e.Next(ctx)
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, ErrEnd) {
				// A run that does not end names what it waits for (issue 52).
				err = fmt.Errorf("%w; the engine waits for:\n  %s", err, strings.Join(e.Waiting(), "\n  "))
			}
			return got, err
		}
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
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

// take acknowledges batches until n records arrived and returns the records
// per partition.
func take(ctx context.Context, t *testing.T, e *Engine, log *testLogger, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	total := 0
	for total < n {
		b, err := e.Next(ctx)
		require.NoError(t, err, "after %d of %d records (%v)\n%s", total, n, got, log)
		got[b.Range.Key().String()] += len(b.Records)
		total += len(b.Records)
		b.Ack()
	}
	return got
}

// readAssigned takes and acknowledges batches of e until n records came.
func readAssigned(t *testing.T, e *Engine, log *testLogger, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		b, err := e.Next(ctx)
		require.NoError(t, err, "the assigned partitions were not read\n%s", log)
		got += len(b.Records)
		b.Ack()
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

// spans returns the ranges of bs, sorted, and the records per range.
func spans(bs []*Batch) ([]ranges.Range, map[ranges.Range]int) {
	var rs []ranges.Range
	n := map[ranges.Range]int{}
	for _, b := range bs {
		rs = append(rs, b.Range)
		n[b.Range] += len(b.Records)
	}
	slices.SortFunc(rs, func(a, b ranges.Range) int {
		if c := a.Key().Compare(b.Key()); c != 0 {
			return c
		}
		return int(a.Start - b.Start)
	})
	return rs, n
}

// pipeline takes batches from an engine as Benthos' input loop does: up to
// depth batches in flight, each acknowledged delay after it was taken (in
// parts, if split). stop stops taking batches and waits for the
// acknowledgement of every batch taken, as Benthos does before it closes an
// input.
type pipeline struct {
	cancel context.CancelFunc
	taking sync.WaitGroup
	acks   sync.WaitGroup
	taken  int
	mu     sync.Mutex // guards taken
}

func (pl *pipeline) took() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.taken
}

func (pl *pipeline) stop() {
	pl.cancel()
	pl.taking.Wait()
	pl.acks.Wait()
}

// --- The group's offsets.

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

// committedOf returns the group's committed offset of t/p, or -1.
func committedOf(t *testing.T, c *kfake.Cluster, group string, p int32) int64 {
	t.Helper()
	cl := kgoClient(t, c)
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(t.Context(), group)
	require.NoError(t, err)
	o, ok := offs.Lookup("t", p)
	if !ok {
		return -1
	}
	return o.At
}

// commitAll commits offset at for every partition of topic in group, from
// outside the group (which has no members yet).
func commitAll(t *testing.T, adm *kadm.Client, group, topic string, partitions int32, at int64) {
	t.Helper()
	offs := kadm.Offsets{}
	for p := range partitions {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	}
	_, err := adm.CommitOffsets(t.Context(), group, offs)
	require.NoError(t, err)
}

// listed is a kadm.ListedOffsets of "topic/partition" -> offset.
func listed(offsets map[ranges.Key]int64) kadm.ListedOffsets {
	lo := kadm.ListedOffsets{}
	for k, o := range offsets {
		if lo[k.Topic] == nil {
			lo[k.Topic] = map[int32]kadm.ListedOffset{}
		}
		lo[k.Topic][k.Partition] = kadm.ListedOffset{Topic: k.Topic, Partition: k.Partition, Offset: o}
	}
	return lo
}

// --- The engine's log lines and state.

// testLogger collects log lines: the engine's own in lines, the lines its
// franz-go clients log through it (kafkaLogger) apart in kafka, so tests of
// the engine's lines do not see them.
type testLogger struct {
	mu    sync.Mutex // guards lines and kafka
	lines []string
	kafka []string
}

func (l *testLogger) add(level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := level + " " + fmt.Sprintf(format, args...)
	if format == kafkaLogFormat {
		l.kafka = append(l.kafka, line)
		return
	}
	l.lines = append(l.lines, line)
}

func (l *testLogger) Debugf(f string, a ...any) { l.add("DEBUG", f, a...) }
func (l *testLogger) Infof(f string, a ...any)  { l.add("INFO", f, a...) }
func (l *testLogger) Warnf(f string, a ...any)  { l.add("WARN", f, a...) }
func (l *testLogger) Errorf(f string, a ...any) { l.add("ERROR", f, a...) }

func (l *testLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// countLines returns the log lines of level that contain every one of parts.
func countLines(log *testLogger, level string, parts ...string) int {
	log.mu.Lock()
	defer log.mu.Unlock()
	n := 0
	for _, l := range log.lines {
		ok := strings.HasPrefix(l, level+" ")
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			n++
		}
	}
	return n
}

// levelLines returns the lines of log at level (without the level).
func levelLines(log *testLogger, level string) []string {
	log.mu.Lock()
	defer log.mu.Unlock()
	var out []string
	for _, l := range log.lines {
		if rest, ok := strings.CutPrefix(l, level+" "); ok {
			out = append(out, rest)
		}
	}
	return out
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

// draining reports whether some partition of e is being drained.
func draining(e *Engine) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.parts.reading() {
		if p.draining {
			return true
		}
	}
	return false
}

// wasAssigned reports whether the group assigned this engine partitions.
func (e *Engine) wasAssigned() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.group.assigned
}
