package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceKeyed writes n records to each of partitions partitions of topic,
// record i of a partition with key k-(i%keys) (no key where keys is 0 or i
// is a multiple of noKeyEvery, if set), value i.
func produceKeyed(t *testing.T, addr, topic string, partitions int32, n, keys, noKeyEvery int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(strconv.Itoa(i))}
			if keys > 0 && (noKeyEvery == 0 || i%noKeyEvery != 0) {
				r.Key = fmt.Appendf(nil, "k-%d", i%keys)
			}
			recs = append(recs, r)
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
}

// keyedWrite is one record as the test output wrote it.
type keyedWrite struct {
	partition int
	key       string
	offset    int64
}

// keyedOutput is a batch output that records what it writes, in the order
// it writes it, and can reject batches; it counts the batches it holds at
// once per partition.
type keyedOutput struct {
	mu      sync.Mutex
	written []keyedWrite
	reject  func(ms service.MessageBatch) bool // rejects the batch if it returns true
	hold    func(ms service.MessageBatch)      // called before a batch is written; may block
	delay   time.Duration
	inside  map[int]int // batches of each partition being written now
	most    int         // the most batches of one partition written at once
	batches atomic.Int64
}

func (o *keyedOutput) Connect(context.Context) error { return nil }
func (o *keyedOutput) Close(context.Context) error   { return nil }

func (o *keyedOutput) WriteBatch(ctx context.Context, ms service.MessageBatch) error {
	o.batches.Add(1)
	if o.reject != nil && o.reject(ms) {
		return errors.New("rejected by the test output")
	}
	if o.hold != nil {
		o.hold(ms)
	}
	p := -1
	if len(ms) > 0 {
		s, _ := ms[0].MetaGet("kafka_partition")
		p, _ = strconv.Atoi(s)
	}
	o.mu.Lock()
	o.inside[p]++
	o.most = max(o.most, o.inside[p])
	o.mu.Unlock()
	if o.delay > 0 {
		select {
		case <-time.After(time.Duration(rand.Int64N(int64(o.delay)))):
		case <-ctx.Done():
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inside[p]--
	for _, m := range ms {
		key, _ := m.MetaGet("kafka_key")
		ps, _ := m.MetaGet("kafka_partition")
		os, _ := m.MetaGet("kafka_offset")
		pi, _ := strconv.Atoi(ps)
		oi, _ := strconv.ParseInt(os, 10, 64)
		o.written = append(o.written, keyedWrite{partition: pi, key: key, offset: oi})
	}
	return nil
}

// runKeyed runs a bounded key-ordered read of topic at addr into out,
// through threads pipeline threads, with extra input fields, and returns
// the log.
func runKeyed(t *testing.T, addr, topic string, threads int, extra string, out *keyedOutput) *syncBuffer {
	t.Helper()
	out.inside = map[int]int{}
	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{}))
	name := fmt.Sprintf("keyed_out_%p", out)
	require.NoError(t, env.RegisterBatchOutput(name, service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return out, service.BatchPolicy{}, 64, nil
	}))
	sb := env.NewStreamBuilder()
	log := &syncBuffer{}
	sb.SetLogger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, sb.AddInputYAML(fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ %s ]
  stop_at: end
  ordering: key
  max_range_records: 100
  max_in_flight: 32
