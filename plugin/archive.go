package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Archive mode: instead of one message per record, each range (or each
// piece of it, up to archive.max_bytes) is handed out as one message
// holding its records' values in one of Benthos' archive formats, so that a
// backfill to files or objects pays Benthos' cost per message once per
// piece, not once per record, and Benthos' `unarchive` processor gives back
// one message per record where a pipeline needs it.
//
// How a range becomes pieces depends on what the engine hands out:
//
//   - With ordered or align_ranges ("whole" mode) each engine batch is cut
//     on its own, at once: with align_ranges it is the whole range (the
//     engine gathers it), with ordered one fetch of it (the engine sends a
//     partition's next batch only once this one is acknowledged, so
//     waiting for more would wait for ever). Its pieces are built by the
//     readers, in parallel (the engine's Prepare hook), and handed out as
//     one Benthos batch of one message per piece, acknowledged as one.
//   - Otherwise ("streaming" mode) a range's engine batches are held, in
//     offset order, until the next record would take the piece past
//     max_bytes (the engine batch is split there, engine.Batch.Split) or
//     the range's reader is done (the engine's end marker,
//     engine.Config.RangeEnds); the piece is then built on the ReadBatch
//     goroutine and handed out as a batch of one message, acknowledged
//     with exactly its engine batches. The readers check the values of
//     json_array in parallel meanwhile.
//
// Either way a value is copied once, into a buffer of the piece's exact
// size. Nothing else is done per record. The engine's tracker commits as
// for any batch: per range with align_ranges, the contiguous acknowledged
// run otherwise.

// Fields of archive mode.
const (
	fieldArchive         = "archive"
	fieldArchiveFormat   = "format"
	fieldArchiveMaxBytes = "max_bytes"

	pathArchiveFormat   = fieldArchive + "." + fieldArchiveFormat
	pathArchiveMaxBytes = fieldArchive + "." + fieldArchiveMaxBytes
)

// Archive formats: Benthos' archive processor's, with the same bytes.
const (
	archiveConcatenate = "concatenate"
	archiveLines       = "lines"
	archiveBinary      = "binary"
	archiveJSONArray   = "json_array"
	archiveTar         = "tar"
)

// defaultArchiveMaxBytes is the default of archive.max_bytes: 16 MiB.
const defaultArchiveMaxBytes = 16 << 20

// Metadata keys of an archive message (the kafka_topic and kafka_partition
// of record mode too).
const (
	metaPieceStart = "kafka_range_piece_start"
	metaPieceEnd   = "kafka_range_piece_end"
	metaRecords    = "kafka_range_records"
	metaFirstTS    = "kafka_range_first_timestamp_ms"
	metaLastTS     = "kafka_range_last_timestamp_ms"
)

// Messages of the archive rules.
const (
	msgArchiveShare     = "%s cannot be used with %s (%s): the broker hands a share group's records to its members one by one, from any partition, and takes acknowledgements per record: there are no ranges to archive"
	msgArchiveBatching  = "%s cannot be used with %s: each range is handed out as archives of at most %s bytes, one message each (set %s to size them; run processors in the pipeline)"
	msgArchiveLag       = "%s cannot be used with %s: an archive holds many records and carries no per-record metadata"
	msgRecordMetaOff    = "%s: true cannot be used with %s: false, which sets no metadata"
	msgRecordMetaShare  = "%s: false cannot be used with %s (%s): its messages carry kafka_delivery_count"
	msgRecordMetaUnused = "%s: false is set but only used without %s, whose messages carry only the archive's metadata"
)

// fieldRecordMetadata is the field that turns per-record metadata off.
const fieldRecordMetadata = "record_metadata"

func init() {
	// Kept here rather than in lint.go's lists, which other changes edit.
	// Package variables are initialised before any init function runs, and
	// fieldLint's rules are looked up only when a lint runs.
	fieldRules = append(fieldRules, archiveFieldRules()...)
	crossRules = append(crossRules, archiveRules)
}

// archiveFields are the spec of archive mode and of record_metadata.
func archiveFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewObjectField(fieldArchive,
			service.NewStringAnnotatedEnumField(fieldArchiveFormat, map[string]string{
				archiveConcatenate: "The values one after the other, nothing between them (`unarchive` has no format that splits them again, except `json_documents` for JSON values).",
				archiveLines:       "The values separated by a newline, none after the last (`unarchive` format `lines`, for values without newlines; a tombstone is an empty line).",
				archiveBinary:      "Benthos' binary blob: a 4-byte big-endian count, then each value as a 4-byte big-endian length and its bytes (`unarchive` format `binary`, for any values).",
				archiveJSONArray:   "A JSON array of the values, which must be JSON documents (`unarchive` format `json_array`); a tombstone is `null`. A piece holding a value that is not JSON is handed out with its values as they are and an error (Benthos' `errored()`, `error()`) naming the topic, partition and offsets, for the pipeline to route (`switch`, `catch`); the others go on.",
				archiveTar:         "A tar archive (USTAR) of one file per record, named by its offset, with the record's timestamp, to the second (`unarchive` format `tar` sets `archive_filename` to the offset).",
			}).
				LintRule(fieldLint(pathArchiveFormat)).
				Description("The archive format of each piece, as Benthos' `archive` processor writes it; empty (what `connect create` writes) is record mode."),
			service.NewStringField(fieldArchiveMaxBytes).
				LintRule(fieldLint(pathArchiveMaxBytes)).
				Description("The most bytes one archive message holds, written as `fetch_max_bytes` is (such as `16MiB`): a range whose archive would be larger is handed out in several pieces, cut at record boundaries (a record larger than this is a piece of its own). It bounds the size of each file or object an output writes and, with `max_in_flight`, the memory archives take beside the records they copy.").
				Default(formatByteSize(defaultArchiveMaxBytes)),
		).
			Description("If set, each range is handed out as archives instead of one message per record: one message per piece of up to `max_bytes` holding its records' values in `format`, so a backfill to files or object storage pays Benthos' cost per message once per piece, not once per record (Benthos' `unarchive` processor gives back one message per record where a pipeline needs it). A message carries `kafka_topic`, `kafka_partition`, `kafka_range_start` and `kafka_range_end` (its range), `kafka_range_piece_start` and `kafka_range_piece_end` (the offsets it covers: a range's pieces follow each other from its start), `kafka_range_records` (how many records it holds), `kafka_range_first_timestamp_ms` and `kafka_range_last_timestamp_ms` (its first and last record's timestamps); no per-record metadata (keys, headers). Acknowledgement and commit are as in record mode. With `align_ranges` a range is one batch of its pieces, the same bytes on every re-run: name files by `kafka_range_piece_start`. With `ordered` each fetch of a range is one batch of its pieces, in order. Not with `share_group`, `batching` or `lag_metadata`; see docs/backfill-to-files.md.").
			Optional(),
		service.NewBoolField(fieldRecordMetadata).
			Description("If false, a message carries only its record's value: no `kafka_` keys and no headers, for pipelines that read none of them (building the metadata is 15 to 27% of the input's CPU time, most at small records). Not with `range_metadata`, `lag_metadata`, `share_group` or `archive` (whose messages carry the archive's metadata).").
			Default(true).
			Advanced(),
	}
}

