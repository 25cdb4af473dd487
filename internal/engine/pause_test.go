package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPausedMemberHoldsNewBatches (issue 43, defect 6): a group member
// whose process did not run for longer than pauseLimit hands out no new
// batch until the group confirms it. The pause is simulated (the reporter's
// last beat set a minute back, as after SIGCONT, whose batches were fetched
// before the stop); "session lost": the coordinator ended the session
// meanwhile (DescribeGroups lists no member, the next heartbeat is answered
// UNKNOWN_MEMBER_ID), so no batch of the ownership before the pause may be
// handed out (before: the readers' buffered batches went out until the
// heartbeat's answer); "still a member": it goes on with the same ownership
// once DescribeGroups lists it.
func TestPausedMemberHoldsNewBatches(t *testing.T) {
	for _, lost := range []bool{true, false} {
		name := "still_a_member"
		if lost {
			name = "session_lost"
		}
		t.Run(name, func(t *testing.T) { testPausedMember(t, lost) })
	}
}

func testPausedMember(t *testing.T, lost bool) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	produce(t, c, "t", 1, 5000)
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Fetch.MaxPartitionBytes = 2048 // many small batches, fetched ahead
		cfg.Group.Opts = []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(2 * time.Second)}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, err := e.Next(ctx)
	require.NoError(t, err)
	first.Ack()
	before := first.Incarnation()
	time.Sleep(1500 * time.Millisecond) // the reporter beats; the readers fetch ahead

	var expired atomic.Bool
	if lost {
		expired.Store(true)
		c.ControlKey(kmsg.DescribeGroups.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if !expired.Load() {
				return nil, nil, false
			}
			resp := req.(*kmsg.DescribeGroupsRequest).ResponseKind().(*kmsg.DescribeGroupsResponse)
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group, g.State, g.ProtocolType = "g", "PreparingRebalance", "consumer"
			resp.Groups = append(resp.Groups, g)
			return resp, nil, true
		})
		c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
			resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true // once: the member's rejoin then works
		})
	}
	e.mu.Lock()
	e.out.pause.alive = time.Now().Add(-time.Minute) // the process did not run for a minute
	e.mu.Unlock()

	b, err := e.Next(ctx)
	require.NoError(t, err, "no batch after the pause\n%s", log)
	expired.Store(false)
	b.Ack()
	if lost {
		assert.Greater(t, b.Incarnation(), before, "handed out a batch of the ownership the session lost during the pause\n%s", log)
		assert.Contains(t, log.String(), "this member lost its session since")
	} else {
		assert.Equal(t, before, b.Incarnation(), "a member the group confirmed goes on\n%s", log)
		assert.Contains(t, log.String(), "the group lists this member")
	}
	assert.Contains(t, log.String(), "holding new batches until the group confirms this member")
}

// pausedMember starts a classic member reading topic "t" (1 partition,
// 5000 records in many small batches, fetched ahead), takes and
// acknowledges its first batch, and lets the reporter beat and the readers
// fetch ahead. It returns the engine, its log and the first batch's
// incarnation.
func pausedMember(t *testing.T) (*kfake.Cluster, *Engine, *testLogger, uint64) {
	t.Helper()
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	produce(t, c, "t", 1, 5000)
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Fetch.MaxPartitionBytes = 2048 // many small batches, fetched ahead
		cfg.Group.Opts = []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(2 * time.Second)}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	first, err := e.Next(ctx)
	require.NoError(t, err)
	first.Ack()
	time.Sleep(1500 * time.Millisecond) // the reporter beats; the readers fetch ahead
	return c, e, log, first.Incarnation()
}

// countDescribes counts the DescribeGroups requests c receives, answered as
// usual.
func countDescribes(c *kfake.Cluster) *atomic.Int32 {
	var n atomic.Int32
	c.ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

const holdLine = "holding new batches until the group confirms this member"

// TestOnePauseIsOneHold (issue 50, defect 4; the review's chaos soak: 2-4
// holds per 20 s SIGSTOP classic, 115 under KIP-848): one pause holds new
// batches once and asks the coordinator once. After a SIGCONT, Go's
// time.Ticker delivers the tick that fell due during the stop with the time
// it fell due, before the gap: the reporter's beat neither saw the gap nor
// moved the last time seen running past it, so every Next and every batch
// received compared the clock with that stale time, and each time the
// previous hold ended a new one began, until the next tick. Now whoever
// sees a gap takes it (the process counts as running from then), and a
// late tick's time is ignored.
func TestOnePauseIsOneHold(t *testing.T) {
	c, e, log, _ := pausedMember(t)
	describes := countDescribes(c)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	e.mu.Lock()
	stopped := time.Now().Add(-time.Minute)
	e.out.pause.alive = stopped // the last beat before a 1-minute SIGSTOP
	// SIGCONT: the tick that fell due during the stop, with its time.
	e.out.pause.tick(stopped.Add(reportEvery), e.group.member)
	e.mu.Unlock()

	for i := range 5 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "batch %d after the pause\n%s", i, log)
		b.Ack()
	}
	holds := strings.Count(log.String(), holdLine)
	assert.Equal(t, 1, holds, "one pause, %d holds (each a warning and a DescribeGroups)\n%s", holds, log)
	assert.NotContains(t, log.String(), "again while holding", "one pause, one gap")
	assert.Equal(t, int32(1), describes.Load(), "DescribeGroups asked for one pause")
}

