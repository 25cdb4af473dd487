package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runTimeout bounds one stream run; a healthy run of these tests takes well
// under a second or two.
const runTimeout = 30 * time.Second

// connectFailed is what Benthos logs when an input's Connect fails. Against
// kfake no test expects it, so runStream stops at the first one instead of
// letting Benthos retry until runTimeout.
const connectFailed = "Failed to connect to kafka_batched_ranges"

// pos is one record's place in Kafka.
type pos struct {
	partition int32
	offset    int64
}

func (p pos) String() string { return fmt.Sprintf("%d@%d", p.partition, p.offset) }

// produced is what produceRecords wrote for one record.
type produced struct {
	key, value string
	headers    map[string]string
	tsMillis   int64
}

// got is one message as delivered to the test's consumer.
type got struct {
	body []byte
	meta map[string]any
}

// newKafka starts an in-process Kafka with topic split into partitions and
// returns its address.
func newKafka(t *testing.T, topic string, partitions int32) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// newAdmin returns an admin client of the Kafka at addr.
func newAdmin(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produceRecords writes n records to topic, record i to partition
// i%partitions, with key k-i, value v-i, two headers and a timestamp of its
// own, and returns them by position.
func produceRecords(t *testing.T, addr, topic string, partitions int32, first, n int) map[pos]produced {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()

	base := time.UnixMilli(1_700_000_000_000)
	recs := make([]*kgo.Record, n)
	for j := range n {
		i := first + j
		recs[j] = &kgo.Record{
			Topic:     topic,
			Partition: int32(i) % partitions,
			Key:       fmt.Appendf(nil, "k-%d", i),
			Value:     fmt.Appendf(nil, "v-%d", i),
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
			Headers: []kgo.RecordHeader{
				{Key: "h-index", Value: fmt.Appendf(nil, "%d", i)},
				{Key: "h-const", Value: []byte("c")},
			},
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	out := make(map[pos]produced, n)
	for _, r := range recs {
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		out[pos{r.Partition, r.Offset}] = produced{key: string(r.Key), value: string(r.Value), headers: hs, tsMillis: r.Timestamp.UnixMilli()}
	}
	return out
}

// endOffsets lists the end offset of every partition of topic.
func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(t.Context(), topic)
	require.NoError(t, err)
	require.NoError(t, ends.Error())
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// committedOffsets fetches the committed offsets of group for topic.
func committedOffsets(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	resps, err := adm.FetchOffsets(t.Context(), group)
	require.NoError(t, err)
	require.NoError(t, resps.Error())
	out := map[int32]int64{}
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// committedNow is committedOffsets for polls: nil while the group has no
// offsets yet (GROUP_ID_NOT_FOUND before its first commit) or the fetch
// fails. (committedOffsets fails the test then, and a poll of
// require.Eventually that fails never answers.)
func committedNow(adm *kadm.Client, group, topic string) map[int32]int64 {
	resps, err := adm.FetchOffsets(context.Background(), group)
	if err != nil || resps.Error() != nil {
		return nil
	}
	out := map[int32]int64{}
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// commitOffsets commits offsets (by partition) of topic for group.
func commitOffsets(t *testing.T, adm *kadm.Client, group, topic string, offsets map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, at := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	}
	resps, err := adm.CommitOffsets(t.Context(), group, os)
	require.NoError(t, err)
	require.NoError(t, resps.Error())
}

// syncBuffer is a bytes.Buffer safe for the stream's logger to write from
// any goroutine.
type syncBuffer struct {
	mu     sync.Mutex // guards buf
	buf    bytes.Buffer
	onLine func(line []byte) // called with each write, outside mu; set before use
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	if b.onLine != nil {
		b.onLine(p)
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runResult is what one stream run delivered.
type runResult struct {
	err     error         // stream.Run's result
	msgs    []got         // every message, in delivery order
	sum     Summary       // the input's summary from Options.OnClose
	closed  bool          // whether OnClose was called
	failure error         // the error the input stopped on, from Options.OnFailure
	log     *syncBuffer   // the stream's log
	elapsed time.Duration // how long Run took
}

// runStream runs inputYAML (a kafka_batched_ranges input config, with
// ${KAFKA_BROKERS} substituted) end to end through a Benthos stream whose
// output is a batch consumer func. consume, if set, decides whether each
// delivery is acknowledged (nil) or nacked (an error); delivered messages are
// recorded either way.
func runStream(t *testing.T, addr, inputYAML string, consume func(service.MessageBatch) error) runResult {
	t.Helper()
	var (
		mu  sync.Mutex // guards res.msgs, res.sum, res.closed
		res = runResult{log: &syncBuffer{}}
	)
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	res.log.onLine = func(line []byte) {
		if bytes.Contains(line, []byte(connectFailed)) {
			cancel()
		}
	}
	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{
		OnClose: func(s Summary) {
			mu.Lock()
			defer mu.Unlock()
			res.sum, res.closed = s, true
		},
		OnFailure: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			res.failure = err
		},
	}))
	sb := env.NewStreamBuilder()
	sb.SetEnvVarLookupFunc(func(name string) (string, bool) {
		if name == "KAFKA_BROKERS" {
			return addr, true
		}
		return "", false
	})
	sb.SetLogger(slog.New(slog.NewTextHandler(res.log, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, sb.AddInputYAML(inputYAML))
	require.NoError(t, sb.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			body, err := m.AsBytes()
			if err != nil {
				return err
			}
			meta := map[string]any{}
			_ = m.MetaWalkMut(func(k string, v any) error { meta[k] = v; return nil })
			res.msgs = append(res.msgs, got{body: bytes.Clone(body), meta: meta})
		}
		if consume != nil {
			return consume(batch)
		}
		return nil
	}))
	stream, err := sb.Build()
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stream log:\n%s", res.log)
		}
	})

	start := time.Now()
	res.err = stream.Run(ctx)
	res.elapsed = time.Since(start)
	if ctx.Err() != nil {
		// Run gave up waiting; stop the stream so it does not outlive the test.
		_ = stream.StopWithin(10 * time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	return res
}

// offsetOf returns a message's partition and offset from its metadata.
func offsetOf(t *testing.T, g got) pos {
	t.Helper()
	p, ok := g.meta["kafka_partition"].(int64)
	require.True(t, ok, "kafka_partition = %#v, want an int64", g.meta["kafka_partition"])
	o, ok := g.meta["kafka_offset"].(int64)
	require.True(t, ok, "kafka_offset = %#v, want an int64", g.meta["kafka_offset"])
	return pos{int32(p), o}
}

// checkMessage checks every metadata key of a delivered message against the
// record that was produced and, with rangeMeta (range_metadata: true), that
// its range holds its offset; without, that the range keys are absent.
func checkMessage(t *testing.T, topic string, maxRange int64, rangeMeta bool, g got, want produced) {
	t.Helper()
	at := offsetOf(t, g)
	assert.Equal(t, want.value, string(g.body), "%s body", at)
	assert.Equal(t, want.key, g.meta["kafka_key"], "%s kafka_key", at)
	assert.Equal(t, topic, g.meta["kafka_topic"], "%s kafka_topic", at)
	assert.Equal(t, want.tsMillis, g.meta["kafka_timestamp_ms"], "%s kafka_timestamp_ms", at)
	assert.Equal(t, want.tsMillis/1000, g.meta["kafka_timestamp_unix"], "%s kafka_timestamp_unix", at)
	assert.Equal(t, false, g.meta["kafka_tombstone_message"], "%s kafka_tombstone_message", at)
	for k, v := range want.headers {
		assert.Equal(t, v, g.meta[k], "%s header %s", at, k)
	}
	if !rangeMeta {
		assert.NotContains(t, g.meta, "kafka_range_start", "%s without range_metadata", at)
		assert.NotContains(t, g.meta, "kafka_range_end", "%s without range_metadata", at)
		return
	}
	start, ok1 := g.meta["kafka_range_start"].(int64)
	end, ok2 := g.meta["kafka_range_end"].(int64)
	if assert.True(t, ok1 && ok2, "%s kafka_range_start/end = %#v/%#v, want int64s", at, g.meta["kafka_range_start"], g.meta["kafka_range_end"]) {
		assert.True(t, start <= at.offset && at.offset < end, "%s outside its range [%d, %d)", at, start, end)
		assert.LessOrEqual(t, end-start, maxRange, "%s range [%d, %d) longer than max_range_records", at, start, end)
	}
}

// countByPos counts deliveries per position.
func countByPos(t *testing.T, msgs []got) map[pos]int {
	t.Helper()
	out := map[pos]int{}
	for _, g := range msgs {
		out[offsetOf(t, g)]++
	}
	return out
}

// requireEnded checks that a stop_at: end run ended by itself, cleanly.
func requireEnded(t *testing.T, res runResult) {
	t.Helper()
	require.NotContains(t, res.log.String(), connectFailed, "the input failed to connect")
	require.NoError(t, res.err, "stream.Run = %v, want nil (the input ends at the end offsets)", res.err)
	assert.True(t, res.closed, "the input's OnClose was not called")
	assert.NotContains(t, res.log.String(), "Input stopped", "the input stopped on an error")
	assert.True(t, res.sum.Ended, "Summary.Ended of a bounded run that read to its end")
	assert.Equal(t, res.sum.Total, res.sum.Done, "Summary: offsets acknowledged of those to read")
	assert.NotErrorIs(t, res.failure, ErrStoppedBeforeEnd)
}

func TestInputReadsEverythingOnce(t *testing.T) {
	const (
		topic      = "orders"
		partitions = 4
		n          = 20000
	)
	addr := newKafka(t, topic, partitions)
	want := produceRecords(t, addr, topic, partitions, 0, n)
	require.Len(t, want, n)

	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ orders ]
  stop_at: end
  max_range_records: 1000
  max_in_flight: 6
  range_metadata: true
`, nil)
	requireEnded(t, res)

	counts := countByPos(t, res.msgs)
	assert.Equal(t, n, len(counts), "distinct positions delivered = %d, want %d", len(counts), n)
	for p, c := range counts {
		assert.Equal(t, 1, c, "%s delivered %d times, want once", p, c)
		_, ok := want[p]
		assert.True(t, ok, "%s delivered but never produced", p)
	}
	for _, g := range res.msgs {
		checkMessage(t, topic, 1000, true, g, want[offsetOf(t, g)])
	}
	assert.Equal(t, int64(n), res.sum.Records, "Summary.Records")
	assert.Equal(t, int64(n), res.sum.Acked, "Summary.Acked")
	assert.Equal(t, int64(n), res.sum.Total, "Summary.Total")
	assert.Contains(t, res.log.String(), fmt.Sprintf("Closed: %d records acknowledged of %d handed out", n, n))
	assert.Contains(t, res.log.String(), "kafka_batched_ranges input "+Version, "the version of the input, logged when it is built")
	assert.Equal(t, int64(n/partitions/1000*partitions), res.sum.Ranges, "Summary.Ranges")
	var wantBytes int64
	for _, w := range want {
		wantBytes += int64(len(w.value))
	}
	assert.Equal(t, wantBytes, res.sum.Bytes, "Summary.Bytes")
	assert.Positive(t, res.sum.Cache.Continuations, "Summary.Cache.Continuations: no range continued on a cached client")
}

func TestInputPartitionSubset(t *testing.T) {
	const topic = "subset"
	addr := newKafka(t, topic, 4)
	want := produceRecords(t, addr, topic, 4, 0, 400)

	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ "subset:1,3" ]
  stop_at: end
  max_range_records: 30
`, nil)
	requireEnded(t, res)
	counts := countByPos(t, res.msgs)
	assert.Equal(t, 200, len(counts))
	for p := range want {
		if p.partition == 1 || p.partition == 3 {
			assert.Equal(t, 1, counts[p], "%s delivered %d times, want once", p, counts[p])
		} else {
			assert.Zero(t, counts[p], "%s of an unselected partition delivered", p)
		}
	}
}