// archiveFieldRules are the value rules of archive mode's fields.
func archiveFieldRules() []fieldRule {
	return []fieldRule{
		{pathArchiveFormat, emptyOr(enum(archiveConcatenate, archiveLines, archiveBinary, archiveJSONArray, archiveTar))}, // "": record mode, as connect create writes it
		{pathArchiveMaxBytes, byteSize},
	}
}

// archiveRules: archive mode cannot apply with a share group (no ranges),
// with batching (max_bytes sizes the archives) or with lag_metadata (no
// per-record metadata). record_metadata: false contradicts the metadata
// fields that add keys, and applies to record mode only.
func archiveRules(pc *service.ParsedConfig) []error {
	var errs []error
	group := text(pc, fieldShareGroup)
	archive := text(pc, fieldArchive, fieldArchiveFormat) != ""
	if archive {
		if group != "" {
			errs = append(errs, fmt.Errorf(msgArchiveShare, fieldArchive, fieldShareGroup, group))
		}
		if pc.Contains(fieldBatching) {
			if p, err := pc.FieldBatchPolicy(fieldBatching); err == nil && !p.IsNoop() {
				errs = append(errs, fmt.Errorf(msgArchiveBatching, fieldBatching, fieldArchive, pathArchiveMaxBytes, pathArchiveMaxBytes))
			}
		}
		if lag, _ := pc.FieldBool(fieldLagMetadata); lag {
			errs = append(errs, fmt.Errorf(msgArchiveLag, fieldLagMetadata, fieldArchive))
		}
	}
	if on, err := pc.FieldBool(fieldRecordMetadata); err == nil && !on {
		for _, f := range []string{fieldRangeMetadata, fieldLagMetadata} {
			if set, _ := pc.FieldBool(f); set {
				errs = append(errs, fmt.Errorf(msgRecordMetaOff, f, fieldRecordMetadata))
			}
		}
		if group != "" {
			errs = append(errs, fmt.Errorf(msgRecordMetaShare, fieldRecordMetadata, fieldShareGroup, group))
		}
		if archive {
			errs = append(errs, fmt.Errorf(msgRecordMetaUnused, fieldRecordMetadata, fieldArchive))
		}
	}
	return errs
}

