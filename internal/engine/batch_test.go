package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestNackedBatchIsReplayedWhole: a nacked batch comes back, whole, and only
// its acknowledgement lets the commit pass it.
func TestNackedBatchIsReplayedWhole(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.Group.Name = "g"
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	first := b.Records
	b.Nack(errors.New("rejected"))
	b.Nack(errors.New("a second nack of the same delivery is ignored by the plugin, not here"))
	b2, err := e.Next(ctx)
	require.NoError(t, err)
	assert.Same(t, b, b2, "the replay is the same batch")
	assert.Equal(t, first, b2.Records)
	assert.Equal(t, 2, b2.Attempts)
	b2.Ack()
	b2.Ack() // safe twice
	_, err = drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
}

// goneRaceEngine is an engine reading partition t/0 (offsets [0, 40)) with
// its first range [0, 7) launched and a reader about to hand out the batch
// of [0, 3): the batch waits on the channel Next takes batches from, as a
// reader's does once its records are fetched. No Kafka: the planner, the
// tracker and the table, as in FuzzPartitionTable.
func goneRaceEngine(t *testing.T) (*Engine, *rangeState, *Batch, chan error) {
	t.Helper()
	k := ranges.Key{Topic: "t", Partition: 0}
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 7, MaxInFlight: 10,
		PollInterval: time.Second, Hooks: Hooks{Logger: &testLogger{}}, Group: GroupConfig{Name: "g", Membership: true, CommitPeriod: time.Second}})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker, e.sched.baseCtx = ranges.NewPlanner(7), ranges.NewTracker(), context.Background()
	e.out.batches, e.started = make(chan *Batch), true

	e.mu.Lock()
	e.failLocked(e.parts.assigned(k))
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
	e.sched.slots.take()
	e.mu.Unlock()

	recs := make([]*kgo.Record, 3)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Partition: 0, Offset: int64(i), Value: []byte("v")}
	}
	b := &Batch{Records: recs, High: 40, Range: r, Span: ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 3}, e: e, st: st}
	st.emitted = 3
	sent := make(chan error, 1)
	go func() { sent <- (&reader{e: e, st: st}).send(context.Background(), b) }()
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

// What a plugin that re-cuts batches (a Benthos batch policy) relies on:
// Split makes exact sub-batches, and RangeEnds says when a range will hand
// out no more batches.

// TestSplitAcksExactly: the parts of a split batch are acknowledged and
// replayed on their own; the commit never passes a part that is not
// acknowledged, and a rejected part comes back alone, with its records.
func TestSplitAcksExactly(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	adm := kadm.NewClient(kgoClient(t, c))
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}}}
		cfg.Group.Name = "g"
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords = 300
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b.Records), 30, "the test needs a batch of 30 records or more")
	n := len(b.Records)
	all := b.Records
	span := b.Span
	mid := b.Split(10)
	last := mid.Split(10)

	assert.Equal(t, all[:10], b.Records, "the first part's records")
	assert.Equal(t, all[10:20], mid.Records, "the middle part's records")
	assert.Equal(t, all[20:], last.Records, "the last part's records")
	assert.Equal(t, ranges.Range{Topic: "t", Partition: 0, Start: span.Start, End: all[9].Offset + 1}, b.Span)
	assert.Equal(t, ranges.Range{Topic: "t", Partition: 0, Start: all[9].Offset + 1, End: all[19].Offset + 1}, mid.Span)
	assert.Equal(t, ranges.Range{Topic: "t", Partition: 0, Start: all[19].Offset + 1, End: span.End}, last.Span)
	require.Positive(t, b.High, "the fetch's high watermark")
	for _, p := range []*Batch{mid, last} {
		assert.Equal(t, b.Range, p.Range)
		assert.Equal(t, b.High, p.High, "a part keeps the high watermark of its fetch (kafka_lag)")
		assert.Equal(t, b.Incarnation(), p.Incarnation())
		assert.Equal(t, 1, p.Attempts)
		assert.Nil(t, p.Prepared)
	}

	// The last and middle parts first: nothing may be committed.
	last.Ack()
	mid.Nack(errors.New("rejected"))
	time.Sleep(300 * time.Millisecond) // six commit periods
	assert.LessOrEqual(t, committed(ctx, t, adm, "g", "t", 0), span.Start, "committed past the unacknowledged first part\n%s", log)

	b.Ack()
	require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == mid.Span.Start }, 5*time.Second, 10*time.Millisecond,
		"the first part's acknowledgement is not committed, or the commit passed the rejected middle part\n%s", log)

	// The rejected middle part comes back alone (n-20 records of the first
	// batch were acknowledged, later batches are drained meanwhile).
	for {
		r, err := e.Next(ctx)
		require.NoError(t, err, "%s", log)
		if r.Attempts == 1 {
			r.Ack()
			continue
		}
		assert.Same(t, mid, r, "the replay is the rejected part")
		assert.Equal(t, all[10:20], r.Records, "the replayed records")
		time.Sleep(200 * time.Millisecond)
		assert.Equal(t, mid.Span.Start, committed(ctx, t, adm, "g", "t", 0), "committed past the part being replayed")
		r.Ack()
		break
	}
	_, err = drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	require.NoError(t, e.Close(ctx))
	assert.Equal(t, int64(300), committed(ctx, t, adm, "g", "t", 0))
	sum := e.Summary()
	assert.Equal(t, int64(300), sum.Records, "records handed out for the first time (the first batch had %d)", n)
	// The reader's own times: the first and the last new batch (the
	// replay does not count), within the run.
	assert.True(t, 0 < sum.FirstOut && sum.FirstOut <= sum.LastOut && sum.LastOut <= sum.Elapsed,
		"first batch handed out at %s, last at %s, of %s", sum.FirstOut, sum.LastOut, sum.Elapsed)
}

