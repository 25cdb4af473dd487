package tests

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBoundedReadExactlyOnce reads 200,000 records from 8 partitions with stop_at: end and checks
// that `connect run` exits 0, every offset below the snapshot end is delivered exactly once, the
// metadata of every message matches what was produced, and the ranges of each partition tile
// [0, end) with at most max_range_records offsets each.
func TestBoundedReadExactlyOnce(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const (
		partitions      = 8
		total           = 200_000
		maxRangeRecords = 5000
		valueSize       = 100
	)
	topic := createTopic(t, partitions)

	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	pad := strings.Repeat("x", valueSize)
	records := make([]*kgo.Record, total)
	for i := range records {
		p := int32(i % partitions)
		var value []byte
		if i%20011 != 3 { // a few tombstones, spread over partitions
			value = []byte(fmt.Sprintf("v-%08d-%s", i, pad)[:valueSize])
		}
		records[i] = &kgo.Record{
			Topic:     topic,
			Partition: p,
			Key:       []byte(fmt.Sprintf("k-%d", i)),
			Value:     value,
			Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprintf("%d-%d", p, i))}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		}
	}
	start := time.Now()
	prod := produceAll(t, producer(t), records)
	records = nil
	t.Logf("produced %d records in %s", prod.count(), time.Since(start).Round(time.Millisecond))
	require.Equal(t, total, prod.count())

	ends := endOffsets(t, topic)
	require.Len(t, ends, partitions)

	in := baseInput(topic)
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["max_range_records"] = maxRangeRecords
	in["max_in_flight"] = 16
	in["range_metadata"] = true // checked below
	recs := runInput(t, in, 3*time.Minute)
	t.Logf("delivered %d records", len(recs))

	requireExactlyOnce(t, offsetRange(nil, ends), recs)

	// Metadata of every message; collect at most 20 problems.
	var problems []string
	bad := func(r outRecord, format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf("%d/%d: ", r.P.V, r.O.V)+fmt.Sprintf(format, args...))
		}
	}
	ranges := map[int32]map[int64]int64{} // partition -> range start -> range end
	for _, r := range recs {
		p, o := int32(r.P.V), r.O.V
		want, ok := prod[p][o]
		if !ok {
			bad(r, "not produced")
			continue
		}
		if r.T != topic {
			bad(r, "kafka_topic %q, want %q", r.T, topic)
		}
		if r.K == nil || *r.K != want.Key {
			bad(r, "kafka_key %v, want %q", deref(r.K), want.Key)
		}
		if r.H == nil || *r.H != want.Header {
			bad(r, "header h %v, want %q", deref(r.H), want.Header)
		}
		if !r.TS.Valid || r.TS.V != want.Timestamp {
			bad(r, "kafka_timestamp_ms %v, want %d", r.TS, want.Timestamp)
		}
		if !r.TSU.Valid || r.TSU.V != want.Timestamp/1000 {
			bad(r, "kafka_timestamp_unix %v, want %d", r.TSU, want.Timestamp/1000)
		}
		if !r.Tomb.Valid || r.Tomb.V != (want.Value == nil) {
			bad(r, "kafka_tombstone_message %v, want %v", r.Tomb, want.Value == nil)
		}
		if r.V != string(want.Value) {
			bad(r, "value %q, want %q", r.V, want.Value)
		}
		if !r.RS.Valid || !r.RE.Valid {
			bad(r, "kafka_range_start/kafka_range_end missing: %v %v", r.RS, r.RE)
			continue
		}
		if !(r.RS.V <= o && o < r.RE.V) {
			bad(r, "offset outside its range [%d, %d)", r.RS.V, r.RE.V)
		}
		if n := r.RE.V - r.RS.V; n > maxRangeRecords {
			bad(r, "range [%d, %d) spans %d offsets > max_range_records %d", r.RS.V, r.RE.V, n, maxRangeRecords)
		}
		if ranges[p] == nil {
			ranges[p] = map[int64]int64{}
		}
		if prev, ok := ranges[p][r.RS.V]; ok && prev != r.RE.V {
			bad(r, "range start %d has ends %d and %d", r.RS.V, prev, r.RE.V)
		}
		ranges[p][r.RS.V] = r.RE.V
	}
	require.Emptyf(t, problems, "metadata problems:\n%s", strings.Join(problems, "\n"))

	// The ranges of each partition are disjoint and tile [0, end).
	for p, end := range ends {
		starts := make([]int64, 0, len(ranges[p]))
		for s := range ranges[p] {
			starts = append(starts, s)
		}
		slices.Sort(starts)
		next := int64(0)
		for _, s := range starts {
			require.Equalf(t, next, s, "partition %d: ranges %v do not tile [0, %d)", p, starts, end)
			next = ranges[p][s]
		}
		require.Equalf(t, end, next, "partition %d: ranges end at %d, want %d", p, next, end)
		t.Logf("partition %d: %d ranges over [0, %d)", p, len(starts), end)
	}
}

