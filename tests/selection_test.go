package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceSpread produces perPart records to each listed partition of topic, nil keys on every
// seventh record, and returns what the broker acknowledged.
func produceSpread(t *testing.T, topic string, parts []int32, perPart int, tag string) produced {
	t.Helper()
	var records []*kgo.Record
	for i := range perPart * len(parts) {
		r := &kgo.Record{
			Topic:     topic,
			Partition: parts[i%len(parts)],
			Value:     []byte(fmt.Sprintf("%s-%d", tag, i)),
		}
		if i%7 != 0 {
			r.Key = []byte(fmt.Sprintf("k-%d", i))
		}
		records = append(records, r)
	}
	return produceAll(t, producer(t), records)
}

// only keeps the listed partitions of p.
func only(p produced, parts ...int32) produced {
	out := produced{}
	for _, part := range parts {
		if m, ok := p[part]; ok {
			out[part] = m
		}
	}
	return out
}

// TestTopicsSelectionAndStartFrom checks the topics entry forms (`name`, `name:a-b`, `name:a,b`,
// several topics in one input), partitions without records, nil keys, and start_from: latest
// with stop_at: end (nothing to read, exit 0).
func TestTopicsSelectionAndStartFrom(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	// Partitions 6 and 7 stay empty.
	t1 := createTopic(t, 8)
	t2 := createTopic(t, 2)
	prod1 := produceSpread(t, t1, []int32{0, 1, 2, 3, 4, 5}, 150, "a")
	prod2 := produceSpread(t, t2, []int32{0, 1}, 100, "b")

	run := func(t *testing.T, in inputConfig) []outRecord {
		t.Helper()
		in["stop_at"] = "end"
		in["max_range_records"] = 40
		return runInput(t, in, time.Minute)
	}
	byTopic := func(recs []outRecord) map[string][]outRecord {
		out := map[string][]outRecord{}
		for _, r := range recs {
			out[r.T] = append(out[r.T], r)
		}
		return out
	}

	t.Run("whole_topic_with_empty_partitions", func(t *testing.T) {
		recs := run(t, baseInput(t1))
		requireExactlyOnce(t, offsetsOf(prod1), recs)
		requireValuesMatchNilKeys(t, prod1, recs)
	})
	t.Run("partition_range", func(t *testing.T) {
		recs := run(t, baseInput(t1+":1-3"))
		requireExactlyOnce(t, offsetsOf(only(prod1, 1, 2, 3)), recs)
	})
	t.Run("partition_list_with_empty_partition", func(t *testing.T) {
		recs := run(t, baseInput(t1+":0,5,7"))
		requireExactlyOnce(t, offsetsOf(only(prod1, 0, 5)), recs)
	})
	t.Run("mixed_range_and_list", func(t *testing.T) {
		recs := run(t, baseInput(t1+":0-1,4"))
		requireExactlyOnce(t, offsetsOf(only(prod1, 0, 1, 4)), recs)
	})
	t.Run("two_topics", func(t *testing.T) {
		recs := run(t, baseInput(t1+":2", t2))
		got := byTopic(recs)
		require.Len(t, got, 2, "records from both topics")
		requireExactlyOnce(t, offsetsOf(only(prod1, 2)), got[t1])
		requireExactlyOnce(t, offsetsOf(prod2), got[t2])
		requireValuesMatchNilKeys(t, prod2, got[t2])
	})
	t.Run("latest_reads_nothing", func(t *testing.T) {
		in := baseInput(t1, t2)
		in["start_from"] = "latest"
		recs := run(t, in)
		require.Empty(t, recs, "start_from latest with stop_at end")
	})
}

// requireValuesMatchNilKeys checks values and keys, where a record produced without a key must
// arrive without kafka_key or with an empty one.
func requireValuesMatchNilKeys(t *testing.T, want produced, recs []outRecord) {
	t.Helper()
	for _, r := range recs {
		w, ok := want[int32(r.P.V)][r.O.V]
		require.Truef(t, ok, "unexpected record %d/%d %q", r.P.V, r.O.V, r.V)
		require.Equalf(t, string(w.Value), r.V, "value of %d/%d", r.P.V, r.O.V)
		if w.Key == "" {
			require.Truef(t, r.K == nil || *r.K == "", "kafka_key of %d/%d (produced without key) = %s", r.P.V, r.O.V, deref(r.K))
		} else {
			require.NotNilf(t, r.K, "kafka_key of %d/%d", r.P.V, r.O.V)
			require.Equalf(t, w.Key, *r.K, "kafka_key of %d/%d", r.P.V, r.O.V)
		}
	}
}

