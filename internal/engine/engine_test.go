package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
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

// newKafka starts a kfake cluster with the given topics of partitions each
// and produces n records to every partition of every topic.
func newKafka(t *testing.T, partitions int32, n int, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	for _, topic := range topics {
		produce(t, c, topic, partitions, n)
	}
	return c
}

// produce writes n records to each partition of topic, values
// "<topic>-<partition>-<i>".
func produce(t *testing.T, c *kfake.Cluster, topic string, partitions int32, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(16<<10))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", topic, p, i)})
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
}

// testLogger collects log lines: the engine's own in lines, the lines its
// franz-go clients log through it (kafkaLogger) apart in kafka, so tests of
// the engine's lines do not see them.
type testLogger struct {
	mu    sync.Mutex // guards lines and kafka
	lines []string
	kafka []string
}

func (l *testLogger) add(level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := level + " " + fmt.Sprintf(format, args...)
	if format == kafkaLogFormat {
		l.kafka = append(l.kafka, line)
		return
	}
	l.lines = append(l.lines, line)
}
func (l *testLogger) Debugf(f string, a ...any) { l.add("DEBUG", f, a...) }
func (l *testLogger) Infof(f string, a ...any)  { l.add("INFO", f, a...) }
func (l *testLogger) Warnf(f string, a ...any)  { l.add("WARN", f, a...) }
func (l *testLogger) Errorf(f string, a ...any) { l.add("ERROR", f, a...) }

func (l *testLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// newEngine starts an engine on c with mod applied to a small default config,
// and closes it at cleanup.
func newEngine(t *testing.T, c *kfake.Cluster, mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	e, log := newTestEngine(t, c, mod)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, e.Close(ctx), "Close")
		if t.Failed() {
			t.Logf("engine log:\n%s", log)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.Start(ctx))
	return e, log
}

// newTestEngine creates (not starts) an engine on c with mod applied to a
// small default config.
func newTestEngine(t *testing.T, c *kfake.Cluster, mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	log := &testLogger{}
	cfg := Config{
		Seeds:            c.ListenAddrs(),
		MaxRangeRecords:  100,
		MaxInFlight:      4,
		PollInterval:     50 * time.Millisecond,
		CacheCapacity:    16,
		CacheIdleTimeout: time.Minute,
		CommitPeriod:     50 * time.Millisecond,
		ReplayNacks:      true,
		Logger:           log,
	}
	mod(&cfg)
	e, err := New(cfg)
	require.NoError(t, err)
	return e, log
}

// drain takes and acknowledges batches until Next ends or ctx ends, and
// returns the number of records per "topic/partition".
func drain(ctx context.Context, e *Engine) (map[string]int, error) {
	got := map[string]int{}
	for {
		b, err := e.Next(ctx)
		if err != nil {
			return got, err
		}
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
}

// fetchError makes every fetch of topic's partition p fail with code, as long
// as on returns true.
func fetchError(c *kfake.Cluster, topic string, p int32, code int16, on func() bool) {
	id := c.TopicInfo(topic).TopicID // the control function cannot ask the cluster
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on() {
			return nil, nil, false
		}
		fr := req.(*kmsg.FetchRequest)
		hit := false
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				hit = hit || (rt.Topic == topic || rt.TopicID == id) && rp.Partition == p
			}
		}
		if !hit {
			return nil, nil, false
		}
		// A fetch holds many partitions: the failing one gets the error,
		// the others an answer without records (kfake cannot serve part
		// of a request), so they fetch again in the next round.
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				if (rt.Topic == topic || rt.TopicID == id) && rp.Partition == p {
					sp.ErrorCode = code
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// TestStoppingErrorWithRangesInFlightEnds: a permanent error on one partition
// while readers of another wait to hand over their batches must end Next
// (defect: a batch was counted before it was handed over and never uncounted
// when its reader was cancelled in the hand-over, so Next never ended).
func TestStoppingErrorWithRangesInFlightEnds(t *testing.T) {
	c := newKafka(t, 2, 2000, "t")
	var broken atomic.Bool
	fetchError(c, "t", 1, kerr.TopicAuthorizationFailed.Code, broken.Load)
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 8
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sched.readers >= 4
	}, 5*time.Second, 10*time.Millisecond, "ranges in flight")
	// From now on partition 1 cannot be read; partition 0's readers keep
	// handing over batches while Next takes them, and the next fetch of
	// partition 1 stops the engine under them.
	broken.Store(true)
	b.Ack()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "Next after a stopping error with ranges in flight")
	require.ErrorIs(t, e.Err(), kerr.TopicAuthorizationFailed)
	assert.Regexp(t, `^read t/1\[\d+,\d+\) at offset \d+: `, e.Err().Error(), "the error names the range and offset")
	assert.Less(t, got["t/1"], 2000, "partition 1 was read to the end")
}

