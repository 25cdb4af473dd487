package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestCrashReReadsAtMostMaxInFlightRanges checks docs/design.md's "A range
// keeps its max_in_flight slot until a commit covers it, so a crash
// re-reads at most max_in_flight × max_range_records records", with a
// commit period far longer than the test, so that only the commit the
// engine makes at once when every slot is held lets the read go on: each
// time Next hands out a batch, the records handed out past the group's
// committed offsets (what a crash then would hand out again) are at most
// max_in_flight × max_range_records, and the read reaches its end.
func TestCrashReReadsAtMostMaxInFlightRanges(t *testing.T) {
	const (
		partitions = 2
		perPart    = 120
		rangeSize  = 10
		inFlight   = 3
	)
	c := newKafka(t, partitions, perPart, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords = rangeSize
		cfg.MaxInFlight = inFlight
		cfg.Group.CommitPeriod = time.Hour
	})
	cl := kgoClient(t, c)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	handed := map[int32]int64{} // per partition: the offset after the last record handed out
	for n := 0; ; n++ {
		b, err := e.Next(ctx)
		if err != nil {
			require.ErrorIs(t, err, ErrEnd, "the read did not end: the commit due when every slot is held was not made?\n%s", log)
			break
		}
		handed[b.Range.Partition] = max(handed[b.Range.Partition], b.Span.End)
		reRead := int64(0)
		for p := range int32(partitions) {
			at := max(committed(ctx, t, adm, "g", "t", p), 0)
			reRead += max(handed[p]-at, 0)
		}
		require.LessOrEqual(t, reRead, int64(inFlight*rangeSize), "batch %d (%s): a crash now re-reads %d offsets handed out past the committed offsets, above max_in_flight × max_range_records (%d)",
			n, b.Span, reRead, inFlight*rangeSize)
		b.Ack()
	}
	for p := range int32(partitions) {
		require.Equal(t, int64(perPart), committed(ctx, t, adm, "g", "t", p), "partition %d's committed offset at the end", p)
	}
}
