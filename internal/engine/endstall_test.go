package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEndStallSaysWhatHoldsTheRun: a bounded read that handed out every
// batch up to its end, none of which is acknowledged, says once, after
// endStallAfter and not before, that a batching policy without a period
// downstream holds them (what Benthos cannot flush before the input ends);
// it ends once they are acknowledged.
func TestEndStallSaysWhatHoldsTheRun(t *testing.T) {
	c := newKafka(t, 2, 100, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords = 40
		cfg.MaxInFlight = 16 // every range at once: none waits for a slot the held batches keep
	})
	var held []*Batch
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		b, err := e.Next(ctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded, "Next ends only once every batch handed out is done")
			break
		}
		held = append(held, b)
	}
	require.NotEmpty(t, held)
	const warning = "Every range up to the end offsets was handed to the pipeline"
	var s endStall
	now := time.Now()
	(&reporter{e: e}).checkEndStall(&s, now)
	(&reporter{e: e}).checkEndStall(&s, now.Add(endStallAfter-time.Second))
	assert.NotContains(t, log.String(), warning, "said before endStallAfter")
	(&reporter{e: e}).checkEndStall(&s, now.Add(endStallAfter))
	(&reporter{e: e}).checkEndStall(&s, now.Add(2*endStallAfter))
	assert.Equal(t, 1, strings.Count(log.String(), warning), "said once:\n%s", log)
	assert.Contains(t, log.String(), "period: 1s")
	assert.Contains(t, log.String(), "200 offsets")

	for _, b := range held {
		b.Ack()
	}
	(&reporter{e: e}).checkEndStall(&s, now.Add(3*endStallAfter))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := e.Next(ctx)
	require.ErrorIs(t, err, ErrEnd)
	assert.Equal(t, 1, strings.Count(log.String(), warning), "said again after the acknowledgements:\n%s", log)
}

// TestProgressNeverRoundsUpToDone: the progress line's percentage is
// rounded down, so a read with offsets left never says 100.0%.
func TestProgressNeverRoundsUpToDone(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		want        string
	}{
		{4999, 5000, "99.9"}, {49999, 50000, "99.9"}, {5000, 5000, "100.0"}, {0, 5000, "0.0"},
		{1, 1000, "0.1"}, {999, 1000, "99.9"}, {2500, 5003, "49.9"}, {0, 0, "0.0"},
	} {
		assert.Equal(t, tc.want, percent(tc.done, tc.total), "percent(%d, %d)", tc.done, tc.total)
	}
	assert.Contains(t, Progress{Done: 99999, Total: 100000, Left: -1}.String(), "acknowledged 99.9% of 100000 offsets")
}
