package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestProgressLineLabelsBothMeasures: the percentage is acknowledged offsets
// and the counts are delivered records, each labelled; counts are plain
// numbers (a comma reads as a decimal point in many locales), rates short
// (100k), bytes in a unit that suits them; a read with nothing to read says
// so; an unknown time left is not printed.
func TestProgressLineLabelsBothMeasures(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Progress
		want string
	}{
		{"mid-read", Progress{Done: 70000, Total: 200000, Records: 95551, Bytes: 16_700_000, Elapsed: 3400 * time.Millisecond, Rate: 277755.4, Left: 700 * time.Millisecond},
			"Progress: acknowledged 35.0% of 200000 offsets; delivered 95551 records, 16.7 MB in 3.4 s; 278k offsets acknowledged/s; about 0.7 s left"},
		{"nothing acknowledged yet", Progress{Done: 0, Total: 200000, Records: 15000, Bytes: 3_000_000, Elapsed: 200 * time.Millisecond, Rate: 99999, Left: -1},
			"Progress: acknowledged 0.0% of 200000 offsets; delivered 15000 records, 3.00 MB in 0.2 s; 100k offsets acknowledged/s"},
		{"long", Progress{Done: 1_234_567_890, Total: 2_000_000_000, Records: 1_234_567_890, Bytes: 999, Elapsed: 754 * time.Second, Rate: 1_000_000, Left: 190 * time.Second},
			"Progress: acknowledged 61.7% of 2000000000 offsets; delivered 1234567890 records, 999 B in 12m34s; 1.00M offsets acknowledged/s; about 3m10s left"},
		{"empty read", Progress{Total: 0, Left: -1},
			"Progress: no offsets to read; delivered 0 records, 0 B in 0.0 s"},
		{"small counts", Progress{Done: 5, Total: 600, Records: 999, Bytes: 12_345, Rate: 12.4, Elapsed: 59940 * time.Millisecond, Left: 30 * time.Second},
			"Progress: acknowledged 0.8% of 600 offsets; delivered 999 records, 12.3 kB in 59.9 s; 12 offsets acknowledged/s; about 30.0 s left"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.p.String()
			assert.Equal(t, c.want, got)
			assert.NotContains(t, got, "unknown")
		})
	}
}

// TestSummaryLineUnits: the summary's sizes and rates in units that suit
// them, never "0.0 MB/s" for a small read, and no grouping commas.
func TestSummaryLineUnits(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Summary
		want string
	}{
		{"large", Summary{Acked: 2_000_000, Records: 2_000_000, Bytes: 2_048_000_000, Ranges: 200, Elapsed: 9642 * time.Millisecond},
			"2000000 records acknowledged of 2000000 handed out (2.05 GB of values) in 200 ranges in 9.642s: 212 MB/s, 207k records/s"},
		{"small", Summary{Acked: 10, Records: 12, Bytes: 1200, Ranges: 1, Elapsed: 2 * time.Second},
			"10 records acknowledged of 12 handed out (1.20 kB of values) in 1 ranges in 2s: 600 B/s, 6 records/s"},
		{"nothing", Summary{},
			"0 records acknowledged of 0 handed out (0 B of values) in 0 ranges in 0s: 0 B/s, 0 records/s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.s.String()
			assert.Truef(t, strings.HasPrefix(got, c.want+"; cache: "), "Summary.String() = %q, want it to start with %q", got, c.want)
			assert.NotContains(t, got, "stopped before the end", "a continuous run's summary")
		})
	}
	s := Summary{Acked: 10, Records: 10, Elapsed: 3 * time.Second, FirstOut: 105 * time.Millisecond, LastOut: 2345 * time.Millisecond}
	assert.Contains(t, s.String(), "; batches handed out from 105ms to 2.345s after the start", "when the first and the last batch went")
	s = Summary{Acked: 90, Records: 100, Done: 900, Total: 1000, Bounded: true}
	assert.Contains(t, s.String(), "; stopped before the end: 100 of 1000 offsets not acknowledged", "a bounded run that did not end")
	s.Ended = true
	assert.NotContains(t, s.String(), "stopped before the end", "a bounded run that ended")
}

// TestProgressKeepsWhatALeavingPartitionAcknowledged: a partition that
// leaves (revoked, lost, its topic gone: dropLocked) keeps the
// offsets it acknowledged in Done and in Total, and only what it had left
// to read leaves Total. Before, it left both, so Done fell (50 to 0) and the
// percentage jumped with every revocation.
func TestProgressKeepsWhatALeavingPartitionAcknowledged(t *testing.T) {
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 10, MaxInFlight: 1, PollInterval: time.Second})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker, e.sched.baseCtx = ranges.NewPlanner(10), ranges.NewTracker(), context.Background()
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	e.mu.Lock()
	for _, k := range []ranges.Key{k0, k1} {
		require.NoError(t, e.addPartitionLocked(k, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	}
	acked := ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 50}
	require.NoError(t, e.parts.tracker.Add(acked))
	_, _, err = e.parts.tracker.Ack(acked)
	require.NoError(t, err)
	e.mu.Unlock()
	p := e.Progress()
	assert.Equal(t, [2]int64{50, 200}, [2]int64{p.Done, p.Total}, "done, total before k0 leaves")

	e.mu.Lock()
	e.dropLocked(k0, e.parts.cur(k0))
	e.mu.Unlock()
	p = e.Progress()
	assert.Equal(t, [2]int64{50, 150}, [2]int64{p.Done, p.Total}, "done, total after k0 left having acknowledged [0, 50)")

	e.mu.Lock()
	require.NoError(t, e.addPartitionLocked(k0, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	e.mu.Unlock()
	p = e.Progress()
	assert.Equal(t, [2]int64{50, 250}, [2]int64{p.Done, p.Total}, "done, total once k0 is read again as a new incarnation from 0")
}
