package ranges

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ackStep is one Ack in a tracker table test and what it must return.
type ackStep struct {
	s            Range
	wantFrontier int64
	wantComplete bool
	wantErr      error
}

func TestTrackerAck(t *testing.T) {
	a := key("a", 0)
	r1, r2, r3, r4 := rng("a", 0, 100, 110), rng("a", 0, 110, 120), rng("a", 0, 120, 130), rng("a", 0, 130, 135)
	tests := []struct {
		name  string
		added []Range // added after Start(a, 100)
		acks  []ackStep
	}{
		{
			name:  "in-order acks advance one by one",
			added: []Range{r1, r2, r3},
			acks: []ackStep{
				{s: r1, wantFrontier: 110, wantComplete: true},
				{s: r2, wantFrontier: 120, wantComplete: true},
				{s: r3, wantFrontier: 130, wantComplete: true},
			},
		},
		{
			name:  "out-of-order acks hold the frontier until the gap fills",
			added: []Range{r1, r2, r3, r4},
			acks: []ackStep{
				{s: r3, wantFrontier: 100, wantComplete: true},
				{s: r2, wantFrontier: 100, wantComplete: true},
				{s: r1, wantFrontier: 130, wantComplete: true},
				{s: r4, wantFrontier: 135, wantComplete: true},
			},
		},
		{
			name:  "reverse order jumps to the end at the last ack",
			added: []Range{r1, r2, r3, r4},
			acks: []ackStep{
				{s: r4, wantFrontier: 100, wantComplete: true},
				{s: r3, wantFrontier: 100, wantComplete: true},
				{s: r2, wantFrontier: 100, wantComplete: true},
				{s: r1, wantFrontier: 135, wantComplete: true},
			},
		},
		{
			name:  "spans of the head range move the frontier within it",
			added: []Range{r1, r2},
			acks: []ackStep{
				{s: rng("a", 0, 100, 104), wantFrontier: 104},
				{s: rng("a", 0, 107, 110), wantFrontier: 104},
				{s: rng("a", 0, 104, 107), wantFrontier: 110, wantComplete: true},
				{s: rng("a", 0, 115, 120), wantFrontier: 110},
				{s: rng("a", 0, 110, 115), wantFrontier: 120, wantComplete: true},
			},
		},
		{
			name:  "a complete range past a gap waits, then the frontier runs into the next partial range",
			added: []Range{r1, r2, r3},
			acks: []ackStep{
				{s: r2, wantFrontier: 100, wantComplete: true},
				{s: rng("a", 0, 120, 125), wantFrontier: 100},
				{s: r1, wantFrontier: 125, wantComplete: true},
			},
		},
		{
			name:  "spans acked in scrambled order merge",
			added: []Range{r1},
			acks: []ackStep{
				{s: rng("a", 0, 108, 110), wantFrontier: 100},
				{s: rng("a", 0, 102, 104), wantFrontier: 100},
				{s: rng("a", 0, 104, 108), wantFrontier: 100},
				{s: rng("a", 0, 100, 102), wantFrontier: 110, wantComplete: true},
			},
		},
		{
			name:  "double ack of the frontier range",
			added: []Range{r1, r2},
			acks: []ackStep{
				{s: r1, wantFrontier: 110, wantComplete: true},
				{s: r1, wantErr: ErrNotPlanned},
			},
		},
		{
			name:  "double ack of a range past a gap",
			added: []Range{r1, r2},
			acks: []ackStep{
				{s: r2, wantFrontier: 100, wantComplete: true},
				{s: r2, wantErr: ErrNotPlanned},
			},
		},
		{
			name:  "overlapping spans",
			added: []Range{r1},
			acks: []ackStep{
				{s: rng("a", 0, 103, 106), wantFrontier: 100},
				{s: rng("a", 0, 100, 104), wantErr: ErrNotPlanned},
				{s: rng("a", 0, 105, 108), wantErr: ErrNotPlanned},
				{s: rng("a", 0, 104, 105), wantErr: ErrNotPlanned},
				{s: rng("a", 0, 100, 110), wantErr: ErrNotPlanned},
			},
		},
		{
			name:  "ack outside every added range",
			added: []Range{r1},
			acks: []ackStep{
				{s: r2, wantErr: ErrNotPlanned},
				{s: rng("a", 0, 90, 100), wantErr: ErrNotPlanned},
				{s: rng("a", 0, 95, 105), wantErr: ErrNotPlanned},
			},
		},
		{
			name:  "a span across two ranges",
			added: []Range{r1, r2},
			acks: []ackStep{
				{s: rng("a", 0, 105, 115), wantErr: ErrNotPlanned},
			},
		},
		{
			name:  "empty and inverted spans",
			added: []Range{r1},
			acks: []ackStep{
				{s: rng("a", 0, 105, 105), wantErr: ErrNotPlanned},
				{s: rng("a", 0, 106, 105), wantErr: ErrNotPlanned},
			},
		},
		{
			name:  "ack of an unknown partition",
			added: []Range{r1},
			acks: []ackStep{
				{s: rng("b", 0, 100, 110), wantErr: ErrUnknownPartition},
				{s: rng("b", 0, 100, 110), wantErr: ErrNotPlanned},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker()
			require.NoError(t, tr.Start(a, 100))
			for _, r := range tt.added {
				require.NoError(t, tr.Add(r), "Add(%v)", r)
			}
			for i, s := range tt.acks {
				before, _ := tr.Frontier(a)
				frontier, complete, err := tr.Ack(s.s)
				if s.wantErr != nil {
					require.ErrorIs(t, err, s.wantErr, "ack %d: Ack(%v) = %v, want %v", i, s.s, err, s.wantErr)
					assert.Contains(t, err.Error(), s.s.String())
					after, _ := tr.Frontier(a)
					assert.Equal(t, before, after, "ack %d: failed Ack(%v) moved the frontier", i, s.s)
					continue
				}
				require.NoError(t, err, "ack %d: Ack(%v)", i, s.s)
				assert.Equal(t, s.wantFrontier, frontier, "ack %d: Ack(%v) frontier = %d, want %d", i, s.s, frontier, s.wantFrontier)
				assert.Equal(t, s.wantComplete, complete, "ack %d: Ack(%v) complete = %v, want %v", i, s.s, complete, s.wantComplete)
				got, ok := tr.Frontier(a)
				assert.True(t, ok)
				assert.Equal(t, frontier, got, "ack %d: Frontier(%v) = %d, want %d", i, a, got, frontier)
			}
		})
	}
}

