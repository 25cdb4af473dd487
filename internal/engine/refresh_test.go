package engine

import (
	"bytes"
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

// TestDeletedTopicNextToLiveOne: a topic deleted after it was read is
// dropped with a warning; the other topic keeps flowing.
func TestDeletedTopicNextToLiveOne(t *testing.T) {
	c := newKafka(t, 2, 50, "a", "b")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "a"}, {Name: "b"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	total := map[string]int{}
	take := func(want int) {
		t.Helper()
		n := 0
		for n < want {
			b, err := e.Next(ctx)
			require.NoError(t, err, "after %d of %d records", n, want)
			total[b.Range.Key().String()] += len(b.Records)
			n += len(b.Records)
			b.Ack()
		}
	}
	take(200)
	require.NoError(t, c.DeleteTopic("a"))
	require.Eventually(t, func() bool { return strings.Contains(log.String(), `Topic "a" was deleted`) }, 10*time.Second, 20*time.Millisecond)
	produce(t, c, "b", 2, 5)
	take(10)
	assert.Equal(t, map[string]int{"a/0": 50, "a/1": 50, "b/0": 55, "b/1": 55}, total)
	require.NoError(t, e.Err())
}

// TestDeletedTopicWithUnreadDataStops: deleting a topic with offsets not yet
// read is data loss: the engine stops naming the span, in a bounded run
// rather than retrying for ever.
func TestDeletedTopicWithUnreadDataStops(t *testing.T) {
	c := newKafka(t, 1, 1000, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.Ordered = true
		cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.NoError(t, c.DeleteTopic("t"))
	b.Ack()
	_, err = drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	require.Error(t, e.Err())
	assert.Regexp(t, `t/0: topics: topic "t" does not exist: offsets \[\d+, 1000\) of partition 0 were never read`, e.Err().Error())
}

// TestRecreatedTopicIsDataLoss: a topic deleted and created again while a
// cache-less engine reads it is data loss: it stops the engine naming the
// span, or with SkipDataLoss counts the unread offsets and reads the new
// topic from its first offset.
func TestRecreatedTopicIsDataLoss(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("skip=%v", skip), func(t *testing.T) {
			c := newKafka(t, 1, 500, "t")
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				cfg.Fetch.CacheCapacity = 0
				cfg.SkipDataLoss = skip
				cfg.Ordered = true
				cfg.Fetch.MaxBytes, cfg.Fetch.MaxPartitionBytes = 1, 1
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			b, err := e.Next(ctx)
			require.NoError(t, err)
			read := b.Span.End
			require.NoError(t, c.DeleteTopic("t"))
			require.NoError(t, c.CreateTopic("t", 1, nil))
			produce(t, c, "t", 1, 50)
			b.Ack()
			fresh := 0
			for {
				b, err := e.Next(ctx)
				if errors.Is(err, ErrEnd) {
					break
				}
				require.NoError(t, err, "\n%s", log)
				for _, r := range b.Records {
					if r.Offset < 50 && bytes.HasPrefix(r.Value, []byte("t-0-")) && b.Range.Start < 50 {
						fresh++
					}
				}
				b.Ack()
				if skip && fresh == 50 {
					break
				}
			}
			if !skip {
				require.Error(t, e.Err())
				assert.Regexp(t, `t/0: .*recreated.*offsets \[\d+, 500\) of partition 0 were never read`, e.Err().Error())
				return
			}
			require.NoError(t, e.Err())
			assert.Equal(t, 50, fresh, "records of the new topic read from offset 0")
			require.NoError(t, e.Close(ctx)) // logs what is left to log
			assert.Contains(t, log.String(), "Data loss on t/0: offsets [")
			assert.Contains(t, log.String(), "were never read: the topic was recreated")
			assert.Greater(t, e.Summary().Lost, int64(0))
			assert.LessOrEqual(t, e.Summary().Lost, 500-read)
		})
	}
}