func TestInputOrdered(t *testing.T) {
	const (
		topic      = "changelog"
		partitions = 4
		n          = 8000
	)
	addr := newKafka(t, topic, partitions)
	want := produceRecords(t, addr, topic, partitions, 0, n)

	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ changelog ]
  stop_at: end
  ordered: true
  max_range_records: 300
  max_in_flight: 8
`, nil)
	requireEnded(t, res)

	last := map[int32]int64{}
	for _, g := range res.msgs {
		p := offsetOf(t, g)
		prev, seen := last[p.partition]
		if seen {
			assert.Equal(t, prev+1, p.offset, "partition %d: offset %d delivered after %d, want %d", p.partition, p.offset, prev, prev+1)
		} else {
			assert.Zero(t, p.offset, "partition %d: first offset delivered is %d, want 0", p.partition, p.offset)
		}
		last[p.partition] = p.offset
	}
	assert.Equal(t, len(want), len(countByPos(t, res.msgs)))
	assert.Equal(t, len(want), len(res.msgs))
}

func TestInputCommitsAndResumes(t *testing.T) {
	const (
		topic      = "events"
		group      = "archiver"
		partitions = 4
	)
	addr := newKafka(t, topic, partitions)
	adm := newAdmin(t, addr)
	first := produceRecords(t, addr, topic, partitions, 0, 4000)
	conf := `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ events ]
  consumer_group: archiver
  start_from: earliest
  stop_at: end
  max_range_records: 250
  commit_period: 50ms
