package ranges

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// partSpec is one partition handed to Planner.Add in a test.
type partSpec struct {
	key        Key
	start, end int64
}

func key(topic string, partition int32) Key { return Key{Topic: topic, Partition: partition} }

func rng(topic string, partition int32, start, end int64) Range {
	return Range{Topic: topic, Partition: partition, Start: start, End: end}
}

// newPlanner returns a Planner with every spec added.
func newPlanner(t testing.TB, maxRecords int64, specs ...partSpec) *Planner {
	t.Helper()
	p := NewPlanner(maxRecords)
	for _, s := range specs {
		require.NoError(t, p.Add(s.key, s.start, s.end), "Add(%v, %d, %d)", s.key, s.start, s.end)
	}
	return p
}

// drain calls Next(skip) until it reports nothing left, at most limit times.
func drain(p *Planner, skip func(Key) bool, limit int) []Range {
	var out []Range
	for range limit {
		r, ok := p.Next(skip)
		if !ok {
			break
		}
		out = append(out, r)
	}
	return out
}

func TestKeyAndRangeString(t *testing.T) {
	assert.Equal(t, "topic/3", key("topic", 3).String())
	r := rng("topic", 3, 100, 200)
	assert.Equal(t, "topic/3[100,200)", r.String())
	assert.Equal(t, int64(100), r.Len())
	assert.Equal(t, key("topic", 3), r.Key())
}

func TestNewPlannerPanicsOnNonPositiveMax(t *testing.T) {
	for _, m := range []int64{0, -1} {
		assert.Panics(t, func() { NewPlanner(m) }, "NewPlanner(%d) did not panic", m)
	}
}

func TestPlannerNext(t *testing.T) {
	a, b, c := key("a", 0), key("a", 1), key("b", 0)
	tests := []struct {
		name  string
		max   int64
		parts []partSpec
		skip  func(Key) bool
		limit int // maximum Next calls; the planner must be drained before it
		want  []Range
	}{
		{
			name:  "single partition, last range short",
			max:   10,
			parts: []partSpec{{a, 0, 25}},
			want:  []Range{rng("a", 0, 0, 10), rng("a", 0, 10, 20), rng("a", 0, 20, 25)},
		},
		{
			name:  "exact multiple of max",
			max:   10,
			parts: []partSpec{{a, 100, 130}},
			want:  []Range{rng("a", 0, 100, 110), rng("a", 0, 110, 120), rng("a", 0, 120, 130)},
		},
		{
			name:  "range smaller than max",
			max:   1000,
			parts: []partSpec{{a, 5, 8}},
			want:  []Range{rng("a", 0, 5, 8)},
		},
		{
			name:  "max of one",
			max:   1,
			parts: []partSpec{{a, 0, 3}},
			want:  []Range{rng("a", 0, 0, 1), rng("a", 0, 1, 2), rng("a", 0, 2, 3)},
		},
		{
			name:  "empty partition plans nothing",
			max:   10,
			parts: []partSpec{{a, 42, 42}},
			want:  nil,
		},
		{
			name:  "no partitions",
			max:   10,
			parts: nil,
			want:  nil,
		},
		{
			name:  "empty partition is passed over",
			max:   10,
			parts: []partSpec{{a, 7, 7}, {b, 0, 5}, {c, 3, 3}},
			want:  []Range{rng("a", 1, 0, 5)},
		},
		{
			name:  "round-robin across three partitions, one big backlog",
			max:   10,
			parts: []partSpec{{a, 0, 60}, {b, 0, 20}, {c, 0, 15}},
			want: []Range{
				rng("a", 0, 0, 10), rng("a", 1, 0, 10), rng("b", 0, 0, 10),
				rng("a", 0, 10, 20), rng("a", 1, 10, 20), rng("b", 0, 10, 15),
				rng("a", 0, 20, 30), rng("a", 0, 30, 40), rng("a", 0, 40, 50), rng("a", 0, 50, 60),
			},
		},
		{
			name:  "keys are planned in sorted order whatever the add order",
			max:   10,
			parts: []partSpec{{c, 0, 5}, {b, 0, 5}, {a, 0, 5}},
			want:  []Range{rng("a", 0, 0, 5), rng("a", 1, 0, 5), rng("b", 0, 0, 5)},
		},
		{
			name:  "large offsets do not overflow",
			max:   1 << 62,
			parts: []partSpec{{a, 1<<63 - 10, 1<<63 - 1}},
			want:  []Range{rng("a", 0, 1<<63-10, 1<<63-1)},
		},
		{
			name:  "skip passes over a partition",
			max:   10,
			parts: []partSpec{{a, 0, 20}, {b, 0, 20}, {c, 0, 20}},
			skip:  func(k Key) bool { return k == b },
			want: []Range{
				rng("a", 0, 0, 10), rng("b", 0, 0, 10), rng("a", 0, 10, 20), rng("b", 0, 10, 20),
			},
		},
		{
			name:  "skip of every partition plans nothing",
			max:   10,
			parts: []partSpec{{a, 0, 20}, {b, 0, 20}},
			skip:  func(Key) bool { return true },
			want:  nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, tt.max, tt.parts...)
			limit := tt.limit
			if limit == 0 {
				limit = 100
			}
			got := drain(p, tt.skip, limit)
			assert.Equal(t, tt.want, got, "Plan(%v) = %v, want %v", tt.parts, got, tt.want)
			_, ok := p.Next(tt.skip)
			assert.False(t, ok, "Next after drain reported a range")
		})
	}
}

