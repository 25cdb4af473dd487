package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestLateLossOfAnEndedIncarnationIsLoggedNotCounted: what the engine itself
// produces for an incarnation that is over (here a reader that found its
// offsets deleted after its partition was revoked and assigned again) is
// dropped without being counted as stale and without a loss, and logged at
// DEBUG, as doc.go says. Before, the loss was dropped silently.
func TestLateLossOfAnEndedIncarnationIsLoggedNotCounted(t *testing.T) {
	log := &testLogger{}
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 10, MaxInFlight: 1, PollInterval: time.Second, SkipDataLoss: true, Logger: log})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker, e.sched.baseCtx = ranges.NewPlanner(10), ranges.NewTracker(), context.Background()
	k := ranges.Key{Topic: "t", Partition: 0}
	e.mu.Lock()
	require.NoError(t, e.addPartitionLocked(k, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	old := &rangeState{r: ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 10}, part: e.parts.cur(k)}
	e.dropLocked(k, old.part)
	require.NoError(t, e.addPartitionLocked(k, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	e.mu.Unlock()

	assert.Equal(t, int64(10), e.skipLost(old, 0, 20), "where the old reader goes on")
	assert.Zero(t, e.stats.stale.Load(), "stale counted")
	assert.Empty(t, e.parts.peek(k).losses, "losses recorded for the partition's current incarnation")
	assert.Equal(t, 1, countLines(log, "DEBUG", "Dropped the loss of t/0[0,10)", "incarnation 1 of t/0 is over"), "\n%s", log)
}
