package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestABoundedRunThatDoesNotEndSaysWhatItWaitsFor (issue 52, liveness): a
// bounded read that cannot end (here a batch of t/1 the pipeline never
// acknowledges) names, in the error of the tests' drain and in the log of
// its stop, the partition, its state and what holds it; the partitions
// that are done are not named.
func TestABoundedRunThatDoesNotEndSaysWhatItWaitsFor(t *testing.T) {
	c := newKafka(t, 2, 30, "t")
	e, log := startEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords = 10
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var held []string
	for len(held) == 0 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if b.Range.Partition == 1 && b.Range.Start == 10 {
			held = append(held, b.Span.String()) // never acknowledged
			continue
		}
		b.Ack()
	}
	short, cancelShort := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancelShort()
	_, err := drain(short, e)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrEnd)
	msg := err.Error()
	assert.Contains(t, msg, "t/1: reading (incarnation ", "%s", msg)
	assert.Contains(t, msg, "1 batches handed out and not acknowledged", "%s", msg)
	assert.Contains(t, msg, "acknowledged to 10", "%s", msg)
	assert.NotContains(t, msg, "t/0:", "a partition read to its end and acknowledged is named: %s", msg)

	closeCtx, cancelClose := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelClose()
	_ = e.Close(closeCtx)
	lines := log.String()
	i := strings.Index(lines, "Stopping before the end; what each partition waited for:")
	require.GreaterOrEqual(t, i, 0, "%s", lines)
	assert.Contains(t, lines[i:], "t/1: reading")
}