// ArchiveConfig is the archive part of Config. An empty Format is record
// mode.
type ArchiveConfig struct {
	Format   string
	MaxBytes int
}

// parseArchive reads archive mode's fields of a config that passed
// checkRules.
func parseArchive(pc *service.ParsedConfig) (ArchiveConfig, error) {
	if !pc.Contains(fieldArchive) {
		return ArchiveConfig{}, nil
	}
	format, err := pc.FieldString(fieldArchive, fieldArchiveFormat)
	if err != nil {
		return ArchiveConfig{}, err
	}
	s, err := pc.FieldString(fieldArchive, fieldArchiveMaxBytes)
	if err != nil {
		return ArchiveConfig{}, err
	}
	n, err := parseByteSize(pathArchiveMaxBytes, s)
	if err != nil {
		return ArchiveConfig{}, err
	}
	return ArchiveConfig{Format: format, MaxBytes: int(n)}, nil
}

// archiver builds the archives of one input. What it writes comes from
// the config. Safe for concurrent use (the readers prepare in parallel).
type archiver struct {
	format   string
	maxBytes int
	whole    bool // each engine batch is cut on its own (ordered, align_ranges)
}

// archiver returns the input's archiver, nil in record mode.
func (c Config) archiver() *archiver {
	if c.Archive.Format == "" {
		return nil
	}
	return &archiver{format: c.Archive.Format, maxBytes: c.Archive.MaxBytes, whole: c.Ordered || c.AlignRanges}
}

// streaming reports whether a range's engine batches are held and cut
// into pieces across them, which needs the engine's end markers.
func (a *archiver) streaming() bool { return a != nil && !a.whole }

// message builds the archive message of p, a piece of b's range whose
// values at offsets bad are not JSON (checked is false: not looked at yet).
func (a *archiver) message(b *engine.Batch, p piece, bad []int64, checked bool) *service.Message {
	if !checked {
		bad = a.badValues(p.chunks...)
	}
	var first, last *kgo.Record
	for _, c := range p.chunks {
		if len(c) == 0 {
			continue
		}
		if first == nil {
			first = c[0]
		}
		last = c[len(c)-1]
	}
	return newArchiveMessage(b.Range, a.build(p), p.start, p.end, p.n, first, last, bad)
}

// newArchiveMessage is the message of an archive buf of n records of range
// r covering [start, end), first and last its first and last records (nil:
// none), the values at offsets bad not JSON.
func newArchiveMessage(r ranges.Range, buf []byte, start, end int64, n int, first, last *kgo.Record, bad []int64) *service.Message {
	msg := service.NewMessage(buf)
	msg.MetaSetMut(metaTopic, r.Topic)
	msg.MetaSetMut(metaPartition, int64(r.Partition))
	msg.MetaSetMut(metaRangeStart, r.Start)
	msg.MetaSetMut(metaRangeEnd, r.End)
	msg.MetaSetMut(metaPieceStart, start)
	msg.MetaSetMut(metaPieceEnd, end)
	msg.MetaSetMut(metaRecords, int64(n))
	if first != nil {
		msg.MetaSetMut(metaFirstTS, first.Timestamp.UnixMilli())
		msg.MetaSetMut(metaLastTS, last.Timestamp.UnixMilli())
	}
	if len(bad) > 0 {
		msg.SetError(notJSON(r.Topic, r.Partition, bad))
	}
	return msg
}

// maxNamed is how many offsets an error names before it counts the rest.
const maxNamed = 5

// notJSON is the error of an archive whose values at offsets bad are not
// JSON.
func notJSON(topic string, partition int32, bad []int64) error {
	named := make([]string, 0, min(len(bad), maxNamed))
	for _, o := range bad[:min(len(bad), maxNamed)] {
		named = append(named, strconv.FormatInt(o, 10))
	}
	more := ""
	if len(bad) > maxNamed {
		more = fmt.Sprintf(" and %d more", len(bad)-maxNamed)
	}
	return fmt.Errorf("%s %s: the values of %s/%d at offsets %s%s are not JSON: %w",
		pathArchiveFormat, archiveJSONArray, topic, partition, strings.Join(named, ", "), more, errNotJSON)
}