// TestEndOffsetMovingBackIsCheckedAgain: one listing of an end offset below
// what was planned is not trusted (a warning); the same answer twice stops
// the engine, naming the offsets that no longer exist as they were read.
func TestEndOffsetMovingBackIsCheckedAgain(t *testing.T) {
	for _, times := range []int{1, 1000} {
		t.Run(fmt.Sprintf("%d wrong answers", times), func(t *testing.T) {
			c := newKafka(t, 1, 100, "t")
			var wrong, armed atomic.Int32
			c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				lr := req.(*kmsg.ListOffsetsRequest)
				if armed.Load() == 0 || lr.Topics[0].Partitions[0].Timestamp != -1 || wrong.Add(1) > int32(times) {
					return nil, nil, false
				}
				resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
				st := kmsg.NewListOffsetsResponseTopic()
				st.Topic = "t"
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Offset, sp.LeaderEpoch = 50, 0
				st.Partitions = append(st.Partitions, sp)
				resp.Topics = append(resp.Topics, st)
				return resp, nil, true
			})
			e, log := newEngine(t, c, func(cfg *Config) { cfg.Topics = []TopicSpec{{Name: "t"}} })
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			n := 0
			for n < 100 {
				b, err := e.Next(ctx)
				require.NoError(t, err)
				n += len(b.Records)
				b.Ack()
			}
			armed.Store(1)
			require.Eventually(t, func() bool { return strings.Contains(log.String(), "below offsets already planned; checking again") }, 5*time.Second, 10*time.Millisecond)
			if times == 1 {
				produce(t, c, "t", 1, 10)
				for n < 110 {
					b, err := e.Next(ctx)
					require.NoError(t, err, "a single wrong answer stopped the engine: %v", e.Err())
					n += len(b.Records)
					b.Ack()
				}
				require.NoError(t, e.Err())
				return
			}
			require.Eventually(t, func() bool { return e.Err() != nil }, 5*time.Second, 10*time.Millisecond)
			assert.Contains(t, e.Err().Error(), "t/0: the end offset moved back to 50, below offset 100 already planned")
		})
	}
}

// TestGroupWaitLineNamesNoPartitionsOwned: a bounded group run that waits
// for the group before it owns any partition (its first JoinGroup is slow)
// does not say "This member's partitions are read" (defect 12's last point),
// nor judges the group's commits before it was assigned partitions once.
func TestGroupWaitLineNamesNoPartitionsOwned(t *testing.T) {
	c := newKafka(t, 2, 100, "t")
	joined := make(chan struct{})
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { <-joined }) // the first join waits; later ones run at once
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.StopAtEnd = true
	})
	time.Sleep(time.Second) // twenty poll intervals before the first assignment
	close(joined)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	assert.Equal(t, map[string]int{"t/0": 100, "t/1": 100}, got)
	before, _, _ := strings.Cut(log.String(), "assigned")
	assert.NotContains(t, before, "This member's partitions are read", "said before the member owned any partition")
	assert.NotContains(t, before, "waiting for other members", "said before the member owned any partition")
}

