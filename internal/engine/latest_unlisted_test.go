package engine

import (
	"context"
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

// TestLatestPartitionListedLateIsReadFromFirst: start_from latest,
// one member of a new group, a topic of two partitions that existed (with
// 300 records each) before the member started. t/0 is listed at once and
// started at latest (300), and its offset is committed; t/1's leader is not
// available at the assignment, so it waits for its watermarks. Once it can
// be listed, the group has an offset for t/0 and none for t/1, so
// groupNewLocked takes t/1 for a partition "new to the group" and reads it
// from its first offset: its 300 old records are delivered, although
// start_from latest says to read only what is written after the start (as
// it does for t/0, and for t/1 too when its leader answers at once). The
// same process and partition replay the partition's whole retention or
// nothing depending on whether one ListOffsets answer failed.
func TestLatestPartitionListedLateIsReadFromFirst(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	var hidden atomic.Bool
	hidden.Store(true)
	hideLatestListing(c, 1, &hidden)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StartFrom = StartLatest
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
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

// hideLatestListing answers the ListOffsets of t/p with
// LEADER_NOT_AVAILABLE while hidden is set; every other partition of t is
// answered start 0 and end 300.
func hideLatestListing(c *kfake.Cluster, p int32, hidden *atomic.Bool) {
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !hidden.Load() {
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
				if rt.Topic == "t" && rp.Partition == p {
					sp.ErrorCode = kerr.LeaderNotAvailable.Code
				} else {
					sp.Offset, sp.LeaderEpoch = 300, 0
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
}