// TestOrderedDeliversInOffsetOrder runs ordered: true with many small ranges over several
// partitions read concurrently, and checks that each partition's offsets reach the output in
// strictly increasing order, complete and without duplicates. The records are produced in small
// record batches so that, with a small fetch_max_partition_bytes, one range is emitted as many
// Benthos batches; the second case also runs several pipeline threads.
func TestOrderedDeliversInOffsetOrder(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const (
		partitions = 4
		perPart    = 3000
	)
	topic := createTopic(t, partitions)
	pad := strings.Repeat("o", 90)
	var records []*kgo.Record
	for i := range partitions * perPart {
		records = append(records, &kgo.Record{
			Topic:     topic,
			Partition: int32(i % partitions),
			Key:       []byte(fmt.Sprintf("k-%d", i)),
			Value:     []byte(fmt.Sprintf("v-%d-%s", i, pad)),
		})
	}
	prod := produceAll(t, producer(t, kgo.ProducerBatchMaxBytes(4096)), records)
	require.Equal(t, partitions*perPart, prod.count())

	small := inputConfig{"fetch_max_partition_bytes": 4096}
	cases := []struct {
		name    string
		extra   inputConfig
		threads int  // 0: Benthos' default (one per CPU)
		jitter  bool // processing time varies per batch
	}{
		{name: "default_fetch"},
		{name: "many_batches_per_range", extra: small},
		{name: "many_batches_per_range_jitter", extra: small, jitter: true},
		{name: "many_batches_per_range_4_threads_jitter", extra: small, threads: 4, jitter: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(topic)
			in["start_from"] = "earliest"
			in["stop_at"] = "end"
			in["ordered"] = true
			in["max_range_records"] = 500
			in["max_in_flight"] = 4
			for k, v := range tc.extra {
				in[k] = v
			}
			var opts []runOption
			if tc.threads > 0 {
				opts = append(opts, withPipelineThreads(tc.threads))
			}
			if tc.jitter {
				opts = append(opts, withBatchJitter())
			}
			recs := runInput(t, in, 2*time.Minute, opts...)

			requireExactlyOnce(t, offsetsOf(prod), recs)
			requireOffsetOrder(t, recs)
		})
	}
}

// TestOrderedWithBatchingPolicy (issue 43, defect 1): ordered: true with a batching policy
// that cuts each engine batch into many smaller ones (count: 100), the configuration
// (4 partitions x 12,500 records of 100 B, the default max_range_records of 10,000, so a
// partition is two ranges), with 1 and 4 pipeline threads, several runs each: every partition's
// offsets reach the output in strictly increasing order, each once. Before the fix 3 of 3 runs
// with 4 threads went backwards (partition 1: 0..399, 9900..9999, 400..), and neighbouring
// batches swapped in 3 of 9 runs with one thread.
func TestOrderedWithBatchingPolicy(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const (
		partitions = 4
		perPart    = 12500
	)
	topic := createTopic(t, partitions)
	pad := strings.Repeat("b", 92)
	var records []*kgo.Record
	for i := range partitions * perPart {
		records = append(records, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(fmt.Sprintf("%08d%s", i, pad)[:100])})
	}
	prod := produceAll(t, producer(t), records)
	require.Equal(t, partitions*perPart, prod.count())
	runs := 3
	if n, err := strconv.Atoi(os.Getenv("KBR_ORDERED_RUNS")); err == nil && n > 0 {
		runs = n // the acceptance: KBR_ORDERED_RUNS=5
	}
	for _, threads := range []int{4, 1} {
		for run := range runs {
			t.Run(fmt.Sprintf("threads_%d_run_%d", threads, run+1), func(t *testing.T) {
				in := baseInput(topic)
				in["start_from"] = "earliest"
				in["stop_at"] = "end"
				in["ordered"] = true
				in["batching"] = map[string]any{"count": 100}
				recs := runInput(t, in, 2*time.Minute, withLeanPipeline(threads, ""))
				requireExactlyOnce(t, offsetsOf(prod), recs)
				requireOffsetOrder(t, recs)
			})
		}
	}
}