`

	res := runStream(t, addr, conf, nil)
	requireEnded(t, res)
	assert.Equal(t, len(first), len(countByPos(t, res.msgs)))
	assert.Equal(t, len(first), len(res.msgs))
	ends := endOffsets(t, adm, topic)
	assert.Equal(t, ends, committedOffsets(t, adm, group, topic), "committed offsets after the first run, want the end offsets")

	res = runStream(t, addr, conf, nil)
	requireEnded(t, res)
	assert.Zero(t, len(res.msgs), "second run delivered %d messages, want none", len(res.msgs))
	assert.Zero(t, res.sum.Records)

	second := produceRecords(t, addr, topic, partitions, 4000, 600)
	res = runStream(t, addr, conf, nil)
	requireEnded(t, res)
	counts := countByPos(t, res.msgs)
	assert.Equal(t, len(second), len(counts), "third run delivered %d positions, want the %d new records", len(counts), len(second))
	for p := range second {
		assert.Equal(t, 1, counts[p], "%s delivered %d times, want once", p, counts[p])
	}
	for _, g := range res.msgs {
		checkMessage(t, topic, 250, false, g, second[offsetOf(t, g)])
	}
	assert.Equal(t, endOffsets(t, adm, topic), committedOffsets(t, adm, group, topic), "committed offsets after the third run")
}

// TestInputStartFromCommittedNewGroup: with start_from committed, a group
// that never committed reads nothing (Kafka's auto.offset.reset=none): one
// warning names the partitions, a bounded run ends, and nothing is committed.
// Before, it read every partition from the start, as earliest does.
func TestInputStartFromCommittedNewGroup(t *testing.T) {
	const topic = "fresh"
	addr := newKafka(t, topic, 2)
	adm := newAdmin(t, addr)
	produceRecords(t, addr, topic, 2, 0, 100)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ fresh ]
  consumer_group: never-committed
  start_from: committed
  stop_at: end
`, nil)
	requireEnded(t, res)
	assert.Empty(t, res.msgs, "records read")
	assert.Equal(t, 1, strings.Count(res.log.String(), "No committed offset in group"), "warnings about partitions without a committed offset")
	assert.Contains(t, res.log.String(), `No committed offset in group \"never-committed\" for fresh/0, fresh/1; not reading them (start_from: committed)`)
	assert.Empty(t, committedOffsets(t, adm, "never-committed", topic), "committed offsets after the run")
}