// TestReadCommittedStopsAtLastStableOffset leaves a transaction open while the input runs:
//
//	p0: plain x5 (0-4), open txn x3 (5-7), plain x5 (8-12)
//
// Under read_committed, stop_at: end snapshots the last stable offset (5), so the run must end
// after the first five records instead of waiting for the transaction. Under read_uncommitted it
// reads up to the high watermark (13).
func TestReadCommittedStopsAtLastStableOffset(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 1)
	plain := producer(t)
	rec := func(kind string, i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: 0, Key: []byte(kind), Value: []byte(fmt.Sprintf("%s-%d", kind, i))}
	}
	var first, open, after []*kgo.Record
	for i := range 5 {
		first = append(first, rec("before", i))
		after = append(after, rec("after", i))
	}
	for i := range 3 {
		open = append(open, rec("open", i))
	}
	before := produceAll(t, plain, first)

	txn := producer(t, kgo.TransactionalID(uniqueName(t, "txn")))
	require.NoError(t, txn.BeginTransaction())
	t.Cleanup(func() {
		ctx, cancel := contextTimeout(30 * time.Second)
		defer cancel()
		if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Logf("abort open transaction: %v", err)
		}
	})
	inTxn := produceAll(t, txn, open)
	later := produceAll(t, plain, after)
	require.Equal(t, int64(13), endOffsets(t, topic)[0])

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lso, err := newAdmin(t).ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	o, ok := lso.Lookup(topic, 0)
	require.True(t, ok)
	require.Equal(t, int64(5), o.Offset, "last stable offset with the transaction open")

	t.Run("read_committed", func(t *testing.T) {
		in := baseInput(topic)
		in["stop_at"] = "end"
		in["isolation_level"] = "read_committed"
		in["max_range_records"] = 4
		recs := runInput(t, in, 60*time.Second)
		requireExactlyOnce(t, offsetsOf(before), recs)
	})
	t.Run("read_uncommitted", func(t *testing.T) {
		in := baseInput(topic)
		in["stop_at"] = "end"
		in["isolation_level"] = "read_uncommitted"
		in["max_range_records"] = 4
		recs := runInput(t, in, 60*time.Second)
		all := produced{}
		for _, p := range []produced{before, inTxn, later} {
			mergeProduced(all, p)
		}
		requireExactlyOnce(t, offsetsOf(all), recs)
	})
}

// TestCommittedBelowLogStartIsDataLoss commits offsets with a first run, deletes records past
// them (DeleteRecords moves the log start offset beyond the commit), and checks that a run from
// the committed offsets exits non-zero (data loss) without hanging, while start_from: earliest
// reads from the new log start.
func TestCommittedBelowLogStartIsDataLoss(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 2)
	group, adm := newGroup(t)

	produceSpread(t, topic, []int32{0, 1}, 200, "first")
	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["max_range_records"] = 50
	recs := runInput(t, in, time.Minute)
	require.Len(t, recs, 400)
	requireCommitted(t, adm, group, topic, map[int32]int64{0: 200, 1: 200})

	produceSpread(t, topic, []int32{0, 1}, 100, "second")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 250})
	resp, err := adm.DeleteRecords(ctx, del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	t.Run("committed_reports_data_loss", func(t *testing.T) {
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, in, dir+"/out.jsonl")
		res := runConnect(t, time.Minute, nil, "run", cfg)
		require.Falsef(t, res.TimedOut, "run with a committed offset below the log start hung\n%s", res)
		require.NotEqualf(t, 0, res.ExitCode, "committed offset 200 < log start 250 on %s/0 must fail the run\n%s", topic, res)
		require.Containsf(t, res.Stdout+res.Stderr, "250", "the error should name the new log start offset\n%s", res)
		t.Logf("exit %d; delivered %d records", res.ExitCode, len(readOutput(t, dir+"/out.jsonl")))
	})
	t.Run("earliest_starts_at_log_start", func(t *testing.T) {
		in := baseInput(topic)
		in["start_from"] = "earliest"
		in["stop_at"] = "end"
		recs := runInput(t, in, time.Minute)
		want := map[int32][]int64{}
		for o := int64(250); o < 300; o++ {
			want[0] = append(want[0], o)
		}
		for o := int64(0); o < 300; o++ {
			want[1] = append(want[1], o)
		}
		requireExactlyOnce(t, want, recs)
	})
}