// requireOffsetOrder checks that each partition's offsets appear in strictly increasing order.
func requireOffsetOrder(t *testing.T, recs []outRecord) {
	t.Helper()
	last := map[int32]int64{}
	switches, prevP, violations := 0, int32(-1), 0
	var problems []string
	for i, r := range recs {
		p, o := int32(r.P.V), r.O.V
		if prev, ok := last[p]; ok && o <= prev {
			violations++
			if len(problems) < 20 {
				problems = append(problems, fmt.Sprintf("line %d: partition %d offset %d (range [%d, %d)) after offset %d",
					i+1, p, o, r.RS.V, r.RE.V, prev))
			}
		}
		last[p] = o
		if p != prevP {
			switches++
			prevP = p
		}
	}
	t.Logf("output switched partition %d times over %d records", switches, len(recs))
	require.Emptyf(t, problems, "ordered: true delivered out of offset order %d times:\n%s", violations, strings.Join(problems, "\n"))
}

// TestReadCommittedSkipsAbortedAndCompletesOnMarkers builds two partitions whose logs end on
// transaction control records:
//
//	p0: plain x5, committed x4, COMMIT, aborted x3, ABORT
//	p1: plain x5, aborted x3, ABORT, committed x4, COMMIT
//
// With isolation_level: read_committed and stop_at: end the run must finish (ranges ending on
// marker offsets complete), deliver every committed record exactly once and no aborted one. The
// same topic read with read_uncommitted must deliver the aborted records too.
func TestReadCommittedSkipsAbortedAndCompletesOnMarkers(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 2)

	rec := func(p int32, kind string, i int) *kgo.Record {
		return &kgo.Record{
			Topic:     topic,
			Partition: p,
			Key:       []byte(fmt.Sprintf("%s-%d-%d", kind, p, i)),
			Value:     []byte(fmt.Sprintf("%s-%d-%d", kind, p, i)),
		}
	}
	batch := func(p int32, kind string, n int) []*kgo.Record {
		var out []*kgo.Record
		for i := range n {
			out = append(out, rec(p, kind, i))
		}
		return out
	}
	merge := mergeProduced

	committed, aborted := produced{}, produced{}
	merge(committed, produceAll(t, producer(t), append(batch(0, "plain", 5), batch(1, "plain", 5)...)))

	txn := producer(t, kgo.TransactionalID(uniqueName(t, "txn")))
	ctx := t.Context()
	// runTxn produces the records in one transaction, flushes them into the log, then ends the
	// transaction with commit or abort.
	runTxn := func(commit kgo.TransactionEndTry, recs []*kgo.Record) produced {
		t.Helper()
		require.NoError(t, txn.BeginTransaction())
		p := produceAll(t, txn, recs)
		require.NoError(t, txn.EndTransaction(ctx, commit))
		return p
	}
	merge(committed, runTxn(kgo.TryCommit, batch(0, "committed", 4)))
	merge(aborted, runTxn(kgo.TryAbort, append(batch(0, "aborted", 3), batch(1, "aborted", 3)...)))
	merge(committed, runTxn(kgo.TryCommit, batch(1, "committed", 4)))

	// Both partitions end in a control record: end = last data offset + 2. Markers are written
	// asynchronously after EndTransaction returns, so wait for them.
	wantEnd := map[int32]int64{}
	for _, ps := range []produced{committed, aborted} {
		for p, m := range ps {
			for o := range m {
				wantEnd[p] = max(wantEnd[p], o+2)
			}
		}
	}
	require.Equal(t, map[int32]int64{0: 14, 1: 14}, wantEnd, "unexpected log layout")
	require.Eventuallyf(t, func() bool {
		got := endOffsets(t, topic)
		return got[0] == wantEnd[0] && got[1] == wantEnd[1]
	}, 30*time.Second, 200*time.Millisecond, "end offsets never reached %v", wantEnd)

	t.Run("read_committed", func(t *testing.T) {
		in := baseInput(topic)
		in["start_from"] = "earliest"
		in["stop_at"] = "end"
		in["isolation_level"] = "read_committed"
		in["max_range_records"] = 3 // ranges that end on and consist of marker offsets
		recs := runInput(t, in, 60*time.Second)
		for _, r := range recs {
			assert.Falsef(t, strings.HasPrefix(r.V, "aborted-"), "aborted record delivered: %d/%d %q", r.P.V, r.O.V, r.V)
		}
		requireExactlyOnce(t, offsetsOf(committed), recs)
		requireValuesMatch(t, committed, recs)
	})

	t.Run("read_committed_one_range", func(t *testing.T) {
		in := baseInput(topic)
		in["start_from"] = "earliest"
		in["stop_at"] = "end"
		in["isolation_level"] = "read_committed"
		recs := runInput(t, in, 60*time.Second)
		requireExactlyOnce(t, offsetsOf(committed), recs)
		requireValuesMatch(t, committed, recs)
	})

	t.Run("read_uncommitted", func(t *testing.T) {
		in := baseInput(topic)
		in["start_from"] = "earliest"
		in["stop_at"] = "end"
		in["isolation_level"] = "read_uncommitted"
		recs := runInput(t, in, 60*time.Second)
		all := produced{}
		merge(all, committed)
		merge(all, aborted)
		requireExactlyOnce(t, offsetsOf(all), recs)
		requireValuesMatch(t, all, recs)
		n := 0
		for _, r := range recs {
			if strings.HasPrefix(r.V, "aborted-") {
				n++
			}
		}
		require.Equal(t, aborted.count(), n, "read_uncommitted must deliver the aborted records")
	})
}