// TestWholeRangeTrackerAck checks that a whole-range tracker moves its
// frontier only over complete ranges: acknowledged spans of the range at the
// frontier do not move it until the range is complete.
func TestWholeRangeTrackerAck(t *testing.T) {
	a := key("a", 0)
	r1, r2, r3 := rng("a", 0, 100, 110), rng("a", 0, 110, 120), rng("a", 0, 120, 130)
	tests := []struct {
		name  string
		added []Range // added after Start(a, 100)
		acks  []ackStep
	}{
		{
			name:  "whole ranges in order",
			added: []Range{r1, r2},
			acks: []ackStep{
				{s: r1, wantFrontier: 110, wantComplete: true},
				{s: r2, wantFrontier: 120, wantComplete: true},
			},
		},
		{
			name:  "spans of the head range leave the frontier at its start",
			added: []Range{r1, r2},
			acks: []ackStep{
				{s: rng("a", 0, 100, 104), wantFrontier: 100},
				{s: rng("a", 0, 104, 109), wantFrontier: 100},
				{s: rng("a", 0, 109, 110), wantFrontier: 110, wantComplete: true},
				{s: rng("a", 0, 110, 119), wantFrontier: 110},
			},
		},
		{
			name:  "a complete range past a gap, then the gap: the frontier stops before the partial range",
			added: []Range{r1, r2, r3},
			acks: []ackStep{
				{s: r2, wantFrontier: 100, wantComplete: true},
				{s: rng("a", 0, 120, 125), wantFrontier: 100},
				{s: r1, wantFrontier: 120, wantComplete: true},
				{s: rng("a", 0, 125, 130), wantFrontier: 130, wantComplete: true},
			},
		},
		{
			name:  "double ack is refused as before",
			added: []Range{r1},
			acks: []ackStep{
				{s: rng("a", 0, 100, 105), wantFrontier: 100},
				{s: rng("a", 0, 100, 105), wantErr: ErrNotPlanned},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewWholeRangeTracker()
			require.NoError(t, tr.Start(a, 100))
			for _, r := range tt.added {
				require.NoError(t, tr.Add(r), "Add(%v)", r)
			}
			for i, s := range tt.acks {
				frontier, complete, err := tr.Ack(s.s)
				if s.wantErr != nil {
					require.ErrorIs(t, err, s.wantErr, "ack %d: Ack(%v) = %v, want %v", i, s.s, err, s.wantErr)
					continue
				}
				require.NoError(t, err, "ack %d: Ack(%v)", i, s.s)
				assert.Equal(t, s.wantFrontier, frontier, "ack %d: Ack(%v) frontier = %d, want %d", i, s.s, frontier, s.wantFrontier)
				assert.Equal(t, s.wantComplete, complete, "ack %d: Ack(%v) complete = %v, want %v", i, s.s, complete, s.wantComplete)
				got, _ := tr.Frontier(a)
				assert.Equal(t, frontier, got, "ack %d: Frontier(%v) = %d, want %d", i, a, got, frontier)
			}
		})
	}
}

