package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// metaOf returns every metadata value of msg by key, as set.
func metaOf(t *testing.T, msg *service.Message) map[string]any {
	t.Helper()
	out := map[string]any{}
	require.NoError(t, msg.MetaWalkMut(func(k string, v any) error {
		out[k] = v
		return nil
	}))
	return out
}

func TestNewMessage(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123_456_789, time.UTC)
	r := ranges.Range{Topic: "orders", Partition: 3, Start: 100, End: 200}
	tests := []struct {
		name      string
		rec       *kgo.Record
		wantBody  []byte
		wantMeta  map[string]any
		wantTexts map[string]string // MetaGet, as Bloblang's @ sees strings
	}{
		{
			name: "record with key, value and headers",
			rec: &kgo.Record{
				Key: []byte("k1"), Value: []byte("hello"), Topic: "orders", Partition: 3, Offset: 150, Timestamp: ts,
				Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "empty", Value: nil}},
			},
			wantBody: []byte("hello"),
			wantMeta: map[string]any{
				"kafka_key":               "k1",
				"kafka_topic":             "orders",
				"kafka_partition":         int64(3),
				"kafka_offset":            int64(150),
				"kafka_timestamp_unix":    ts.Unix(),
				"kafka_timestamp_ms":      ts.UnixMilli(),
				"kafka_tombstone_message": false,
				"trace":                   "abc",
				"empty":                   "",
			},
			wantTexts: map[string]string{
				"kafka_partition":         "3",
				"kafka_offset":            "150",
				"kafka_timestamp_ms":      "1714979289123",
				"kafka_timestamp_unix":    "1714979289",
				"kafka_tombstone_message": "false",
			},
		},
		{
			name:     "tombstone: nil value",
			rec:      &kgo.Record{Key: []byte("k2"), Value: nil, Topic: "orders", Partition: 3, Offset: 199, Timestamp: ts},
			wantBody: nil,
			wantMeta: map[string]any{
				"kafka_key":               "k2",
				"kafka_topic":             "orders",
				"kafka_partition":         int64(3),
				"kafka_offset":            int64(199),
				"kafka_timestamp_unix":    ts.Unix(),
				"kafka_timestamp_ms":      ts.UnixMilli(),
				"kafka_tombstone_message": true,
			},
			wantTexts: map[string]string{"kafka_tombstone_message": "true"},
		},
		{
			name:     "empty non-nil value is not a tombstone; nil key",
			rec:      &kgo.Record{Key: nil, Value: []byte{}, Topic: "orders", Partition: 3, Offset: 100, Timestamp: ts},
			wantBody: []byte{},
			wantMeta: map[string]any{
				"kafka_key":               "",
				"kafka_topic":             "orders",
				"kafka_partition":         int64(3),
				"kafka_offset":            int64(100),
				"kafka_timestamp_unix":    ts.Unix(),
				"kafka_timestamp_ms":      ts.UnixMilli(),
				"kafka_tombstone_message": false,
			},
			wantTexts: map[string]string{"kafka_tombstone_message": "false", "kafka_key": ""},
		},
		{
			name: "repeated header keys keep every value in order; a single one stays a string",
			rec: &kgo.Record{
				Key: []byte("k3"), Value: []byte("v"), Topic: "orders", Partition: 3, Offset: 120, Timestamp: ts,
				Headers: []kgo.RecordHeader{
					{Key: "tag", Value: []byte("a")}, {Key: "trace", Value: []byte("t1")},
					{Key: "tag", Value: []byte("b")}, {Key: "tag", Value: nil}, {Key: "pair", Value: []byte("x")}, {Key: "pair", Value: []byte("x")},
				},
			},
			wantBody: []byte("v"),
			wantMeta: map[string]any{
				"kafka_key":               "k3",
				"kafka_topic":             "orders",
				"kafka_partition":         int64(3),
				"kafka_offset":            int64(120),
				"kafka_timestamp_unix":    ts.Unix(),
				"kafka_timestamp_ms":      ts.UnixMilli(),
				"kafka_tombstone_message": false,
				"tag":                     []any{"a", "b", ""},
				"trace":                   "t1",
				"pair":                    []any{"x", "x"},
			},
			wantTexts: map[string]string{"tag": `["a","b",""]`, "trace": "t1"},
		},
		{
			name: "headers named like the input's keys leave the input's values",
			rec: &kgo.Record{
				Key: []byte("k4"), Value: []byte("v"), Topic: "orders", Partition: 3, Offset: 130, Timestamp: ts,
				Headers: []kgo.RecordHeader{
					{Key: "kafka_offset", Value: []byte("999")}, {Key: "kafka_range_end", Value: []byte("x")},
					{Key: "kafka_key", Value: []byte("a")}, {Key: "kafka_key", Value: []byte("b")}, {Key: "kafka_other", Value: []byte("kept")},
					{Key: "kafka_lag", Value: []byte("-1")},
				},
			},
			wantBody: []byte("v"),
			wantMeta: map[string]any{
				"kafka_key":               "k4",
				"kafka_topic":             "orders",
				"kafka_partition":         int64(3),
				"kafka_offset":            int64(130),
				"kafka_timestamp_unix":    ts.Unix(),
				"kafka_timestamp_ms":      ts.UnixMilli(),
				"kafka_tombstone_message": false,
				"kafka_other":             "kept",
			},
			wantTexts: map[string]string{"kafka_offset": "130", "kafka_key": "k4"},
		},
	}
	const high = 250 // the fetch's high watermark: 50 records past the range
	for _, tc := range tests {
		for _, ms := range []messages{{}, {rangeMeta: true}, {lagMeta: true}, {rangeMeta: true, lagMeta: true}} {
			rangeMeta := ms.rangeMeta
			t.Run(fmt.Sprintf("%s/range_metadata=%v,lag_metadata=%v", tc.name, rangeMeta, ms.lagMeta), func(t *testing.T) {
				wantMeta := maps.Clone(tc.wantMeta)
				wantTexts := maps.Clone(tc.wantTexts)
				if rangeMeta {
					wantMeta["kafka_range_start"] = int64(100)
					wantMeta["kafka_range_end"] = int64(200)
					wantTexts["kafka_range_end"] = "200"
				}
				if ms.lagMeta {
					lag := high - tc.rec.Offset - 1
					wantMeta["kafka_lag"] = lag
					wantTexts["kafka_lag"] = fmt.Sprint(lag)
				}
				// Two records of the range, so the second message is built
				// from the first's batch-wide values too.
				first := *tc.rec
				first.Offset, first.Key, first.Headers = r.Start, []byte("other"), nil
				batch := ms.batch([]*kgo.Record{&first, tc.rec}, r, high)
				require.Len(t, batch, 2)
				msg := batch[1]
				body, err := msg.AsBytes()
				require.NoError(t, err)
				assert.True(t, bytes.Equal(tc.wantBody, body), "batch(%v) body = %q, want %q", tc.rec, body, tc.wantBody)
				got := metaOf(t, msg)
				assert.Equal(t, wantMeta, got, "batch(%v) metadata = %v, want %v", tc.rec, got, wantMeta)
				for k, want := range wantTexts {
					v, ok := msg.MetaGet(k)
					assert.True(t, ok, "MetaGet(%q) missing", k)
					assert.Equal(t, want, v, "MetaGet(%q) = %q, want %q", k, v, want)
				}
				if !rangeMeta {
					for _, k := range []string{"kafka_range_start", "kafka_range_end"} {
						_, ok := msg.MetaGetMut(k)
						assert.False(t, ok, "%s is set without range_metadata", k)
					}
				}
				if !ms.lagMeta {
					_, ok := msg.MetaGetMut("kafka_lag")
					assert.False(t, ok, "kafka_lag is set without lag_metadata")
				}
				// The first message keeps its own per-record values.
				assert.Equal(t, map[string]any{"kafka_key": "other", "kafka_offset": r.Start},
					map[string]any{"kafka_key": metaOf(t, batch[0])["kafka_key"], "kafka_offset": metaOf(t, batch[0])["kafka_offset"]})
			})
		}
	}
}

