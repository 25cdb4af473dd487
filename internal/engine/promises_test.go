package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// TestPromiseReadingGoesOnPastLossesInARow checks backfills.md's "reading goes
// on from the new log start ... and the commit moves past them" (on_data_loss:
// skip) for two deletions in a row while the partition's first range still
// waits for the pipeline: each reader that meets one skips the unplanned
// offsets below the new log start, so two skipped spans follow each other
// before the partition's turn to emit reaches them. The turn passes both,
// the range after them is emitted, and the bounded run ends.
func TestPromiseReadingGoesOnPastLossesInARow(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	produceEach(t, c, "t", 0, 0, 800)
	// Fetches at [150,200) fail (retriably) while block1 is set, at
	// [250,300) while block2 is: the readers of those ranges read their
	// first records (so the next range is planned), then meet the deletions
	// one after the other.
	var block1, block2 atomic.Bool
	var asked1, asked2 atomic.Bool
	block1.Store(true)
	block2.Store(true)
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				blocked := false
				switch o := rp.FetchOffset; {
				case o >= 150 && o < 200:
					asked1.Store(true)
					blocked = block1.Load()
				case o >= 250 && o < 300:
					asked2.Store(true)
					blocked = block2.Load()
				}
				if !blocked {
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
	// Hold the first batch of [0,100): the partition's turn stays there.
	first, err := e.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), first.Span.Start)
	require.Eventually(t, func() bool { return asked1.Load() && asked2.Load() }, 10*time.Second, 5*time.Millisecond,
		"[100,200) and [200,300) were not read to their blocked offsets\n%s", log)

	adm := kadm.NewClient(kgoClient(t, c))
	deleteBelow := func(at int64) {
		del := kadm.Offsets{}
		del.Add(kadm.Offset{Topic: "t", Partition: 0, At: at})
		_, err := adm.DeleteRecords(ctx, del)
		require.NoError(t, err)
	}
	// The reader of [100,200) meets the first deletion: [150,200) and the
	// unplanned [300,500) are lost.
	deleteBelow(500)
	block1.Store(false)
	require.Eventually(t, func() bool { return e.stats.lost.Load() >= 250 }, 10*time.Second, 5*time.Millisecond,
		"the first deletion was not seen\n%s", log)
	// The reader of [200,300) meets the second: [250,300) and [500,700).
	deleteBelow(700)
	block2.Store(false)
	require.Eventually(t, func() bool { return e.stats.lost.Load() >= 500 }, 10*time.Second, 5*time.Millisecond,
		"the second deletion was not seen\n%s", log)

	first.Ack()
	rest, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "the run did not end past the losses\n%s", log)
	lost := e.Summary().Lost
	assert.Equal(t, int64(800), int64(len(first.Records)+rest["t/0"])+lost, "records delivered and offsets lost")
	assert.GreaterOrEqual(t, rest["t/0"], 100, "[700,800) delivered")
	require.NoError(t, e.Err())
}

// TestPromiseFailingPartitionHoldsOneSlot checks design.md's "a partition
// without a leader is retried and read once it has one, while the rest flow
// (while it cannot be read it holds one max_in_flight slot: no further range
// of it is planned, and its other ranges in flight give their slots back)":
// with two slots, one held by a partition whose every fetch fails, another
// partition reads one range at a time, never two.
func TestPromiseFailingPartitionHoldsOneSlot(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	produceEach(t, c, "t", 1, 0, 300)
	produceEach(t, c, "t", 0, 0, 10)
	id := c.TopicInfo("t").TopicID
	var highest1 atomic.Int64 // the highest offset of t/1 fetched
	highest1.Store(-1)
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		failing := false
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				switch {
				case rp.Partition == 0:
					failing = true
				case rp.FetchOffset > highest1.Load():
					highest1.Store(rp.FetchOffset)
				}
			}
		}
		if !failing {
			return nil, nil, false
		}
		// t/0 has no leader; the others get an answer without records
		// (kfake cannot serve part of a request) and fetch again.
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				if (rt.Topic == "t" || rt.TopicID == id) && rp.Partition == 0 {
					sp.ErrorCode = kerr.NotLeaderForPartition.Code
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.MaxInFlight = 2
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// Hold t/1's first batch: its first range [0,100) stays in flight.
	first, err := e.Next(ctx)
	require.NoError(t, err, "%s", log)
	require.Equal(t, int32(1), first.Range.Partition)
	// t/0's reader fails and backs off, again and again.
	require.Eventually(t, func() bool {
		return countLines(log, "WARN", "Reading t/0[0,") > 0
	}, 15*time.Second, 10*time.Millisecond, "t/0's read did not fail\n%s", log)
	time.Sleep(time.Second) // time enough to start a second range of t/1 if a slot were free
	assert.Less(t, highest1.Load(), int64(100),
		"a second range of t/1 was read while t/1's first and the failing t/0 held the two slots\n%s", log)
	first.Ack()
}

// TestPromiseOrderedReadsOneRangePerPartition checks ordered's "at most one
// range per partition is in flight, so each partition's records reach the
// pipeline in offset order (a range starts only once the previous one of its
// partition is acknowledged)": while the pipeline holds a batch of a
// partition's first range, nothing past that range is read, however many
// slots are free; and the partition's batches come in offset order.
func TestPromiseOrderedReadsOneRangePerPartition(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	produceEach(t, c, "t", 0, 0, 300)
	var highest atomic.Int64 // the highest offset fetched
	highest.Store(-1)
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset > highest.Load() && rp.FetchOffset < 300 { // not the tail's long poll
					highest.Store(rp.FetchOffset)
				}
			}
		}
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Ordered = true
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 4
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	first, err := e.Next(ctx)
	require.NoError(t, err, "%s", log)
	require.Equal(t, int64(0), first.Span.Start)
	time.Sleep(time.Second) // time enough to start the next range if the scheduler would
	assert.Less(t, highest.Load(), first.Range.End,
		"read past %s while the pipeline held its batch %s\n%s", first.Range, first.Span, log)

	next := first.Span.End
	first.Ack()
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err, "%s", log)
		require.Equal(t, next, b.Span.Start, "batch %s out of offset order", b.Span)
		next = b.Span.End
		b.Ack()
	}
	assert.Equal(t, int64(300), next)
}