// TestGroupTopicDeletedThenCreatedAgain (review 4, finding 2): docs/backfills.md, data loss table: "a
// topic deleted with offsets not read ... if the topic is created again
// (continuous runs), it is read from its first offset"; "a topic deleted
// after everything in it was read: a warning; the other topics go on".
// Without a group the refresh reads the topic created again as new
// partitions. With a group, once a listing saw the topic missing
// (topicGone drops t/0), the topic created again is never read: franz-go's
// group client keeps the topic's old ID and the partition assigned (no
// rebalance: "we do not adopt the new ID"), so Assigned is not called
// again, and the refresh, which sees the new ID, finds no planned key of t
// to restart (topicGone(name, nil) only restarts keys still planned) and
// adds no partitions under Membership: t/0 stayed assigned to the member
// and unread. Now the partitions the member still owns are read again.
func TestGroupTopicDeletedThenCreatedAgain(t *testing.T) {
	for _, from := range []StartFrom{StartEarliest, StartLatest} {
		name := map[StartFrom]string{StartLatest: "latest", StartEarliest: "earliest"}[from]
		t.Run(name, func(t *testing.T) {
			c := newKafka(t, 1, 100, "t", "other")
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "other"}}
				cfg.Group.Name = "g"
				cfg.Group.Membership = true
				cfg.StartFrom = from
				cfg.SkipDataLoss = true
				cfg.Group.Opts = []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			k := ranges.Key{Topic: "t", Partition: 0}
			require.Eventually(t, func() bool { return owns(e, k) }, 20*time.Second, 10*time.Millisecond, "%s", log)
			stop := drainInBackground(ctx, e)
			adm := kadm.NewClient(kgoClient(t, c))
			require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 100 }, 20*time.Second, 20*time.Millisecond,
				"t/0 was not committed to 100\n%s", log)
			stop()

			require.NoError(t, c.DeleteTopic("t"))
			require.Eventually(t, func() bool { return strings.Contains(log.String(), `Topic "t" was deleted`) }, 20*time.Second, 10*time.Millisecond,
				"the deletion was not noticed\n%s", log)
			t.Logf("group offset of t/0 after the deletion: %d", committed(ctx, t, adm, "g", "t", 0))
			_, err := adm.CreateTopic(ctx, 1, 1, nil, "t")
			require.NoError(t, err)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, err)
			var recs []*kgo.Record
			for i := range 50 {
				recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Value: fmt.Appendf(nil, "new-%d", i)})
			}
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
			cl.Close()

			got := 0
			deadline := time.Now().Add(25 * time.Second)
			for time.Now().Before(deadline) && e.Err() == nil && got < 50 {
				nctx, ncancel := context.WithTimeout(ctx, 500*time.Millisecond)
				b, err := e.Next(nctx)
				ncancel()
				if err != nil {
					continue
				}
				if b.Range.Topic == "t" {
					got += len(b.Records)
				}
				b.Ack()
			}
			t.Logf("records of the new topic delivered: %d of 50; owns t/0: %v; owns other/0: %v; engine error: %v", got, owns(e, k), owns(e, ranges.Key{Topic: "other"}), e.Err())
			assert.NoError(t, e.Err(), "the member stopped")
			assert.Equal(t, 50, got, "records of the topic created again delivered\n%s", log)
		})
	}
}

// TestRecreatedTopicAckDoesNotCommitTheNewTopic: a batch of a topic that is
// then deleted and recreated (on_data_loss: skip, with a group) and
// acknowledged afterwards must not count for the new topic: the new topic is
// read from its first offset and its commit only follows what of it was
// acknowledged. Before, the old batch's ack marked the new topic's [0,10)
// acknowledged and the group committed 10 with nothing of it handed out.
func TestRecreatedTopicAckDoesNotCommitTheNewTopic(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.SkipDataLoss = true
		cfg.MaxRangeRecords = 10
	})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	held := holdFirst(ctx, t, e, 1)[0]
	require.Equal(t, int64(0), held.Span.Start)
	oldInc := held.Incarnation()

	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.DeleteTopics(ctx, "t")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := adm.CreateTopic(ctx, 1, 1, nil, "t")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	produce(t, c, "t", 1, 10)
	k := ranges.Key{Topic: "t", Partition: 0}
	require.Eventually(t, func() bool { inc := incOf(e, k); return inc != 0 && inc != oldInc }, 20*time.Second, 10*time.Millisecond,
		"the recreated topic is not read as a new incarnation\n%s", log)

	held.Ack() // of the old topic
	// Take the new topic's batches but do not acknowledge them.
	var fresh []*Batch
	for n := 0; n < 10; {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if b.Incarnation() == oldInc {
			b.Ack() // more of the old topic, handed out before it went
			continue
		}
		fresh = append(fresh, b)
		n += len(b.Records)
	}
	assert.Equal(t, int64(0), fresh[0].Span.Start, "the new topic is not read from its first offset")
	time.Sleep(300 * time.Millisecond) // several commit periods
	assert.LessOrEqual(t, committed(ctx, t, adm, "g", "t", 0), int64(0), "the group committed offsets of the new topic that nothing acknowledged\n%s", log)
	for _, b := range fresh {
		b.Ack()
	}
	require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 10 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, e.Err())
}