// TestDefaultMetadataFitsOneMapGroup checks the point of range_metadata
// being off: a message of a record without headers carries seven metadata
// entries by default (a Go map keeps up to eight in one group), eight with
// lag_metadata, and nine with range_metadata.
func TestDefaultMetadataFitsOneMapGroup(t *testing.T) {
	r := ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 10}
	rec := &kgo.Record{Topic: "t", Offset: 3, Value: []byte("v")}
	assert.Len(t, metaOf(t, messages{}.batch([]*kgo.Record{rec}, r, 10)[0]), 7, "metadata entries by default")
	assert.Len(t, metaOf(t, messages{lagMeta: true}.batch([]*kgo.Record{rec}, r, 10)[0]), 8, "metadata entries with lag_metadata")
	assert.Len(t, metaOf(t, messages{rangeMeta: true}.batch([]*kgo.Record{rec}, r, 10)[0]), 9, "metadata entries with range_metadata")
}

// TestSetHeadersManyHeaders checks that a record with more headers than
// maxScanHeaders (grouped with a map) gets the same metadata as the pairwise
// scan gives the same headers in smaller records.
func TestSetHeadersManyHeaders(t *testing.T) {
	var hs []kgo.RecordHeader
	for i := range maxScanHeaders + 5 {
		key := fmt.Sprintf("h%d", i%7) // h0..h6, repeated
		if i%9 == 4 {
			key = "kafka_partition"
		}
		hs = append(hs, kgo.RecordHeader{Key: key, Value: fmt.Appendf(nil, "v%d", i)})
	}
	hs = append(hs, kgo.RecordHeader{Key: "once", Value: []byte("1")})
	require.Greater(t, len(hs), maxScanHeaders)
	r := ranges.Range{Topic: "t", Partition: 2, Start: 0, End: 10}
	got := metaOf(t, messages{}.batch([]*kgo.Record{{Topic: "t", Partition: 2, Offset: 5, Headers: hs}}, r, 10)[0])

	want := map[string]any{}
	for _, h := range hs {
		if _, ours := ownKeys[h.Key]; ours {
			continue
		}
		if prev, ok := want[h.Key]; ok {
			if l, isList := prev.([]any); isList {
				want[h.Key] = append(l, string(h.Value))
			} else {
				want[h.Key] = []any{prev, string(h.Value)}
			}
		} else {
			want[h.Key] = string(h.Value)
		}
	}
	for k, v := range want {
		assert.Equal(t, v, got[k], "header %q of a record with %d headers", k, len(hs))
	}
	assert.Equal(t, int64(2), got["kafka_partition"], "kafka_partition keeps the input's value")
	assert.Equal(t, "1", got["once"])
	assert.Len(t, got, len(want)+len(ownKeys)-3, "metadata keys (ours without the two range keys and kafka_lag, and the headers): %v", got)
}

