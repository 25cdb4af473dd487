package engine

import (
	"context"
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

// Regression tests of where partitions start and when bounded runs end.

// TestCommittedPastTargetEndIsDone: a committed offset at or past an end
// that is a target (a bounded run's snapshot end, below the partition's
// current end) means the partition is done, not truncated. Before, it
// stopped the engine: "committed offset 200 is past the partition's end 100:
// the log was truncated or the topic recreated".
func TestCommittedPastTargetEndIsDone(t *testing.T) {
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 10, MaxInFlight: 1, PollInterval: time.Second})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker = ranges.NewPlanner(10), ranges.NewTracker()
	e.sched.baseCtx = context.Background()
	k := ranges.Key{Topic: "t", Partition: 0}
	for _, tc := range []struct {
		name      string
		committed int64
		m         marks
		wantErr   string
	}{
		{"past the snapshot end", 200, marks{start: 0, end: 100, high: 200, from: -1}, ""},
		{"at the snapshot end", 100, marks{start: 0, end: 100, high: 200, from: -1}, ""},
		{"past the listed end", 201, marks{start: 0, end: 100, high: 200, from: -1}, "past the partition's end 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.parts.ensure(k).committed = tc.committed
			if p := e.parts.cur(k); p != nil {
				e.dropLocked(k, p)
			}
			err := e.addPartitionLocked(k, tc.m, fromConfig, 1)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, int64(0), e.parts.planner.Pending(k), "offsets left to read")
		})
	}
}

// TestStopTimestampBelowCommittedIsDone: a time window whose stop offset is
// below the group's committed offset reads nothing and ends, without error.
func TestStopTimestampBelowCommittedIsDone(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	cl := kgoClient(t, c)
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Value: fmt.Appendf(nil, "%d", i), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 200, LeaderEpoch: -1})
	_, err = adm.CommitOffsets(t.Context(), "g", offs)
	require.NoError(t, err)

	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}}}
		cfg.Group = "g"
		cfg.StopAtEnd = true
		cfg.StopMillis = base.Add(100 * time.Millisecond).UnixMilli()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	require.NoError(t, e.Err())
	assert.Empty(t, got)
}

// TestResetOffsetsOncePerReplay: reset_offsets with a group resets the
// group's offsets when the replay starts; a member joining the replay later
// resumes from what the first one committed. Before, every assignment
// restarted from start_from, and the member joining re-read the whole
// partition it took over.
func TestResetOffsetsOncePerReplay(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	adm := kadm.NewClient(kgoClient(t, c))
	commitAll(t, adm, "g", "t", 2, 300) // a previous run committed everything

	replay := func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.ResetOffsets = true
	}
	a, logA := newEngine(t, c, replay)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	stopA := drainInBackground(ctx, a)
	require.Eventually(t, func() bool {
		return committed(ctx, t, adm, "g", "t", 0) == 300 && committed(ctx, t, adm, "g", "t", 1) == 300 && a.Summary().Records == 600
	}, 20*time.Second, 20*time.Millisecond, "the replay did not read and commit everything again\n%s", logA)

	b, logB := newEngine(t, c, replay) // joins the replay under way
	stopB := drainInBackground(ctx, b)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.parts.nReading == 1
	}, 20*time.Second, 20*time.Millisecond, "no partition moved to the second member\n%s", logB)
	time.Sleep(500 * time.Millisecond) // let it read what it would
	stopB()
	stopA()
	assert.Zero(t, b.Summary().Records, "the member that joined the replay re-read its partition\n%s", logB)
	assert.Contains(t, logB.String(), "replay is under way")
}

// TestBoundedReplayWithSlowJoinReadsEverything: a bounded replay whose first
// join takes longer than the poll interval still reads every record; before,
// the previous run's commits (at the end) made it end having read nothing.
func TestBoundedReplayWithSlowJoinReadsEverything(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	adm := kadm.NewClient(kgoClient(t, c))
	commitAll(t, adm, "g", "t", 2, 300) // a previous run committed everything
	var slowed atomic.Bool
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !slowed.Swap(true) {
			c.SleepControl(func() { time.Sleep(time.Second) })
		}
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.ResetOffsets = true
		cfg.StopAtEnd = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	require.NoError(t, e.Err())
	assert.Equal(t, map[string]int{"t/0": 300, "t/1": 300}, got, "%s", log)
}

// TestBoundedGroupRunEndsAfterSkippedDeletedTopic: a bounded group run with
// on_data_loss: skip whose second topic is deleted with offsets unread
// counts the loss and ends. Before, it waited for ever for the deleted
// partition to be committed to its end.
func TestBoundedGroupRunEndsAfterSkippedDeletedTopic(t *testing.T) {
	c := newKafka(t, 1, 300, "a")
	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.CreateTopic(t.Context(), 1, 1, nil, "b")
	require.NoError(t, err)
	produce(t, c, "b", 1, 900)
	var deleted atomic.Bool
	fetchError(c, "b", 0, kerr.NotLeaderForPartition.Code, func() bool { return !deleted.Load() })
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.Topics = []TopicSpec{{Name: "a"}, {Name: "b"}}
		cfg.StopAtEnd = true
		cfg.SkipDataLoss = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", b.Range.Topic)
	b.Ack()
	_, err = adm.DeleteTopics(ctx, "b")
	require.NoError(t, err)
	deleted.Store(true)
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "the bounded run did not end\n%s", log)
	require.NoError(t, e.Err())
	assert.Equal(t, 300, got["a/0"]+len(b.Records))
	assert.Equal(t, int64(900), e.Summary().Lost, "the deleted topic's unread offsets are counted as lost")
}

