package plugin

import (
	"sync"
	"time"
	"unsafe"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Metadata keys. The kafka_ keys match the other Kafka inputs Benthos users
// know and are set on every message (kafka_lag only with lag_metadata). The
// kafka_range_ keys are this input's own and are set only with
// range_metadata.
const (
	metaKey        = "kafka_key"
	metaTopic      = "kafka_topic"
	metaPartition  = "kafka_partition"
	metaOffset     = "kafka_offset"
	metaTSUnix     = "kafka_timestamp_unix"
	metaTSMillis   = "kafka_timestamp_ms"
	metaTombstone  = "kafka_tombstone_message"
	metaLag        = "kafka_lag"
	metaRangeStart = "kafka_range_start"
	metaRangeEnd   = "kafka_range_end"
)

// fieldRangeMetadata is the field that adds the kafka_range_ keys.
const fieldRangeMetadata = "range_metadata"

// rangeMetadataField is the spec of range_metadata.
func rangeMetadataField() *service.ConfigField {
	return service.NewBoolField(fieldRangeMetadata).
		Description("If true, every message also carries `kafka_range_start` and `kafka_range_end`, the bounds of the range it was read in (end exclusive), for example to name one output file per range. Off by default because of what it costs: without record headers a message then has nine metadata entries instead of seven, and Benthos keeps a message's metadata in a Go map, which holds up to eight entries in one group and needs a full hash table (directory, table and two groups) from nine on. Building each message then takes about twice the CPU time and two thirds more memory (about 1 µs and 820 B against 0.45 µs and 490 B in the project's BenchmarkNewBatch; docs/benchmarks.md has the figures).").
		Default(false)
}

// fieldLagMetadata is the field that adds kafka_lag.
const fieldLagMetadata = "lag_metadata"

// lagMetadataField is the spec of lag_metadata.
func lagMetadataField() *service.ConfigField {
	return service.NewBoolField(fieldLagMetadata).
		Description("If true, every message also carries `kafka_lag`, how far its record was behind the partition's end when it was fetched: the partition's high watermark in the fetch response that returned the record, minus the record's offset, minus 1 (0 for the record at the tail), as a number (`@kafka_lag + 1` works; `meta(\"kafka_lag\")` gives a string). Under `isolation_level: read_committed` it is still the high watermark, not the last stable offset, so records of open transactions count. Records fetched ahead of their range keep the watermark of their fetch. Off by default because it costs more than 5%: it is one metadata key more, so a record with one header key then has nine entries, which Benthos' Go map keeps in a full hash table instead of one group, and building its message takes about 1.9 times the CPU time and 57% more memory (927 B against 590 B); a record without headers costs about 5% more CPU time, 8 B and one allocation more; with two header keys or `range_metadata`, 2 to 9% more (the project's BenchmarkNewBatch; docs/benchmarks.md has the figures).").
		Default(false).
		Advanced()
}

// messages builds the Benthos messages of records, once per input. What it
// sets comes from the config.
type messages struct {
	rangeMeta bool              // also set kafka_range_start and kafka_range_end
	lagMeta   bool              // also set kafka_lag
	bare      bool              // set no metadata at all (record_metadata: false)
	headers   *headerCollisions // where headers named like our keys are reported; nil: not reported
}

// batch turns the records of one range into a message batch. high is the
// partition's high watermark at the fetch that returned them (engine.Batch.High),
// from which kafka_lag is computed.
//
// Benthos clones a message's metadata map on its first write when the map is
// shared (Copy), and otherwise starts a new one with room for 5 entries. A
// Go map holds up to 8 entries in one group (one allocation, no table). From
// 9 on it is a table, about twice the memory and time, and a map that grows
// past 8 pays for the group it leaves too. So:
//
//   - by default a message of a record with at most one header key (seven
//     keys, eight with the header) is new and its keys are inserted directly: one
//     small map, no clone, no rehash; so is one without headers with
//     lag_metadata (eight keys);
//   - with range_metadata (nine keys), or with more headers, every message is
//     a shallow copy of a template holding all nine keys (ten with
//     lag_metadata), so its map is
//     cloned as a table at once and only the per-record values are written
//     (without range_metadata the two range keys are then deleted, cheaper
//     than growing a small map into a table).
//
// Values that are the same for the whole range (topic, partition, range
// bounds) are boxed once per batch. Timestamps are boxed once per run of
// equal ones. Offsets and keys, which differ per record, are boxed into two slabs of the
// batch (see perRecord). Record headers become metadata by their key (see
// setHeaders).
func (ms messages) batch(recs []*kgo.Record, r ranges.Range, high int64) service.MessageBatch {
	batch := make(service.MessageBatch, len(recs))
	if ms.bare {
		for i, rec := range recs {
			batch[i] = service.NewMessage(rec.Value)
		}
		return batch
	}
	c := batchConsts{topic: r.Topic, partition: int64(r.Partition), lag: ms.lagMeta, high: high, recs: newPerRecord(recs)}
	var (
		ts   timestamps
		tmpl *service.Message // built for the first record that needs it
	)
	for i, rec := range recs {
		var msg *service.Message
		if ms.direct(rec.Headers) {
			msg = service.NewMessage(rec.Value)
			c.set(msg, i, rec, &ts)
		} else {
			if tmpl == nil {
				tmpl = service.NewMessage(nil)
				c.set(tmpl, i, rec, &ts)
				tmpl.MetaSetMut(metaRangeStart, r.Start)
				tmpl.MetaSetMut(metaRangeEnd, r.End)
			}
			msg = tmpl.Copy()
			msg.SetBytes(rec.Value)
			c.setRecord(msg, i, rec, &ts)
			if !ms.rangeMeta {
				msg.MetaDelete(metaRangeStart)
				msg.MetaDelete(metaRangeEnd)
			}
		}
		if len(rec.Headers) > 0 {
			setHeaders(msg, rec, ms.headers)
		}
		batch[i] = msg
	}
	return batch
}

// Messages returns the message batch the input builds for recs, records of
// one partition read in the range [start, end) of topic and partition,
// fetched at high watermark high, with the default metadata (neither
// range_metadata nor lag_metadata). It is what the benchmark's ceiling
// variant (resources/bench/ceiling) hands to Benthos to measure what
// Benthos itself costs per message, without Kafka: the same code as the
// input's, not a copy of it.
func Messages(recs []*kgo.Record, topic string, partition int32, start, end, high int64) service.MessageBatch {
	return messages{}.batch(recs, ranges.Range{Topic: topic, Partition: partition, Start: start, End: end}, high)
}

// direct reports whether a message of a record with headers hs keeps all
// its keys in one map group (at most eight) and is built key by key.
func (ms messages) direct(hs []kgo.RecordHeader) bool {
	switch {
	case ms.rangeMeta:
		return false
	case ms.lagMeta:
		return len(hs) == 0
	default:
		return oneHeaderKey(hs)
	}
}

// oneHeaderKey reports whether hs holds at most one distinct key.
func oneHeaderKey(hs []kgo.RecordHeader) bool {
	for _, h := range hs[min(1, len(hs)):] {
		if h.Key != hs[0].Key {
			return false
		}
	}
	return true
}

// batchConsts holds the boxed metadata values shared by every message of a
// batch: boxing them once saves an allocation per message each.
type batchConsts struct {
	topic, partition any
	lag              bool  // set kafka_lag
	high             int64 // the high watermark kafka_lag is computed from
	recs             perRecord
}

// set sets the seven kafka_ keys of rec, the i-th record of the batch, on msg
// (eight with kafka_lag).
func (c *batchConsts) set(msg *service.Message, i int, rec *kgo.Record, ts *timestamps) {
	msg.MetaSetMut(metaTopic, c.topic)
	msg.MetaSetMut(metaPartition, c.partition)
	c.setRecord(msg, i, rec, ts)
}

// setRecord sets the keys whose values differ per record.
func (c *batchConsts) setRecord(msg *service.Message, i int, rec *kgo.Record, ts *timestamps) {
	if len(rec.Key) > 0 {
		msg.MetaSetMut(metaKey, boxOf(&c.recs.keys[i]))
	} else {
		msg.MetaSetMut(metaKey, emptyKey)
	}
	msg.MetaSetMut(metaOffset, boxOf(&c.recs.offsets[i]))
	unix, ms := ts.boxes(rec.Timestamp)
	msg.MetaSetMut(metaTSUnix, unix)
	msg.MetaSetMut(metaTSMillis, ms)
	msg.MetaSetMut(metaTombstone, rec.Value == nil)
	if c.lag {
		// A broker returns only records below its high watermark, so
		// the lag is >= 0. max keeps it so should one not.
		msg.MetaSetMut(metaLag, max(c.high-rec.Offset-1, 0))
	}
}

// perRecord holds the values of a batch's records that differ per record,
// offsets and keys, in one slab each, so that boxing them as metadata values
// (boxOf) costs two allocations (three with keys) per batch instead of two
// per message. An int64 or a string put in an interface otherwise gets an
// allocation of its own (a string two, with the copy of its bytes). The keys
// share one buffer, so a message kept after the others of its batch were
// freed keeps every key of the batch (a few bytes per record, next to the
// values that every message pins anyway).
type perRecord struct {
	offsets []int64
	keys    []string // "" for a record without key
}

func newPerRecord(recs []*kgo.Record) perRecord {
	pr := perRecord{offsets: make([]int64, len(recs))}
	n := 0
	for i, rec := range recs {
		pr.offsets[i] = rec.Offset
		n += len(rec.Key)
	}
	if n == 0 {
		return pr
	}
	pr.keys = make([]string, len(recs))
	buf := make([]byte, 0, n)
	for i, rec := range recs {
		start := len(buf)
		buf = append(buf, rec.Key...)
		// The buffer is never written again past its own key's bytes, so
		// its keys are strings like any other.
		pr.keys[i] = unsafe.String(unsafe.SliceData(buf[start:]), len(rec.Key))
	}
	return pr
}

// boxOf returns *p as an interface value without copying it to the heap: the
// interface's data word points at p, which must never be written again (a
// slab of perRecord). This is what the compiler does for a value it boxes,
// except that the memory is the slab's instead of an allocation of its own.
// T must not be pointer-shaped (int64 and string are not), as an interface
// holds a pointer-shaped value in its data word directly.
func boxOf[T int64 | string](p *T) (v any) {
	var zero T
	v = zero // the type word of T; the zero value of T is boxed without allocating
	(*iface)(unsafe.Pointer(&v)).data = unsafe.Pointer(p)
	return v
}

// iface is the layout of an empty interface value (runtime.eface).
type iface struct {
	typ, data unsafe.Pointer
}

// timestamps keeps the boxed timestamp values of the previous record: records
// of one producer batch usually share their timestamp, so consecutive
// messages share the boxes instead of allocating two per message.
type timestamps struct {
	ms         int64
	unix, msBx any
}

func (t *timestamps) boxes(ts time.Time) (unix, ms any) {
	m := ts.UnixMilli()
	if t.msBx == nil || m != t.ms {
		t.ms, t.unix, t.msBx = m, ts.Unix(), m
	}
	return t.unix, t.msBx
}

// emptyKey is the shared box of the empty key.
var emptyKey any = ""

// maxScanHeaders is the most headers setHeaders looks for repeated keys by
// comparing them pairwise. Above it, it groups them with a map.
const maxScanHeaders = 16

// setHeaders sets the record's headers as metadata of msg, by key. A key
// that occurs once gives its value as a string. A key repeated in the record
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
// metadata keys (kafka_key, kafka_offset, ...). The message keeps the
// input's value, and the header's is not in the metadata. Each key is logged
// once per input, at warn level, naming the first record it was seen on.
// Safe for concurrent use (messages are built by the readers in parallel). A
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
	metaTSMillis: {}, metaTombstone: {}, metaRangeStart: {}, metaRangeEnd: {}, metaLag: {},
}
