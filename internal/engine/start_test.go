package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestExplicitStartOffsets: a partition whose topics entry names a start
// offset (topic:partition:offset) starts there instead of where start_from
// says, the others of the same run where start_from says; the first batch
// of it holds that offset first.
func TestExplicitStartOffsets(t *testing.T) {
	c := newKafka(t, 3, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
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
	assert.Contains(t, log.String(), "(start_from latest, stop_at end): 1 from latest, 2 from the offsets their topics entries name;", "the start line says where they start")
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

// commitGroupOffset stores offset at for group g of t/0.
func commitGroupOffset(t *testing.T, ctx context.Context, adm *kadm.Client, g string, at int64) {
	t.Helper()
	var os kadm.Offsets
	os.AddOffset("t", 0, at, -1)
	r, err := adm.CommitOffsets(ctx, g, os)
	require.NoError(t, err)
	require.NoError(t, r.Error())
}

// TestCommittedOffsetWinsOverExplicitBelowLogStart: the group
// committed 80 (a previous run that started at t:0:10 and read to 80); then
// retention deleted [0, 50). The same config restarts: the committed
// offset 80 is valid and, as documented, wins; the run must read [80, 100).
// Today it stops with "its topics entry starts it at offset 10 but the log
// now starts at 50".
func TestCommittedOffsetWinsOverExplicitBelowLogStart(t *testing.T) {
	for _, skip := range []bool{false, true} {
		name := "on_data_loss_error"
		if skip {
			name = "on_data_loss_skip"
		}
		t.Run(name, func(t *testing.T) {
			c := newKafka(t, 1, 100, "t")
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			adm := kadm.NewClient(kgoClient(t, c))
			commitGroupOffset(t, ctx, adm, "g", 80)
			require.NoError(t, c.DeleteRecords("t", 0, 50))
			e, log := newTestEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 10}}}
				cfg.Group.Name = "g"
				cfg.StopAtEnd = true
				cfg.SkipDataLoss = skip
			})
			t.Cleanup(func() { _ = e.Close(context.Background()) })
			err := e.Start(ctx)
			var got map[string]int
			if err == nil {
				got, err = drain(ctx, e)
				if errors.Is(err, ErrEnd) {
					err = e.Err()
				}
			}
			require.NoError(t, err, "the group's committed offset 80 is inside the log; log:\n%s", log)
			require.NoError(t, e.Close(ctx))
			assert.Equal(t, map[string]int{"t/0": 20}, got, "records read: [80, 100)")
			assert.Zero(t, e.Summary().Lost, "nothing was lost: the group had read past the deleted span")
			assert.NotContains(t, log.String(), "Data loss", "a loss that did not happen was logged")
		})
	}
}

// TestCommittedOffsetWinsOverExplicitPastEnd: the group committed
// 40, and the topics entry names t:0:500, past the end 100 (e.g. a config
// copied from another cluster or written ahead of the data). The committed
// offset wins by the docs; today the run stops with "past the partition's
// end".
func TestCommittedOffsetWinsOverExplicitPastEnd(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(kgoClient(t, c))
	commitGroupOffset(t, ctx, adm, "g", 40)
	e, log := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 500}}}
		cfg.Group.Name = "g"
		cfg.StopAtEnd = true
	})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	err := e.Start(ctx)
	var got map[string]int
	if err == nil {
		got, err = drain(ctx, e)
		if errors.Is(err, ErrEnd) {
			err = e.Err()
		}
	}
	require.NoError(t, err, "the group's committed offset 40 wins; log:\n%s", log)
	assert.Equal(t, map[string]int{"t/0": 60}, got, "records read: [40, 100)")
}

// TestExplicitOffsetOfTopicCreatedLater: `t:0:5` names a topic that
// does not exist yet; once created (10 records), partition 0 is read from
// offset 0, not from 5 as its topics entry says (addPartitionLocked applies
// the explicit offset only with origin fromConfig; a partition of a topic
// created after the start starts fromFirst).
func TestExplicitOffsetOfTopicCreatedLater(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1))
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 5}}}
	})
	require.Eventually(t, func() bool { return len(log.String()) > 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.CreateTopic("t", 1, nil))
	produce(t, c, "t", 1, 10)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, b.Records)
	assert.Equal(t, int64(5), b.Records[0].Offset, "first offset read of t/0 (its topics entry says 5); log:\n%s", log)
	b.Ack()
}