// errNotJSON is wrapped by the error of a json_array archive holding a
// value that is not JSON.
var errNotJSON = errors.New("json_array holds JSON documents only")

// prepare is the engine's Prepare hook in archive mode, run by the
// readers in parallel: in whole mode it builds the batch's pieces (a
// service.MessageBatch), in streaming mode it writes the batch's records
// into its range's pieces (prepareStreaming, an archivePrep).
func (a *archiver) prepare(b *engine.Batch) any {
	if a.whole {
		return a.batch(b)
	}
	return a.prepareStreaming(b, b.Scratch())
}

// building is a piece of streaming mode being built by its range's reader
// (prepareStreaming), kept in the range's slot (engine.Batch.Scratch)
// from one batch to the next. Once the reader started the next piece, or
// is done with the range, it writes no more to it.
type building struct {
	buf  []byte // the head, then each record's bytes so far (separators between them)
	size int    // the piece's size so far, fixed included (cutPieces' count)
	n    int    // its records
}

// segment is the records of one engine batch that went into one piece:
// the next n records of the batch, their bytes p.buf[from:to] (no
// separator before the first).
type segment struct {
	p        *building
	n        int
	from, to int
	count    int     // p's records up to and including these
	bad      []int64 // offsets of their values that are not JSON (json_array)
}

// archivePrep is what a reader did with a batch of streaming mode: its
// records, in order, in one or more segments, each of another piece (a
// batch is cut only where the next record would take its piece past
// max_bytes).
type archivePrep struct {
	segs []segment
}

// prepareStreaming writes b's records into the pieces of its range, the
// one in slot first (the range's, or a slot of its own), and returns where
// they went. It runs on the range's reader, batch after batch in offset
// order. Each value is copied once, into a buffer sized for the piece (as
// many of the range's records as may still come, at this batch's average
// size, at most max_bytes), so the records' values can go as soon as
// ReadBatch takes the batch.
func (a *archiver) prepareStreaming(b *engine.Batch, slot *any) archivePrep {
	p, _ := (*slot).(*building)
	var segs []segment
	avg := 0 // the batch's average record size, once a piece is opened
	for _, rec := range b.Records {
		sz := a.recordSize(rec)
		if p == nil || p.n > 0 && p.size+sz > a.maxBytes {
			if avg == 0 {
				total := 0
				for _, r := range b.Records {
					total += a.recordSize(r)
				}
				avg = max(total/len(b.Records), 1)
			}
			left := max(b.Range.End-rec.Offset, 1) // records at most still to come
			est := a.fixed() + int(min(left, int64(a.maxBytes/avg+1)))*avg
			p = &building{size: a.fixed()}
			p.buf = append(makeNoZero(max(min(est, a.maxBytes), a.fixed()+sz)+len(a.tail())), a.head()...)
		}
		if p.n > 0 {
			p.buf = a.appendSep(p.buf)
		}
		if len(segs) == 0 || segs[len(segs)-1].p != p {
			segs = append(segs, segment{p: p, from: len(p.buf)})
		}
		p.buf = a.appendRecord(p.buf, rec)
		p.size += sz
		p.n++
		sg := &segs[len(segs)-1]
		sg.n++
		sg.to, sg.count = len(p.buf), p.n
		if a.format == archiveJSONArray && rec.Value != nil && !json.Valid(rec.Value) {
			sg.bad = append(sg.bad, rec.Offset)
		}
	}
	*slot = p
	for _, rec := range b.Records {
		// Copied: the engine counted them before (engine.Hooks.PrepareEarly)
		// and reads only the records' count, offsets and (for the metadata)
		// timestamps from here on. What the values pinned (the fetches'
		// buffers) can go, while the range waits for its turn.
		rec.Value, rec.Key, rec.Headers = nil, nil, nil
	}
	return archivePrep{segs: segs}
}

// batch builds the pieces of b, one message each.
func (a *archiver) batch(b *engine.Batch) service.MessageBatch {
	ps := a.cutPieces(b.Records, b.Span.Start, b.Span.End)
	out := make(service.MessageBatch, len(ps))
	for i, p := range ps {
		out[i] = a.message(b, p, nil, false)
	}
	return out
}