// TestAssignmentListsCommittedOffsetsAndWatermarksAtOnce: when the group
// assigns partitions, the engine lists their committed offsets, start
// offsets and end offsets at once. The group's committed offsets (the
// engine's OffsetFetch of the whole group) are held here until the client
// wrote two ListOffsets requests (start and end offsets) or 5 s passed; the
// broker answers a connection's requests in order, so with the listings one
// after another not even the second would be written. Before, the three
// went one after another, and a start waited for their sum.
func TestAssignmentListsCommittedOffsetsAndWatermarksAtOnce(t *testing.T) {
	c := newKafka(t, 2, 10, "t")
	var (
		eng      atomic.Pointer[Engine]
		listings atomic.Int64 // ListOffsets requests written after the assignment
		armed    atomic.Bool  // the first whole-group OffsetFetch after the assignment is held
		overlap  atomic.Int64 // listings written while it was held
	)
	armed.Store(true)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		e := eng.Load()
		if e == nil || !e.wasAssigned() || !wholeGroup(kreq.(*kmsg.OffsetFetchRequest)) || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		c.SleepControl(func() {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if listings.Load() >= 2 {
					break
				}
				select {
				case <-done:
					return
				default:
				}
			}
			overlap.Store(listings.Load())
		})
		return nil, nil, false
	})
	e, log := startMember(t, c, &eng, func(cfg *Config) {
		cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(writeHook(func(key int16) {
			if e := eng.Load(); key == kmsg.ListOffsets.Int16() && e != nil && e.wasAssigned() {
				listings.Add(1)
			}
		}))}
	})
	readAssigned(t, e, log, 20)
	require.False(t, armed.Load(), "the group's committed offsets were not listed after the assignment\n%s", log)
	assert.EqualValues(t, 2, overlap.Load(), "ListOffsets requests (start and end offsets) written while the committed offsets were listed")
}

// wholeGroup reports whether r asks for every committed offset of its group
// (the engine's listing, kadm's FetchOffsets), not for some partitions.
func wholeGroup(r *kmsg.OffsetFetchRequest) bool {
	if len(r.Groups) > 0 {
		return r.Groups[0].Topics == nil
	}
	return r.Topics == nil
}

// endListingOf reports whether req lists the end offset (latest) of
// topic/partition, as the engine's watermark listing does.
func endListingOf(req *kmsg.ListOffsetsRequest, topic string, partition int32) bool {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic == topic && rp.Partition == partition && rp.Timestamp == -1 {
				return true
			}
		}
	}
	return false
}

// produceOne writes one record to topic/partition from a goroutine that is
// not the test's (a kfake control function's), returning its error.
func produceOne(c *kfake.Cluster, topic string, partition int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: partition, Value: []byte("tail")}).FirstErr()
}

// plannedEnd is the planner's end of k.
func (e *Engine) plannedEnd(k ranges.Key) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, end, _ := e.parts.planner.Position(k)
	return end
}

// readTail reads the first 10 records of t/0 and returns the batch that
// holds offset 10, and whether release (the held listing's) had happened
// by then.
func readTail(ctx context.Context, t *testing.T, e *Engine, released *atomic.Bool, log *testLogger) bool {
	t.Helper()
	for {
		b, err := e.Next(ctx)
		require.NoError(t, err, "the record at offset 10 was not delivered\n%s", log)
		b.Ack()
		for _, r := range b.Records {
			if r.Offset == 10 {
				return released.Load()
			}
		}
	}
}

// TestTailRecordIsReadWhileAListingIsHeld: in a continuous read, a record
// written to a followed partition while the scheduler's watermark listing
// waits for the broker is planned and delivered at once (the follower's
// fetch reports the new end), not once the listing is answered. Before, the
// scheduler listed on its own goroutine and planned nothing meanwhile: at
// 300 partitions every record written during the listing every
// poll_interval came as late as the listing took.
func TestTailRecordIsReadWhileAListingIsHeld(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	var (
		armed    atomic.Bool // the next end listing of t/0 is held until the tail record is delivered
		released atomic.Bool // the held listing was answered
		produced = make(chan error, 1)
	)
	delivered := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // before the cluster closes: no sleeper outlives the test
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !endListingOf(kreq.(*kmsg.ListOffsetsRequest), "t", 0) || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		c.SleepControl(func() {
			produced <- produceOne(c, "t", 0)
			select {
			case <-delivered:
			case <-done:
			case <-time.After(10 * time.Second):
			}
			released.Store(true)
		})
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < 10; {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got += len(b.Records)
		b.Ack()
	}
	armed.Store(true)
	late := readTail(ctx, t, e, &released, log)
	close(delivered)
	require.NoError(t, <-produced)
	assert.False(t, late, "the record written while the listing was held was delivered only once the listing was answered\n%s", log)
}