// TestPauseSeenByTheReportersBeat (issue 50, defect 4): while nothing calls
// Next (the pipeline is busy), the reporter's beat is what sees the pause:
// the hold begins at that beat, before any Next, with its one warning; the
// next Next asks the coordinator once and goes on with the same ownership.
func TestPauseSeenByTheReportersBeat(t *testing.T) {
	c, e, log, before := pausedMember(t)
	describes := countDescribes(c)

	e.mu.Lock()
	e.out.pause.alive = time.Now().Add(-time.Minute) // the process did not run for a minute
	e.mu.Unlock()
	// No Next: only the reporter looks (every reportEvery).
	require.Eventually(t, func() bool { return strings.Contains(log.String(), holdLine) }, 10*reportEvery, reportEvery/10,
		"the reporter's beat did not see the pause\n%s", log)
	e.mu.Lock()
	holding := !e.out.pause.since.IsZero()
	e.mu.Unlock()
	assert.True(t, holding, "a hold began at the reporter's beat")
	assert.Zero(t, describes.Load(), "nothing asked the coordinator before Next")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err, "no batch after the pause\n%s", log)
	b.Ack()
	assert.Equal(t, before, b.Incarnation(), "a member the group confirmed goes on\n%s", log)
	assert.Equal(t, 1, strings.Count(log.String(), holdLine), "one pause, one hold\n%s", log)
	assert.Equal(t, int32(1), describes.Load(), "DescribeGroups asked for one pause")
	assert.Contains(t, log.String(), "the group lists this member")
}

// TestFailingConfirmationKeepsTheHold (issue 50, defect 4): while the
// coordinator cannot say whether it still lists this member (its
// DescribeGroups fail: the connection is closed), the hold stays and no
// batch is handed out; the failure is logged once per lineEvery, not per
// attempt; once the coordinator answers, the member goes on.
func TestFailingConfirmationKeepsTheHold(t *testing.T) {
	c, e, log, before := pausedMember(t)
	var failing atomic.Bool
	var attempts atomic.Int32
	failing.Store(true)
	c.ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		attempts.Add(1)
		return nil, errors.New("the coordinator is down"), true // kfake closes the connection
	})
	e.mu.Lock()
	e.out.pause.alive = time.Now().Add(-time.Minute) // the process did not run for a minute
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	b, err := e.Next(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "handed out a batch (%v) while the member was not confirmed\n%s", b, log)
	failed := countLines(log, "WARN", "asking the coordinator whether this member is still in the group failed")
	assert.Equal(t, 1, failed, "one warning per %s, %d attempts\n%s", lineEvery, attempts.Load(), log)
	assert.Greater(t, attempts.Load(), int32(1), "the hold asks again")

	failing.Store(false)
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err = e.Next(ctx)
	require.NoError(t, err, "no batch once the coordinator answers\n%s", log)
	b.Ack()
	assert.Equal(t, before, b.Incarnation(), "a member the group confirmed goes on\n%s", log)
	assert.Equal(t, 1, strings.Count(log.String(), holdLine), "one pause, one hold\n%s", log)
	assert.Contains(t, log.String(), "the group lists this member")
}

// TestGapDuringTheHoldAsksAgain (issue 50, defect 4): the process stops
// again while the hold's DescribeGroups is in flight; its answer ("listed")
// is from before the session ended in that second gap. The reporter's beat
// after the resume sees the second gap although a hold runs (before, it
// only moved the time seen running: the gap was swallowed, the stale answer
// ended the hold, and the batches of the ownership the session lost went
// out), so the answer counts for nothing and the hold asks again, until the
// member hears from its heartbeat that the session is over.
//
// Simulated as testPausedMember does: the first DescribeGroups sets the
// time seen running a minute back (the second gap), lets the reporter beat
// (kfake's SleepControl, 1.7 s, under the question's 2 s limit), then
// answers as the broker does (listed); from then on the session is over
// (DescribeGroups lists no member, the next heartbeat a second later is
// answered UNKNOWN_MEMBER_ID).
func TestGapDuringTheHoldAsksAgain(t *testing.T) {
	c, e, log, before := pausedMember(t)
	var describes atomic.Int32
	var expired, heartbeatFailed atomic.Bool
	var expiredAt atomic.Int64 // unix nanoseconds
	c.ControlKey(kmsg.DescribeGroups.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if describes.Add(1) == 1 {
			// The process stops (again) while this request is in flight.
			e.mu.Lock()
			e.out.pause.alive = time.Now().Add(-time.Minute)
			e.mu.Unlock()
			c.SleepControl(func() { time.Sleep(1700 * time.Millisecond) }) // the reporter beats after the resume
			expiredAt.Store(time.Now().UnixNano())
			expired.Store(true)    // the session ended during that gap
			return nil, nil, false // the answer the broker gave before: listed
		}
		if !expired.Load() {
			return nil, nil, false
		}
		resp := req.(*kmsg.DescribeGroupsRequest).ResponseKind().(*kmsg.DescribeGroupsResponse)
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group, g.State, g.ProtocolType = "g", "PreparingRebalance", "consumer"
		resp.Groups = append(resp.Groups, g)
		return resp, nil, true
	})
	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !expired.Load() || time.Since(time.Unix(0, expiredAt.Load())) < time.Second || heartbeatFailed.Swap(true) {
			return nil, nil, false
		}
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true // once: the member's rejoin then works
	})
	e.mu.Lock()
	e.out.pause.alive = time.Now().Add(-time.Minute) // the first pause: a minute
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err, "no batch after the pauses\n%s", log)
	b.Ack()
	assert.Greater(t, b.Incarnation(), before,
		"handed out a batch of the ownership the session lost during the second pause, on a DescribeGroups answer from before it (%d DescribeGroups)\n%s", describes.Load(), log)
	assert.Greater(t, describes.Load(), int32(1), "asked again after the second gap")
	assert.Contains(t, log.String(), "again while holding new batches")
	assert.Contains(t, log.String(), "this member lost its session since")
}