// TestPlannerOrderedSkip models ordered mode: a partition with a range in
// flight is skipped until that range is acked, so at most one range per
// partition is ever outstanding.
func TestPlannerOrderedSkip(t *testing.T) {
	a, b := key("a", 0), key("b", 0)
	p := newPlanner(t, 10, partSpec{a, 0, 30}, partSpec{b, 0, 10})
	inFlight := map[Key]bool{}
	skip := func(k Key) bool { return inFlight[k] }

	steps := []struct {
		ack    *Key // finish this partition's range before calling Next
		want   Range
		wantOK bool
	}{
		{want: rng("a", 0, 0, 10), wantOK: true},
		{want: rng("b", 0, 0, 10), wantOK: true},
		{wantOK: false}, // both in flight
		{ack: &b, wantOK: false},
		{ack: &a, want: rng("a", 0, 10, 20), wantOK: true},
		{wantOK: false},
		{ack: &a, want: rng("a", 0, 20, 30), wantOK: true},
	}
	for i, s := range steps {
		if s.ack != nil {
			inFlight[*s.ack] = false
		}
		got, ok := p.Next(skip)
		require.Equal(t, s.wantOK, ok, "step %d: Next ok = %v, want %v", i, ok, s.wantOK)
		if ok {
			inFlight[got.Key()] = true
		}
		assert.Equal(t, s.want, got, "step %d: Next() = %v, want %v", i, got, s.want)
	}
	assert.True(t, p.Done())
}

func TestPlannerSetEnd(t *testing.T) {
	a := key("a", 0)
	tests := []struct {
		name     string
		start    int64
		end      int64
		before   int   // Next calls before SetEnd
		setEnd   int64 // new end
		wantErr  error
		wantNext []Range // ranges drained after SetEnd
	}{
		{
			name: "growth continues planning", start: 0, end: 10, before: 1, setEnd: 25,
			wantNext: []Range{rng("a", 0, 10, 20), rng("a", 0, 20, 25)},
		},
		{
			name: "same end is a no-op", start: 0, end: 10, before: 1, setEnd: 10,
			wantNext: nil,
		},
		{
			name: "shrinking the unplanned tail is accepted", start: 0, end: 30, before: 1, setEnd: 15,
			wantNext: []Range{rng("a", 0, 10, 15)},
		},
		{
			name: "shrinking to next is accepted", start: 0, end: 30, before: 1, setEnd: 10,
			wantNext: nil,
		},
		{
			name: "below next is an error", start: 0, end: 30, before: 2, setEnd: 15,
			wantErr:  ErrEndMovedBack,
			wantNext: []Range{rng("a", 0, 20, 30)},
		},
		{
			name: "below start of an empty partition is an error", start: 50, end: 50, setEnd: 49,
			wantErr: ErrEndMovedBack,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, 10, partSpec{a, tt.start, tt.end})
			for range tt.before {
				_, ok := p.Next(nil)
				require.True(t, ok)
			}
			next, end, _ := p.Position(a)
			err := p.SetEnd(a, tt.setEnd)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "SetEnd(%v, %d) = %v, want %v", a, tt.setEnd, err, tt.wantErr)
				assert.Contains(t, err.Error(), a.String())
				assert.Contains(t, err.Error(), fmt.Sprint(tt.setEnd))
				assert.Contains(t, err.Error(), fmt.Sprint(next))
				gotNext, gotEnd, _ := p.Position(a)
				assert.Equal(t, [2]int64{next, end}, [2]int64{gotNext, gotEnd}, "failed SetEnd changed the position")
			} else {
				require.NoError(t, err, "SetEnd(%v, %d)", a, tt.setEnd)
			}
			got := drain(p, nil, 100)
			assert.Equal(t, tt.wantNext, got, "Plan after SetEnd(%d) = %v, want %v", tt.setEnd, got, tt.wantNext)
		})
	}
}

