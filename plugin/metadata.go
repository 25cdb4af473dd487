package plugin

import (
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Metadata keys set on every message. The kafka_ keys match the other Kafka
// inputs Benthos users know; kafka_range_ keys are this input's own.
const (
	metaKey        = "kafka_key"
	metaTopic      = "kafka_topic"
	metaPartition  = "kafka_partition"
	metaOffset     = "kafka_offset"
	metaTSUnix     = "kafka_timestamp_unix"
	metaTSMillis   = "kafka_timestamp_ms"
	metaTombstone  = "kafka_tombstone_message"
	metaRangeStart = "kafka_range_start"
	metaRangeEnd   = "kafka_range_end"
)

// newBatch turns the records of one range into a message batch.
//
// Every message starts as a shallow copy of one template that already holds
// all nine keys, so its metadata map is cloned at its final size and only the
// per-record values are written: far fewer allocations than nine inserts into
// a fresh map (the dominant per-message cost in CPU profiles).
//
// Record headers become metadata by their key (see setHeaders). A header
// whose key is one of the nine above is reported to hc, the input's one
// headerCollisions; nil means not reported.
func newBatch(recs []*kgo.Record, r ranges.Range, hc *headerCollisions) service.MessageBatch {
	tmpl := service.NewMessage(nil)
	tmpl.MetaSetMut(metaTopic, r.Topic)
	tmpl.MetaSetMut(metaPartition, int64(r.Partition))
	tmpl.MetaSetMut(metaRangeStart, r.Start)
	tmpl.MetaSetMut(metaRangeEnd, r.End)
	tmpl.MetaSetMut(metaKey, "")
	tmpl.MetaSetMut(metaOffset, int64(0))
	tmpl.MetaSetMut(metaTSUnix, int64(0))
	tmpl.MetaSetMut(metaTSMillis, int64(0))
	tmpl.MetaSetMut(metaTombstone, false)

	batch := make(service.MessageBatch, len(recs))
	var ts timestamps
	for i, rec := range recs {
		batch[i] = newMessage(tmpl, rec, &ts, hc)
	}
	return batch
}

// timestamps keeps the boxed timestamp values of the previous record: records
// of one producer batch usually share their timestamp, so consecutive
// messages share the boxes instead of allocating two per message.
type timestamps struct {
	ms         int64
	unix, msBx any
}

func (t *timestamps) boxes(ms int64, unix int64) (any, any) {
	if t.msBx == nil || ms != t.ms {
		t.ms, t.unix, t.msBx = ms, unix, ms
	}
	return t.unix, t.msBx
}

// emptyKey is the shared box of the empty key.
var emptyKey any = ""

// newMessage builds the message of rec from the batch's template, which
// holds the range's keys.
func newMessage(tmpl *service.Message, rec *kgo.Record, ts *timestamps, hc *headerCollisions) *service.Message {
	msg := tmpl.Copy()
	msg.SetBytes(rec.Value)
	if len(rec.Key) > 0 {
		msg.MetaSetMut(metaKey, string(rec.Key))
	} else {
		msg.MetaSetMut(metaKey, emptyKey)
	}
	msg.MetaSetMut(metaOffset, rec.Offset)
	unix, ms := ts.boxes(rec.Timestamp.UnixMilli(), rec.Timestamp.Unix())
	msg.MetaSetMut(metaTSUnix, unix)
	msg.MetaSetMut(metaTSMillis, ms)
	msg.MetaSetMut(metaTombstone, rec.Value == nil)
	if len(rec.Headers) > 0 {
		setHeaders(msg, rec, hc)
	}
	return msg
}

// maxScanHeaders is the most headers setHeaders looks for repeated keys by
// comparing them pairwise; above it, it groups them with a map.
const maxScanHeaders = 16

// setHeaders sets the record's headers as metadata of msg, by key. A key
// that occurs once gives its value as a string; a key repeated in the record
// gives all its values, in order, as a []any of strings (Kafka allows
// repeated keys; other Kafka inputs offer a multi_header option for them). A
// header whose key is one of the input's own keys (kafka_key, ...) leaves
// the input's value in place and is reported to hc.
func setHeaders(msg *service.Message, rec *kgo.Record, hc *headerCollisions) {
	hs := rec.Headers
	if len(hs) > maxScanHeaders {
		setManyHeaders(msg, rec, hc)
		return
	}
	for i, h := range hs {
		if _, ours := ownKeys[h.Key]; ours {
			hc.report(h.Key, rec)
			continue
		}
		if repeatsBefore(hs[:i], h.Key) {
			continue // set with the key's first occurrence
		}
		n := 1
		for _, o := range hs[i+1:] {
			if o.Key == h.Key {
				n++
			}
		}
		if n == 1 {
			msg.MetaSetMut(h.Key, string(h.Value))
			continue
		}
		vals := make([]any, 0, n)
		for _, o := range hs[i:] {
			if o.Key == h.Key {
				vals = append(vals, string(o.Value))
			}
		}
		msg.MetaSetMut(h.Key, vals)
	}
}

func repeatsBefore(hs []kgo.RecordHeader, key string) bool {
	for _, h := range hs {
		if h.Key == key {
			return true
		}
	}
	return false
}

// setManyHeaders is setHeaders for records with many headers: linear, with
// a map of the values of each key.
func setManyHeaders(msg *service.Message, rec *kgo.Record, hc *headerCollisions) {
	vals := make(map[string][]any, len(rec.Headers))
	order := make([]string, 0, len(rec.Headers))
	for _, h := range rec.Headers {
		if _, ours := ownKeys[h.Key]; ours {
			hc.report(h.Key, rec)
			continue
		}
		if _, seen := vals[h.Key]; !seen {
			order = append(order, h.Key)
		}
		vals[h.Key] = append(vals[h.Key], string(h.Value))
	}
	for _, k := range order {
		if v := vals[k]; len(v) == 1 {
			msg.MetaSetMut(k, v[0])
		} else {
			msg.MetaSetMut(k, v)
		}
	}
}

// headerCollisions logs record headers whose key is one of the input's own
// metadata keys (kafka_key, kafka_offset, ...): the message keeps the
// input's value, and the header's is not in the metadata. Each key is logged
// once per input, at warn level, naming the first record it was seen on.
// Safe for concurrent use (messages are built by the readers in parallel); a
// nil *headerCollisions reports nothing.
type headerCollisions struct {
	log *service.Logger

	mu   sync.Mutex // guards seen
	seen map[string]struct{}
}

// newHeaderCollisions returns the collision log of one input, writing to log.
func newHeaderCollisions(log *service.Logger) *headerCollisions {
	return &headerCollisions{log: log, seen: map[string]struct{}{}}
}

// report notes that rec has a header named key, one of the input's own
// keys, and logs it the first time key is reported.
func (hc *headerCollisions) report(key string, rec *kgo.Record) {
	if hc == nil {
		return
	}
	hc.mu.Lock()
	_, logged := hc.seen[key]
	if !logged {
		hc.seen[key] = struct{}{}
	}
	hc.mu.Unlock()
	if !logged && hc.log != nil {
		hc.log.Warnf("record header %q of %s/%d at offset %d has the name of a metadata key the input sets: messages keep the input's %s and not the header's value (logged once per header key)",
			key, rec.Topic, rec.Partition, rec.Offset, key)
	}
}

var ownKeys = map[string]struct{}{
	metaKey: {}, metaTopic: {}, metaPartition: {}, metaOffset: {}, metaTSUnix: {},
	metaTSMillis: {}, metaTombstone: {}, metaRangeStart: {}, metaRangeEnd: {},
}