// TestListingOlderThanAFetchKeepsTheFetchedEnd: a watermark listing
// answered before a record was written, and applied after the follower's
// fetch reported that record (the partition's end moved past the listed
// one), leaves the end the fetch reported: the record is delivered at once.
// Before, the listing moved the planned end back to what it had listed, and
// the record waited for the next listing (a poll_interval: 1 s records were
// seen at 300 partitions), since its follower had reported that end already.
func TestListingOlderThanAFetchKeepsTheFetchedEnd(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	k := ranges.Key{Topic: "t", Partition: 0}
	var (
		stage    atomic.Int32 // 1: the next end listing answers 10 and is held until the fetch reported 11; 2: the one after is held until the record is delivered
		released atomic.Bool  // the listing after the stale one was answered
		eng      atomic.Pointer[Engine]
		produced = make(chan error, 1)
	)
	delivered := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if !endListingOf(req, "t", 0) {
			return nil, nil, false
		}
		switch {
		case stage.CompareAndSwap(1, 2):
			// The answer as it was before the record: end 10.
			resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
			resp.Version = req.Version
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = "t"
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = 0
			rp.Timestamp = -1
			rp.Offset = 10
			rp.LeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
			resp.Topics = append(resp.Topics, rt)
			c.SleepControl(func() {
				produced <- produceOne(c, "t", 0)
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if eng.Load().plannedEnd(k) == 11 { // the follower's fetch reported it
						return
					}
				}
			})
			return resp, nil, true
		case stage.Load() == 2:
			c.SleepControl(func() {
				select {
				case <-delivered:
				case <-done:
				case <-time.After(10 * time.Second):
				}
				released.Store(true)
			})
		}
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	eng.Store(e)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < 10; {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got += len(b.Records)
		b.Ack()
	}
	stage.Store(1)
	late := readTail(ctx, t, e, &released, log)
	close(delivered)
	require.NoError(t, <-produced)
	assert.False(t, late, "the record was delivered only at the listing after the stale one: the stale listing moved the end back\n%s", log)
	assert.NotContains(t, log.String(), "below offsets already planned")
}

// TestFollowedPartitionsAreNotListedEveryPoll: once the partitions of a
// continuous read are caught up and followed by their cursors (whose
// fetches report each partition's end), a refresh lists only the watermarks
// of the partitions with no follower (here u/0, which cannot be listed, so
// it is listed at every refresh: the test's clock), and the followed ones
// only every followedListEvery refreshes. Records written afterwards are
// still read, from the followers' reports.
func TestFollowedPartitionsAreNotListedEveryPoll(t *testing.T) {
	const partitions = 4
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"), kfake.SeedTopics(1, "u"))
	produce(t, c, "t", partitions, 100)
	var endT atomic.Int64 // t's end offsets (the control function cannot ask the cluster)
	endT.Store(100)
	var listedT, listedU atomic.Int64 // end offset listings naming t, u
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				switch {
				case rt.Topic == "u":
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				case rp.Timestamp == -2:
					sp.Offset, sp.LeaderEpoch = 0, 0
				default:
					sp.Offset, sp.LeaderEpoch = endT.Load(), 0
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
			if rt.Partitions[0].Timestamp == -1 {
				switch rt.Topic {
				case "t":
					listedT.Add(1)
				case "u":
					listedU.Add(1)
				}
			}
		}
		return resp, nil, true
	})
	e, log := newEngine(t, c, func(cfg *Config) { cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "u"}} })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n := 0
	for n < partitions*100 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		n += len(b.Records)
		b.Ack()
	}
	require.Eventually(t, func() bool { return e.kafka.cache.Stats().Following == partitions }, 10*time.Second, 10*time.Millisecond, "followers")

	listedT.Store(0)
	listedU.Store(0)
	require.Eventually(t, func() bool { return listedU.Load() >= 30 }, 15*time.Second, 10*time.Millisecond, "refreshes")
	lt, lu := listedT.Load(), listedU.Load()
	// Listed at every refresh: lt is lu. Every followedListEvery (10)
	// refreshes: about lu/10.
	assert.LessOrEqual(t, lt*3, lu, "the followed partitions were listed in %d of %d refreshes", lt, lu)

	endT.Store(110) // before the records exist: a listing never shows an end below the followers' reports
	produce(t, c, "t", partitions, 10)
	for n < partitions*110 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "\n%s", log)
		n += len(b.Records)
		b.Ack()
	}
	assert.Contains(t, log.String(), "Partition u/0 is not readable yet")
}