// TestDataLossWithRangesInFlightNamesTheSpan: offsets deleted under a
// reader stop the engine with the lost span, while other readers wait.
func TestDataLossWithRangesInFlightNamesTheSpan(t *testing.T) {
	c := newKafka(t, 2, 1000, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 8
		cfg.Ordered = true // each partition waits for its acknowledgement: readers hold their place
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1
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

// TestPermanentErrorsStop: errors retrying cannot fix stop the engine at once
// with the range and offset; retriable ones are retried and logged.
func TestPermanentErrorsStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int16
		want error
	}{
		{"authorization", kerr.TopicAuthorizationFailed.Code, kerr.TopicAuthorizationFailed},
		{"corrupt message", kerr.CorruptMessage.Code, kerr.CorruptMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 2, 300, "t")
			fetchError(c, "t", 1, tc.code, func() bool { return true })
			e, _ := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				cfg.StopAtEnd = true
			})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd)
			require.ErrorIs(t, e.Err(), tc.want)
			assert.Regexp(t, `^read t/1\[\d+,\d+\) at offset \d+: `, e.Err().Error(), "the error names the range and offset")
		})
	}
	t.Run("retriable", func(t *testing.T) {
		c := newKafka(t, 2, 300, "t")
		// Longer than the cache's own retries (1.5s), so the engine retries.
		until := time.Now().Add(2500 * time.Millisecond)
		fetchError(c, "t", 1, kerr.NotLeaderForPartition.Code, func() bool { return time.Now().Before(until) })
		e, log := newEngine(t, c, func(cfg *Config) {
			cfg.Topics = []TopicSpec{{Name: "t"}}
			cfg.StopAtEnd = true
		})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		got, err := drain(ctx, e)
		require.ErrorIs(t, err, ErrEnd)
		require.NoError(t, e.Err())
		assert.Equal(t, map[string]int{"t/0": 300, "t/1": 300}, got)
		assert.Contains(t, log.String(), "(attempt 1)", "the retry is logged with its attempt")
	})
}

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
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1
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

// TestUnlistablePartitionDoesNotStopOthers: a partition whose offsets cannot
// be listed (no leader) neither fails the start nor holds back the others,
// and is read once it can be listed.
func TestUnlistablePartitionDoesNotStopOthers(t *testing.T) {
	c := newKafka(t, 2, 100, "t")
	var broken atomic.Bool
	broken.Store(true)
	var end0 atomic.Int64 // partition 0's end offset (the control function cannot ask the cluster)
	end0.Store(100)
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !broken.Load() {
			return nil, nil, false
		}
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				if rp.Partition == 1 {
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				} else {
					sp.Offset, sp.LeaderEpoch = end0.Load(), 0
					if rp.Timestamp == -2 {
						sp.Offset = 0
					}
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := map[string]int{}
	for got["t/0"] < 100 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	produce(t, c, "t", 1, 10) // new records on partition 0 while 1 is still unlistable
	end0.Store(110)
	for got["t/0"] < 110 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	assert.Zero(t, got["t/1"])
	assert.Contains(t, log.String(), "Partition t/1 is not readable yet")
	broken.Store(false)
	for got["t/1"] < 100 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got[b.Range.Key().String()] += len(b.Records)
		b.Ack()
	}
	assert.Equal(t, map[string]int{"t/0": 110, "t/1": 100}, got)
	assert.Contains(t, log.String(), "INFO Reading 1 partition (t: 1) from ", "the start's summary")
	assert.Contains(t, log.String(), ": 1 from earliest; 1 partition not readable yet (retried); 100 offsets to read now\n", "the start's summary")
	assert.Contains(t, log.String(), "INFO Reading 1 partition (t: 1) that can be listed now: 1 from earliest; 100 offsets to read now", "the summary once t/1 is listed")
}