// readAll reads and acknowledges batches from a connected input until it
// ends, and returns the number of messages.
func readAll(t *testing.T, in *input) int {
	t.Helper()
	var n int
	for {
		batch, ack, err := in.ReadBatch(t.Context())
		if errors.Is(err, service.ErrEndOfInput) {
			return n
		}
		require.NoError(t, err)
		n += len(batch)
		require.NoError(t, ack(t.Context(), nil))
		require.NoError(t, ack(t.Context(), nil), "a second ack")
	}
}

func TestInputStartFromLatest(t *testing.T) {
	const topic = "latest"
	addr := newKafka(t, topic, 2)
	produceRecords(t, addr, topic, 2, 0, 100)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ latest ]
  start_from: latest
  stop_at: end
`, nil)
	requireEnded(t, res)
	assert.Zero(t, len(res.msgs))
}

func TestInputNackedBatchesAreRedelivered(t *testing.T) {
	const (
		topic      = "nacks"
		group      = "nacker"
		partitions = 4
		n          = 6000
	)
	addr := newKafka(t, topic, partitions)
	adm := newAdmin(t, addr)
	want := produceRecords(t, addr, topic, partitions, 0, n)
	// The group has committed before (TestInputCommitsAndResumes starts
	// with a group that never did).
	commitOffsets(t, adm, group, topic, map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0})

	// Nack the first delivery of every third distinct batch.
	var (
		mu     sync.Mutex // guards seen, nacked
		seen   = map[pos]bool{}
		nacked int
	)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ nacks ]
  consumer_group: nacker
  start_from: committed
  stop_at: end
  max_range_records: 200
  commit_period: 50ms
`, func(b service.MessageBatch) error {
		p, _ := b[0].MetaGetMut("kafka_partition")
		o, _ := b[0].MetaGetMut("kafka_offset")
		first := pos{int32(p.(int64)), o.(int64)}
		mu.Lock()
		defer mu.Unlock()
		if seen[first] {
			return nil
		}
		seen[first] = true
		if len(seen)%3 == 0 {
			nacked++
			return errors.New("test nack")
		}
		return nil
	})
	requireEnded(t, res)

	mu.Lock()
	assert.Positive(t, nacked, "no batch was nacked: the test did not test anything")
	mu.Unlock()
	counts := countByPos(t, res.msgs)
	assert.Equal(t, n, len(counts), "distinct positions delivered = %d, want %d", len(counts), n)
	for p := range want {
		assert.GreaterOrEqual(t, counts[p], 1, "%s never delivered", p)
	}
	assert.Greater(t, len(res.msgs), n, "deliveries = %d, want more than %d (nacked batches are delivered again)", len(res.msgs), n)
	assert.Equal(t, endOffsets(t, adm, topic), committedOffsets(t, adm, group, topic), "committed offsets, want the end offsets")
}

