package plugin

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The archive formats of archive mode (archive.go). How many bytes a
// piece of records takes in each, where a range is cut into pieces, and
// the bytes themselves, as Benthos' archive processor writes them, each
// value copied once.

// fixed is the bytes an archive takes besides its records' (recordSize):
// with n records, fixed + the sum of their sizes.
func (a *archiver) fixed() int {
	switch a.format {
	case archiveLines:
		return -1 // a separator counted on each record, none before the first
	case archiveJSONArray:
		return 1 // [ and ], less the first record's comma
	case archiveBinary:
		return 4 // the count
	case archiveTar:
		return 2 * tarBlock // the end of the archive
	}
	return 0
}

// tarBlock is tar's block: a header, and the unit its files are padded to.
const tarBlock = 512

// recordSize is the bytes rec takes in an archive.
func (a *archiver) recordSize(rec *kgo.Record) int {
	n := len(rec.Value)
	switch a.format {
	case archiveLines:
		return n + 1
	case archiveJSONArray:
		if rec.Value == nil {
			n = len(jsonNull)
		}
		return n + 1
	case archiveBinary:
		return n + 4
	case archiveTar:
		return tarBlock + (n+tarBlock-1)/tarBlock*tarBlock
	}
	return n
}

var jsonNull = []byte("null")

// piece is the records of one archive: chunks of records in offset order,
// the offsets it covers and its size.
type piece struct {
	chunks     [][]*kgo.Record
	start, end int64
	size, n    int
}

// cutPieces cuts recs (spanning [start, end)) into pieces of at most
// maxBytes, at record boundaries.
func (a *archiver) cutPieces(recs []*kgo.Record, start, end int64) []piece {
	var out []piece
	p := piece{start: start, size: a.fixed()}
	from := 0
	for i, rec := range recs {
		sz := a.recordSize(rec)
		if p.n > 0 && p.size+sz > a.maxBytes {
			p.chunks, p.end = [][]*kgo.Record{recs[from:i]}, rec.Offset
			out = append(out, p)
			p, from = piece{start: rec.Offset, size: a.fixed()}, i
		}
		p.size += sz
		p.n++
	}
	p.chunks, p.end = [][]*kgo.Record{recs[from:]}, end
	return append(out, p)
}

// badValues returns the offsets of the values in chunks that a json_array
// archive cannot hold (not JSON). nil for other formats.
func (a *archiver) badValues(chunks ...[]*kgo.Record) []int64 {
	if a.format != archiveJSONArray {
		return nil
	}
	var bad []int64
	for _, recs := range chunks {
		for _, rec := range recs {
			if rec.Value != nil && !json.Valid(rec.Value) {
				bad = append(bad, rec.Offset)
			}
		}
	}
	return bad
}

// joinAbove is the average record size in a piece (format included) from
// which build joins the values (buildJoined) rather than appending them to
// a buffer it allocated. A new buffer is cleared before it is written, which
// costs as much as copying large values into it, while joining costs a call
// per value and separator, more than the clearing below a few hundred bytes
// (BenchmarkArchiveBuild: about 0.5x the time at 1 KiB, up to 2x at 100 B).
const joinAbove = 256

// build writes p's values in the archive format, into a buffer of exactly
// p.size bytes. Each value is copied once.
func (a *archiver) build(p piece) []byte {
	switch {
	case a.format == archiveTar:
		return a.buildTar(p)
	case p.n > 0 && p.size/p.n >= joinAbove:
		return a.buildJoined(p)
	}
	return a.buildAppended(p)
}