func TestPlannerSetEndUnknown(t *testing.T) {
	p := NewPlanner(10)
	err := p.SetEnd(key("a", 0), 10)
	require.ErrorIs(t, err, ErrUnknownPartition)
	assert.Contains(t, err.Error(), "a/0")
}

func TestPlannerAdd(t *testing.T) {
	a := key("a", 0)
	tests := []struct {
		name       string
		start, end int64
		wantErr    error // nil: no error expected unless dup
		dup        bool
	}{
		{name: "valid", start: 0, end: 10},
		{name: "empty", start: 10, end: 10},
		{name: "inverted", start: 10, end: 9, wantErr: ErrInvalidRange},
		{name: "negative start", start: -1, end: 10, wantErr: ErrInvalidRange},
		{name: "duplicate", start: 0, end: 10, dup: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPlanner(10)
			if tt.dup {
				require.NoError(t, p.Add(a, 0, 5))
			}
			err := p.Add(a, tt.start, tt.end)
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr, "Add(%v, %d, %d) = %v, want %v", a, tt.start, tt.end, err, tt.wantErr)
				assert.Empty(t, p.Keys(), "failed Add registered the key")
			case tt.dup:
				require.EqualError(t, err, "partition a/0 already added")
				next, end, _ := p.Position(a)
				assert.Equal(t, [2]int64{0, 5}, [2]int64{next, end}, "duplicate Add changed the position")
			default:
				require.NoError(t, err)
				next, end, ok := p.Position(a)
				assert.True(t, ok)
				assert.Equal(t, [2]int64{tt.start, tt.end}, [2]int64{next, end})
			}
		})
	}
}

func TestPlannerPendingDonePosition(t *testing.T) {
	a, b := key("a", 0), key("b", 0)
	p := NewPlanner(10)
	assert.True(t, p.Done(), "empty planner is done")
	require.NoError(t, p.Add(a, 0, 15))
	require.NoError(t, p.Add(b, 5, 5))
	assert.False(t, p.Done())
	assert.Equal(t, int64(15), p.Pending(a))
	assert.Equal(t, int64(0), p.Pending(b))
	assert.Equal(t, int64(0), p.Pending(key("unknown", 0)))

	_, ok := p.Next(nil)
	require.True(t, ok)
	assert.Equal(t, int64(5), p.Pending(a))
	next, end, ok := p.Position(a)
	assert.True(t, ok)
	assert.Equal(t, [2]int64{10, 15}, [2]int64{next, end})
	_, _, ok = p.Position(key("unknown", 0))
	assert.False(t, ok)

	_, ok = p.Next(nil)
	require.True(t, ok)
	assert.True(t, p.Done())
	require.NoError(t, p.SetEnd(b, 6))
	assert.False(t, p.Done(), "SetEnd growth makes the planner not done")
}

func TestPlannerKeys(t *testing.T) {
	p := NewPlanner(10)
	for _, k := range []Key{key("b", 1), key("a", 2), key("b", 0), key("a", 10)} {
		require.NoError(t, p.Add(k, 0, 1))
	}
	want := []Key{key("a", 2), key("a", 10), key("b", 0), key("b", 1)}
	got := p.Keys()
	assert.Equal(t, want, got, "Keys() = %v, want %v", got, want)
	got[0] = key("mutated", 0)
	assert.Equal(t, want, p.Keys(), "Keys() returned the planner's own slice")
}