// TestInputNacksWithoutReplay: with auto_replay_nacks: false a nacked batch
// is dropped (Benthos' contract), so its range still completes and is
// committed.
func TestInputNacksWithoutReplay(t *testing.T) {
	const (
		topic      = "dropped"
		group      = "dropper"
		partitions = 2
		n          = 1000
	)
	addr := newKafka(t, topic, partitions)
	adm := newAdmin(t, addr)
	produceRecords(t, addr, topic, partitions, 0, n)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ dropped ]
  consumer_group: dropper
  stop_at: end
  max_range_records: 100
  auto_replay_nacks: false
`, func(service.MessageBatch) error { return errors.New("test nack") })
	requireEnded(t, res)
	counts := countByPos(t, res.msgs)
	assert.Equal(t, n, len(counts), "distinct positions delivered")
	assert.Equal(t, n, len(res.msgs), "deliveries: a nacked batch was delivered again")
	assert.Equal(t, endOffsets(t, adm, topic), committedOffsets(t, adm, group, topic), "committed offsets, want the end offsets")
	// Dropped, but counted and said: in the summary, and in one warning
	// (at most one per 10 seconds) naming the option.
	assert.Equal(t, int64(n), res.sum.Dropped, "records dropped, in the summary")
	assert.Zero(t, res.sum.Acked, "records acknowledged, in the summary: every one was dropped")
	assert.Equal(t, int64(n), res.sum.Done, "offsets done (committed past), in the summary")
	assert.Contains(t, res.sum.String(), fmt.Sprintf("0 records acknowledged of %d handed out", n))
	assert.Contains(t, res.sum.String(), fmt.Sprintf("%d rejected records dropped", n))
	warned := strings.Count(res.log.String(), "rejected (test nack) and dropped (auto_replay_nacks: false)")
	assert.Equal(t, 1, warned, "warnings of dropped batches, want one per 10 seconds\n%s", res.log.String())
}

func TestInputWithoutCache(t *testing.T) {
	const (
		topic      = "nocache"
		partitions = 3
		n          = 3000
	)
	addr := newKafka(t, topic, partitions)
	want := produceRecords(t, addr, topic, partitions, 0, n)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ nocache ]
  stop_at: end
  max_range_records: 100
  consumer_cache:
    capacity: 0
`, nil)
	requireEnded(t, res)
	counts := countByPos(t, res.msgs)
	assert.Equal(t, len(want), len(counts))
	for p := range want {
		assert.Equal(t, 1, counts[p], "%s delivered %d times, want once", p, counts[p])
	}
	// Capacity 0 keeps no records past a range (nothing is kept: every
	// continuation fetches again), never a client per range: cursors share
	// the engine's one client for cursors and listings, so the cache
	// creates none.
	assert.Zero(t, res.sum.Cache.NewClients, "clients created by the cache")
	assert.Zero(t, res.sum.Cache.Kept, "records kept by idle cursors with capacity 0")
	assert.Positive(t, res.sum.Cache.EvictionsCapacity, "no cursor dropped its records with capacity 0")
}