// TestLatestPartitionListedLateIsReadFromFirst: start_from latest,
// one member of a new group, a topic of two partitions that existed (with
// 300 records each) before the member started. t/0 is listed at once and
// started at latest (300), and its offset is committed; t/1's leader is not
// available at the assignment, so it waits for its watermarks. Once it can
// be listed, the group has an offset for t/0 and none for t/1, so
// groupNew takes t/1 for a partition "new to the group" and reads it
// from its first offset: its 300 old records are delivered, although
// start_from latest says to read only what is written after the start (as
// it does for t/0, and for t/1 too when its leader answers at once). The
// same process and partition replay the partition's whole retention or
// nothing depending on whether one ListOffsets answer failed.
func TestLatestPartitionListedLateIsReadFromFirst(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	var hidden atomic.Bool
	hidden.Store(true)
	hideListing(c, "t", 1, 300, &hidden)
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.StartFrom = StartLatest
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool { return owns(e, k0) }, 20*time.Second, 10*time.Millisecond, "t/0 not read\n%s", log)
	e.mu.Lock()
	waits := e.parts.stateOf(k1) == stateWaiting
	e.mu.Unlock()
	require.True(t, waits, "t/1 waits for its watermarks\n%s", log)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 300 }, 10*time.Second, 20*time.Millisecond,
		"t/0 committed at latest\n%s", log)

	hidden.Store(false) // t/1's leader is back
	require.Eventually(t, func() bool { return owns(e, k1) }, 10*time.Second, 10*time.Millisecond, "t/1 not read\n%s", log)
	got := map[int32]int{}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		nctx, ncancel := context.WithTimeout(ctx, 200*time.Millisecond)
		b, err := e.Next(nctx)
		ncancel()
		if err != nil {
			continue
		}
		got[b.Range.Partition] += len(b.Records)
		b.Ack()
	}
	t.Logf("records delivered after t/1 could be listed: %v", got)
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "t/1") && strings.Contains(line, "first offset") {
			t.Logf("%s", line)
		}
	}
	assert.Zero(t, got[1], "start_from latest: t/1 existed with 300 records before the member started, nothing was written to it since; its old records were delivered\n%s", log)
	require.NoError(t, e.Err())
}

// TestNewGroupLatestPartitionListedLate (issue 43, suspected defect 7,
// proved): a brand-new group, start_from latest, a topic of two partitions
// that existed with 300 records each before any member started. t/0 is
// started at latest and committed; t/1's watermarks cannot be listed (its
// leader is not available), so its owner waits, reading and committing
// nothing of it. Then its owner leaves and the other member is assigned
// t/1: when it lists the group's offsets, the group has one for t/0 (this
// run's own, at latest) and none for t/1.
//
//   - founders: both members started before either joined (on Kafka: they
//     start together, within group.initial.rebalance.delay.ms), so both
//     found the group without offsets and members: t/1 existed when the
//     group started, and start_from latest applies: none of its 300 old
//     records is delivered. Before the fix it was taken for new to the group
//     and read from its first offset.
//   - joined_later: the second member started once the first was in the
//     group; a partition no member committed may be new to the group (its
//     topic or partition created after the group started), so it is read
//     from its first offset: all 300 delivered, duplicates rather than a
//     skip (documented).
func TestNewGroupLatestPartitionListedLate(t *testing.T) {
	for _, founders := range []bool{true, false} {
		name := "joined_later"
		if founders {
			name = "founders"
		}
		t.Run(name, func(t *testing.T) { testNewGroupLatest(t, founders) })
	}
}

func testNewGroupLatest(t *testing.T, founders bool) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	produce(t, c, "t", 2, 300)
	var hidden atomic.Bool
	hidden.Store(true)
	hideListing(c, "t", 1, 300, &hidden)
	both := make(chan struct{})
	if founders {
		// Every JoinGroup waits until both members started.
		c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			c.SleepControl(func() { <-both })
			return nil, nil, false
		})
	}
	member := func(cfg *Config) {
		asMember(cfg)
		cfg.StartFrom = StartLatest
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	a, alog := newEngine(t, c, member)
	if !founders {
		require.Eventually(t, func() bool { return owns(a, k0) && waitsFor(a, k1) }, 20*time.Second, 10*time.Millisecond,
			"the first member reads t/0 and waits for t/1\n%s", alog)
	}
	b, blog := newEngine(t, c, member)
	close(both)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 300 }, 20*time.Second, 20*time.Millisecond,
		"t/0 committed at latest\n%s\n--\n%s", alog, blog)
	// The member that waits for t/1 leaves; the other is assigned it.
	var stay *Engine
	var stayLog *testLogger
	require.Eventually(t, func() bool {
		switch {
		case waitsFor(a, k1) && !waitsFor(b, k1):
			stay, stayLog = b, blog
			require.NoError(t, a.Close(ctx))
		case waitsFor(b, k1) && !waitsFor(a, k1):
			stay, stayLog = a, alog
			require.NoError(t, b.Close(ctx))
		}
		return stay != nil
	}, 20*time.Second, 10*time.Millisecond, "a member waits for t/1\n%s\n--\n%s", alog, blog)
	require.Eventually(t, func() bool { return owns(stay, k0) && waitsFor(stay, k1) }, 20*time.Second, 10*time.Millisecond,
		"the remaining member reads t/0 and waits for t/1\n%s", stayLog)
	time.Sleep(300 * time.Millisecond) // it lists the group's offsets
	hidden.Store(false)                // t/1's leader is back
	require.Eventually(t, func() bool { return owns(stay, k1) }, 10*time.Second, 10*time.Millisecond, "t/1 not read\n%s", stayLog)
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		nctx, ncancel := context.WithTimeout(ctx, 200*time.Millisecond)
		bt, err := stay.Next(nctx)
		ncancel()
		if err == nil {
			got += len(bt.Records)
			bt.Ack()
		}
	}
	if founders {
		assert.Zero(t, got, "start_from latest, a founder of the group: t/1's 300 old records were delivered\n%s", stayLog)
	} else {
		assert.Equal(t, 300, got, "a partition no member committed, taken over by a member that joined a running group: read from its first offset, never skipped\n%s", stayLog)
	}
}