func TestPlannerRemove(t *testing.T) {
	a, b, c := key("a", 0), key("b", 0), key("c", 0)
	tests := []struct {
		name   string
		before int // Next calls before Remove
		remove Key
		want   []Range // drained after Remove
	}{
		{
			name: "remove the partition served last: its successor is next", before: 2, remove: b,
			want: []Range{rng("c", 0, 0, 10), rng("a", 0, 10, 20), rng("c", 0, 10, 20)},
		},
		{
			name: "remove a partition before the cursor", before: 2, remove: a,
			want: []Range{rng("c", 0, 0, 10), rng("b", 0, 10, 20), rng("c", 0, 10, 20)},
		},
		{
			name: "remove a partition after the cursor", before: 1, remove: c,
			want: []Range{rng("b", 0, 0, 10), rng("a", 0, 10, 20), rng("b", 0, 10, 20)},
		},
		{
			name: "remove the first partition before any Next", remove: a,
			want: []Range{rng("b", 0, 0, 10), rng("c", 0, 0, 10), rng("b", 0, 10, 20), rng("c", 0, 10, 20)},
		},
		{
			name: "remove unknown is a no-op", before: 1, remove: key("zzz", 0),
			want: []Range{
				rng("b", 0, 0, 10), rng("c", 0, 0, 10),
				rng("a", 0, 10, 20), rng("b", 0, 10, 20), rng("c", 0, 10, 20),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(t, 10, partSpec{a, 0, 20}, partSpec{b, 0, 20}, partSpec{c, 0, 20})
			for range tt.before {
				_, ok := p.Next(nil)
				require.True(t, ok)
			}
			p.Remove(tt.remove)
			got := drain(p, nil, 100)
			assert.Equal(t, tt.want, got, "Plan after Remove(%v) = %v, want %v", tt.remove, got, tt.want)
			assert.NotContains(t, p.Keys(), tt.remove)
			assert.Equal(t, int64(0), p.Pending(tt.remove))
		})
	}
}

// TestPlannerAddKeepsCursor checks that adding a partition before the one
// served last does not make the planner serve the same partition twice.
func TestPlannerAddKeepsCursor(t *testing.T) {
	b, c := key("b", 0), key("c", 0)
	p := newPlanner(t, 10, partSpec{b, 0, 20}, partSpec{c, 0, 20})
	r, ok := p.Next(nil)
	require.True(t, ok)
	require.Equal(t, rng("b", 0, 0, 10), r)
	require.NoError(t, p.Add(key("a", 0), 0, 20))
	got := drain(p, nil, 3)
	want := []Range{rng("c", 0, 0, 10), rng("a", 0, 0, 10), rng("b", 0, 10, 20)}
	assert.Equal(t, want, got, "Plan after Add = %v, want %v", got, want)
}

// fuzzBytes hands out fuzz input one decision at a time; it yields zeros once
// exhausted.
type fuzzBytes []byte

func (f *fuzzBytes) byte() byte {
	if len(*f) == 0 {
		return 0
	}
	b := (*f)[0]
	*f = (*f)[1:]
	return b
}

func (f *fuzzBytes) uint16() uint16 {
	return uint16(f.byte())<<8 | uint16(f.byte())
}

func (f *fuzzBytes) empty() bool { return len(*f) == 0 }

// FuzzPlanner drives a Planner with fuzz-chosen partitions, start and end
// offsets, maxRecords, SetEnd calls (growth, shrinking and moving back) and
// skip patterns, and checks these invariants:
//
//   - no range is empty and none holds more than maxRecords offsets;
//   - each partition's ranges come in increasing order and each starts where
//     the previous one ended, so ranges never overlap;
//   - no range reaches past the partition's current end;
//   - no range belongs to a partition skip rejected;
//   - Next serves the first partition, round-robin after the one served last,
//     that has something pending and passes skip, and reports !ok only when
//     there is none;
//   - SetEnd below the next unplanned offset fails with ErrEndMovedBack and
//     changes nothing, every other SetEnd succeeds;
//   - once drained, every offset in [start, end) of each partition (end being
//     its final end) was covered exactly once and Done reports true.
//
// With an aligned planner (nParts>>3 picks none, CutAtEnd or WholeBlocks) it
// checks as well:
//
//   - no range crosses a multiple of maxRecords, and each is as long as that
//     and the end allow;
//   - with WholeBlocks every range ends at a multiple of maxRecords, only the
//     first range of a partition may start between two, and a partition is
//     served only once its next block is complete below its end (Ready says
//     the same); once drained, what is left of each partition is less than
//     one block.
func FuzzPlanner(f *testing.F) {
	f.Add(uint8(3), uint16(10), []byte{0, 0, 100, 0, 0, 20, 0, 0, 5, 1, 2, 3, 8, 0, 50})
	f.Add(uint8(1), uint16(1), []byte{0, 5, 0, 9})
	f.Add(uint8(6), uint16(1000), []byte("some bytes that drive the planner around"))
	f.Add(uint8(2), uint16(7), []byte{255, 255, 255, 255, 255, 255, 0, 8, 16, 24, 32, 1, 9, 17})
	f.Add(uint8(8+3), uint16(10), []byte{0, 7, 100, 0, 0, 20, 0, 3, 5, 1, 2, 3, 8, 0, 50})
	f.Add(uint8(16+2), uint16(7), []byte{0, 3, 40, 0, 9, 17, 0, 0, 90, 1, 1, 1, 0, 1, 30, 1, 1})
	f.Fuzz(fuzzPlanner)
}

