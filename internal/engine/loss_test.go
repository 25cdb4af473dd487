package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestDataLossWithRangesInFlightNamesTheSpan: offsets deleted under a
// reader stop the engine with the lost span, while other readers wait.
func TestDataLossWithRangesInFlightNamesTheSpan(t *testing.T) {
	c := newKafka(t, 2, 1000, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 8
		cfg.Ordered = true // each partition waits for its acknowledgement: readers hold their place
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.NoError(t, c.DeleteRecords("t", 0, 900))
	require.NoError(t, c.DeleteRecords("t", 1, 900))
	b.Ack()
	_, err = drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	require.Error(t, e.Err())
	assert.Regexp(t, `t/[01]: offsets \[\d+, 900\) no longer exist`, e.Err().Error())
}

// TestSkipDataLossCountsAndCommitsPast: with SkipDataLoss, offsets deleted
// ahead of the readers are counted exactly (those not read), logged once as
// one span, every other record arrives once, and the commit reaches the end.
// A cursor reads ahead of its range (up to two fetches queued), so records
// fetched before the delete may still be delivered: what was delivered is a
// prefix [0, read) and the rest [600, 1000), and exactly [read, 600) is lost.
func TestSkipDataLossCountsAndCommitsPast(t *testing.T) {
	c := newKafka(t, 1, 0, "t")
	// Producer batches of 10 records, one batch per fetch: little past the
	// first batch is fetched before the delete.
	cl := kgoClient(t, c)
	for i := 0; i < 1000; i += 10 {
		var recs []*kgo.Record
		for j := range 10 {
			recs = append(recs, &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "%d", i+j)})
		}
		require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	}
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.SkipDataLoss = true
		cfg.Group.Name = "g"
		cfg.Ordered = true
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	seen := map[int64]int{}
	for _, r := range b.Records {
		seen[r.Offset]++
	}
	require.Less(t, b.Span.End, int64(600))
	require.NoError(t, c.DeleteRecords("t", 0, 600))
	b.Ack()
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err)
		for _, r := range b.Records {
			seen[r.Offset]++
		}
		b.Ack()
	}
	require.NoError(t, e.Err())
	read := int64(0)
	for seen[read] > 0 {
		read++
	}
	require.Less(t, read, int64(600), "the delete did not overtake the readers")
	for o, n := range seen {
		assert.Equalf(t, 1, n, "offset %d delivered %d times", o, n)
		assert.Falsef(t, o >= read && o < 600, "offset %d delivered after a gap of deleted offsets", o)
	}
	assert.Len(t, seen, int(read)+400, "records delivered")
	require.NoError(t, e.Close(ctx))
	assert.Equal(t, 600-read, e.Summary().Lost, "lost offsets")
	assert.Contains(t, log.String(), fmt.Sprintf("Data loss on t/0: offsets [%d, 600) were deleted before they were read; skipping them (on_data_loss: skip)", read))
	assert.Equal(t, 1, strings.Count(log.String(), "Data loss on"), "one warning for one loss")
	adm := kadm.NewClient(kgoClient(t, c))
	offs, err := adm.FetchOffsets(ctx, "g")
	require.NoError(t, err)
	o, _ := offs.Lookup("t", 0)
	assert.Equal(t, int64(1000), o.At, "committed offset")
}

// TestSkippedLossBeforeItsTurnDoesNotStall: offsets deleted under a range
// that is not yet its partition's turn to emit (on_data_loss: skip) are
// skipped, and the partition goes on to its end. Before, the lost range was
// acknowledged whole at once, left the open ranges before its turn, and the
// turn to emit never passed it: the bounded run never ended.
func TestSkippedLossBeforeItsTurnDoesNotStall(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	produceEach(t, c, "t", 0, 0, 500)
	// Fetches from offset 200 on fail (retriably) until the deletion, so
	// [200,300) is read only after it; the highest offset fetched below 200
	// tells when [100,200) is read.
	var block atomic.Bool
	var below200 atomic.Int64
	block.Store(true)
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset < 200 {
					if rp.FetchOffset > below200.Load() {
						below200.Store(rp.FetchOffset)
					}
					continue
				}
				if !block.Load() {
					continue
				}
				resp := fr.ResponseKind().(*kmsg.FetchResponse)
				st := kmsg.NewFetchResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotLeaderForPartition.Code
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
				resp.Topics = append(resp.Topics, st)
				return resp, nil, true
			}
		}
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.SkipDataLoss = true
		cfg.MaxInFlight = 3
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Hold the first batch of [0,100): its reader waits to hand over the
	// next, so [100,200), once read, waits for its turn.
	first, err := e.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), first.Span.Start)
	require.Eventually(t, func() bool { return below200.Load() == 199 }, 10*time.Second, 5*time.Millisecond, "[100,200) was not read")
	time.Sleep(100 * time.Millisecond) // the last fetch's answer reaches the reader

	adm := kadm.NewClient(kgoClient(t, c))
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "t", Partition: 0, At: 350})
	_, err = adm.DeleteRecords(ctx, del)
	require.NoError(t, err)
	block.Store(false)
	require.Eventually(t, func() bool { return e.stats.lost.Load() > 0 }, 10*time.Second, 5*time.Millisecond, "the deletion was not seen")

	first.Ack()
	rest, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "the run did not end\n%s", log)
	// Every offset was delivered once or lost: [200,350) lost, and of
	// [0,100) whatever its reader had not fetched yet.
	lost := e.Summary().Lost
	assert.Equal(t, int64(500), int64(len(first.Records)+rest["t/0"])+lost, "records delivered and offsets lost")
	assert.GreaterOrEqual(t, lost, int64(150), "lost offsets")
	assert.GreaterOrEqual(t, rest["t/0"], 100+150, "[100,200) and [350,500) delivered")
	require.NoError(t, e.Err())
}

// TestLateLossOfAnEndedIncarnationIsLoggedNotCounted: what the engine itself
// produces for an incarnation that is over (here a reader that found its
// offsets deleted after its partition was revoked and assigned again) is
// dropped without being counted as stale and without a loss, and logged at
// DEBUG, as doc.go says. Before, the loss was dropped silently.
func TestLateLossOfAnEndedIncarnationIsLoggedNotCounted(t *testing.T) {
	log := &testLogger{}
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 10, MaxInFlight: 1, PollInterval: time.Second, SkipDataLoss: true, Hooks: Hooks{Logger: log}})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker, e.sched.baseCtx = ranges.NewPlanner(10), ranges.NewTracker(), context.Background()
	k := ranges.Key{Topic: "t", Partition: 0}
	e.mu.Lock()
	require.NoError(t, e.addPartitionLocked(k, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	old := &rangeState{r: ranges.Range{Topic: "t", Partition: 0, Start: 0, End: 10}, part: e.parts.cur(k)}
	e.dropLocked(k, old.part)
	require.NoError(t, e.addPartitionLocked(k, marks{start: 0, end: 100, high: 100, from: -1}, fromConfig, e.parts.nextInc()))
	e.mu.Unlock()

	assert.Equal(t, int64(10), (&reader{e: e, st: old}).skipLost(0, 20), "where the old reader goes on")
	assert.Zero(t, e.stats.stale.Load(), "stale counted")
	assert.Empty(t, e.parts.peek(k).losses, "losses recorded for the partition's current incarnation")
	assert.Equal(t, 1, countLines(log, "DEBUG", "Dropped the loss of t/0[0,10)", "incarnation 1 of t/0 is over"), "\n%s", log)
}
