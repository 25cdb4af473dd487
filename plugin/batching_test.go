package plugin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The batching field: a Benthos batch policy applied within one range.

// readBatch is one batch as ReadBatch returned it.
type readBatch struct {
	partition  int32
	rangeStart int64
	offsets    []int64
	bytes      int
	ack        service.AckFunc
}

// metaInt returns an int64 metadata value of msg.
func metaInt(t *testing.T, msg *service.Message, key string) int64 {
	t.Helper()
	v, ok := msg.MetaGetMut(key)
	require.True(t, ok, "no %s", key)
	n, ok := v.(int64)
	require.True(t, ok, "%s = %#v, want an int64", key, v)
	return n
}

// describe reads what a batch holds, and checks that it is of one range of
// one partition (range_metadata must be on) with offsets increasing.
func describe(t *testing.T, batch service.MessageBatch, ack service.AckFunc) readBatch {
	t.Helper()
	require.NotEmpty(t, batch)
	rb := readBatch{partition: int32(metaInt(t, batch[0], "kafka_partition")), rangeStart: metaInt(t, batch[0], "kafka_range_start"), ack: ack}
	for _, m := range batch {
		assert.Equal(t, rb.partition, int32(metaInt(t, m, "kafka_partition")), "a batch mixes partitions")
		assert.Equal(t, rb.rangeStart, metaInt(t, m, "kafka_range_start"), "a batch mixes ranges")
		o := metaInt(t, m, "kafka_offset")
		if n := len(rb.offsets); n > 0 {
			assert.Greater(t, o, rb.offsets[n-1], "offsets out of order in a batch")
		}
		rb.offsets = append(rb.offsets, o)
		b, err := m.AsBytes()
		require.NoError(t, err)
		rb.bytes += len(b)
	}
	return rb
}

// readUntil reads batches from a connected input, acknowledging each if
// ack is set, until n records were read.
func readUntil(t *testing.T, ctx context.Context, in *input, n int, ack bool) []readBatch {
	t.Helper()
	var out []readBatch
	for got := 0; got < n; {
		batch, af, err := in.ReadBatch(ctx)
		require.NoError(t, err, "after %d of %d records", got, n)
		rb := describe(t, batch, af)
		if ack {
			require.NoError(t, af(ctx, nil))
		}
		out = append(out, rb)
		got += len(rb.offsets)
	}
	return out
}

// byRange groups batch sizes by partition and range start, in delivery
// order.
func byRange(batches []readBatch) map[string][]int {
	out := map[string][]int{}
	for _, b := range batches {
		k := fmt.Sprintf("%d@%d", b.partition, b.rangeStart)
		out[k] = append(out[k], len(b.offsets))
	}
	return out
}

// connected returns a connected input of yaml, closed at cleanup.
func connected(t *testing.T, yaml string) *input {
	t.Helper()
	in := newTestInput(t, yaml)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, in.Connect(ctx))
	return in
}

// TestBatchingCount: count 500 cuts every range into batches of exactly
// 500 records but its last; no batch mixes ranges or partitions, every
// record comes once. Before, batches were fetch-sized (thousands).
func TestBatchingCount(t *testing.T) {
	addr := newKafka(t, "counted", 2)
	produceRecords(t, addr, "counted", 2, 0, 4000) // 2000 per partition
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ counted ]
stop_at: end
max_range_records: 1200
range_metadata: true
batching:
  count: 500
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	batches := readUntil(t, ctx, in, 4000, true)
	_, _, err := in.ReadBatch(ctx)
	require.ErrorIs(t, err, service.ErrEndOfInput)
	assert.Equal(t, map[string][]int{
		"0@0": {500, 500, 200}, "0@1200": {500, 300},
		"1@0": {500, 500, 200}, "1@1200": {500, 300},
	}, byRange(batches), "batch sizes per range, in delivery order")
	seen := map[string]bool{}
	for _, b := range batches {
		for _, o := range b.offsets {
			k := fmt.Sprintf("%d@%d", b.partition, o)
			assert.False(t, seen[k], "%s delivered twice", k)
			seen[k] = true
		}
	}
	assert.Len(t, seen, 4000)
}