// requireValuesMatch checks every delivered value against the produced record at its offset.
func requireValuesMatch(t *testing.T, want produced, recs []outRecord) {
	t.Helper()
	for _, r := range recs {
		w, ok := want[int32(r.P.V)][r.O.V]
		require.Truef(t, ok, "unexpected record %d/%d %q", r.P.V, r.O.V, r.V)
		require.Equalf(t, string(w.Value), r.V, "value of %d/%d", r.P.V, r.O.V)
		require.NotNilf(t, r.K, "kafka_key of %d/%d", r.P.V, r.O.V)
		require.Equalf(t, w.Key, *r.K, "kafka_key of %d/%d", r.P.V, r.O.V)
	}
}

// TestConsumerGroupSecondRunReadsNothing checks commits: a first bounded run with a consumer
// group reads everything and commits the end offsets, a second run reads nothing, and after M
// more records a third run reads exactly those.
func TestConsumerGroupSecondRunReadsNothing(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 3
	topic := createTopic(t, partitions)
	group, adm := newGroup(t)

	produceN := func(n int, tag string) produced {
		t.Helper()
		var records []*kgo.Record
		for i := range n {
			records = append(records, &kgo.Record{
				Topic:     topic,
				Partition: int32(i % partitions),
				Value:     []byte(fmt.Sprintf("%s-%d", tag, i)),
			})
		}
		return produceAll(t, producer(t), records)
	}
	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["max_range_records"] = 200
	in["commit_period"] = "100ms"

	first := produceN(3000, "first")
	ends := endOffsets(t, topic)
	recs := runInput(t, in, 2*time.Minute)
	requireExactlyOnce(t, offsetsOf(first), recs)
	requireCommitted(t, adm, group, topic, ends)

	recs = runInput(t, in, 2*time.Minute)
	require.Emptyf(t, recs, "second run with group %s must deliver nothing, delivered %d", group, len(recs))
	requireCommitted(t, adm, group, topic, ends)

	second := produceN(600, "second")
	ends = endOffsets(t, topic)
	recs = runInput(t, in, 2*time.Minute)
	requireExactlyOnce(t, offsetsOf(second), recs)
	requireValuesMatch(t, second, recs)
	requireCommitted(t, adm, group, topic, ends)
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *s)
}