func TestTrackerAdd(t *testing.T) {
	a := key("a", 0)
	tests := []struct {
		name    string
		prior   []Range // added successfully before r
		r       Range
		wantErr error
		wantMsg string // substring of the error
	}{
		{name: "first range at the start offset", r: rng("a", 0, 50, 60)},
		{name: "contiguous after a prior range", prior: []Range{rng("a", 0, 50, 60)}, r: rng("a", 0, 60, 61)},
		{name: "gap after the start offset", r: rng("a", 0, 51, 60), wantErr: ErrInvalidRange, wantMsg: "expected start 50"},
		{name: "before the start offset", r: rng("a", 0, 40, 60), wantErr: ErrInvalidRange, wantMsg: "expected start 50"},
		{
			name: "gap after a prior range", prior: []Range{rng("a", 0, 50, 60)},
			r: rng("a", 0, 61, 70), wantErr: ErrInvalidRange, wantMsg: "expected start 60",
		},
		{
			name: "overlapping a prior range", prior: []Range{rng("a", 0, 50, 60)},
			r: rng("a", 0, 55, 70), wantErr: ErrInvalidRange, wantMsg: "expected start 60",
		},
		{name: "empty", r: rng("a", 0, 50, 50), wantErr: ErrInvalidRange},
		{name: "inverted", r: rng("a", 0, 50, 49), wantErr: ErrInvalidRange},
		{name: "unknown partition", r: rng("b", 0, 50, 60), wantErr: ErrUnknownPartition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker()
			require.NoError(t, tr.Start(a, 50))
			for _, r := range tt.prior {
				require.NoError(t, tr.Add(r), "Add(%v)", r)
			}
			err := tr.Add(tt.r)
			if tt.wantErr == nil {
				require.NoError(t, err, "Add(%v)", tt.r)
				_, complete, err := tr.Ack(tt.r)
				require.NoError(t, err, "Ack of the added range")
				assert.True(t, complete)
				return
			}
			require.ErrorIs(t, err, tt.wantErr, "Add(%v) = %v, want %v", tt.r, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.r.String())
			assert.Contains(t, err.Error(), tt.wantMsg)
			if tt.r.Start < tt.r.End {
				_, _, err := tr.Ack(tt.r)
				assert.ErrorIs(t, err, ErrNotPlanned, "failed Add registered the range")
			}
		})
	}
}

func TestTrackerStart(t *testing.T) {
	a := key("a", 0)
	tr := NewTracker()
	require.NoError(t, tr.Start(a, 7))
	got, ok := tr.Frontier(a)
	assert.True(t, ok)
	assert.Equal(t, int64(7), got)

	require.EqualError(t, tr.Start(a, 9), "partition a/0 already started")
	got, _ = tr.Frontier(a)
	assert.Equal(t, int64(7), got, "second Start moved the frontier")

	require.ErrorIs(t, tr.Start(key("b", 0), -1), ErrInvalidRange)
	_, ok = tr.Frontier(key("b", 0))
	assert.False(t, ok, "failed Start registered the key")
}

func TestTrackerRemove(t *testing.T) {
	a, b := key("a", 0), key("b", 1)
	tr := NewTracker()
	require.NoError(t, tr.Start(a, 0))
	require.NoError(t, tr.Start(b, 500))
	require.NoError(t, tr.Add(rng("a", 0, 0, 10)))
	require.NoError(t, tr.Add(rng("b", 1, 500, 600)))

	tr.Remove(b)
	tr.Remove(key("unknown", 0)) // no-op
	_, ok := tr.Frontier(b)
	assert.False(t, ok)
	f, ok := tr.Frontier(a)
	assert.True(t, ok)
	assert.Equal(t, int64(0), f)
	_, _, err := tr.Ack(rng("b", 1, 500, 600))
	require.ErrorIs(t, err, ErrNotPlanned, "Ack after Remove")

	// A removed key can be started again, for example when a topic is
	// created again or a partition is assigned back after a rebalance.
	require.NoError(t, tr.Start(b, 600))
	got, _ := tr.Frontier(b)
	assert.Equal(t, int64(600), got)
}