// fuzzPlanner runs one FuzzPlanner input.
func fuzzPlanner(t *testing.T, nParts uint8, maxRecords uint16, data []byte) {
	in := fuzzBytes(data)
	maxRec := int64(maxRecords%64) + 1
	mode := AlignMode((nParts >> 3) % 3) // 0: unaligned
	p := NewPlanner(maxRec)
	if mode != 0 {
		p = NewAlignedPlanner(maxRec, mode)
	}
	// room is how many offsets a range starting at next may hold.
	room := func(next int64) int64 {
		if mode == 0 {
			return maxRec
		}
		return maxRec - next%maxRec
	}
	ready := func(next, end int64) bool {
		return next < end && (mode != WholeBlocks || end-next >= room(next))
	}

	type model struct {
		key         Key
		start, next int64 // next: the next offset the model expects planned
		end         int64
	}
	n := int(nParts%8) + 1
	models := make([]*model, 0, n)
	byKey := map[Key]*model{}
	for i := range n {
		k := Key{Topic: string(rune('a' + i%3)), Partition: int32(i)}
		start := int64(in.uint16())
		if in.byte()&1 == 1 {
			start += 1 << 40 // exercise large offsets
		}
		end := start + int64(in.byte())
		require.NoError(t, p.Add(k, start, end))
		m := &model{key: k, start: start, next: start, end: end}
		models = append(models, m)
		byKey[k] = m
	}
	order := p.Keys()
	require.Len(t, order, n)
	for i := 1; i < len(order); i++ {
		require.Negative(t, order[i-1].Compare(order[i]), "Keys() not sorted: %v", order)
	}

	last := -1 // index in order of the partition served last
	check := func(skip func(Key) bool) bool {
		r, ok := p.Next(skip)
		// The model's choice: the first partition after last with
		// something pending that passes skip.
		want := -1
		for i := 1; i <= n; i++ {
			idx := (last + i) % n
			m := byKey[order[idx]]
			if ready(m.next, m.end) && (skip == nil || !skip(m.key)) {
				want = idx
				break
			}
		}
		if want < 0 {
			require.False(t, ok, "Next() = %v, want nothing to plan", r)
			return false
		}
		require.True(t, ok, "Next() = nothing, want a range of %v", order[want])
		require.Equal(t, order[want], r.Key(), "Next() = %v, want a range of %v", r, order[want])
		m := byKey[r.Key()]
		require.Positive(t, r.Len(), "empty range %v", r)
		require.LessOrEqual(t, r.Len(), maxRec, "range %v longer than %d", r, maxRec)
		require.Equal(t, m.next, r.Start, "range %v does not start at next %d", r, m.next)
		require.LessOrEqual(t, r.End, m.end, "range %v past end %d", r, m.end)
		require.Equal(t, min(m.end, m.next+room(m.next)), r.End, "range %v not maximal", r)
		if mode != 0 {
			require.Equal(t, r.Start/maxRec, (r.End-1)/maxRec, "range %v crosses a multiple of %d", r, maxRec)
		}
		if mode == WholeBlocks {
			require.Zero(t, r.End%maxRec, "range %v does not end at a multiple of %d", r, maxRec)
			require.True(t, r.Start == m.start || r.Start%maxRec == 0, "range %v starts inside a block, first offset %d", r, m.start)
		}
		m.next = r.End
		last = want
		require.Equal(t, m.end-m.next, p.Pending(m.key))
		return true
	}

	for steps := 0; !in.empty() && steps < 10000; steps++ {
		op := in.byte()
		switch op % 4 {
		case 0: // SetEnd
			m := models[int(in.byte())%n]
			delta := int64(in.byte()) - 64
			newEnd := max(m.next+delta, 0)
			err := p.SetEnd(m.key, newEnd)
			if newEnd < m.next {
				require.ErrorIs(t, err, ErrEndMovedBack, "SetEnd(%v, %d) below next %d", m.key, newEnd, m.next)
			} else {
				require.NoError(t, err, "SetEnd(%v, %d) with next %d", m.key, newEnd, m.next)
				m.end = newEnd
			}
			next, end, ok := p.Position(m.key)
			require.True(t, ok)
			require.Equal(t, [2]int64{m.next, m.end}, [2]int64{next, end}, "Position(%v)", m.key)
			require.Equal(t, ready(m.next, m.end), p.Ready(m.key), "Ready(%v) at [%d, %d)", m.key, m.next, m.end)
		case 1: // Next without skip
			check(nil)
		default: // Next skipping the partitions whose bit is set in mask
			mask := in.byte()
			check(func(k Key) bool { return mask&(1<<(k.Partition%8)) != 0 })
		}
	}
	// Drain: every partition gets planned up to its final end.
	for range 1 << 20 {
		if !check(nil) {
			break
		}
	}
	done := true
	for _, m := range models {
		require.False(t, p.Ready(m.key), "Ready(%v) after drain", m.key)
		if mode == WholeBlocks {
			require.Less(t, m.end-m.next, room(m.next), "%v: a whole block left unplanned at [%d, %d)", m.key, m.next, m.end)
			done = done && m.next == m.end
		} else {
			require.Equal(t, m.end, m.next, "%v planned up to %d, want %d", m.key, m.next, m.end)
		}
		require.Equal(t, m.end-m.next, p.Pending(m.key))
	}
	require.Equal(t, done, p.Done())
}