// TestNackedBatchIsReplayedWhole: a nacked batch comes back, whole, and only
// its acknowledgement lets the commit pass it.
func TestNackedBatchIsReplayedWhole(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.Group = "g"
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

// TestCloseWithExpiredContextReleasesClients: Close whose context ends while
// readers are blocked on the network still closes every client, so the
// readers return and nothing is left running; a second Close then finishes.
func TestCloseWithExpiredContextReleasesClients(t *testing.T) {
	c := newKafka(t, 4, 500, "t")
	require.Eventually(t, func() bool { return len(ourGoroutines()) == 0 }, 20*time.Second, 20*time.Millisecond,
		"goroutines running before the test:\n%s", strings.Join(ourGoroutines(), "\n\n"))
	// Fetches hang once blocked: the broker holds them until the test ends.
	var blocked atomic.Bool
	release := make(chan struct{})
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if blocked.Load() {
			<-release
		}
		return nil, nil, false
	})
	t.Cleanup(func() { close(release) })
	e, err := New(Config{
		Seeds: c.ListenAddrs(), Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 100, MaxInFlight: 8,
		PollInterval: 50 * time.Millisecond, CacheCapacity: 16, CacheIdleTimeout: time.Minute,
		FetchMaxBytes: 1, FetchMaxPartitionBytes: 1,
	})
	require.NoError(t, err)
	blocked.Store(true)
	require.NoError(t, e.Start(t.Context())) // lists offsets, which are not blocked
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sched.readers == 4 // one per partition: none has read, so none gets a second range
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the readers' first fetches are now held by the broker

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err = e.Close(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "Close while readers are blocked")
	require.NoError(t, e.Close(t.Context()), "second Close, after the clients were closed")
	var left []string
	require.Eventually(t, func() bool { left = ourGoroutines(); return len(left) == 0 }, 10*time.Second, 20*time.Millisecond,
		"goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
}

// TestCloseWithReadsInFlightLeavesNothing closes an engine whose readers are
// reading and waiting to hand over batches.
func TestCloseWithReadsInFlightLeavesNothing(t *testing.T) {
	c := newKafka(t, 4, 2000, "t")
	require.Eventually(t, func() bool { return len(ourGoroutines()) == 0 }, 20*time.Second, 20*time.Millisecond)
	e, err := New(Config{
		Seeds: c.ListenAddrs(), Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 100, MaxInFlight: 16,
		PollInterval: 50 * time.Millisecond, CacheCapacity: 16, CacheIdleTimeout: time.Minute,
		Group: "g", CommitPeriod: 20 * time.Millisecond, ReplayNacks: true,
	})
	require.NoError(t, err)
	require.NoError(t, e.Start(t.Context()))
	for range 5 {
		b, err := e.Next(t.Context())
		require.NoError(t, err)
		b.Ack()
	}
	held, err := e.Next(t.Context())
	require.NoError(t, err)
	require.NoError(t, e.Close(t.Context()))
	held.Nack(errors.New("after close")) // dropped, never replayed
	_, err = e.Next(t.Context())
	require.ErrorIs(t, err, ErrEnd)
	var left []string
	require.Eventually(t, func() bool { left = ourGoroutines(); return len(left) == 0 }, 10*time.Second, 20*time.Millisecond,
		"goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
}

// ourGoroutines returns the stacks of goroutines running franz-go client code
// or this module's engine and cache.
func ourGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "franz-go/pkg/kgo.") || strings.Contains(g, "internal/engine.(*Engine)") ||
			strings.Contains(g, "internal/cache.(*Cache)") {
			out = append(out, g)
		}
	}
	return out
}

// TestLateAckOfRevokedPartitionIsNotCommitted: a batch handed out before its
// partition was revoked (a second member joined) and acknowledged after the
// revocation never moves the group's offset of that partition; the
// partition this member keeps goes on committing.
func TestLateAckOfRevokedPartitionIsNotCommitted(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
		cfg.MaxInFlight = 2
		cfg.Ordered = true // one range per partition: nothing beyond the held batch is read
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Hold the first batch of each partition.
	held := map[int32]*Batch{}
	for len(held) < 2 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if held[b.Range.Partition] != nil {
			b.Ack()
			continue
		}
		held[b.Range.Partition] = b
	}
	// A second member joins: one partition moves to it.
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond))
	require.NoError(t, err)
	defer other.Close()
	go func() {
		for ctx.Err() == nil {
			other.PollFetches(ctx) // the other member's records are not needed
		}
	}()
	var revoked int32 = -1
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for p := range int32(2) {
			if !e.parts.stateOf(ranges.Key{Topic: "t", Partition: p}).held() {
				revoked = p
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "no partition was revoked\n%s", log)
	kept := 1 - revoked

	committedOf := func(p int32) int64 {
		adm := kadm.NewClient(kgoClient(t, c))
		offs, err := adm.FetchOffsets(ctx, "g")
		require.NoError(t, err)
		o, ok := offs.Lookup("t", p)
		if !ok {
			return -1
		}
		return o.At
	}
	before := committedOf(revoked)
	held[revoked].Ack() // too late: the partition belongs to the other member
	held[kept].Ack()
	require.Eventually(t, func() bool { return committedOf(kept) >= held[kept].Span.End }, 10*time.Second, 20*time.Millisecond,
		"the kept partition's acknowledged batch was not committed")
	assert.Equal(t, before, committedOf(revoked), "the late acknowledgement of revoked partition %d moved the group's offset", revoked)
	assert.Less(t, committedOf(revoked), held[revoked].Span.End)
	assert.Contains(t, log.String(), "revoked 1 partitions")
}

func kgoClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// TestLeadershipMovesMidRead reads a topic through the engine on a
// three-broker cluster while partition leadership moves between brokers every
// few milliseconds: every record arrives exactly once and the read ends.
func TestLeadershipMovesMidRead(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produce(t, c, "t", 4, 3000)
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 4096, 4096
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	shuffled := make(chan int)
	go func() {
		n := 0
		defer func() { shuffled <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				c.ShufflePartitionLeaders()
				n++
			}
		}
	}()
	seen := map[string]int{}
	dups := 0
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err)
		for _, r := range b.Records {
			k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
			if seen[k]++; seen[k] > 1 {
				dups++
			}
		}
		b.Ack()
	}
	close(stop)
	moves := <-shuffled
	require.NoError(t, e.Err())
	assert.Len(t, seen, 4*3000, "records delivered")
	assert.Zero(t, dups, "records delivered twice")
	assert.Greater(t, moves, 10, "leadership hardly moved during the read")
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
		cfg.Group = "g"
		cfg.Ordered = true
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1
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

// TestTimeWindowSelectsExactly: start and stop timestamps select exactly the
// records whose timestamps lie in [start, stop), and a partition with none
// of them is empty.
func TestTimeWindowSelectsExactly(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range 60 { // partition 0: one record a minute from 10:00
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Timestamp: base.Add(time.Duration(i) * time.Minute), Value: fmt.Appendf(nil, "%d", i)})
	}
	for i := range 10 { // partition 1: all before the window
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 1, Timestamp: base.Add(-time.Hour + time.Duration(i)*time.Minute), Value: []byte("early")})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	start, stop := base.Add(15*time.Minute), base.Add(20*time.Minute)
	e, _ := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StartFrom = StartTimestamp
		cfg.StartMillis = start.UnixMilli()
		cfg.StopAtEnd = true
		cfg.StopMillis = stop.UnixMilli()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, ErrEnd) {
			break
		}
		require.NoError(t, err)
		for _, r := range b.Records {
			got = append(got, fmt.Sprintf("%d:%s", r.Partition, r.Value))
		}
		b.Ack()
	}
	assert.Equal(t, []string{"0:15", "0:16", "0:17", "0:18", "0:19"}, got)
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
				cfg.CacheCapacity = 0
				cfg.SkipDataLoss = skip
				cfg.Ordered = true
				cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1
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

// TestReadAheadCountsWholeRecords: a range that is not yet its partition's
// turn stops reading ahead once the records it holds (keys and headers
// included) reach the read-ahead budget, also when they are tombstones with
// large keys, whose values weigh nothing.
func TestReadAheadCountsWholeRecords(t *testing.T) {
	old := readAheadBytes
	readAheadBytes = 64 << 10
	t.Cleanup(func() { readAheadBytes = old })

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl := kgoClient(t, c)
	key := bytes.Repeat([]byte("k"), 4<<10)
	for i := 0; i < 2000; i += 10 { // batches of 10 tombstones with 4 KiB keys
		var recs []*kgo.Record
		for range 10 {
			recs = append(recs, &kgo.Record{Topic: "t", Key: key, Headers: []kgo.RecordHeader{{Key: "h", Value: key[:100]}}})
		}
		require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	}
	var highest atomic.Int64
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				for {
					h := highest.Load()
					if rp.FetchOffset >= 2000 {
						break // the caught-up partition's follower long-polls its end
					}
					if rp.FetchOffset <= h || highest.CompareAndSwap(h, rp.FetchOffset) {
						break
					}
				}
			}
		}
		return nil, nil, false
	})
	_, _ = newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.MaxRangeRecords = 1000
		cfg.MaxInFlight = 2
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1 // one producer batch (10 records) per fetch
	})
	// Nothing takes batches: [0, 1000) waits to hand over its first one,
	// [1000, 2000) reads ahead until its budget is full, then waits too.
	time.Sleep(time.Second)
	// 64 KiB is about 15 of these records: two fetches of 10 past 1000.
	assert.Less(t, highest.Load(), int64(1000+100), "the waiting range read far past its read-ahead budget")
	assert.GreaterOrEqual(t, highest.Load(), int64(1000), "the waiting range did not read ahead at all")
}