// TestTrackerReusesBuffer interleaves Add and Ack far beyond the queue's
// capacity so that popped entries and their acked buffers are reused, and
// checks the frontier at every step.
func TestTrackerReusesBuffer(t *testing.T) {
	a := key("a", 0)
	tr := NewTracker()
	require.NoError(t, tr.Start(a, 0))
	// Keep three ranges in flight; ack the middle one (in two spans) before
	// the oldest.
	var inFlight []Range
	next := int64(0)
	for i := range 1000 {
		r := rng("a", 0, next, next+int64(i%5)+2)
		next = r.End
		require.NoError(t, tr.Add(r))
		inFlight = append(inFlight, r)
		if len(inFlight) < 3 {
			continue
		}
		mid := inFlight[1]
		_, complete, err := tr.Ack(rng("a", 0, mid.Start+1, mid.End))
		require.NoError(t, err)
		assert.False(t, complete)
		_, complete, err = tr.Ack(rng("a", 0, mid.Start, mid.Start+1))
		require.NoError(t, err)
		assert.True(t, complete)
		f, complete, err := tr.Ack(inFlight[0])
		require.NoError(t, err)
		assert.True(t, complete)
		require.Equal(t, mid.End, f, "step %d: frontier = %d, want %d", i, f, mid.End)
		inFlight = inFlight[2:]
	}
}