// BenchmarkPlannerNext measures Next over 64 partitions with endless backlogs,
// with and without a skip function that passes over half of them.
func BenchmarkPlannerNext(b *testing.B) {
	for _, withSkip := range []bool{false, true} {
		b.Run(fmt.Sprintf("skip=%v", withSkip), func(b *testing.B) {
			p := NewPlanner(1000)
			for i := range 64 {
				require.NoError(b, p.Add(Key{Topic: "topic", Partition: int32(i)}, 0, 1<<62))
			}
			var skip func(Key) bool
			if withSkip {
				skip = func(k Key) bool { return k.Partition%2 == 1 }
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := p.Next(skip); !ok {
					b.Fatal("Next reported nothing to plan")
				}
			}
		})
	}
}

func TestPlannerSkipTo(t *testing.T) {
	a := key("a", 0)
	tests := []struct {
		name             string
		offset           int64
		wantFrom, wantTo int64
		wantNext         []Range
	}{
		{name: "inside the pending offsets", offset: 25, wantFrom: 10, wantTo: 25, wantNext: []Range{rng("a", 0, 25, 35), rng("a", 0, 35, 40)}},
		{name: "past the end stops at the end", offset: 100, wantFrom: 10, wantTo: 40, wantNext: nil},
		{name: "behind next skips nothing", offset: 5, wantFrom: 10, wantTo: 10, wantNext: []Range{rng("a", 0, 10, 20), rng("a", 0, 20, 30), rng("a", 0, 30, 40)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPlanner(10)
			require.NoError(t, p.Add(a, 10, 40))
			from, to, err := p.SkipTo(a, tt.offset)
			require.NoError(t, err)
			assert.Equal(t, [2]int64{tt.wantFrom, tt.wantTo}, [2]int64{from, to}, "SkipTo(%v, %d)", a, tt.offset)
			assert.Equal(t, tt.wantNext, drain(p, nil, 10), "ranges after SkipTo(%v, %d)", a, tt.offset)
		})
	}
	_, _, err := NewPlanner(10).SkipTo(a, 5)
	require.ErrorIs(t, err, ErrUnknownPartition)
}