// waitsFor reports whether e waits to read k (assigned, its offsets not
// listed yet).
func waitsFor(e *Engine, k ranges.Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.parts.stateOf(k) == stateWaiting
}

// TestNewPartitionToLaterMemberIsReadFromFirst (review 4, finding 3): docs/several-instances.md "Running several
// instances": "A partition created after the process started is read from
// its first offset where the group has no offset for it, whatever
// start_from says (as Flink and Spark do): every record of it is new". Member
// A reads t (1 partition) with start_from latest; t gets a second partition
// and 50 records are written to it; member B starts (scale-out, or a
// rolling restart) and the group hands t/1 to B. For B, t/1 existed at its
// start, so B started it at latest: the 50 records written to a partition
// the group never read were skipped by the group as a whole. Now "new" is
// decided per group: at B's start the group had an offset for t/0, none for
// t/1 (newToGroup).
func TestNewPartitionToLaterMemberIsReadFromFirst(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	mod := func(cfg *Config) {
		asMember(cfg)
		cfg.StartFrom = StartLatest
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	a, alog := newEngine(t, c, mod)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool { return owns(a, k0) }, 20*time.Second, 10*time.Millisecond, "%s", alog)

	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.CreatePartitions(t.Context(), 1, "t")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var recs []*kgo.Record
	for i := range 50 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 1, Value: fmt.Appendf(nil, "new-%d", i)})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	b, blog := newEngine(t, c, mod) // started after t/1 was created

	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for name, e := range map[string]*Engine{"A": a, "B": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				bt, err := e.Next(ctx)
				if err != nil {
					return
				}
				if bt.Range.Partition == 1 {
					mu.Lock()
					got[name] += len(bt.Records)
					mu.Unlock()
				}
				bt.Ack()
			}
		}()
	}
	require.Eventually(t, func() bool { return owns(a, k1) || owns(b, k1) }, 30*time.Second, 20*time.Millisecond,
		"t/1 was never assigned\nA:\n%s\nB:\n%s", alog, blog)
	owner := "A"
	if owns(b, k1) {
		owner = "B"
	}
	time.Sleep(3 * time.Second) // let its owner read it
	cancel()
	wg.Wait()
	t.Logf("t/1 assigned to %s; records of t/1 delivered: %v; group offset of t/1: %d", owner, got,
		committed(context.Background(), t, adm, "g", "t", 1))
	assert.Equal(t, 50, got["A"]+got["B"], "records written to the new partition before the group read it\nA:\n%s\nB:\n%s", alog, blog)
}

// TestStartLatestWithNewGroupStartsAtLatest: the guard of newToGroup: a
// group without offsets for a topic starts its partitions where start_from
// says (latest), every one of them, with one member or two.
func TestStartLatestWithNewGroupStartsAtLatest(t *testing.T) {
	c := newKafka(t, 2, 10, "t")
	mod := func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.StartFrom = StartLatest
	}
	a, alog := newEngine(t, c, mod)
	b, blog := newEngine(t, c, mod)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool {
		return (owns(a, k0) || owns(b, k0)) && (owns(a, k1) || owns(b, k1))
	}, 20*time.Second, 10*time.Millisecond, "A:\n%s\nB:\n%s", alog, blog)
	time.Sleep(500 * time.Millisecond) // both started where they start
	produceTo(t, c, "t", 0, 5)
	produceTo(t, c, "t", 1, 5)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	var offsets []int64
	var wg sync.WaitGroup
	for _, e := range []*Engine{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				bt, err := e.Next(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				for _, r := range bt.Records {
					offsets = append(offsets, r.Offset)
				}
				mu.Unlock()
				bt.Ack()
			}
		}()
	}
	wg.Wait()
	assert.Len(t, offsets, 10, "records read: %v\nA:\n%s\nB:\n%s", offsets, alog, blog)
	for _, o := range offsets {
		assert.GreaterOrEqual(t, o, int64(10), "a record written before the start was read (start_from latest)")
	}
}

