package ranges

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ackStep is one Ack in a tracker table test and what it must return.
type ackStep struct {
	r            Range
	wantFrontier int64
	wantAdvanced bool
	wantErr      error
}

func TestTrackerAck(t *testing.T) {
	a := key("a", 0)
	r1, r2, r3, r4 := rng("a", 0, 100, 110), rng("a", 0, 110, 120), rng("a", 0, 120, 130), rng("a", 0, 130, 135)
	tests := []struct {
		name            string
		added           []Range // added after Start(a, 100)
		acks            []ackStep
		wantOutstanding int
	}{
		{
			name:  "in-order acks advance one by one",
			added: []Range{r1, r2, r3},
			acks: []ackStep{
				{r: r1, wantFrontier: 110, wantAdvanced: true},
				{r: r2, wantFrontier: 120, wantAdvanced: true},
				{r: r3, wantFrontier: 130, wantAdvanced: true},
			},
		},
		{
			name:  "out-of-order acks hold the frontier until the gap fills",
			added: []Range{r1, r2, r3, r4},
			acks: []ackStep{
				{r: r3, wantFrontier: 100},
				{r: r2, wantFrontier: 100},
				{r: r1, wantFrontier: 130, wantAdvanced: true},
				{r: r4, wantFrontier: 135, wantAdvanced: true},
			},
		},
		{
			name:  "reverse order jumps to the end at the last ack",
			added: []Range{r1, r2, r3, r4},
			acks: []ackStep{
				{r: r4, wantFrontier: 100},
				{r: r3, wantFrontier: 100},
				{r: r2, wantFrontier: 100},
				{r: r1, wantFrontier: 135, wantAdvanced: true},
			},
		},
		{
			name:  "frontier stops at the first unacked range",
			added: []Range{r1, r2, r3, r4},
			acks: []ackStep{
				{r: r2, wantFrontier: 100},
				{r: r4, wantFrontier: 100},
				{r: r1, wantFrontier: 120, wantAdvanced: true},
			},
			wantOutstanding: 1,
		},
		{
			name:  "double ack of the frontier range",
			added: []Range{r1, r2},
			acks: []ackStep{
				{r: r1, wantFrontier: 110, wantAdvanced: true},
				{r: r1, wantErr: ErrNotPlanned},
			},
			wantOutstanding: 1,
		},
		{
			name:  "double ack of a range past a gap",
			added: []Range{r1, r2},
			acks: []ackStep{
				{r: r2, wantFrontier: 100},
				{r: r2, wantErr: ErrNotPlanned},
			},
			wantOutstanding: 1,
		},
		{
			name:  "ack of a range never added",
			added: []Range{r1},
			acks: []ackStep{
				{r: r2, wantErr: ErrNotPlanned},
				{r: rng("a", 0, 90, 100), wantErr: ErrNotPlanned},
			},
			wantOutstanding: 1,
		},
		{
			name:  "ack must match an added range exactly",
			added: []Range{r1, r2},
			acks: []ackStep{
				{r: rng("a", 0, 100, 105), wantErr: ErrNotPlanned},
				{r: rng("a", 0, 100, 120), wantErr: ErrNotPlanned},
				{r: rng("a", 0, 105, 110), wantErr: ErrNotPlanned},
			},
			wantOutstanding: 2,
		},
		{
			name:  "ack of an unknown partition",
			added: []Range{r1},
			acks: []ackStep{
				{r: rng("b", 0, 100, 110), wantErr: ErrUnknownPartition},
				{r: rng("b", 0, 100, 110), wantErr: ErrNotPlanned},
			},
			wantOutstanding: 1,
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
				frontier, advanced, err := tr.Ack(s.r)
				if s.wantErr != nil {
					require.ErrorIs(t, err, s.wantErr, "ack %d: Ack(%v) = %v, want %v", i, s.r, err, s.wantErr)
					assert.Contains(t, err.Error(), s.r.String())
					after, _ := tr.Frontier(a)
					assert.Equal(t, before, after, "ack %d: failed Ack(%v) moved the frontier", i, s.r)
					continue
				}
				require.NoError(t, err, "ack %d: Ack(%v)", i, s.r)
				assert.Equal(t, s.wantFrontier, frontier, "ack %d: Ack(%v) frontier = %d, want %d", i, s.r, frontier, s.wantFrontier)
				assert.Equal(t, s.wantAdvanced, advanced, "ack %d: Ack(%v) advanced = %v, want %v", i, s.r, advanced, s.wantAdvanced)
				got, ok := tr.Frontier(a)
				assert.True(t, ok)
				assert.Equal(t, frontier, got, "ack %d: Frontier(%v) = %d, want %d", i, a, got, frontier)
			}
			assert.Equal(t, tt.wantOutstanding, tr.Outstanding(a), "Outstanding(%v)", a)
			assert.Equal(t, tt.wantOutstanding, tr.OutstandingTotal(), "OutstandingTotal()")
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
				assert.Equal(t, len(tt.prior)+1, tr.Outstanding(a))
				return
			}
			require.ErrorIs(t, err, tt.wantErr, "Add(%v) = %v, want %v", tt.r, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.r.String())
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Equal(t, len(tt.prior), tr.Outstanding(a), "failed Add registered the range")
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

func TestTrackerFrontiersAndRemove(t *testing.T) {
	a, b := key("a", 0), key("b", 1)
	tr := NewTracker()
	require.NoError(t, tr.Start(a, 0))
	require.NoError(t, tr.Start(b, 500))
	require.NoError(t, tr.Add(rng("a", 0, 0, 10)))
	require.NoError(t, tr.Add(rng("a", 0, 10, 20)))
	require.NoError(t, tr.Add(rng("b", 1, 500, 600)))
	_, _, err := tr.Ack(rng("a", 0, 0, 10))
	require.NoError(t, err)

	want := map[Key]int64{a: 10, b: 500}
	got := tr.Frontiers()
	assert.Equal(t, want, got, "Frontiers() = %v, want %v", got, want)
	got[a] = 999
	delete(got, b)
	assert.Equal(t, want, tr.Frontiers(), "Frontiers() returned the tracker's own map")
	assert.Equal(t, 2, tr.OutstandingTotal())

	tr.Remove(b)
	tr.Remove(key("unknown", 0)) // no-op
	_, ok := tr.Frontier(b)
	assert.False(t, ok)
	assert.Equal(t, 0, tr.Outstanding(b))
	assert.Equal(t, 1, tr.OutstandingTotal(), "Remove did not drop the key's outstanding ranges")
	assert.Equal(t, map[Key]int64{a: 10}, tr.Frontiers())
	_, _, err = tr.Ack(rng("b", 1, 500, 600))
	require.ErrorIs(t, err, ErrNotPlanned, "Ack after Remove")

	// A removed key can be started again, for example when a partition
	// is assigned back after a rebalance.
	require.NoError(t, tr.Start(b, 600))
	got2, _ := tr.Frontier(b)
	assert.Equal(t, int64(600), got2)
}

// TestTrackerReusesBuffer interleaves Add and Ack far beyond the queue's
// capacity so that popped entries are reclaimed, and checks the frontier at
// every step.
func TestTrackerReusesBuffer(t *testing.T) {
	a := key("a", 0)
	tr := NewTracker()
	require.NoError(t, tr.Start(a, 0))
	// Keep three ranges in flight; ack the middle one before the oldest.
	var inFlight []Range
	next := int64(0)
	for i := range 1000 {
		r := rng("a", 0, next, next+int64(i%5)+1)
		next = r.End
		require.NoError(t, tr.Add(r))
		inFlight = append(inFlight, r)
		if len(inFlight) < 3 {
			continue
		}
		_, _, err := tr.Ack(inFlight[1])
		require.NoError(t, err)
		f, advanced, err := tr.Ack(inFlight[0])
		require.NoError(t, err)
		assert.True(t, advanced)
		require.Equal(t, inFlight[1].End, f, "step %d: frontier = %d, want %d", i, f, inFlight[1].End)
		inFlight = inFlight[2:]
	}
	assert.Equal(t, len(inFlight), tr.Outstanding(a))
}

// FuzzTracker plans contiguous ranges of fuzz-chosen lengths on two
// partitions, interleaves Add with Acks in a fuzz-chosen order (a random pick
// among the outstanding ranges) and retries some acks, and checks these
// invariants after every call:
//
//   - the frontier never decreases;
//   - the frontier equals the start of the smallest unacked range (or the end
//     of the last added range when none is unacked), so it never exceeds the
//     smallest unacked offset and never lags behind a contiguous acked run;
//   - Ack reports advanced exactly when the frontier moved;
//   - acking a range twice fails with ErrNotPlanned and changes nothing;
//   - Outstanding and OutstandingTotal count the added, unacked ranges;
//   - once every range is acked, the frontier equals the end of the last one.
func FuzzTracker(f *testing.F) {
	f.Add(int64(0), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(int64(1000), []byte{0, 0, 0, 0, 255, 255, 255, 255})
	f.Add(int64(1<<40), []byte("out of order acknowledgements"))
	f.Add(int64(5), []byte{})
	f.Fuzz(fuzzTracker)
}

// fuzzTracker runs one FuzzTracker input.
func fuzzTracker(t *testing.T, start int64, data []byte) {
	if start < 0 {
		start = -(start + 1)
	}
	start %= 1 << 60
	in := fuzzBytes(data)
	tr := NewTracker()

	type model struct {
		key      Key
		added    int64   // end of the last added range
		unacked  []Range // outstanding ranges, in offset order
		acked    []Range // acked ranges, for retry
		frontier int64
	}
	models := []*model{{key: key("a", 0)}, {key: key("b", 7)}}
	for i, m := range models {
		m.added = start + int64(i)*3
		m.frontier = m.added
		require.NoError(t, tr.Start(m.key, m.added))
	}
	total := func() int {
		n := 0
		for _, m := range models {
			n += len(m.unacked)
		}
		return n
	}
	verify := func(m *model) {
		want := m.added
		if len(m.unacked) > 0 {
			want = m.unacked[0].Start
		}
		got, ok := tr.Frontier(m.key)
		require.True(t, ok)
		require.Equal(t, want, got, "Frontier(%v) = %d, want %d (smallest unacked offset)", m.key, got, want)
		require.Equal(t, len(m.unacked), tr.Outstanding(m.key))
		require.Equal(t, total(), tr.OutstandingTotal())
	}
	ack := func(m *model, i int) {
		r := m.unacked[i]
		before := m.frontier
		frontier, advanced, err := tr.Ack(r)
		require.NoError(t, err, "Ack(%v)", r)
		m.unacked = append(m.unacked[:i], m.unacked[i+1:]...)
		m.acked = append(m.acked, r)
		require.GreaterOrEqual(t, frontier, before, "Ack(%v) moved the frontier back from %d to %d", r, before, frontier)
		require.Equal(t, frontier != before, advanced, "Ack(%v) advanced = %v, frontier %d -> %d", r, advanced, before, frontier)
		m.frontier = frontier
		verify(m)
	}

	for steps := 0; !in.empty() && steps < 10000; steps++ {
		op := in.byte()
		m := models[int(op>>7)]
		switch {
		case op&0x7f < 48: // add a range of 1..256 offsets
			r := Range{Topic: m.key.Topic, Partition: m.key.Partition, Start: m.added, End: m.added + int64(in.byte()) + 1}
			require.NoError(t, tr.Add(r), "Add(%v)", r)
			m.added = r.End
			m.unacked = append(m.unacked, r)
			verify(m)
		case op&0x7f < 120: // ack a fuzz-chosen outstanding range
			if len(m.unacked) > 0 {
				ack(m, int(in.byte())%len(m.unacked))
			}
		default: // retry an ack that already happened
			if len(m.acked) > 0 {
				r := m.acked[int(in.byte())%len(m.acked)]
				_, _, err := tr.Ack(r)
				require.ErrorIs(t, err, ErrNotPlanned, "second Ack(%v)", r)
				verify(m)
			}
		}
	}
	// Ack what is left, newest first: the frontier must wait for the oldest.
	for _, m := range models {
		for len(m.unacked) > 0 {
			ack(m, len(m.unacked)-1)
		}
		require.Equal(t, m.added, m.frontier, "%v: frontier %d after acking everything, want %d", m.key, m.frontier, m.added)
	}
	require.Equal(t, 0, tr.OutstandingTotal())
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