// buildAppended is build by appending to a buffer of p.size.
func (a *archiver) buildAppended(p piece) []byte {
	buf := make([]byte, 0, max(p.size, 0))
	sep := false // a separator goes before the next value
	switch a.format {
	case archiveConcatenate:
		for _, c := range p.chunks {
			for _, rec := range c {
				buf = append(buf, rec.Value...)
			}
		}
	case archiveLines:
		for _, c := range p.chunks {
			for _, rec := range c {
				if sep {
					buf = append(buf, '\n')
				}
				buf, sep = append(buf, rec.Value...), true
			}
		}
	case archiveBinary:
		buf = binary.BigEndian.AppendUint32(buf, uint32(p.n))
		for _, c := range p.chunks {
			for _, rec := range c {
				buf = binary.BigEndian.AppendUint32(buf, uint32(len(rec.Value)))
				buf = append(buf, rec.Value...)
			}
		}
	case archiveJSONArray:
		buf = append(buf, '[')
		for _, c := range p.chunks {
			for _, rec := range c {
				if sep {
					buf = append(buf, ',')
				}
				sep = true
				if rec.Value == nil {
					buf = append(buf, jsonNull...)
				} else {
					buf = append(buf, rec.Value...)
				}
			}
		}
		buf = append(buf, ']')
	}
	return buf
}

// buildJoined is build by bytes.Join, whose buffer is not cleared before
// it is written.
func (a *archiver) buildJoined(p piece) []byte {
	lp := joinParts.Get().(*[][]byte)
	parts := (*lp)[:0]
	var sep []byte
	switch a.format {
	case archiveConcatenate, archiveLines:
		if a.format == archiveLines {
			sep = newline
		}
		for _, c := range p.chunks {
			for _, rec := range c {
				parts = append(parts, rec.Value)
			}
		}
	case archiveBinary:
		// The count and each value's length, in a buffer of their own.
		lens := make([]byte, 0, 4*(p.n+1))
		lens = binary.BigEndian.AppendUint32(lens, uint32(p.n))
		parts = append(parts, lens[0:4])
		for _, c := range p.chunks {
			for _, rec := range c {
				at := len(lens)
				lens = binary.BigEndian.AppendUint32(lens, uint32(len(rec.Value)))
				parts = append(parts, lens[at:at+4], rec.Value)
			}
		}
	case archiveJSONArray:
		parts = append(parts, jsonOpen)
		for _, c := range p.chunks {
			for _, rec := range c {
				if len(parts) > 1 {
					parts = append(parts, jsonComma)
				}
				if rec.Value == nil {
					parts = append(parts, jsonNull)
				} else {
					parts = append(parts, rec.Value)
				}
			}
		}
		parts = append(parts, jsonClose)
	}
	buf := bytes.Join(parts, sep)
	clear(parts) // the pool keeps no value alive
	*lp = parts[:0]
	joinParts.Put(lp)
	return buf
}

// joinParts recycles the lists of slices build joins (one a value or
// separator each), so a piece costs no list of its own.
var joinParts = sync.Pool{New: func() any { return new([][]byte) }}

var (
	newline   = []byte("\n")
	jsonOpen  = []byte("[")
	jsonComma = []byte(",")
	jsonClose = []byte("]")
)

// buildTar writes p as a tar archive (USTAR, as Go's archive/tar writes
// it): per record a header block naming the file by its offset, with the
// record's timestamp to the second, then its value padded to whole blocks.
// Two zero blocks end it. Headers are written directly: archive/tar's
// writer cost about 7 allocations and 10 µs a record.
func (a *archiver) buildTar(p piece) []byte {
	buf := make([]byte, max(p.size, 0)) // zeroed: headers and padding are mostly zeros
	at := 0
	for _, c := range p.chunks {
		for _, rec := range c {
			tarHeader(buf[at:at+tarBlock], rec.Offset, len(rec.Value), max(rec.Timestamp.Unix(), 0))
			at += tarBlock
			copy(buf[at:], rec.Value)
			at += (len(rec.Value) + tarBlock - 1) / tarBlock * tarBlock
		}
	}
	return buf
}

// tarHeader writes the USTAR header of a regular file named by offset, of
// size bytes and modified at mtime (Unix seconds), into h, a zeroed block.
func tarHeader(h []byte, offset int64, size int, mtime int64) {
	copy(h[0:100], strconv.AppendInt(h[:0:100], offset, 10))
	tarOctal(h[100:108], 0o644) // mode
	tarOctal(h[108:116], 0)     // uid
	tarOctal(h[116:124], 0)     // gid
	tarOctal(h[124:136], int64(size))
	tarOctal(h[136:148], mtime)
	h[156] = tar.TypeReg
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	tarOctal(h[329:337], 0)      // devmajor
	tarOctal(h[337:345], 0)      // devminor
	copy(h[148:156], "        ") // the checksum counts its own field as spaces
	sum := int64(0)
	for _, b := range h[:tarBlock] {
		sum += int64(b)
	}
	tarOctal(h[148:155], sum) // six digits and a NUL; the space after stays
}