// archives hands out the archives of an input's ranges (see the top of
// this file). Benthos calls ReadBatch, and so read, from one goroutine.
// open and ready are its own.
type archives struct {
	a     *archiver
	log   *service.Logger
	open  map[rangeID]*openPiece // streaming: ranges with records not cut yet
	ready []*cutBatch            // cut pieces to hand out, oldest first

	// parts holds, in streaming mode, where each engine batch handed out in
	// a piece is in its piece's bytes, until the batch is done. Its
	// records' values are released once the batch is taken (the reader
	// copied them), so a replay of it (each part of a rejected piece is
	// delivered again alone) is built from these bytes.
	parts map[*engine.Batch]partBytes

	warned   time.Time // when a piece with an error was last logged
	unwarned int       // pieces with an error handed out since, not logged

	// kept holds, in whole mode, the pieces of each batch handed out (shallow
	// copies, taken before the pipeline sees them) until the batch is done:
	// its records' values, keys and headers are released once the pieces are
	// built, so a range in flight holds its values once, in its archives,
	// and a replay hands out these pieces again.
	kept map[*engine.Batch]service.MessageBatch
}

// warnEvery is how often pieces handed out with an error (json_array
// values that are not JSON) are logged at most.
const warnEvery = 10 * time.Second

// openPiece is, in streaming mode, the piece a range's reader is filling
// as ReadBatch took its batches: the engine batches in it (whole, or the
// part of one before the reader started the next piece), in offset order.
type openPiece struct {
	p     *building
	parts []*engine.Batch
	spans []partBytes // of each part, its buf not set yet
	to, n int         // p's bytes and records up to the end of the last part
	bad   []int64     // offsets of its values that are not JSON (json_array)
}

// partBytes is where an engine batch is in a piece of streaming mode: its
// records' bytes, buf[from:to], n records, bad those not JSON.
type partBytes struct {
	buf      []byte
	from, to int
	n        int
	bad      []int64
}

func newArchives(a *archiver, log *service.Logger) *archives {
	if a == nil {
		return nil
	}
	return &archives{a: a, log: log, open: map[rangeID]*openPiece{}, kept: map[*engine.Batch]service.MessageBatch{}, parts: map[*engine.Batch]partBytes{}}
}

// read returns the next archive batch, taking engine batches from eng
// until one is cut. Its errors are Next's.
func (as *archives) read(ctx context.Context, eng *engine.Engine) (service.MessageBatch, service.AckFunc, error) {
	for len(as.ready) == 0 {
		b, err := eng.Next(ctx)
		if err != nil {
			return nil, nil, err
		}
		as.add(b)
	}
	c := as.ready[0]
	as.ready[0] = nil
	as.ready = as.ready[1:]
	for _, m := range c.msgs {
		if err := m.GetError(); err != nil {
			as.warn(err)
		}
	}
	return c.msgs, archiveAck(c.parts), nil
}

// warn logs the error of a piece handed out with one: the first, then at
// most one every warnEvery with how many were not logged. The message
// carries it for the pipeline to route.
func (as *archives) warn(err error) {
	if time.Since(as.warned) < warnEvery {
		as.unwarned++
		return
	}
	more := ""
	if as.unwarned > 0 {
		more = fmt.Sprintf(" (and %d more pieces with errors since the last line)", as.unwarned)
	}
	as.warned, as.unwarned = time.Now(), 0
	if as.log != nil {
		as.log.Warnf("Handed out an archive with an error, for the pipeline to route (errored()): %v%s", err, more)
	}
}

// add takes one engine batch. In whole mode it is cut on its own. In
// streaming mode its records join the pieces its reader wrote them into,
// and a piece is cut once the reader started the next one or, at the
// range's end marker, is done with the range. A replay is handed out alone.
func (as *archives) add(b *engine.Batch) {
	id := rangeID{r: b.Range, inc: b.Incarnation()}
	if b.RangeEnd {
		if o := as.open[id]; o != nil {
			delete(as.open, id)
			as.cut(o)
		}
		*b.Scratch() = nil // the reader is done: its last piece is cut
		return
	}
	prep := b.Prepared
	b.Prepared = nil // processors may mutate it; a replay rebuilds (whole mode: as.kept, streaming: as.parts)
	if as.a.whole {
		as.ready = append(as.ready, &cutBatch{msgs: as.whole(b, prep), parts: []*engine.Batch{b}})
		return
	}
	for k := range as.parts {
		if k.Done() {
			delete(as.parts, k) // acknowledged, or dropped by the engine: no replay comes
		}
	}
	if b.Attempts > 1 {
		as.ready = append(as.ready, &cutBatch{msgs: service.MessageBatch{as.replay(b)}, parts: []*engine.Batch{b}})
		return
	}
	p, ok := prep.(archivePrep)
	if !ok {
		// Not prepared (never so far): written into pieces of its own.
		var slot any
		p = as.a.prepareStreaming(b, &slot)
		if o := as.open[id]; o != nil {
			delete(as.open, id)
			as.cut(o)
		}
	}
	o := as.open[id]
	for i, sg := range p.segs {
		part := b
		if i < len(p.segs)-1 {
			b = part.Split(sg.n)
		}
		if o != nil && o.p != sg.p {
			as.cut(o) // the reader started the next piece: this one is complete
			o = nil
		}
		if o == nil {
			o = &openPiece{p: sg.p}
		}
		o.parts = append(o.parts, part)
		o.spans = append(o.spans, partBytes{from: sg.from, to: sg.to, n: sg.n, bad: sg.bad})
		o.to, o.n = sg.to, sg.count
		o.bad = append(o.bad, sg.bad...)
	}
	as.open[id] = o
}