// TestBatchingByteSize: byte_size cuts a batch at the record that brings it
// to the size, never later.
func TestBatchingByteSize(t *testing.T) {
	addr := newKafka(t, "sized", 1)
	produceRecords(t, addr, "sized", 1, 0, 1000) // values v-0 ... v-999: 3 to 5 bytes
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ sized ]
stop_at: end
range_metadata: true
batching:
  byte_size: 100
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	batches := readUntil(t, ctx, in, 1000, true)
	for i, b := range batches {
		last := len(fmt.Sprintf("v-%d", b.offsets[len(b.offsets)-1]))
		assert.Less(t, b.bytes-last, 100, "batch %d (%d bytes) was not cut when it reached 100 bytes", i, b.bytes)
		if i < len(batches)-1 {
			assert.GreaterOrEqual(t, b.bytes, 100, "batch %d (%d bytes) was cut before 100 bytes, not at its range's end", i, b.bytes)
		}
	}
	assert.Greater(t, len(batches), 30, "batches")
}

// TestBatchingAcksAreExact: with count 100, a batch left unacknowledged
// holds the commit at its first offset, however many later batches are
// acknowledged; a rejected batch is delivered again alone, with exactly its
// records.
func TestBatchingAcksAreExact(t *testing.T) {
	addr := newKafka(t, "exact", 1)
	adm := newAdmin(t, addr)
	produceRecords(t, addr, "exact", 1, 0, 1000)
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ exact:0 ]
consumer_group: exact
stop_at: end
commit_period: 20ms
range_metadata: true
batching:
  count: 100
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	batches := readUntil(t, ctx, in, 1000, false)
	require.Len(t, batches, 10)
	for i, b := range batches {
		require.Equal(t, int64(i*100), b.offsets[0], "batch %d", i)
		if i != 3 && i != 6 {
			require.NoError(t, b.ack(ctx, nil))
		}
	}
	require.Eventually(t, func() bool { return committedNow(adm, "exact", "exact")[0] == 300 }, 5*time.Second, 10*time.Millisecond,
		"the acknowledged batches before the held one were not committed")
	require.NoError(t, batches[6].ack(ctx, errors.New("rejected")))
	replay, ack, err := in.ReadBatch(ctx)
	require.NoError(t, err)
	rb := describe(t, replay, ack)
	want := make([]int64, 100)
	for i := range want {
		want[i] = int64(600 + i)
	}
	assert.Equal(t, want, rb.offsets, "the replay holds exactly the rejected batch's records")
	time.Sleep(200 * time.Millisecond) // ten commit periods
	assert.Equal(t, int64(300), committedOffsets(t, adm, "exact", "exact")[0], "committed past the unacknowledged batch")

	require.NoError(t, batches[3].ack(ctx, nil))
	require.Eventually(t, func() bool { return committedNow(adm, "exact", "exact")[0] == 600 }, 5*time.Second, 10*time.Millisecond,
		"the commit did not move to the batch being replayed")
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, int64(600), committedOffsets(t, adm, "exact", "exact")[0], "committed past the batch being replayed")
	require.NoError(t, rb.ack(ctx, nil))
	_, _, err = in.ReadBatch(ctx)
	require.ErrorIs(t, err, service.ErrEndOfInput)
	require.NoError(t, in.Close(ctx))
	assert.Equal(t, int64(1000), committedOffsets(t, adm, "exact", "exact")[0])
}

// TestBatchingTrickleIsNotHeld: a continuous read of records written one
// at a time, with a count no range reaches and no period, delivers each
// record at once: a range is cut when it is read, not held until it fills.
func TestBatchingTrickleIsNotHeld(t *testing.T) {
	addr := newKafka(t, "trickle", 1)
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ trickle ]
range_metadata: true
batching:
  count: 1000
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for i := range 5 {
		produceRecords(t, addr, "trickle", 1, i, 1)
		written := time.Now()
		got := readUntil(t, ctx, in, 1, true)
		require.Len(t, got, 1)
		assert.Equal(t, []int64{int64(i)}, got[0].offsets)
		assert.Less(t, time.Since(written), 5*time.Second, "record %d was held", i)
	}
}

