package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExplicitStartOffsets: a partition whose topics entry names a start
// offset (topic:partition:offset) starts there instead of where start_from
// says, the others of the same run where start_from says; the first batch
// of it holds that offset first.
func TestExplicitStartOffsets(t *testing.T) {
	c := newKafka(t, 3, 300, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0, 1, 2}, Offsets: map[int32]int64{0: 120, 2: 0}}}
		cfg.StartFrom = StartLatest
		cfg.StopAtEnd = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	first := map[string]int64{}
	got := map[string]int{}
	for {
		b, err := e.Next(ctx)
		if err != nil {
			require.ErrorIs(t, err, ErrEnd)
			break
		}
		k := b.Range.Key().String()
		if _, ok := first[k]; !ok && len(b.Records) > 0 {
			first[k] = b.Records[0].Offset
		}
		got[k] += len(b.Records)
		b.Ack()
	}
	assert.Equal(t, map[string]int{"t/0": 180, "t/2": 300}, got, "records read (t/1 from latest: none)")
	assert.Equal(t, map[string]int64{"t/0": 120, "t/2": 0}, first, "first offsets")
}

// TestExplicitStartOffsetOutsideTheLog: a start offset past the partition's
// end stops the run with an error naming the partition, the offset and the
// end; nothing is read from elsewhere instead.
func TestExplicitStartOffsetOutsideTheLog(t *testing.T) {
	c := newKafka(t, 1, 50, "t")
	e, _ := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 51}}}
		cfg.StopAtEnd = true
	})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := e.Start(ctx)
	if err == nil {
		_, err = drain(ctx, e)
		if err == ErrEnd {
			err = e.Err()
		}
	}
	require.Error(t, err)
	assert.ErrorContains(t, err, "t/0: its topics entry starts it at offset 51, past the partition's end 50")
}