// TestRefusedCommitKeepsThePauseHold (issue 50, defect 4): under the
// consumer group protocol (KIP-848) a member paused past its session holds
// new batches; after the pause the committer commits the partition whose
// frontier moved and the coordinator refuses it, UNKNOWN_MEMBER_ID, which
// ends that one partition's incarnation (commit.go: endRefusedOwnerships;
// it is assigned again at once, since the member still lists it as owned).
// Before, any ownership ended since the gap ended the hold, for every
// partition: batches of the other partition, fetched before the pause and
// lost with the session, went out before the member's heartbeat told it
// the session was over. Now only a confirmation or the member's lost
// session (Handler.Lost) ends a hold: no batch is handed out between the
// pause and the heartbeat answered UNKNOWN_MEMBER_ID. The pause limit is a
// third of the broker's session timeout (6 s here: 2 s), not of franz-go's
// option.
func TestRefusedCommitKeepsThePauseHold(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.BrokerConfigs(map[string]string{
		"group.consumer.session.timeout.ms":    "6000", // the old member leaves kfake's group 6 s after its last heartbeat, not 45
		"group.consumer.heartbeat.interval.ms": "1000",
	}))
	produce(t, c, "t", 2, 5000)
	e, log := newEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.Fetch.MaxPartitionBytes = 2048 // many small batches, fetched ahead
		cfg.Group.CommitPeriod = 200 * time.Millisecond
		cfg.Group.Opts = []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer())}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	first, err := e.Next(ctx)
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond) // both partitions' readers fetch ahead

	// The session ended during the pause: the coordinator lists no member,
	// refuses commits as UNKNOWN_MEMBER_ID, and the member's next heartbeat,
	// 4 s from now, is answered UNKNOWN_MEMBER_ID.
	var expired, heartbeatFailed atomic.Bool
	expired.Store(true)
	lostAt := time.Now().Add(4 * time.Second)
	c.ControlKey(kmsg.ConsumerGroupDescribe.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !expired.Load() {
			return nil, nil, false
		}
		resp := req.(*kmsg.ConsumerGroupDescribeRequest).ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group, g.State, g.AssignorName = "g", "Stable", "uniform"
		resp.Groups = append(resp.Groups, g)
		return resp, nil, true
	})
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !expired.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.UnknownMemberID.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c.ControlKey(kmsg.ConsumerGroupHeartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !expired.Load() || time.Now().Before(lostAt) {
			return nil, nil, false
		}
		if heartbeatFailed.Swap(true) {
			expired.Store(false) // rejoined: the group works again
			return nil, nil, false
		}
		resp := req.(*kmsg.ConsumerGroupHeartbeatRequest).ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})

	// The pause: a minute without running, noticed at once.
	e.mu.Lock()
	e.out.pause.alive = time.Now().Add(-time.Minute)
	e.out.pause.holding(time.Now(), e.group.member)
	e.mu.Unlock()
	// The reporter beats after the resume, inside the hold; then the
	// pipeline acknowledges the batch it had, and the partition's frontier
	// moves: the committer commits it, refused.
	time.Sleep(1500 * time.Millisecond)
	first.Ack()

	b, err := e.Next(ctx)
	require.NoError(t, err, "no batch after the pause\n%s", log)
	learnt := heartbeatFailed.Load()
	b.Ack()
	assert.True(t, learnt, "handed out a batch (%s, incarnation %d) while the session was over, before the member heard of it: the refused commit of one partition ended the hold for all\n%s",
		b.Range.Key(), b.Incarnation(), log)
	assert.Contains(t, log.String(), "refused the commit of 1 partitions", "the case: a commit refused during the hold")
	assert.Contains(t, log.String(), "longer than 2s (a third of the session timeout, within 2s and 10s; the session timeout is 6s: group.consumer.session.timeout.ms of broker 0")
	assert.Equal(t, 1, strings.Count(log.String(), holdLine), "one pause, one hold\n%s", log)
}