// TestRangeEndsFollowEachRange: with RangeEnds every range that handed out
// a batch is followed by exactly one end marker, after its last batch; the
// markers hold no records, their Ack and Nack do nothing, and a bounded run
// still ends.
func TestRangeEndsFollowEachRange(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.RangeEnds = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	seen := map[ranges.Range]int{} // records per range
	ended := map[ranges.Range]int{}
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err, "%s", log)
		if b.RangeEnd {
			assert.Empty(t, b.Records, "an end marker with records")
			assert.Positive(t, seen[b.Range], "the end of %s, which handed out no batch", b.Range)
			ended[b.Range]++
			b.Nack(errors.New("ignored"))
			b.Ack()
			continue
		}
		assert.Zero(t, ended[b.Range], "a batch of %s after its end", b.Range)
		seen[b.Range] += len(b.Records)
		b.Ack()
	}
	assert.Len(t, seen, 6, "ranges read")
	for r, n := range seen {
		assert.Equal(t, 100, n, "records of %s", r)
		assert.Equal(t, 1, ended[r], "end markers of %s", r)
	}
}

// TestRangeEndAfterStoppedReader: a reader stopped in the middle of its
// range (here by Close) still hands out the range's end marker, so a plugin
// holding the range's batches lets them go.
func TestRangeEndAfterStoppedReader(t *testing.T) {
	c := newKafka(t, 1, 0, "t")
	produceEach(t, c, "t", 0, 0, 20)
	e, log := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.RangeEnds = true
		cfg.Fetch.MaxPartitionBytes = 1 // one record per fetch: twenty batches
		cfg.MaxInFlight = 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	require.NoError(t, e.Start(ctx))
	b, err := e.Next(ctx)
	require.NoError(t, err, "%s", log)
	require.Less(t, b.Span.End, b.Range.End, "the test needs a range of several batches")
	time.Sleep(100 * time.Millisecond) // the reader waits to hand out its next batch
	require.NoError(t, e.Close(ctx))
	end, err := e.Next(ctx)
	require.NoError(t, err, "%s", log)
	require.True(t, end.RangeEnd, "got a batch of %s, want the end marker", end.Span)
	assert.Equal(t, b.Range, end.Range)
	assert.Equal(t, b.Incarnation(), end.Incarnation())
}

// TestNoRangeEndsByDefault: without RangeEnds, Next hands out no markers.
func TestNoRangeEndsByDefault(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n := 0
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err)
		require.False(t, b.RangeEnd, "an end marker without RangeEnds")
		n += len(b.Records)
		b.Ack()
	}
	assert.Equal(t, 300, n)
}

// TestLateAckOfSplitBatchCountsOnce (review 4, read, not reproduced): one
// late acknowledgement of a batch that the caller split into parts (the
// plugin's batching cuts an engine batch into several) is one stale
// acknowledgement, not one per part.
func TestLateAckOfSplitBatchCountsOnce(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	e, log := newEngine(t, c, memberConfig(kgo.CooperativeStickyBalancer()))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k := ranges.Key{Topic: "t", Partition: 0}
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b.Records), 3)
	second := b.Split(1)
	third := second.Split(1)
	inc := b.Incarnation()

	loseSessionOnce(c)
	require.Eventually(t, func() bool { return owns(e, k) && incOf(e, k) != inc }, 20*time.Second, 10*time.Millisecond,
		"t/0 did not come back as a new incarnation\n%s", log)
	before := e.Summary().Stale
	AckAll([]*Batch{b, second, third})
	assert.Equal(t, int64(1), e.Summary().Stale-before, "one late acknowledgement of 3 parts")
	assert.True(t, b.Done() && second.Done() && third.Done())
	AckAll([]*Batch{b, second, third}) // again: nothing
	assert.Equal(t, int64(1), e.Summary().Stale-before)
}

// TestDroppedBatchIsSaidWhole (issue 50, defect 6): without ReplayNacks, a
// batch of the pipeline made of several engine batches (Split parts, as the
// plugin's batching cuts them) that is rejected is said once, with the
// records of the whole batch; the warning said "Batch of 10 records" of
// its first part where the pipeline had rejected a batch of 30.
func TestDroppedBatchIsSaidWhole(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}}}
		cfg.StopAtEnd = true
		cfg.MaxRangeRecords = 300
		cfg.ReplayNacks = false
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b.Records), 31, "the test needs a batch of more than 30 records")
	rest := b.Split(30)
	mid := b.Split(10)
	last := mid.Split(10)
	NackAll([]*Batch{b, mid, last}, errors.New("output down"))

	lines := levelLines(log, "WARN")
	require.Len(t, lines, 1, "one warning of the rejected batch")
	assert.Equal(t, "A batch of 30 records (of t/0[0,300)) was rejected (output down) and dropped (auto_replay_nacks: false); 30 rejected records dropped so far", lines[0])
	assert.Equal(t, int64(30), e.Summary().Dropped, "records dropped")
	rest.Ack()
}
