package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of promises the docs make, checked as properties (issue 52, item
// 3): each names the sentence it checks, and was seen to fail with the
// mutant of resources/mutate/mutants.go written from that sentence.

// TestPromiseRejectedWhileStoppingIsNeverCommitted checks README's "A record
// is committed only once it and every record before it in its partition was
// acknowledged" on a stop path: a batch the pipeline rejects once the
// engine stops (here on a stopping error) is dropped unacknowledged, so the
// final commit never passes it, whatever was acknowledged after it.
func TestPromiseRejectedWhileStoppingIsNeverCommitted(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	e, log := startEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group.Name = "g"
		cfg.Group.CommitPeriod = time.Hour // only the final commit
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var held []*Batch // every batch of the first range, in offset order
	for {
		b, err := e.Next(ctx)
		require.NoError(t, err, "%s", log)
		held = append(held, b)
		if b.Span.End >= b.Range.End {
			break
		}
	}
	require.Equal(t, int64(0), held[0].Span.Start)

	e.fail(errors.New("a stopping error")) // the engine stops: Benthos rejects what its pipeline holds
	held[0].Nack(errors.New("rejected while stopping"))
	AckAll(held[1:]) // acknowledged after it: still never committable past it
	closeCtx, closeCancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer closeCancel()
	_ = e.Close(closeCtx) // returns the stopping error

	got := committedOf(t, c, "g", 0)
	assert.LessOrEqual(t, got, held[0].Span.Start,
		"committed %d, past the batch %s rejected while the engine stopped\n%s", got, held[0].Span, log)
}

// TestPromiseDroppedRecordsAreCounted checks auto_replay_nacks' "false drops
// it (Benthos' contract) and counts its range as done: the dropped records
// are counted (kafka_batched_ranges_dropped_records_total, the summary
// line)": every record of every rejected batch is counted once, and the
// bounded run ends with its ranges done.
func TestPromiseDroppedRecordsAreCounted(t *testing.T) {
	c := newKafka(t, 2, 250, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.ReplayNacks = false
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	rejected, acked := int64(0), int64(0)
	for i := 0; ; i++ {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err, "%s", log)
		if i%2 == 0 {
			rejected += int64(len(b.Records))
			b.Nack(errors.New("rejected"))
		} else {
			acked += int64(len(b.Records))
			b.Ack()
		}
	}
	s := e.Summary()
	require.Positive(t, rejected)
	assert.Equal(t, rejected, s.Dropped, "records dropped")
	assert.Equal(t, acked, s.Acked, "records acknowledged")
	assert.Equal(t, int64(500), s.Done, "offsets done: a dropped batch's range counts as done")
}