// replay returns the archive of b alone, a part of a piece handed out
// before (a rejected piece's parts are each delivered again).
func (as *archives) replay(b *engine.Batch) *service.Message {
	pb, ok := as.parts[b]
	if !ok {
		// Never handed out in a piece (never so far): its records still
		// hold their values.
		return as.a.message(b, as.a.cutPieces(b.Records, b.Span.Start, b.Span.End)[0], nil, false)
	}
	var first, last *kgo.Record
	if len(b.Records) > 0 {
		first, last = b.Records[0], b.Records[len(b.Records)-1]
	}
	return newArchiveMessage(b.Range, as.a.replayBytes(pb.buf[pb.from:pb.to], pb.n), b.Span.Start, b.Span.End, pb.n, first, last, pb.bad)
}

// whole returns the pieces of b in whole mode: on its first delivery those
// the readers built (prep), kept for a replay while its records are
// released. On a replay the kept ones again.
func (as *archives) whole(b *engine.Batch, prep any) service.MessageBatch {
	for k := range as.kept {
		if k.Done() {
			delete(as.kept, k) // acknowledged, or dropped by the engine: no replay comes
		}
	}
	if kept, ok := as.kept[b]; ok {
		return copyBatch(kept)
	}
	msgs, ok := prep.(service.MessageBatch)
	if !ok {
		msgs = as.a.batch(b)
	}
	as.kept[b] = copyBatch(msgs)
	for _, rec := range b.Records {
		// The engine reads only the records' count and offsets from here
		// on. What the values pinned (the fetches' buffers) can go.
		rec.Value, rec.Key, rec.Headers = nil, nil, nil
	}
	return msgs
}

// copyBatch returns shallow copies of msgs: the same bytes, metadata of
// their own.
func copyBatch(msgs service.MessageBatch) service.MessageBatch {
	out := make(service.MessageBatch, len(msgs))
	for i, m := range msgs {
		out[i] = m.Copy()
	}
	return out
}

// cut finishes o's piece, up to its last part (the reader is done with
// it), and queues it to hand out with its parts.
func (as *archives) cut(o *openPiece) {
	if len(o.parts) == 0 {
		return
	}
	buf := as.a.finish(o.p.buf[:o.to], o.n)
	for i, part := range o.parts {
		pb := o.spans[i]
		pb.buf = buf
		as.parts[part] = pb
	}
	first, last := o.parts[0], o.parts[len(o.parts)-1]
	var firstRec, lastRec *kgo.Record
	if len(first.Records) > 0 {
		firstRec, lastRec = first.Records[0], last.Records[len(last.Records)-1]
	}
	msg := newArchiveMessage(first.Range, buf, first.Span.Start, last.Span.End, o.n, firstRec, lastRec, o.bad)
	as.ready = append(as.ready, &cutBatch{msgs: service.MessageBatch{msg}, parts: o.parts})
	o.parts, o.spans = nil, nil
}

// archiveAck finishes parts, the engine batches one archive batch
// carries, once the pipeline is done with it (a rejected one's batches are
// each delivered again, with auto_replay_nacks, as archives of their own).
func archiveAck(parts []*engine.Batch) service.AckFunc {
	var once atomic.Bool // this delivery's ack runs once
	return func(_ context.Context, err error) error {
		if once.Swap(true) {
			return nil
		}
		if err != nil {
			engine.NackAll(parts, err)
		} else {
			engine.AckAll(parts)
		}
		return nil
	}
}