// logLines is a slog.Handler that keeps each record's level and message.
type logLines struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// TestHeaderCollisionsLoggedOncePerKey builds batches in parallel, as the
// readers do, from records whose headers collide with the input's keys, and
// checks each colliding key is logged once, at warn level, naming the key
// and a record it was on, while the messages keep the input's values.
func TestHeaderCollisionsLoggedOncePerKey(t *testing.T) {
	logs := &logLines{}
	hc := newHeaderCollisions(service.NewLoggerFromSlog(slog.New(logs)))
	r := ranges.Range{Topic: "orders", Partition: 1, Start: 0, End: 100}
	recs := make([]*kgo.Record, 100)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "orders", Partition: 1, Offset: int64(i), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: "kafka_offset", Value: []byte("x")}, {Key: "kafka_topic", Value: []byte("y")}, {Key: "kafka_topic", Value: []byte("z")}, {Key: "plain", Value: []byte("p")},
		}}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, msg := range (messages{headers: hc}).batch(recs, r, 100) {
				off, _ := msg.MetaGetMut("kafka_offset")
				topic, _ := msg.MetaGetMut("kafka_topic")
				plain, _ := msg.MetaGetMut("plain")
				assert.IsType(t, int64(0), off, "kafka_offset")
				assert.Equal(t, "orders", topic, "kafka_topic")
				assert.Equal(t, "p", plain, "plain")
			}
		})
	}
	wg.Wait()

	lines := logs.all()
	require.Len(t, lines, 2, "one line per colliding key: %q", lines)
	slices.Sort(lines)
	for i, key := range []string{"kafka_offset", "kafka_topic"} {
		assert.True(t, strings.HasPrefix(lines[i], "WARN "), "level of %q", lines[i])
		assert.Contains(t, lines[i], fmt.Sprintf("record header %q of orders/1 at offset", key))
		assert.Contains(t, lines[i], "messages keep the input's "+key)
	}

	// Another input has its own log: the same keys are logged again there.
	logs2 := &logLines{}
	messages{headers: newHeaderCollisions(service.NewLoggerFromSlog(slog.New(logs2)))}.batch(recs[:1], r, 100)
	assert.Len(t, logs2.all(), 2, "a second input's collisions: %q", logs2.all())

	// Without a collision log (nil, or none given) nothing is reported and
	// nothing panics.
	assert.Len(t, messages{}.batch(recs[:1], r, 100), 1)
	assert.Len(t, messages{rangeMeta: true}.batch(recs[:1], r, 100), 1)
}