// TestBatchingPeriodCutsASlowRange: a range read slowly (one record per
// fetch, each fetch delayed) is cut every period, long before it is read
// or fills, and every cut is of that one range.
func TestBatchingPeriodCutsASlowRange(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "slow"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	require.NoError(t, err)
	for i := range 60 { // one record batch each: a fetch of one byte returns one record
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: "slow", Value: fmt.Appendf(nil, "r-%d", i)}).FirstErr())
	}
	cl.Close()
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl() // every fetch, not only the first
		// A plain sleep holds the whole cluster, which serves this one
		// reader only; kfake's SleepControl, which would not, races with
		// itself when fetches overlap (go test -race reports it inside
		// kfake's bsleep.waitQueue).
		time.Sleep(50 * time.Millisecond)
		return nil, nil, false
	})
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ slow ]
stop_at: end
max_range_records: 60
fetch_max_partition_bytes: 1
range_metadata: true
batching:
  count: 1000
  period: 300ms
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	began := time.Now()
	batches := readUntil(t, ctx, in, 60, true)
	elapsed := time.Since(began)
	require.Greater(t, len(batches), 2, "the slow range was not cut by period (read in %s)", elapsed)
	for i, b := range batches {
		assert.Equal(t, int64(0), b.rangeStart, "batch %d is of another range", i)
		assert.Less(t, len(b.offsets), 60, "batch %d holds the whole range", i)
		if i < len(batches)-1 {
			assert.Greater(t, len(b.offsets), 1, "batch %d was cut before its period (each fetch returns one record)", i)
		}
	}
	sizes := make([]int, len(batches))
	for i, b := range batches {
		sizes[i] = len(b.offsets)
	}
	t.Logf("read in %s, batch sizes %v", elapsed, sizes)
}

// TestBatchingOrderedOneAtATime: with ordered, a partition's next batch is
// handed out only once its previous one is acknowledged, in offset order,
// and count still bounds each batch.
func TestBatchingOrderedOneAtATime(t *testing.T) {
	addr := newKafka(t, "inorder", 1)
	produceRecords(t, addr, "inorder", 1, 0, 600)
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ inorder ]
stop_at: end
ordered: true
max_range_records: 250
range_metadata: true
batching:
  count: 40
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	next := int64(0)
	for next < 600 {
		batch, ack, err := in.ReadBatch(ctx)
		require.NoError(t, err)
		b := describe(t, batch, ack)
		assert.LessOrEqual(t, len(b.offsets), 40)
		require.Equal(t, next, b.offsets[0], "batches out of order")
		next = b.offsets[len(b.offsets)-1] + 1

		wait, cancelWait := context.WithTimeout(ctx, 200*time.Millisecond)
		_, _, err = in.ReadBatch(wait)
		cancelWait()
		require.ErrorIs(t, err, context.DeadlineExceeded, "a second batch of the partition while one is unacknowledged")
		require.NoError(t, ack(ctx, nil))
		if next >= 600 {
			break
		}
	}
	_, _, err := in.ReadBatch(ctx)
	require.ErrorIs(t, err, service.ErrEndOfInput)
}

// TestBatchingOrderedReplayComesFirst: with ordered, a rejected batch is
// delivered again before any later batch of its partition.
func TestBatchingOrderedReplayComesFirst(t *testing.T) {
	addr := newKafka(t, "replayed", 1)
	produceRecords(t, addr, "replayed", 1, 0, 200)
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ replayed ]
stop_at: end
ordered: true
range_metadata: true
batching:
  count: 40
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	batch, ack, err := in.ReadBatch(ctx)
	require.NoError(t, err)
	first := describe(t, batch, ack)
	require.Equal(t, int64(0), first.offsets[0])
	require.NoError(t, ack(ctx, errors.New("rejected")))
	batch, ack, err = in.ReadBatch(ctx)
	require.NoError(t, err)
	again := describe(t, batch, ack)
	assert.Equal(t, first.offsets, again.offsets, "the next batch of the partition is not the rejected one again")
	require.NoError(t, ack(ctx, nil))
	batch, ack, err = in.ReadBatch(ctx)
	require.NoError(t, err)
	next := describe(t, batch, ack)
	assert.Equal(t, first.offsets[len(first.offsets)-1]+1, next.offsets[0], "the batch after the replay")
	require.NoError(t, ack(ctx, nil))
}

// TestBatchingStream runs batching through a Benthos stream: count bounds
// what the output sees, and processors run once per batch (archive makes
// each batch one message of its lines).
func TestBatchingStream(t *testing.T) {
	addr := newKafka(t, "streamed", 2)
	produceRecords(t, addr, "streamed", 2, 0, 3000)
	var (
		mu    sync.Mutex // guards sizes
		sizes []int
	)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ streamed ]
  stop_at: end
  batching:
    count: 500
`, func(b service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(b))
		return nil
	})
	requireEnded(t, res)
	assert.Equal(t, 3000, len(countByPos(t, res.msgs)))
	sort.Ints(sizes)
	require.NotEmpty(t, sizes)
	assert.LessOrEqual(t, sizes[len(sizes)-1], 500, "the largest batch")
	full := 0
	for _, n := range sizes {
		if n == 500 {
			full++
		}
	}
	// 1500 per partition in ranges of 10000: three batches of 500 each.
	assert.Equal(t, 6, full, "batches of 500: %v", sizes)

	res = runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ streamed ]
  stop_at: end
  max_range_records: 1000
  batching:
    count: 100
    processors:
      - archive:
          format: lines
`, nil)
	requireEnded(t, res)
	require.Len(t, res.msgs, 30, "one archived message per batch of 100")
	for _, g := range res.msgs {
		assert.Equal(t, 100, len(splitLines(g.body)), "lines in an archived batch")
	}
}

