package ranges

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Acknowledged offsets above a commit. A partition's committed offset is its
// frontier: every offset below it is acknowledged. Offsets above it may be
// acknowledged too (batches acknowledged out of order, which ordering: key
// makes common), and a crash re-reads them. AckedAbove lists them, and
// EncodeAcked writes them into a commit's metadata (a string the group keeps
// with the offset), so that a start from that offset can skip them
// (DecodeAcked). Two encodings, whichever is shorter: runs ("r" then
// "gap.length" pairs in base 36, each gap from the end of the run before,
// the first from the committed offset), or a bitmap ("b" then the offsets
// from the committed offset up to the last acknowledged one, a bit each,
// least significant first, in unpadded URL base64). What does not fit in the
// size limit is left out: those offsets are read again, never skipped.

// ErrAckedMetadata means a commit's metadata of acknowledged offsets cannot
// be read.
var ErrAckedMetadata = errors.New("unreadable acknowledged offsets")

// AckedAbove returns the acknowledged spans of k above its frontier, in
// offset order, disjoint and not adjacent; nil for an unknown key or none.
func (t *Tracker) AckedAbove(k Key) []Range {
	tp, ok := t.parts[k]
	if !ok {
		return nil
	}
	var out []Range
	for _, tr := range tp.queue[tp.head:] {
		for _, s := range tr.acked {
			if s.end <= tp.frontier {
				continue
			}
			r := Range{Topic: k.Topic, Partition: k.Partition, Start: max(s.start, tp.frontier), End: s.end}
			if n := len(out); n > 0 && out[n-1].End == r.Start {
				out[n-1].End = r.End // adjacent spans of two ranges
				continue
			}
			out = append(out, r)
		}
	}
	return out
}

// EncodeAcked writes spans (disjoint, in offset order, each at or above
// from) relative to from in at most limit bytes, the shorter of the runs and
// the bitmap encodings, leaving out the last spans that do not fit; "" for
// none (or none that fits).
func EncodeAcked(from int64, spans []Range, limit int) string {
	runs, nr := encodeRuns(from, spans, limit)
	bits, nb := encodeBitmap(from, spans, limit)
	if nb > nr || (nb == nr && len(bits) < len(runs)) {
		return bits
	}
	return runs
}

// encodeRuns is the runs encoding of as many of spans as fit in limit, and
// how many.
func encodeRuns(from int64, spans []Range, limit int) (string, int) {
	var b strings.Builder
	b.WriteString("r")
	at, n := from, 0
	for _, s := range spans {
		if s.Start < at || s.End <= s.Start {
			break // not in order: what follows is left out
		}
		pair := strconv.FormatInt(s.Start-at, 36) + "." + strconv.FormatInt(s.End-s.Start, 36)
		if n > 0 {
			pair = "," + pair
		}
		if b.Len()+len(pair) > limit {
			break
		}
		b.WriteString(pair)
		at, n = s.End, n+1
	}
	if n == 0 {
		return "", 0
	}
	return b.String(), n
}

// encodeBitmap is the bitmap encoding of as many of spans as fit in limit,
// and how many.
func encodeBitmap(from int64, spans []Range, limit int) (string, int) {
	maxBits := int64(base64.RawURLEncoding.DecodedLen(limit-1)) * 8
	var bits []byte
	at, n := from, 0
	for _, s := range spans {
		if s.Start < at || s.End <= s.Start || s.End-from > maxBits {
			break
		}
		for o := s.Start; o < s.End; o++ {
			i := o - from
			for int64(len(bits)) <= i/8 {
				bits = append(bits, 0)
			}
			bits[i/8] |= 1 << (i % 8)
		}
		at, n = s.End, n+1
	}
	if n == 0 {
		return "", 0
	}
	return "b" + base64.RawURLEncoding.EncodeToString(bits), n
}

// DecodeAcked reads what EncodeAcked wrote for the offset from: the spans of
// topic's partition, absolute, in offset order. An error wraps
// ErrAckedMetadata: such metadata is taken as none.
func DecodeAcked(topic string, partition int32, from int64, s string) ([]Range, error) {
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrAckedMetadata, s, why) }
	if s == "" {
		return nil, bad("empty")
	}
	var out []Range
	add := func(start, end int64) {
		if n := len(out); n > 0 && out[n-1].End == start {
			out[n-1].End = end
			return
		}
		out = append(out, Range{Topic: topic, Partition: partition, Start: start, End: end})
	}
	switch s[0] {
	case 'r':
		at := from
		for _, pair := range strings.Split(s[1:], ",") {
			gap, length, ok := strings.Cut(pair, ".")
			if !ok {
				return nil, bad("a run without its length")
			}
			g, err1 := strconv.ParseInt(gap, 36, 64)
			l, err2 := strconv.ParseInt(length, 36, 64)
			if err1 != nil || err2 != nil || g < 0 || l <= 0 || at+g < at || at+g+l < at+g {
				return nil, bad("a run that is not two non-negative numbers")
			}
			add(at+g, at+g+l)
			at += g + l
		}
	case 'b':
		bits, err := base64.RawURLEncoding.DecodeString(s[1:])
		if err != nil || len(bits) == 0 {
			return nil, bad("not a bitmap")
		}
		for i, c := range bits {
			for j := range 8 {
				if c&(1<<j) != 0 {
					o := from + int64(i*8+j)
					add(o, o+1)
				}
			}
		}
	default:
		return nil, bad("unknown encoding")
	}
	if len(out) == 0 {
		return nil, bad("no offset")
	}
	return out, nil
}