%s`, addr, topic, extra)))
	sb.SetThreads(threads)
	require.NoError(t, sb.AddOutputYAML(name+": {}"))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	require.NoError(t, stream.Run(ctx), "the bounded run did not end\n%s", log)
	return log
}

// requireKeyOrder checks docs' promise of ordering: key: every record
// written once, and each key's records (records without a key together) in
// offset order within their partition.
func requireKeyOrder(t *testing.T, written []keyedWrite, partitions, perPart int) {
	t.Helper()
	type pk struct {
		p   int
		key string
	}
	last := map[pk]int64{}
	seen := map[[2]int64]bool{}
	violations := 0
	for _, w := range written {
		id := [2]int64{int64(w.partition), w.offset}
		require.False(t, seen[id], "partition %d offset %d written twice", w.partition, w.offset)
		seen[id] = true
		k := pk{w.partition, w.key}
		if l, ok := last[k]; ok && w.offset <= l {
			violations++
			t.Errorf("partition %d key %q: offset %d written after %d", w.partition, w.key, w.offset, l)
		}
		last[k] = w.offset
	}
	require.Zero(t, violations)
	require.Len(t, seen, partitions*perPart, "records written")
}

// TestKeyOrderingKeepsEachKeysOrderInParallel: ordering: key delivers every
// record once, each key's records (and the records without a key) in offset
// order, while batches of one partition are in the pipeline at once.
func TestKeyOrderingKeepsEachKeysOrderInParallel(t *testing.T) {
	const (
		partitions = 2
		perPart    = 2000
	)
	addr := newKafka(t, "keyed", partitions)
	produceKeyed(t, addr, "keyed", partitions, perPart, 16, 7)
	out := &keyedOutput{delay: 3 * time.Millisecond}
	runKeyed(t, addr, "keyed", 8, "", out)
	requireKeyOrder(t, out.written, partitions, perPart)
	assert.GreaterOrEqual(t, out.most, 3, "at most %d batches of one partition were in the pipeline at once: its buckets did not run in parallel", out.most)
}

// TestKeyOrderingWithoutKeysIsPartitionOrder: records without a key share
// one bucket, so a topic without keys is delivered in partition order.
func TestKeyOrderingWithoutKeysIsPartitionOrder(t *testing.T) {
	addr := newKafka(t, "nokeys", 1)
	produceKeyed(t, addr, "nokeys", 1, 1500, 0, 0)
	out := &keyedOutput{delay: 2 * time.Millisecond}
	runKeyed(t, addr, "nokeys", 8, "", out)
	requireKeyOrder(t, out.written, 1, 1500)
	for i := 1; i < len(out.written); i++ {
		require.Greater(t, out.written[i].offset, out.written[i-1].offset, "offset %d written after %d", out.written[i].offset, out.written[i-1].offset)
	}
	assert.Equal(t, 1, out.most)
}

// TestKeyOrderingReplaysARejectedBatchFirst: a rejected batch of a bucket is
// delivered again before anything later of its bucket (auto_replay_nacks),
// so the output, which wrote nothing of the rejected attempts, still has each
// key in order and every record once; batching.count bounds a bucket's
// batches.
func TestKeyOrderingReplaysARejectedBatchFirst(t *testing.T) {
	addr := newKafka(t, "nacked", 1)
	produceKeyed(t, addr, "nacked", 1, 1200, 4, 0)
	var rejected atomic.Int64
	out := &keyedOutput{reject: func(ms service.MessageBatch) bool {
		key, _ := ms[0].MetaGet("kafka_key")
		return key == "k-1" && rand.IntN(3) == 0 && rejected.Add(1) < 20
	}}
	runKeyed(t, addr, "nacked", 4, "  batching: { count: 25 }\n", out)
	require.Positive(t, rejected.Load(), "nothing was rejected")
	requireKeyOrder(t, out.written, 1, 1200)
	require.GreaterOrEqual(t, out.batches.Load(), int64(1200/25), "batches larger than batching.count")
}

// TestKeyOrderingLint: ordering and ordered must agree; ordering: key
// refuses what cannot keep per-key order.
func TestKeyOrderingLint(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{"ordered: true\nordering: key", "ordered: true and ordering: key disagree"},
		{"ordered: true\nordering: none", "ordered: true and ordering: none disagree"},
		{"ordering: key\nalign_ranges: true", "ordering: key cannot be used with align_ranges: true"},
		{"ordering: key\nbatching: { count: 10, period: 1s }", "batching.period cannot be used with ordering: key"},
		{"ordering: key\nbatching: { processors: [ { mapping: 'root = this' } ] }", "batching.processors cannot be used with ordering: key"},
		{"ordering: key\nkey_buckets: 0", "key_buckets"},
		{"ordering: sideways", "ordering"},
	} {
		conf := "seed_brokers: [ 127.0.0.1:9092 ]\ntopics: [ t ]\n" + tc.conf
		pc, err := Spec().ParseYAML(conf, nil)
		if err == nil {
			_, err = ParseConfig(pc)
		}
		require.Error(t, err, "ParseConfig(%q)", tc.conf)
		assert.Contains(t, err.Error(), tc.want, "ParseConfig(%q)", tc.conf)
	}
	for _, ok := range []string{"ordered: true\nordering: partition", "ordering: key\nbatching: { count: 10, byte_size: 1000 }", "ordering: none"} {
		pc, err := Spec().ParseYAML("seed_brokers: [ 127.0.0.1:9092 ]\ntopics: [ t ]\n"+ok, nil)
		require.NoError(t, err)
		_, err = ParseConfig(pc)
		assert.NoError(t, err, "ParseConfig(%q)", ok)
	}
}

// TestKeyOrderingCommitsOnlyTheAcknowledgedRun: with ordering: key the
// commit stays the partition's contiguous acknowledged run. One key's first
// batch is held in the output while every other key's records are written
// and acknowledged, for several commit periods: the group's committed offset
// never passes that batch's first record; once it is written the run ends
// with everything committed.
func TestKeyOrderingCommitsOnlyTheAcknowledgedRun(t *testing.T) {
	const perPart = 1000
	addr := newKafka(t, "held", 1)
	produceKeyed(t, addr, "held", 1, perPart, 8, 0)
	adm := newAdmin(t, addr)
	var once sync.Once
	var heldFrom, committedWhileHeld int64 = -1, -1
	out := &keyedOutput{}
	out.hold = func(ms service.MessageBatch) {
		key, _ := ms[0].MetaGet("kafka_key")
		if key != "k-3" {
			return
		}
		once.Do(func() {
			off, _ := ms[0].MetaGet("kafka_offset")
			heldFrom, _ = strconv.ParseInt(off, 10, 64)
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) { // until the other keys' records are written
				out.mu.Lock()
				n := len(out.written)
				out.mu.Unlock()
				if n >= perPart-perPart/8 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(600 * time.Millisecond) // several commit periods
			offs, err := adm.FetchOffsets(context.Background(), "g")
			if err == nil {
				if o, ok := offs.Lookup("held", 0); ok {
					committedWhileHeld = o.At
				}
			}
		})
	}
	runKeyed(t, addr, "held", 8, "  consumer_group: g\n  commit_period: 100ms\n", out)
	requireKeyOrder(t, out.written, 1, perPart)
	require.GreaterOrEqual(t, heldFrom, int64(0), "k-3 never reached the output")
	require.LessOrEqual(t, committedWhileHeld, heldFrom, "committed %d while the batch from %d was not acknowledged", committedWhileHeld, heldFrom)
	offs, err := adm.FetchOffsets(t.Context(), "g")
	require.NoError(t, err)
	o, ok := offs.Lookup("held", 0)
	require.True(t, ok)
	assert.Equal(t, int64(perPart), o.At, "committed at the end")
}
