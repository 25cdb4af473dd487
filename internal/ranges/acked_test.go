package ranges

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func spans(pairs ...int64) []Range {
	var out []Range
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Range{Topic: "t", Start: pairs[i], End: pairs[i+1]})
	}
	return out
}

func TestEncodeAcked(t *testing.T) {
	for _, tc := range []struct {
		from  int64
		in    []Range
		limit int
		want  []Range // what decodes; nil: ""
	}{
		{100, spans(105, 110, 120, 121), 4096, spans(105, 110, 120, 121)},
		{0, spans(1, 2, 3, 4, 5, 6, 7, 8), 4096, spans(1, 2, 3, 4, 5, 6, 7, 8)},     // dense: bitmap
		{1_000_000, spans(1_000_500, 1_900_000), 4096, spans(1_000_500, 1_900_000)}, // long: runs
		{0, spans(10, 20, 1_000_000_000, 1_000_000_005), 4096, spans(10, 20, 1_000_000_000, 1_000_000_005)},
		{0, spans(10, 20, 30, 40, 50, 60), 9, spans(10, 20, 30, 40)}, // "ra.a,a.a" fits, the third run does not
		{0, spans(10, 20), 3, nil},
		{0, nil, 4096, nil},
	} {
		got := EncodeAcked(tc.from, tc.in, tc.limit)
		assert.LessOrEqual(t, len(got), tc.limit, "EncodeAcked(%d, %v, %d) = %q: too long", tc.from, tc.in, tc.limit, got)
		if tc.want == nil {
			assert.Empty(t, got, "EncodeAcked(%d, %v, %d)", tc.from, tc.in, tc.limit)
			continue
		}
		dec, err := DecodeAcked("t", 0, tc.from, got)
		require.NoError(t, err, "DecodeAcked(%q)", got)
		assert.Equal(t, tc.want, dec, "EncodeAcked(%d, %v, %d) = %q", tc.from, tc.in, tc.limit, got)
	}
	// The shorter encoding is chosen.
	assert.True(t, strings.HasPrefix(EncodeAcked(0, spans(1, 2, 3, 4, 5, 6, 7, 8), 4096), "b"))
	assert.True(t, strings.HasPrefix(EncodeAcked(0, spans(1000, 2000), 4096), "r"))
}

func TestDecodeAckedRefusesWhatItCannotRead(t *testing.T) {
	for _, s := range []string{"", "x", "r", "r1", "r1.0", "r-1.2", "rz.z,", "b", "b!!", "bAA", "kbr-cut:12"} {
		_, err := DecodeAcked("t", 0, 0, s)
		assert.True(t, errors.Is(err, ErrAckedMetadata), "DecodeAcked(%q) = %v, want ErrAckedMetadata", s, err)
	}
}

func TestTrackerAckedAbove(t *testing.T) {
	tr := NewTracker()
	k := Key{Topic: "t"}
	require.NoError(t, tr.Start(k, 0))
	require.NoError(t, tr.Add(Range{Topic: "t", Start: 0, End: 10}))
	require.NoError(t, tr.Add(Range{Topic: "t", Start: 10, End: 20}))
	for _, s := range spans(2, 4, 8, 10, 10, 12, 15, 16) {
		_, _, err := tr.Ack(s)
		require.NoError(t, err)
	}
	assert.Equal(t, spans(2, 4, 8, 12, 15, 16), tr.AckedAbove(k))
	_, _, err := tr.Ack(Range{Topic: "t", Start: 0, End: 2})
	require.NoError(t, err)
	assert.Equal(t, spans(8, 12, 15, 16), tr.AckedAbove(k), "above the frontier 4")
	assert.Nil(t, tr.AckedAbove(Key{Topic: "u"}))
}

// FuzzAcked checks, for any set of spans above an offset and any size
// limit: EncodeAcked's result fits the limit, decodes without an error
// (unless it is ""), and names only offsets of the spans, a prefix of them in
// offset order (what does not fit is left out, never invented); DecodeAcked
// of any string either fails with ErrAckedMetadata or returns disjoint spans
// in offset order at or above the offset.
func FuzzAcked(f *testing.F) {
	f.Add(int64(100), []byte{5, 5, 10, 1}, 4096, "r5.5,a.1")
	f.Add(int64(0), []byte{1, 1, 1, 1, 1, 1}, 16, "bqg")
	f.Fuzz(func(t *testing.T, from int64, gaps []byte, limit int, raw string) {
		from = max(from%1_000_000_000, 0)
		limit = limit%5000 + 1
		if limit < 1 {
			limit += 5000
		}
		var in []Range
		at := from
		for i := 0; i+1 < len(gaps); i += 2 {
			s := at + int64(gaps[i])
			e := s + int64(gaps[i+1]%40) + 1
			in = append(in, Range{Topic: "t", Start: s, End: e})
			at = e + 1 // never adjacent
		}
		enc := EncodeAcked(from, in, limit)
		require.LessOrEqual(t, len(enc), limit)
		if enc != "" {
			dec, err := DecodeAcked("t", 0, from, enc)
			require.NoError(t, err, "%q", enc)
			var want, got []int64
			for _, r := range in {
				for o := r.Start; o < r.End; o++ {
					want = append(want, o)
				}
			}
			for _, r := range dec {
				for o := r.Start; o < r.End; o++ {
					got = append(got, o)
				}
			}
			require.True(t, len(got) <= len(want) && slices.Equal(got, want[:len(got)]), "EncodeAcked(%d, %v, %d) = %q decodes to %v", from, in, limit, enc, dec)
		}
		dec, err := DecodeAcked("t", 0, from, raw)
		if err != nil {
			require.ErrorIs(t, err, ErrAckedMetadata)
			return
		}
		prev := from
		for i, r := range dec {
			require.Less(t, r.Start, r.End)
			require.GreaterOrEqual(t, r.Start, prev, "span %d of %q", i, raw)
			if i > 0 {
				require.Greater(t, r.Start, prev, "adjacent spans %d of %q", i, raw)
			}
			prev = r.End
		}
	})
}