// tarOctal writes v into field as tar does: octal digits, zero-padded, and
// a NUL.
func tarOctal(field []byte, v int64) {
	n := len(field) - 1
	for i := n - 1; i >= 0; i-- {
		field[i] = byte('0' + v&7)
		v >>= 3
	}
	field[n] = 0
}

// The pieces of streaming mode are built by the ranges' readers as their
// batches come (archiver.prepareStreaming). Each record's bytes are
// appended to its piece's buffer, nothing else is done per record, and the
// piece is finished (finish: the count, the closing bytes) once handed
// out. A part of a piece (the records of one engine batch in it) is a run
// of bytes of its buffer, from which a replay of that part alone is built
// (replayBytes).

// head is the bytes a piece's buffer starts with before its first record:
// binary's count (written by finish) and json_array's '['.
func (a *archiver) head() []byte {
	switch a.format {
	case archiveBinary:
		return []byte{0, 0, 0, 0}
	case archiveJSONArray:
		return jsonOpen
	}
	return nil
}

// tail is the bytes that end an archive. json_array's ']' and tar's two
// zero blocks.
func (a *archiver) tail() []byte {
	switch a.format {
	case archiveJSONArray:
		return jsonClose
	case archiveTar:
		return tarEnd[:]
	}
	return nil
}

var tarEnd [2 * tarBlock]byte

// appendSep appends the separator written before a record that is not its
// piece's first: lines' newline, json_array's comma.
func (a *archiver) appendSep(buf []byte) []byte {
	switch a.format {
	case archiveLines:
		return append(buf, '\n')
	case archiveJSONArray:
		return append(buf, ',')
	}
	return buf
}

// appendRecord appends rec's bytes in the archive format, without the
// separator before it (appendSep): recordSize bytes, less the separator.
func (a *archiver) appendRecord(buf []byte, rec *kgo.Record) []byte {
	switch a.format {
	case archiveBinary:
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(rec.Value)))
	case archiveJSONArray:
		if rec.Value == nil {
			return append(buf, jsonNull...)
		}
	case archiveTar:
		at := len(buf)
		buf = append(buf, tarEnd[:tarBlock]...)
		tarHeader(buf[at:at+tarBlock], rec.Offset, len(rec.Value), max(rec.Timestamp.Unix(), 0))
		buf = append(buf, rec.Value...)
		if pad := len(rec.Value) % tarBlock; pad != 0 {
			buf = append(buf, tarEnd[:tarBlock-pad]...)
		}
		return buf
	}
	return append(buf, rec.Value...)
}

// finish completes an archive of n records whose head and records are
// buf (its capacity holding the tail too, or it is grown).
func (a *archiver) finish(buf []byte, n int) []byte {
	if a.format == archiveBinary {
		binary.BigEndian.PutUint32(buf[0:4], uint32(n))
	}
	return append(buf, a.tail()...)
}

// replayBytes builds the archive of the n records whose bytes (separators
// between them, none before the first) are body, a part of a piece: a
// copy, the piece's buffer left as it is.
func (a *archiver) replayBytes(body []byte, n int) []byte {
	head, tail := a.head(), a.tail()
	buf := make([]byte, 0, len(head)+len(body)+len(tail))
	buf = append(buf, head...)
	buf = append(buf, body...)
	return a.finish(buf, n)
}

// makeNoZero returns an empty slice of capacity n whose memory is not
// cleared first. A piece's buffer is written whole before it is read, and
// clearing megabytes costs about as much as copying the values into them
// (strings.Builder.Grow allocates without clearing; its bytes are ours,
// the builder is dropped).
func makeNoZero(n int) []byte {
	if n <= 0 {
		return nil
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteByte(0)
	s := sb.String()
	return unsafe.Slice(unsafe.StringData(s), n)[:0]
}