func TestInputStopsOnDataLoss(t *testing.T) {
	const (
		topic = "lossy"
		group = "slow"
	)
	addr := newKafka(t, topic, 2)
	adm := newAdmin(t, addr)
	produceRecords(t, addr, topic, 2, 0, 2000) // 1000 per partition

	// The group read partition 0 up to 100; then retention deleted [0, 500).
	commitOffsets(t, adm, group, topic, map[int32]int64{0: 100})
	deletes := kadm.Offsets{}
	deletes.Add(kadm.Offset{Topic: topic, Partition: 0, At: 500, LeaderEpoch: -1})
	dr, err := adm.DeleteRecords(t.Context(), deletes)
	require.NoError(t, err)
	require.NoError(t, dr.Error())

	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ lossy ]
  consumer_group: slow
  start_from: committed
  stop_at: end
  commit_period: 50ms
`, nil)
	assert.NoError(t, res.err, "stream.Run: the input should end (and Err report why)")
	assert.Less(t, res.elapsed, 30*time.Second, "the input did not stop promptly")

	err = res.failure
	require.Error(t, err, "Err after data loss = nil, want the data loss")
	for _, want := range []string{"lossy/0", `"slow"`, "100", "500", "[100, 500)", "deleted"} {
		assert.Contains(t, err.Error(), want, "OnFailure(%q), want it to name %q", err, want)
	}
	assert.Contains(t, res.log.String(), "Input stopped", "the stop is logged")
	for _, g := range res.msgs {
		p := offsetOf(t, g)
		assert.False(t, p.partition == 0 && p.offset < 500, "%s delivered, but it was deleted", p)
	}
	// Nothing past the gap was committed for the lossy partition, so the
	// next run reports the loss again instead of reading on silently.
	assert.Equal(t, int64(100), committedOffsets(t, adm, group, topic)[0], "committed offset of partition 0 after the run")

	res = runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ lossy ]
  consumer_group: slow
  start_from: committed
  stop_at: end
`, nil)
	assert.NoError(t, res.err)
	assert.Contains(t, res.log.String(), "offsets [100, 500) were deleted", "the second run does not report the loss")
	assert.Zero(t, len(res.msgs), "the second run delivered %d messages past a loss", len(res.msgs))
}

// TestInputStopsOnDataLossWhileReading deletes records a range still has to
// read, while it reads them.
func TestInputStopsOnDataLossWhileReading(t *testing.T) {
	const topic = "shrinking"
	addr := newKafka(t, topic, 1)
	adm := newAdmin(t, addr)

	// Small record batches, fetched one at a time (fetch_max_bytes: 1), so
	// the reader has to ask the broker again every few records.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchMaxBytes(1024), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "value-%04d", i)}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	in := newTestInput(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ shrinking ]
stop_at: end
max_range_records: 100
max_in_flight: 1
fetch_max_bytes: 1
fetch_max_partition_bytes: 1
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, in.Connect(ctx))
	batch, ack, err := in.ReadBatch(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, batch)
	last, _ := batch[len(batch)-1].MetaGetMut("kafka_offset")
	require.Less(t, last.(int64), int64(100), "the first batch already holds the whole first range")

	deletes := kadm.Offsets{}
	deletes.Add(kadm.Offset{Topic: topic, Partition: 0, At: 500, LeaderEpoch: -1})
	dr, err := adm.DeleteRecords(ctx, deletes)
	require.NoError(t, err)
	require.NoError(t, dr.Error())
	require.NoError(t, ack(ctx, nil))

	n := len(batch)
	for {
		batch, ack, err := in.ReadBatch(ctx)
		if errors.Is(err, service.ErrEndOfInput) {
			break
		}
		require.NoError(t, err, "ReadBatch")
		n += len(batch)
		require.NoError(t, ack(ctx, nil))
	}
	assert.Less(t, n, 500, "read %d records, but [?, 500) was deleted", n)
	err = in.eng.Err()
	require.Error(t, err, "Err after data loss = nil, want the data loss")
	for _, want := range []string{"shrinking/0", "500", "deleted"} {
		assert.Contains(t, err.Error(), want, "OnFailure(%q), want it to name %q", err, want)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// newTestInput builds an input directly, outside a stream, from yaml fields.
func newTestInput(t *testing.T, yaml string) *input {
	t.Helper()
	conf, err := parseYAML(t, yaml)
	require.NoError(t, err)
	in, err := newInput(conf, service.MockResources(), Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, in.Close(ctx), "Close")
	})
	return in
}