// TestNewPartitionIsReadSoonAfterItIsListed (review 4, finding 5): a
// partition added while a backlog is read (poll_interval 50ms) is listed at
// the next poll, but its reader failed while the cursors' metadata did not
// show it yet and backed off 100, 200, 400, 800 ms: its first record came
// 1.6 s after it was written. The target is poll_interval + 200 ms; the
// test logs the latency (a speed figure, not asserted) and asserts that the
// reader did not treat the partition as failing (a warning and a growing
// backoff), and that it failed at most once for want of metadata: its first
// retry is at once, with metadata requested after the failure. (The rest of
// the latency is the fetch round in flight that its cursor joins.)
func TestNewPartitionIsReadSoonAfterItIsListed(t *testing.T) {
	c := newKafka(t, 1, 3000, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.PollInterval = 50 * time.Millisecond
		cfg.MaxRangeRecords = 100
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	slow := func(ctx context.Context) (*Batch, error) { // a pipeline that takes 2 ms a batch
		b, err := e.Next(ctx)
		if err == nil {
			time.Sleep(2 * time.Millisecond)
		}
		return b, err
	}
	for got := 0; got < 300; { // reading the backlog
		b, err := slow(ctx)
		require.NoError(t, err)
		got += len(b.Records)
		b.Ack()
	}
	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.CreatePartitions(ctx, 1, "t")
	require.NoError(t, err)
	produceTo(t, c, "t", 1, 1)
	written := time.Now()
	var listed time.Time
	backlog := 0
	for {
		b, err := slow(ctx)
		require.NoError(t, err, "the new partition's record was not delivered\n%s", log)
		if listed.IsZero() && owns(e, ranges.Key{Topic: "t", Partition: 1}) {
			listed = time.Now()
		}
		if b.Range.Partition == 1 {
			b.Ack()
			break
		}
		backlog += len(b.Records)
		b.Ack()
	}
	latency := time.Since(written)
	t.Logf("first record of the new partition %s after it was written (listed after %s), %d backlog records before it",
		latency.Round(time.Millisecond), listed.Sub(written).Round(time.Millisecond), backlog)
	for _, line := range strings.Split(log.String(), "\n") {
		assert.False(t, strings.HasPrefix(line, "WARN") && strings.Contains(line, "Reading t/1"),
			"the new partition's reader failed as for a broken partition (growing backoff): %s", line)
	}
	assert.True(t, strings.Contains(log.String(), "Partition t/1 appeared"))
	// The cursors' metadata of t predates the new partition: the first read
	// of t/1 fails, and the next one asks for metadata afresh (and is not
	// delayed). Before, every retry within a second took the same metadata
	// (up to a second old) and failed again.
	assert.LessOrEqual(t, countLines(log, "DEBUG", "Reading t/1", "does not show the partition yet"), 1,
		"reads of the new partition that failed for want of metadata\n%s", log)
	assert.Zero(t, countLines(log, "DEBUG", "Reading t/1", "does not show the partition yet", "retrying in 100ms"),
		"the first retry of a partition just listed waited\n%s", log)
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
		cfg.Group.ResetOffsets = true
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
