package plugin

import (
	"bytes"
	"fmt"
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
				"kafka_range_start":       int64(100),
				"kafka_range_end":         int64(200),
				"trace":                   "abc",
				"empty":                   "",
			},
			wantTexts: map[string]string{
				"kafka_partition":         "3",
				"kafka_offset":            "150",
				"kafka_timestamp_ms":      "1714979289123",
				"kafka_timestamp_unix":    "1714979289",
				"kafka_tombstone_message": "false",
				"kafka_range_end":         "200",
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
				"kafka_range_start":       int64(100),
				"kafka_range_end":         int64(200),
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
				"kafka_range_start":       int64(100),
				"kafka_range_end":         int64(200),
			},
			wantTexts: map[string]string{"kafka_tombstone_message": "false", "kafka_key": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch := newBatch([]*kgo.Record{tc.rec}, r)
			msg := batch[0]
			body, err := msg.AsBytes()
			require.NoError(t, err)
			assert.True(t, bytes.Equal(tc.wantBody, body), "newMessage(%v) body = %q, want %q", tc.rec, body, tc.wantBody)
			got := metaOf(t, msg)
			assert.Equal(t, tc.wantMeta, got, "newMessage(%v) metadata = %v, want %v", tc.rec, got, tc.wantMeta)
			for k, want := range tc.wantTexts {
				v, ok := msg.MetaGet(k)
				assert.True(t, ok, "MetaGet(%q) missing", k)
				assert.Equal(t, want, v, "MetaGet(%q) = %q, want %q", k, v, want)
			}
		})
	}
}

func TestNewBatch(t *testing.T) {
	r := ranges.Range{Topic: "t", Partition: 1, Start: 10, End: 13}
	recs := []*kgo.Record{
		{Topic: "t", Partition: 1, Offset: 10, Value: []byte("abc")},
		{Topic: "t", Partition: 1, Offset: 11, Value: nil},
		{Topic: "t", Partition: 1, Offset: 12, Value: []byte("de")},
	}
	batch := newBatch(recs, r)
	require.Len(t, batch, len(recs))
	for i, msg := range batch {
		off, ok := msg.MetaGetMut("kafka_offset")
		require.True(t, ok)
		assert.Equal(t, recs[i].Offset, off, "batch[%d] kafka_offset = %v, want %d", i, off, recs[i].Offset)
	}

	assert.Empty(t, newBatch(nil, r))
}

func BenchmarkNewBatch(b *testing.B) {
	r := ranges.Range{Topic: "bench", Partition: 0, Start: 0, End: 1000}
	value := bytes.Repeat([]byte("x"), 1024)
	ts := time.Now()
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{
			Key: fmt.Appendf(nil, "key-%d", i), Value: value, Topic: "bench", Partition: 0, Offset: int64(i), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "h1", Value: []byte("v1")}, {Key: "h2", Value: []byte("v2")}},
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(recs) * len(value)))
	for b.Loop() {
		batch := newBatch(recs, r)
		if len(batch) != len(recs) {
			b.Fatalf("newBatch returned %d messages, want %d", len(batch), len(recs))
		}
	}
}