func TestNewBatch(t *testing.T) {
	r := ranges.Range{Topic: "t", Partition: 1, Start: 10, End: 13}
	recs := []*kgo.Record{
		{Topic: "t", Partition: 1, Offset: 10, Value: []byte("abc")},
		{Topic: "t", Partition: 1, Offset: 11, Value: nil},
		{Topic: "t", Partition: 1, Offset: 12, Value: []byte("de")},
	}
	for _, ms := range []messages{{}, {rangeMeta: true}, {lagMeta: true}, {rangeMeta: true, lagMeta: true}} {
		batch := ms.batch(recs, r, 13) // fetched at the tail
		require.Len(t, batch, len(recs))
		for i, msg := range batch {
			off, ok := msg.MetaGetMut("kafka_offset")
			require.True(t, ok)
			assert.Equal(t, recs[i].Offset, off, "batch[%d] kafka_offset = %v, want %d", i, off, recs[i].Offset)
			if lag, ok := msg.MetaGetMut("kafka_lag"); ms.lagMeta {
				// high - offset - 1: the record at the tail has lag 0.
				assert.Equal(t, int64(len(recs)-1-i), lag, "batch[%d] kafka_lag (high watermark 13)", i)
			} else {
				assert.False(t, ok, "batch[%d] kafka_lag set without lag_metadata", i)
			}
			tomb, _ := msg.MetaGetMut("kafka_tombstone_message")
			assert.Equal(t, recs[i].Value == nil, tomb, "batch[%d] kafka_tombstone_message", i)
			// Messages of one batch never share their metadata.
			msg.MetaSetMut("mine", i)
		}
		for i, msg := range batch {
			v, _ := msg.MetaGetMut("mine")
			assert.Equal(t, i, v, "batch[%d] metadata written through another message", i)
		}
		assert.Empty(t, ms.batch(nil, r, 13))
	}
}