func TestConnectUnreachableBroker(t *testing.T) {
	addr := closedPort(t)
	in := newTestInput(t, fmt.Sprintf("seed_brokers: [ %q ]\ntopics: [ t ]\n", addr))

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := in.Connect(ctx)
	require.Error(t, err, "Connect to %s", addr)
	assert.Contains(t, err.Error(), addr, "Connect error %q does not name the seed broker", err)
	assert.Less(t, time.Since(start), 10*time.Second, "Connect ignored its context's deadline")

	_, _, err = in.ReadBatch(t.Context())
	assert.ErrorIs(t, err, service.ErrNotConnected, "ReadBatch after a failed Connect")
}

// TestMissingTopicOrPartition: a topics entry naming a topic or a partition
// that does not exist. A continuous run connects and reads the rest (before,
// Connect failed naming it, retried for ever: issue 25); a bounded run stops
// naming it, or with on_missing_topic: skip reads the rest and ends.
func TestMissingTopicOrPartition(t *testing.T) {
	addr := newKafka(t, "present", 2)
	produceRecords(t, addr, "present", 2, 0, 20)
	tests := []struct {
		topics string
		want   []string // in the bounded run's error
		read   int      // records of the rest
	}{
		{topics: "[ absent, present ]", want: []string{"topics", `"absent"`, "does not exist"}, read: 20},
		{topics: `[ "present:0,5" ]`, want: []string{"topics", `"present"`, "partition 5 does not exist", "2 partitions"}, read: 10},
	}
	for _, tc := range tests {
		in := newTestInput(t, fmt.Sprintf("seed_brokers: [ %q ]\ntopics: %s\n", addr, tc.topics))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		require.NoError(t, in.Connect(ctx), "Connect(topics: %s), a continuous run", tc.topics)
		n := 0
		for n < tc.read {
			batch, ack, err := in.ReadBatch(ctx)
			require.NoError(t, err, "ReadBatch(topics: %s) after %d records", tc.topics, n)
			n += len(batch)
			require.NoError(t, ack(ctx, nil))
		}
		cancel()
		assert.Equal(t, tc.read, n, "records read (topics: %s)", tc.topics)

		bounded := fmt.Sprintf("kafka_batched_ranges:\n  seed_brokers: [ \"${KAFKA_BROKERS}\" ]\n  topics: %s\n  stop_at: end\n", tc.topics)
		res := runStream(t, addr, bounded, nil)
		require.Error(t, res.failure, "OnFailure of a bounded run (topics: %s)", tc.topics)
		for _, w := range tc.want {
			assert.Contains(t, res.failure.Error(), w, "bounded run (topics: %s) error %q, want it to contain %q", tc.topics, res.failure, w)
		}
		assert.Empty(t, res.msgs)

		res = runStream(t, addr, bounded+"  on_missing_topic: skip\n", nil)
		assert.NoError(t, res.err, "stream.Run (topics: %s, on_missing_topic: skip)", tc.topics)
		assert.NoError(t, res.failure, "OnFailure (topics: %s, on_missing_topic: skip)", tc.topics)
		assert.Len(t, res.msgs, tc.read, "records read (topics: %s, on_missing_topic: skip)", tc.topics)
		assert.Contains(t, res.log.String(), tc.want[len(tc.want)-1], "the warning names what is skipped")
	}
}

