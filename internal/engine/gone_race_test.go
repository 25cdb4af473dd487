package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// goneRaceEngine is an engine reading partition t/0 (offsets [0, 40)) with
// its first range [0, 7) launched and a reader about to hand out the batch
// of [0, 3): the batch waits on the channel Next takes batches from, as a
// reader's does once its records are fetched. No Kafka: the planner, the
// tracker and the table, as in FuzzPartitionTable.
func goneRaceEngine(t *testing.T) (*Engine, *rangeState, *Batch, chan error) {
	t.Helper()
	k := ranges.Key{Topic: "t", Partition: 0}
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 7, MaxInFlight: 10,
		PollInterval: time.Second, Logger: &testLogger{}, Membership: true, Group: "g", CommitPeriod: time.Second})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker, e.sched.baseCtx = ranges.NewPlanner(7), ranges.NewTracker(), context.Background()
	e.out.batches, e.started = make(chan *Batch), true

	e.mu.Lock()
	e.assignedLocked(k)
	w, ok := e.parts.waiting()[k]
	require.True(t, ok)
	e.startWaitingLocked(map[ranges.Key]waiting{k: w}, group.Listing{Offsets: map[ranges.Key]int64{}, Topics: map[string]bool{}},
		map[ranges.Key]marks{k: {start: 0, end: 40, high: 40, from: -1}})
	r, ok := e.parts.planner.Next(func(ranges.Key) bool { return false })
	require.True(t, ok)
	require.Equal(t, ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 7}, r)
	require.NoError(t, e.parts.tracker.Add(r))
	p := e.parts.cur(k)
	st := &rangeState{r: r, part: p, turn: make(chan struct{}), emitted: r.Start}
	close(st.turn)
	st.sent.Store(r.Start)
	p.open[r.Start] = st
	e.sched.inflight++
	e.mu.Unlock()

	recs := make([]*kgo.Record, 3)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Partition: 0, Offset: int64(i), Value: []byte("v")}
	}
	b := &Batch{Records: recs, High: 40, Range: r, Span: ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 3}, e: e, st: st}
	st.emitted = 3
	sent := make(chan error, 1)
	go func() { sent <- e.send(context.Background(), st, b) }()
	return e, st, b, sent
}

// nextWithin calls Next for d and returns the batch it hands out, if any.
func nextWithin(t *testing.T, e *Engine, d time.Duration) *Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	b, err := e.Next(ctx)
	if err != nil {
		require.Truef(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrEnd), "Next: %v", err)
		return nil
	}
	return b
}

// A deleted topic with unread data stops the run and names the offsets
// never read. A batch a reader had fetched but not yet handed out when the
// span was taken is inside that span, so it must never be handed out after
// it: the records a run reports unread are records the pipeline never saw
// (TestDeletedTopicWithUnreadDataStopsContinuousRun, on the real broker,
// once saw 25 records written inside the span it reported unread).
func TestBatchFetchedBeforeATopicDeletionIsNotHandedOutAfterIt(t *testing.T) {
	e, _, _, _ := goneRaceEngine(t)
	e.topicGone("t", fmt.Errorf("topic %q: %w", "t", errMissing))
	require.ErrorContains(t, e.Err(), "offsets [0, 40) of partition 0 were never read")
	b := nextWithin(t, e, 200*time.Millisecond)
	require.Nilf(t, b, "Next handed out %v after the run stopped and reported [0, 40) unread", b)
}

// The same, with the reader done with its range: its last batch is still on
// its way to Next, so the span reported unread starts at that batch, not
// after the range.
func TestBatchOfAFinishedRangeStillOnItsWayIsReportedUnread(t *testing.T) {
	e, st, _, _ := goneRaceEngine(t)
	e.mu.Lock()
	st.readDone = true // the reader sent [0, 3) and acknowledged [3, 7), which holds no record
	_, _, err := e.parts.tracker.Ack(ranges.Range{Topic: "t", Partition: 0, Start: 3, End: 7})
	require.NoError(t, err)
	e.mu.Unlock()
	e.topicGone("t", fmt.Errorf("topic %q: %w", "t", errMissing))
	require.ErrorContains(t, e.Err(), "offsets [0, 40) of partition 0 were never read")
	require.Nil(t, nextWithin(t, e, 200*time.Millisecond))
}

// A batch Next hands out counts as seen by the pipeline before Next returns
// it, whatever the reader that sent it does meanwhile: a span taken then
// starts after it.
func TestBatchHandedOutIsCountedBeforeNextReturnsIt(t *testing.T) {
	e, st, b, _ := goneRaceEngine(t)
	got := nextWithin(t, e, time.Second)
	require.Same(t, b, got)
	require.Equal(t, int64(3), st.sent.Load(), "a batch Next returned is not counted as sent")
	e.topicGone("t", fmt.Errorf("topic %q: %w", "t", errMissing))
	require.ErrorContains(t, e.Err(), "offsets [3, 40) of partition 0 were never read")
}