func TestAlignedPlannerNext(t *testing.T) {
	a, b := key("a", 0), key("b", 0)
	tests := []struct {
		name  string
		mode  AlignMode
		parts []partSpec
		want  []Range
	}{
		{
			name:  "aligned start, cut at the end",
			mode:  CutAtEnd,
			parts: []partSpec{{a, 0, 25}},
			want:  []Range{rng("a", 0, 0, 10), rng("a", 0, 10, 20), rng("a", 0, 20, 25)},
		},
		{
			name:  "start inside a block: the first range ends at the next multiple",
			mode:  CutAtEnd,
			parts: []partSpec{{a, 7, 32}},
			want:  []Range{rng("a", 0, 7, 10), rng("a", 0, 10, 20), rng("a", 0, 20, 30), rng("a", 0, 30, 32)},
		},
		{
			name:  "start and end inside one block",
			mode:  CutAtEnd,
			parts: []partSpec{{a, 13, 17}},
			want:  []Range{rng("a", 0, 13, 17)},
		},
		{
			name:  "end on a multiple",
			mode:  CutAtEnd,
			parts: []partSpec{{a, 10, 30}},
			want:  []Range{rng("a", 0, 10, 20), rng("a", 0, 20, 30)},
		},
		{
			name:  "whole blocks: the partial block at the end waits",
			mode:  WholeBlocks,
			parts: []partSpec{{a, 0, 25}},
			want:  []Range{rng("a", 0, 0, 10), rng("a", 0, 10, 20)},
		},
		{
			name:  "whole blocks from inside a block",
			mode:  WholeBlocks,
			parts: []partSpec{{a, 7, 32}},
			want:  []Range{rng("a", 0, 7, 10), rng("a", 0, 10, 20), rng("a", 0, 20, 30)},
		},
		{
			name:  "whole blocks: nothing until the first block is complete",
			mode:  WholeBlocks,
			parts: []partSpec{{a, 13, 19}, {b, 0, 10}},
			want:  []Range{rng("b", 0, 0, 10)},
		},
		{
			name:  "round-robin is kept",
			mode:  CutAtEnd,
			parts: []partSpec{{a, 5, 30}, {b, 0, 15}},
			want:  []Range{rng("a", 0, 5, 10), rng("b", 0, 0, 10), rng("a", 0, 10, 20), rng("b", 0, 10, 15), rng("a", 0, 20, 30)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewAlignedPlanner(10, tt.mode)
			for _, s := range tt.parts {
				require.NoError(t, p.Add(s.key, s.start, s.end))
			}
			got := drain(p, nil, 100)
			assert.Equal(t, tt.want, got, "Plan(%v, %v) = %v, want %v", tt.mode, tt.parts, got, tt.want)
			for _, s := range tt.parts {
				assert.False(t, p.Ready(s.key), "Ready(%v) after drain", s.key)
			}
		})
	}
}

// TestAlignedPlannerGrowingEnd follows a continuous read: the end grows in
// steps that are not multiples of the block, and WholeBlocks plans a block
// only once the end reaches its end, so every range is a whole block and the
// same ranges come out whatever the steps were.
func TestAlignedPlannerGrowingEnd(t *testing.T) {
	a := key("a", 0)
	for _, steps := range [][]int64{{3, 9, 10, 17, 33, 40}, {40}, {1, 2, 39, 40}} {
		p := NewAlignedPlanner(10, WholeBlocks)
		require.NoError(t, p.Add(a, 0, 0))
		var got []Range
		for _, end := range steps {
			require.NoError(t, p.SetEnd(a, end))
			next, _, _ := p.Position(a)
			assert.Equal(t, end-next >= 10, p.Ready(a), "Ready(%v) at next %d, end %d", a, next, end)
			got = append(got, drain(p, nil, 100)...)
		}
		want := []Range{rng("a", 0, 0, 10), rng("a", 0, 10, 20), rng("a", 0, 20, 30), rng("a", 0, 30, 40)}
		assert.Equal(t, want, got, "ranges with ends %v = %v, want %v", steps, got, want)
		assert.True(t, p.Done())
	}
}

func TestPlannerReady(t *testing.T) {
	a := key("a", 0)
	p := NewPlanner(10)
	assert.False(t, p.Ready(a), "Ready of an unknown key")
	require.NoError(t, p.Add(a, 3, 5))
	assert.True(t, p.Ready(a), "unaligned: anything pending is ready")
	drain(p, nil, 10)
	assert.False(t, p.Ready(a), "nothing pending")
}

func TestNewAlignedPlannerPanicsOnBadMode(t *testing.T) {
	assert.Panics(t, func() { NewAlignedPlanner(10, AlignMode(0)) })
	assert.Panics(t, func() { NewAlignedPlanner(0, CutAtEnd) })
}