// splitLines splits b at newlines.
func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, string(b[start:]))
	}
	return out
}

// TestBatchingBadPolicyFailsConstruction: a policy Benthos cannot build
// (an invalid period) fails the input's construction, naming the field.
func TestBatchingBadPolicyFailsConstruction(t *testing.T) {
	conf, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nbatching:\n  count: 10\n  period: soon\n")
	require.NoError(t, err)
	_, err = newInput(conf, service.MockResources(), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "batching")
	assert.Contains(t, err.Error(), "soon")
}

// BenchmarkBatching reads 200,000 records of 200 B from kfake through the
// input, acknowledging every batch, without a policy (fetch-sized batches)
// and with count 500, alternately, and reports both rates, the batches
// per read and the ratio of the rates (count 500 over fetch-sized).
func BenchmarkBatching(b *testing.B) {
	const n = 200_000
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
	require.NoError(b, err)
	b.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	require.NoError(b, err)
	value := make([]byte, 200)
	for i := 0; i < n; i += 10_000 {
		recs := make([]*kgo.Record, 10_000)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: "bench", Value: value}
		}
		require.NoError(b, cl.ProduceSync(b.Context(), recs...).FirstErr())
	}
	cl.Close()
	read := func(policy string) (time.Duration, int) {
		pc, err := Spec().ParseYAML(fmt.Sprintf("seed_brokers: [ %q ]\ntopics: [ bench ]\nstop_at: end\n%s", addr, policy), nil)
		require.NoError(b, err)
		conf, err := ParseConfig(pc)
		require.NoError(b, err)
		in, err := newInput(conf, service.MockResources(), Options{})
		require.NoError(b, err)
		ctx := b.Context()
		began := time.Now()
		require.NoError(b, in.Connect(ctx))
		batches := 0
		for {
			batch, ack, err := in.ReadBatch(ctx)
			if errors.Is(err, service.ErrEndOfInput) {
				break
			}
			require.NoError(b, err)
			require.NoError(b, ack(ctx, nil))
			_ = batch
			batches++
		}
		elapsed := time.Since(began)
		require.NoError(b, in.Close(ctx))
		return elapsed, batches
	}
	var plain, counted time.Duration
	var plainBatches, countedBatches int
	for b.Loop() {
		d, nb := read("")
		plain, plainBatches = plain+d, nb
		d, nb = read("batching:\n  count: 500\n")
		counted, countedBatches = counted+d, nb
	}
	b.ReportMetric(float64(n)*float64(b.N)/plain.Seconds(), "records/s-fetch-sized")
	b.ReportMetric(float64(n)*float64(b.N)/counted.Seconds(), "records/s-count500")
	b.ReportMetric(float64(plainBatches), "batches-fetch-sized")
	b.ReportMetric(float64(countedBatches), "batches-count500")
	b.ReportMetric(plain.Seconds()/counted.Seconds(), "ratio")
}

// TestBatchingOrderedGateIsPerPartition (review 4, finding 1): with
// ordered, a partition revoked or lost and assigned back to this process
// (a new incarnation) hands out nothing while a batch of its earlier
// incarnation is still in the pipeline: the gate is the partition, not the
// incarnation.
func TestBatchingOrderedGateIsPerPartition(t *testing.T) {
	ctx := t.Context()
	bt, err := newBatching(service.BatchPolicy{Count: 10}, service.MockResources(), messages{}, true)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bt.close(context.Background()) })
	r := ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 100}
	for inc := uint64(1); inc <= 2; inc++ {
		batcher, err := bt.acquire(ctx)
		require.NoError(t, err)
		batcher.Add(service.NewMessage([]byte("x")))
		bt.cut(ctx, rangeID{r: r, inc: inc}, &openRange{batcher: batcher, parts: []*engine.Batch{{}}}) // not done
	}
	bt.mu.Lock()
	defer bt.mu.Unlock()
	require.NotNil(t, bt.takeLocked(), "the first incarnation's batch was not handed out")
	assert.Nil(t, bt.takeLocked(), "the new incarnation's batch was handed out while the earlier one's was in the pipeline")
}