// FuzzTracker plans contiguous ranges of fuzz-chosen lengths on two
// partitions, cuts each into fuzz-chosen spans, acknowledges the spans in a
// fuzz-chosen order (a random pick among the unacknowledged ones) and retries
// some acks, and checks these invariants after every call against a model
// that keeps the set of acknowledged offsets:
//
//   - the frontier never decreases;
//   - the frontier equals the smallest unacknowledged offset (or the end of
//     the last added range when every offset is acknowledged), so it never
//     passes an unacknowledged offset and never lags behind a contiguous run;
//   - Ack reports a range complete exactly when its last offset is
//     acknowledged;
//   - acknowledging a span twice, or a span overlapping an acknowledged one,
//     fails with ErrNotPlanned and changes nothing;
//   - once every span is acknowledged, the frontier equals the end of the last
//     range.
//
// An odd start offset runs a whole-range tracker (NewWholeRangeTracker),
// whose frontier is instead the end of the longest run of complete ranges
// from the start: never inside a range.
func FuzzTracker(f *testing.F) {
	f.Add(int64(0), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(int64(1000), []byte{0, 0, 0, 0, 255, 255, 255, 255})
	f.Add(int64(1<<40), []byte("out of order acknowledgements"))
	f.Add(int64(5), []byte{})
	f.Add(int64(1001), []byte{0, 0, 0, 0, 255, 255, 255, 255, 40, 9, 3, 2, 1, 60, 60, 60, 60})
	f.Fuzz(fuzzTracker)
}

// fuzzTracker runs one FuzzTracker input.
func fuzzTracker(t *testing.T, start int64, data []byte) {
	if start < 0 {
		start = -(start + 1)
	}
	start %= 1 << 60
	in := fuzzBytes(data)
	whole := start%2 == 1
	tr := NewTracker()
	if whole {
		tr = NewWholeRangeTracker()
	}

	type model struct {
		key      Key
		base     int64          // start offset
		added    int64          // end of the last added range
		ranges   []Range        // every added range
		unacked  []Range        // spans not acknowledged yet
		acked    []Range        // acknowledged spans, for retries
		ackedSet map[int64]bool // every acknowledged offset
		frontier int64
	}
	models := []*model{{key: key("a", 0)}, {key: key("b", 7)}}
	for i, m := range models {
		m.base = start + int64(i)*3
		m.added, m.frontier = m.base, m.base
		m.ackedSet = map[int64]bool{}
		require.NoError(t, tr.Start(m.key, m.added))
	}
	verify := func(m *model) {
		want := m.frontier
		for want < m.added && m.ackedSet[want] {
			want++
		}
		if whole {
			// The end of the last complete range at or below the smallest
			// unacknowledged offset.
			smallest := want
			want = m.base
			for _, r := range m.ranges {
				if r.End > smallest {
					break
				}
				want = r.End
			}
		}
		got, ok := tr.Frontier(m.key)
		require.True(t, ok)
		require.Equal(t, want, got, "Frontier(%v) = %d, want %d (whole ranges only: %v)", m.key, got, want, whole)
	}
	rangeComplete := func(m *model, s Range) bool {
		for _, r := range m.ranges {
			if r.Start <= s.Start && s.End <= r.End {
				for o := r.Start; o < r.End; o++ {
					if !m.ackedSet[o] {
						return false
					}
				}
				return true
			}
		}
		t.Fatalf("span %v outside every range", s)
		return false
	}
	ack := func(m *model, i int) {
		s := m.unacked[i]
		before := m.frontier
		frontier, complete, err := tr.Ack(s)
		require.NoError(t, err, "Ack(%v)", s)
		m.unacked = append(m.unacked[:i], m.unacked[i+1:]...)
		m.acked = append(m.acked, s)
		for o := s.Start; o < s.End; o++ {
			m.ackedSet[o] = true
		}
		require.GreaterOrEqual(t, frontier, before, "Ack(%v) moved the frontier back from %d to %d", s, before, frontier)
		require.Equal(t, rangeComplete(m, s), complete, "Ack(%v) complete = %v", s, complete)
		verify(m)
		m.frontier = frontier
	}

	for steps := 0; !in.empty() && steps < 10000; steps++ {
		op := in.byte()
		m := models[int(op>>7)]
		switch {
		case op&0x7f < 48: // add a range of 1..256 offsets, cut into up to 4 spans
			r := Range{Topic: m.key.Topic, Partition: m.key.Partition, Start: m.added, End: m.added + int64(in.byte()) + 1}
			require.NoError(t, tr.Add(r), "Add(%v)", r)
			m.added = r.End
			m.ranges = append(m.ranges, r)
			from := r.Start
			for cuts := in.byte() % 4; cuts > 0 && from < r.End; cuts-- {
				to := min(from+int64(in.byte()%64)+1, r.End)
				m.unacked = append(m.unacked, Range{Topic: r.Topic, Partition: r.Partition, Start: from, End: to})
				from = to
			}
			if from < r.End {
				m.unacked = append(m.unacked, Range{Topic: r.Topic, Partition: r.Partition, Start: from, End: r.End})
			}
			verify(m)
		case op&0x7f < 120: // ack a fuzz-chosen span
			if len(m.unacked) > 0 {
				ack(m, int(in.byte())%len(m.unacked))
			}
		default: // retry an ack that already happened, or one overlapping it
			if len(m.acked) > 0 {
				s := m.acked[int(in.byte())%len(m.acked)]
				if in.byte()%2 == 1 && s.End < m.added {
					s.End++ // overlaps s and the offset after it
				}
				_, _, err := tr.Ack(s)
				require.ErrorIs(t, err, ErrNotPlanned, "second Ack(%v)", s)
				verify(m)
			}
		}
	}
	// Ack what is left, newest first: the frontier must wait for the oldest.
	for _, m := range models {
		for len(m.unacked) > 0 {
			ack(m, len(m.unacked)-1)
		}
		f, _ := tr.Frontier(m.key)
		require.Equal(t, m.added, f, "%v: frontier %d after acknowledging everything, want %d", m.key, f, m.added)
	}
}

// BenchmarkTrackerAck measures Add plus an out-of-order Ack per range: ranges
// are added in windows of 64 and each window is acked in a scrambled order, so
// most acks land beyond a gap and the last one of a window moves the frontier
// over all of them.
func BenchmarkTrackerAck(b *testing.B) {
	const window = 64
	// Stride through the window with a step coprime to it: a fixed,
	// scrambled permutation.
	order := make([]int, window)
	for i := range order {
		order[i] = (i*37 + 11) % window
	}
	k := key("topic", 3)
	tr := NewTracker()
	require.NoError(b, tr.Start(k, 0))
	rs := make([]Range, window)
	next := int64(0)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i == 0 {
			for j := range rs {
				rs[j] = Range{Topic: k.Topic, Partition: k.Partition, Start: next, End: next + 100}
				next += 100
				if err := tr.Add(rs[j]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, _, err := tr.Ack(rs[order[i]]); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % window
	}
}

// BenchmarkTrackerAckSpans measures acknowledging a range in ten batch spans,
// in order, as the input does for ranges emitted as several batches.
func BenchmarkTrackerAckSpans(b *testing.B) {
	k := key("topic", 3)
	tr := NewTracker()
	require.NoError(b, tr.Start(k, 0))
	next := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		r := Range{Topic: k.Topic, Partition: k.Partition, Start: next, End: next + 1000}
		if err := tr.Add(r); err != nil {
			b.Fatal(err)
		}
		for s := r.Start; s < r.End; s += 100 {
			if _, _, err := tr.Ack(Range{Topic: k.Topic, Partition: k.Partition, Start: s, End: s + 100}); err != nil {
				b.Fatal(err)
			}
		}
		next = r.End
	}
}
