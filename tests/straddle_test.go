package tests

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRangesEndingInsideBatchesReadOnOneCursor: on the real broker, a partition whose ranges
// end inside record batches (100 B records written in batches of up to 1 MiB, ranges of 2,000
// records) reads its ranges one after the other on its cursor once its first ranges showed it
// (docs/backfills.md, "Backfills from a distant cluster"): with a pipeline slower than the
// reads and 8 ranges in flight, at most 4 seeks for 80 ranges and nearly every range a continuation, and every
// record once. `fetch_connections: 1`, so that a loaded machine's slow broker is never taken
// for a distant one, whose ranges read at once over lanes.
func TestRangesEndingInsideBatchesReadOnOneCursor(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions, perPart, rangeSize, inFlight = 2, 80_000, 2_000, 8
	topic := createTopic(t, partitions)
	// Records buffered for 200 ms go out in batches of 1 MiB: about 8,000 records each.
	cl := producer(t, kgo.ProducerLinger(200*time.Millisecond), kgo.MaxBufferedRecords(2*partitions*perPart))
	value := bytes.Repeat([]byte("v"), 100)
	var recs []*kgo.Record
	for p := range int32(partitions) {
		for range perPart {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: value})
		}
	}
	want := offsetsOf(produceAll(t, cl, recs))

	in := baseInput(topic)
	in["stop_at"] = "end"
	in["max_range_records"] = rangeSize
	in["max_in_flight"] = inFlight
	in["fetch_connections"] = 1
	// Each batch held 20 ms by one of two threads: a range's reader waits to hand its
	// records over while the next ranges start.
	got, res := runInputResult(t, in, 3*time.Minute, withLeanPipeline(2, `${! if batch_index() == 0 { "20ms" } else { "0s" } }`))
	requireExactlyOnce(t, want, got)
	s := cacheSummary(t, res.Stdout+res.Stderr)
	t.Logf("cache: %v", s)
	ranges := int64(partitions * perPart / rangeSize)
	// Without the wait, about a fifth of the ranges seek (8 and 9 of 40 seen); with it, none
	// once each partition's first ranges ended, and at most a few before.
	assert.LessOrEqual(t, s["seeks"], int64(inFlight/2), "seeks: ranges that did not continue where the one before them stopped (%v)", s)
	assert.GreaterOrEqual(t, s["continuations"], ranges-int64(2*inFlight), "continuations of %d ranges (%v)", ranges, s)
}