// TestNewTopicToLaterMemberSkipsRecords: docs/backfills.md ("Missing topics"):
// a topic named in `topics` that does not exist when the input starts,
// "once it is created it is read from its first offset, whatever
// start_from says (found at the next poll_interval; with consumer_group,
// once the group assigns its partitions)".
// Member A of group g starts (start_from latest) while topic x does not
// exist; x is created with 2 partitions and 50 records are written to each;
// member B starts (a rolling restart or a scale-out) and the group assigns
// x's partitions to B. For B, x existed at its start (record.existed), and
// the group has no offset for any partition of x yet, so groupNew
// (review 4 finding 3's fix, which needs offsets for other partitions of
// the topic) does not apply: B starts x at latest and commits there. The
// records written to x before B listed it are read by no member, and the
// group's offsets pass them.
func TestNewTopicToLaterMemberSkipsRecords(t *testing.T) {
	group := func(cfg *Config) {
		cfg.Group.Name = "g"
		cfg.Group.Membership = true
		cfg.StartFrom = StartLatest
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	t.Run("named", func(t *testing.T) {
		// A lists its topics every 3 s: B starts within that time of x's creation.
		newTopicCase(t, func(cfg *Config) {
			group(cfg)
			cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "x"}}
			cfg.PollInterval = 3 * time.Second
		}, func(cfg *Config) {
			group(cfg)
			cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "x"}}
		})
	})
	t.Run("regexp_topics", func(t *testing.T) {
		// docs/topics.md "Topic patterns": "A topic that starts matching while the
		// input runs (one created later) is read from its first offset
		// whatever start_from says (...), so nothing written to it before
		// it was noticed is missed". A matches again every
		// metadata_max_age (default 5m; 1m here): a member that starts
		// within that time of a topic's creation is the only one
		// subscribed to it, and reads it from latest.
		pattern := func(cfg *Config) {
			group(cfg)
			cfg.Topics = []TopicSpec{{Name: "^t$"}, {Name: "^x"}}
			cfg.RegexpTopics = true
			cfg.MetadataMaxAge = time.Minute
		}
		newTopicCase(t, pattern, pattern)
	})
}

// newTopicCase runs member A (modA) on a cluster with topic t, creates
// topic x (2 partitions, 50 records each), starts member B (modB), and
// checks that the group delivers x's 100 records.
func newTopicCase(t *testing.T, modA, modB func(*Config)) {
	c := newKafka(t, 1, 10, "t")
	a, alog := newEngine(t, c, modA)
	require.Eventually(t, func() bool { return owns(a, newTopicKey("t", 0)) }, 20*time.Second, 10*time.Millisecond, "%s", alog)

	require.NoError(t, c.CreateTopic("x", 2, nil))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 50 {
			recs = append(recs, &kgo.Record{Topic: "x", Partition: p, Value: fmt.Appendf(nil, "x-%d-%d", p, i)})
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	b, blog := newEngine(t, c, modB) // started after x was created

	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for name, e := range map[string]*Engine{"A": a, "B": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				bt, err := e.Next(ctx)
				if err != nil {
					return
				}
				if bt.Range.Topic == "x" {
					mu.Lock()
					got[name] += len(bt.Records)
					mu.Unlock()
				}
				bt.Ack()
			}
		}()
	}
	adm := kadm.NewClient(kgoClient(t, c))
	offsetOf := func(p int32) int64 {
		offs, err := adm.FetchOffsets(ctx, "g")
		if err != nil {
			return -1
		}
		o, ok := offs.Lookup("x", p)
		if !ok {
			return -1
		}
		return o.At
	}
	require.Eventually(t, func() bool { return offsetOf(0) >= 0 && offsetOf(1) >= 0 }, 30*time.Second, 50*time.Millisecond,
		"x was never committed\nA:\n%s\nB:\n%s", alog, blog)
	time.Sleep(time.Second)
	o0, o1 := offsetOf(0), offsetOf(1)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("records of x delivered: %v; group g's offsets of x: %d, %d", got, o0, o1)
	assert.Equal(t, 100, got["A"]+got["B"], "records written to x, a topic the group waited for, before a member that started after its creation listed it\nA:\n%s\nB:\n%s", alog, blog)
}

func newTopicKey(topic string, p int32) ranges.Key { return ranges.Key{Topic: topic, Partition: p} }

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
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
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
	_, err := adm.CommitOffsets(t.Context(), "g", offs)
	require.NoError(t, err)

	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}}}
		cfg.Group.Name = "g"
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