// TestLagMetadataInAPipeline reads a topic to its end through a Benthos
// stream with lag_metadata and a Bloblang mapping that does arithmetic on
// @kafka_lag (which fails on a string), and checks every message's lag is
// exact: nothing is produced while it runs, so every fetch sees the
// partition's end as its high watermark and lag = end - offset - 1, 0 for
// the last record of each partition.
func TestLagMetadataInAPipeline(t *testing.T) {
	const (
		topic      = "lagged"
		partitions = 2
		n          = 600
	)
	addr := newKafka(t, topic, partitions)
	produceRecords(t, addr, topic, partitions, 0, n)
	ends := endOffsets(t, newAdmin(t, addr), topic)

	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{}))
	sb := env.NewStreamBuilder()
	sb.SetLogger(slog.New(slog.DiscardHandler))
	require.NoError(t, sb.AddInputYAML(fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ %s ]
  stop_at: end
  max_range_records: 70
  lag_metadata: true
`, addr, topic)))
	require.NoError(t, sb.AddProcessorYAML(`
mapping: |
  root.partition = @kafka_partition
  root.offset = @kafka_offset
  root.lagplusone = @kafka_lag + 1
`))
	type out struct {
		body []byte
		lag  any
		err  error
	}
	var (
		mu   sync.Mutex // guards outs
		outs []out
	)
	require.NoError(t, sb.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			body, err := m.AsBytes()
			lag, _ := m.MetaGetMut("kafka_lag")
			outs = append(outs, out{body: bytes.Clone(body), lag: lag, err: errors.Join(err, m.GetError())})
		}
		return nil
	}))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	require.NoError(t, stream.Run(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, outs, n)
	tails := 0
	for _, o := range outs {
		require.NoError(t, o.err, "message %s", o.body)
		var got struct{ Partition, Offset, LagPlusOne int64 } // numbers, or Unmarshal fails
		require.NoError(t, json.Unmarshal(o.body, &got), "message %s", o.body)
		end := ends[int32(got.Partition)]
		want := end - got.Offset - 1
		assert.Equal(t, want, o.lag, "%d@%d: kafka_lag (an int64), partition end %d", got.Partition, got.Offset, end)
		assert.Equal(t, want+1, got.LagPlusOne, "%d@%d: @kafka_lag + 1", got.Partition, got.Offset)
		if got.Offset == end-1 {
			assert.Equal(t, int64(1), got.LagPlusOne, "%d@%d: the record at the tail has lag 0", got.Partition, got.Offset)
			tails++
		}
	}
	assert.Equal(t, partitions, tails, "records at the tail")
}

// BenchmarkNewBatch builds the messages of a 1000-record range of 1 KiB
// values with 6-byte keys: without headers (the default seven metadata
// keys, and nine with range_metadata), with two distinct headers, and with
// one header key repeated; each also with lag_metadata (one key more, the
// range fetched 100,000 records behind the tail). ns/msg, B/msg and
// allocs/msg are per message.
func BenchmarkNewBatch(b *testing.B) {
	for _, bc := range []struct {
		name      string
		rangeMeta bool
		headers   []kgo.RecordHeader
	}{
		{name: "no headers"},
		{name: "no headers, range_metadata", rangeMeta: true},
		{name: "two headers", headers: []kgo.RecordHeader{{Key: "h1", Value: []byte("v1")}, {Key: "h2", Value: []byte("v2")}}},
		{name: "repeated header", headers: []kgo.RecordHeader{{Key: "h1", Value: []byte("v1")}, {Key: "h1", Value: []byte("v2")}}},
	} {
		for _, lag := range []bool{false, true} {
			name := bc.name
			if lag {
				name += ", lag_metadata"
			}
			b.Run(name, func(b *testing.B) {
				r := ranges.Range{Topic: "bench", Partition: 0, Start: 0, End: 1000}
				value := bytes.Repeat([]byte("x"), 1024)
				ts := time.Now()
				recs := make([]*kgo.Record, 1000)
				for i := range recs {
					recs[i] = &kgo.Record{
						Key: fmt.Appendf(nil, "key-%d", i), Value: value, Topic: "bench", Partition: 0, Offset: int64(i), Timestamp: ts,
						Headers: bc.headers,
					}
				}
				ms := messages{rangeMeta: bc.rangeMeta, lagMeta: lag}
				high := r.End + 100_000
				b.ReportAllocs()
				b.SetBytes(int64(len(recs) * len(value)))
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for b.Loop() {
					batch := ms.batch(recs, r, high)
					if len(batch) != len(recs) {
						b.Fatalf("batch returned %d messages, want %d", len(batch), len(recs))
					}
				}
				runtime.ReadMemStats(&after)
				msgs := float64(b.N) * float64(len(recs))
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/msgs, "B/msg")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/msgs, "allocs/msg")
			})
		}
	}
}

// TestBatchAllocationsPerMessage pins what building a message costs in
// allocations, for a record with a key and no headers: Benthos' message (three)
// and its metadata map (two), while the offsets and keys, which differ per
// record, are boxed into slabs of the batch rather than one allocation each
// (two for a key). Allocation counts do not depend on the machine's speed.
func TestBatchAllocationsPerMessage(t *testing.T) {
	const n = 1000
	value := bytes.Repeat([]byte("x"), 100)
	ts := time.Now()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "key-%d", i), Value: value, Topic: "t", Offset: int64(1000 + i), Timestamp: ts}
	}
	r := ranges.Range{Topic: "t", Start: 1000, End: 1000 + n}
	allocs := testing.AllocsPerRun(20, func() { _ = messages{}.batch(recs, r, r.End) })
	assert.LessOrEqual(t, allocs/n, 5.1, "allocations per message (%.0f per batch of %d)", allocs, n)
}

// TestBatchSlabValuesSurviveGC checks that the offsets and keys boxed into a
// batch's slabs are the records' own, read back as values and as strings after
// the records and every other message of the batch are gone and a GC ran.
func TestBatchSlabValuesSurviveGC(t *testing.T) {
	const n = 300
	r := ranges.Range{Topic: "t", Partition: 2, Start: 500, End: 500 + n}
	build := func() service.MessageBatch {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			var key []byte
			if i%3 != 0 {
				key = fmt.Appendf(nil, "k%d", i)
			}
			recs[i] = &kgo.Record{Key: key, Value: []byte("v"), Topic: "t", Partition: 2, Offset: int64(500 + i), Timestamp: time.UnixMilli(int64(i))}
		}
		return messages{}.batch(recs, r, r.End)
	}
	kept := map[int]*service.Message{}
	for _, i := range []int{0, 1, 2, n / 2, n - 1} {
		kept[i] = build()[i]
	}
	runtime.GC()
	_ = bytes.Repeat([]byte("overwrite"), 1<<16) // reuse of freed memory would show below
	runtime.GC()
	for i, msg := range kept {
		wantKey := ""
		if i%3 != 0 {
			wantKey = fmt.Sprintf("k%d", i)
		}
		meta := metaOf(t, msg)
		assert.Equal(t, int64(500+i), meta[metaOffset], "kafka_offset of message %d", i)
		assert.Equal(t, wantKey, meta[metaKey], "kafka_key of message %d", i)
		off, _ := msg.MetaGet(metaOffset)
		assert.Equal(t, fmt.Sprint(500+i), off, "kafka_offset of message %d as a string", i)
		key, _ := msg.MetaGet(metaKey)
		assert.Equal(t, wantKey, key, "kafka_key of message %d as a string", i)
	}
}