func TestInputLifecycle(t *testing.T) {
	const topic = "life"
	addr := newKafka(t, topic, 2)
	produceRecords(t, addr, topic, 2, 0, 10)
	in := newTestInput(t, fmt.Sprintf("seed_brokers: [ %q ]\ntopics: [ life ]\nstop_at: end\n", addr))

	_, _, err := in.ReadBatch(t.Context())
	assert.ErrorIs(t, err, service.ErrNotConnected, "ReadBatch before Connect")

	require.NoError(t, in.Connect(t.Context()))
	require.NoError(t, in.Connect(t.Context()), "a second Connect")

	assert.Equal(t, 10, readAll(t, in))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, in.Close(ctx))
	require.NoError(t, in.Close(ctx), "a second Close")
	assert.Equal(t, int64(10), in.eng.Summary().Records)
	assert.True(t, strings.Contains(in.eng.Summary().String(), "10 records"), "Summary.String() = %q", in.eng.Summary())
}

// TestFailureIsPerInput runs a failing stream, then a succeeding one, in one
// process: each environment's OnFailure hears only of its own input, so a
// host program running several streams learns exactly which one lost data
// (there is no process-wide failure state for the second run to inherit).
func TestFailureIsPerInput(t *testing.T) {
	addr := newKafka(t, "present", 2)
	produceRecords(t, addr, "present", 2, 0, 200)
	broken := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ absent ]
  stop_at: end
`, nil)
	require.Error(t, broken.failure, "the failing stream's OnFailure")
	assert.Contains(t, broken.failure.Error(), `"absent" does not exist`)
	good := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ present ]
  stop_at: end
`, nil)
	assert.NoError(t, good.failure, "the succeeding stream's OnFailure")
	assert.Len(t, good.msgs, 200)
}

func TestBoundedRunStopsOnMissingTopic(t *testing.T) {
	addr := newKafka(t, "present", 1)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ absent ]
  stop_at: end
`, nil)
	assert.NoError(t, res.err, "stream.Run: a bounded run with a missing topic should end")
	require.Error(t, res.failure, "OnFailure after a bounded run on a missing topic")
	assert.Contains(t, res.failure.Error(), `topics: topic "absent" does not exist`)
	assert.Empty(t, res.msgs)
}

// TestInputPartiallyNackedBatchesLoseNothing: an output that rejects only
// some messages of a batch (a batch error naming them) gets the whole batch
// again, so every record is eventually accepted and the commit reaches the
// end. Benthos' own replay wrapper loses messages in this case.
func TestInputPartiallyNackedBatchesLoseNothing(t *testing.T) {
	const (
		topic      = "partial"
		group      = "partial-nacker"
		partitions = 3
		n          = 3000
	)
	addr := newKafka(t, topic, partitions)
	adm := newAdmin(t, addr)
	want := produceRecords(t, addr, topic, partitions, 0, n)

	var (
		mu       sync.Mutex // guards accepted, batches, failed
		accepted = map[pos]int{}
		batches  int
		failed   int
	)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ partial ]
  consumer_group: partial-nacker
  stop_at: end
  max_range_records: 100
  commit_period: 50ms
`, func(b service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		batches++
		var berr *service.BatchError
		for i, m := range b {
			p, _ := m.MetaGetMut("kafka_partition")
			o, _ := m.MetaGetMut("kafka_offset")
			at := pos{int32(p.(int64)), o.(int64)}
			if batches%2 == 0 && i%2 == 1 {
				if berr == nil {
					berr = service.NewBatchError(b, errors.New("partial nack"))
				}
				berr = berr.Failed(i, errors.New("rejected"))
				failed++
				continue
			}
			accepted[at]++
		}
		if berr != nil {
			return berr
		}
		return nil
	})
	requireEnded(t, res)

	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, failed, "no message was rejected: the test did not test anything")
	for p := range want {
		assert.GreaterOrEqual(t, accepted[p], 1, "%s was never accepted", p)
	}
	assert.Equal(t, endOffsets(t, adm, topic), committedOffsets(t, adm, group, topic), "committed offsets, want the end offsets")
}