// TestPartitionAddedUnderGroupIsReadFromItsFirstOffset: with a group and
// start_from: latest, a partition created after the input started is read
// from its first offset. Before, its first records were skipped.
func TestPartitionAddedUnderGroupIsReadFromItsFirstOffset(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.StartFrom = StartLatest
	})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return owns(e, ranges.Key{Topic: "t", Partition: 0}) }, 20*time.Second, 10*time.Millisecond)
	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.CreatePartitions(ctx, 1, "t")
	require.NoError(t, err)
	produceTo(t, c, "t", 1, 50)
	got := 0
	for got < 50 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "only %d of the new partition's 50 records arrived\n%s", got, log)
		require.Equal(t, int32(1), b.Range.Partition)
		got += len(b.Records)
		b.Ack()
	}
	assert.Equal(t, 50, got)
}

// produceTo writes n records to partition p of topic.
func produceTo(t *testing.T, c *kfake.Cluster, topic string, p int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", topic, p, i)})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
}

// TestNewPartitionSeenDuringCatchUp: without a group, a partition added
// while a backlog is being read is seen at the next poll, not once the
// backlog is read.
func TestNewPartitionSeenDuringCatchUp(t *testing.T) {
	c := newKafka(t, 1, 3000, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx) // held: the backlog stays unread
	require.NoError(t, err)
	adm := kadm.NewClient(kgoClient(t, c))
	_, err = adm.CreatePartitions(ctx, 1, "t")
	require.NoError(t, err)
	produceTo(t, c, "t", 1, 1)
	require.Eventually(t, func() bool { return owns(e, ranges.Key{Topic: "t", Partition: 1}) }, 5*time.Second, 10*time.Millisecond,
		"the new partition was not seen while the backlog was read\n%s", log)
	assert.Positive(t, e.pendingOf(ranges.Key{Topic: "t", Partition: 0}), "the backlog was read already")
	assert.True(t, strings.Contains(log.String(), "Partition t/1 appeared"))
	b.Ack()
}

func (e *Engine) pendingOf(k ranges.Key) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.parts.planner.Pending(k)
}

// TestStoppingErrorEndsASlowRefresh: a permanent read error while the
// scheduler waits on a slow listing stops the engine at once; before, it was
// noticed only when the listing returned.
func TestStoppingErrorEndsASlowRefresh(t *testing.T) {
	c := newKafka(t, 2, 200, "t")
	var slow atomic.Bool
	var fail atomic.Int32 // partition 1's fetches: 1 retriable errors, 2 a permanent one
	fail.Store(1)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // before the cluster closes: no sleeper outlives the test
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slow.Load() {
			c.SleepControl(func() {
				select {
				case <-time.After(20 * time.Second):
				case <-done:
				}
			})
		}
		return nil, nil, false
	})
	fetchError(c, "t", 1, kerr.NotLeaderForPartition.Code, func() bool { return fail.Load() == 1 })
	fetchError(c, "t", 1, kerr.TopicAuthorizationFailed.Code, func() bool { return fail.Load() == 2 })
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < 200; { // partition 0's backlog; partition 1's reader retries
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got += len(b.Records)
		b.Ack()
	}
	slow.Store(true)
	time.Sleep(200 * time.Millisecond) // a refresh is waiting on its listing
	fail.Store(2)
	began := time.Now()
	_, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	require.ErrorIs(t, e.Err(), kerr.TopicAuthorizationFailed)
	assert.Less(t, time.Since(began), 10*time.Second, "the stopping error waited for the slow listing (20s)")
}

// commitAll commits offset at for every partition of topic in group, from
// outside the group (which has no members yet).
func commitAll(t *testing.T, adm *kadm.Client, group, topic string, partitions int32, at int64) {
	t.Helper()
	offs := kadm.Offsets{}
	for p := range partitions {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	}
	_, err := adm.CommitOffsets(t.Context(), group, offs)
	require.NoError(t, err)
}

// TestBoundedGroupRunStartsWithAnUnlistablePartition: a bounded group run
// that starts while one partition's offsets cannot be listed (no leader)
// reads the others meanwhile, snapshots that one once it can be listed, and
// ends with everything read. Before, it did not start until every partition
// could be listed.
func TestBoundedGroupRunStartsWithAnUnlistablePartition(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	var failing atomic.Bool
	failing.Store(true)
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.Timestamp, sp.LeaderEpoch = rp.Partition, -1, 0
				switch {
				case rp.Partition == 1:
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				case rp.Timestamp == -2: // earliest
					sp.Offset = 0
				default: // latest
					sp.Offset = 300
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.StopAtEnd = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := map[string]int{}
	for got["t/0"] < 300 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "%s", log)
		require.Equal(t, int32(0), b.Range.Partition, "a record of the unlistable partition")
		got["t/0"] += len(b.Records)
		b.Ack()
	}
	failing.Store(false)
	rest, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "%s", log)
	require.NoError(t, e.Err())
	assert.Equal(t, map[string]int{"t/1": 300}, rest)
}
