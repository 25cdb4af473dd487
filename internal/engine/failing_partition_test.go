package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestFailingPartitionsLeaveSlotsToHealthyOnes: with max_in_flight 4 and 6
// partitions of which 2 cannot be read (every fetch answered
// NOT_LEADER_FOR_PARTITION, as when their broker is down), the healthy
// partitions are read to their end while the failing ones keep failing
// (defect: the planner kept planning ranges of the failing partitions, each
// holding a slot while its reader backed off, until every slot was theirs and
// nothing was delivered). Once the failing partitions can be read again,
// every record of them arrives too.
func TestFailingPartitionsLeaveSlotsToHealthyOnes(t *testing.T) {
	const perPart = 2000
	c := newKafka(t, 6, perPart, "t")
	var broken atomic.Bool
	broken.Store(true)
	fetchError(c, "t", 1, kerr.NotLeaderForPartition.Code, broken.Load)
	fetchError(c, "t", 4, kerr.NotLeaderForPartition.Code, broken.Load)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 4
		cfg.MaxRangeRecords = 100 // 20 ranges a partition: slots turn over many times
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	healthy := func(got map[string]int) int {
		return got["t/0"] + got["t/2"] + got["t/3"] + got["t/5"]
	}
	got := map[string]int{}
	for healthy(got) < 4*perPart {
		// Without a limit on the failing partitions' ranges this waits
		// until ctx ends: every slot is held by a reader backing off.
		b, err := e.Next(ctx)
		require.NoErrorf(t, err, "Next with %d of %d records of the healthy partitions delivered (%v)", healthy(got), 4*perPart, got)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	assert.Zero(t, got["t/1"]+got["t/4"], "records of the failing partitions")
	e.mu.Lock()
	failingOpen := len(e.parts.cur(ranges.Key{Topic: "t", Partition: 1}).open) + len(e.parts.cur(ranges.Key{Topic: "t", Partition: 4}).open)
	e.mu.Unlock()
	assert.LessOrEqual(t, failingOpen, 2, "ranges of the failing partitions in flight (at most one each)")
	assert.Eventually(t, func() bool {
		l := log.String()
		return strings.Contains(l, "Reading t/1[") && strings.Contains(l, "Reading t/4[")
	}, 15*time.Second, 10*time.Millisecond, "the failing partitions' reads were logged")

	broken.Store(false)
	rest, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	for k, n := range rest {
		got[k] += n
	}
	assert.Equal(t, map[string]int{"t/0": perPart, "t/1": perPart, "t/2": perPart, "t/3": perPart, "t/4": perPart, "t/5": perPart}, got)
	require.NoError(t, e.Err())
}

// TestPartitionFailingMidReadGivesItsSlotsBack: a partition that holds every
// slot (its ranges in flight, read ahead, waiting for their turn) and then
// cannot be read any more keeps one slot: the others go back, so a
// partition that gets records meanwhile is read. Once the failing partition
// reads again, its ranges take their slots back and everything arrives.
func TestPartitionFailingMidReadGivesItsSlotsBack(t *testing.T) {
	old := readAheadBytes
	readAheadBytes = 1 // a range not at its turn reads one fetch, then waits
	t.Cleanup(func() { readAheadBytes = old })
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produceEach(t, c, "t", 0, 0, 400)
	var broken atomic.Bool
	fetchError(c, "t", 0, kerr.NotLeaderForPartition.Code, broken.Load)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.MaxInFlight = 4
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1 // one record a fetch
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, err := e.Next(ctx) // held: [0,100) waits to hand over its next batch
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		p := e.parts.cur(ranges.Key{Topic: "t", Partition: 0})
		return p != nil && len(p.open) == 4 && p.stalled == 0
	}, 10*time.Second, 5*time.Millisecond, "partition 0 did not take every slot\n%s", log)

	broken.Store(true)
	first.Ack()
	produceTo(t, c, "t", 1, 50)
	got := map[string]int{}
	for got["t/1"] < 50 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "%d of partition 1's 50 records arrived while partition 0 failed\n%s", got["t/1"], log)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	e.mu.Lock()
	inflight := e.sched.inflight
	e.mu.Unlock()
	assert.LessOrEqual(t, inflight, 4)

	broken.Store(false)
	for got["t/0"] < 400-len(first.Records) {
		b, err := e.Next(ctx)
		require.NoError(t, err, "partition 0 did not recover: %v\n%s", got, log)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	require.NoError(t, e.Err())
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sched.inflight == 0
	}, 10*time.Second, 10*time.Millisecond, "slots left taken once everything was read")
}
