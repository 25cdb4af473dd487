package cache

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// records returns records at offsets from..to-1, as kgo decodes them: one
// slice of pointers.
func records(from, to int64) []*kgo.Record {
	var recs []*kgo.Record
	for o := from; o < to; o++ {
		recs = append(recs, &kgo.Record{Offset: o})
	}
	return recs
}

func offsetsOf(recs []*kgo.Record) []int64 {
	out := make([]int64, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

// TestKeepFrom checks what decode buffers of a fetch: the records at or
// past the position; into an empty buffer the decoded slice itself (no
// copy per fetch), with the records before the position dropped from it.
func TestKeepFrom(t *testing.T) {
	recs := records(10, 15)
	got := keepFrom(nil, recs, 12)
	assert.Equal(t, []int64{12, 13, 14}, offsetsOf(got), "keepFrom(nil, 10..14, 12)")
	assert.Same(t, &recs[2], &got[0], "keepFrom into an empty buffer: the decoded slice, not a copy")
	assert.Equal(t, len(got), cap(got), "keepFrom into an empty buffer: capacity")
	assert.Nil(t, recs[0], "a record before the position is dropped from the slice")
	assert.Nil(t, recs[1], "a record before the position is dropped from the slice")

	buf := records(5, 7)
	got = keepFrom(buf, records(7, 9), 7)
	assert.Equal(t, []int64{5, 6, 7, 8}, offsetsOf(got), "keepFrom(5..6, 7..8, 7)")

	assert.Empty(t, keepFrom(nil, records(1, 3), 3), "keepFrom(nil, 1..2, 3)")
	assert.Empty(t, keepFrom(nil, nil, 0), "keepFrom(nil, nil, 0)")
}

// TestDeliverHandsOverTheBuffer checks how deliver hands buffered records
// to emit: all of them as the buffer itself (no copy), which the cursor
// then lets go of; a part of them as a copy, the rest staying buffered at
// the front of the cursor's slice and the handed-over ones cleared from
// it, so that what stays buffered does not pin them.
func TestDeliverHandsOverTheBuffer(t *testing.T) {
	for _, tc := range []struct {
		end      int64
		want     []int64
		left     []int64
		next     int64
		original bool // emit gets the buffer's own slice
	}{
		{end: 100, want: []int64{10, 11, 12, 13}, next: 14, original: true},
		{end: 12, want: []int64{10, 11}, left: []int64{12, 13}, next: 12},
	} {
		t.Run(fmt.Sprint("end ", tc.end), func(t *testing.T) {
			cur := newCursor("t", 0)
			cur.buf = records(10, 14)
			cur.fetched = 14
			whole := cur.buf
			var got []*kgo.Record
			require.NoError(t, cur.deliver(tc.end, func(recs []*kgo.Record, _ int64) error {
				got = recs
				return nil
			}))
			assert.Equal(t, tc.want, offsetsOf(got), "delivered below %d", tc.end)
			assert.Equal(t, len(got), cap(got), "capacity of what was delivered")
			assert.Equal(t, tc.original, &got[0] == &whole[0], "emit got the buffer's own slice")
			assert.Equal(t, tc.left, nilIfEmpty(offsetsOf(cur.buf)), "left buffered")
			assert.Equal(t, tc.next, cur.next, "next")
			if !tc.original {
				for i := range len(tc.want) {
					assert.Nil(t, whole[i], "slot %d of the buffer after delivering it", i)
				}
			}
		})
	}
}

func nilIfEmpty(s []int64) []int64 {
	if len(s) == 0 {
		return nil
	}
	return s
}
