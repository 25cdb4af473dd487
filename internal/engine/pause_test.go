package engine

import (
	"context"
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
		assert.Contains(t, log.String(), "an ownership ended since")
	} else {
		assert.Equal(t, before, b.Incarnation(), "a member the group confirmed goes on\n%s", log)
		assert.Contains(t, log.String(), "the group lists this member")
	}
	assert.Contains(t, log.String(), "holding new batches until the group confirms this member")
}
