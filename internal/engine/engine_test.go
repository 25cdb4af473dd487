package engine

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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

// TestAssignedPartitionsShareTheFirstRound: the partitions of an
// assignment are started under a hold of the fetch loops (cache.Hold), so
// the first fetch of their broker asks for all of them; before, the loop
// sent a round with the first few started while the engine still started
// the rest, and those waited until the broker answered it.
func TestAssignedPartitionsShareTheFirstRound(t *testing.T) {
	const partitions = 300
	c := newKafka(t, partitions, 0, "t")
	var (
		mu    sync.Mutex // guards first
		first = -1       // partitions in the first fetch that asks for any
	)
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := 0
		for _, rt := range kreq.(*kmsg.FetchRequest).Topics {
			n += len(rt.Partitions)
		}
		mu.Lock()
		if first < 0 && n > 0 {
			first = n
		}
		mu.Unlock()
		return nil, nil, false
	})
	_, log := startMember(t, c, nil, nil)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first >= 0
	}, 10*time.Second, time.Millisecond, "nothing was fetched\n%s", log)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, partitions, first, "partitions in the first fetch after the assignment")
}

// TestMemberOpensItsFetchConnectionBeforeItsAssignment: a group member's
// cursors learn their topics' leaders and open the fetch connections to
// them while the member joins (cache.Learn), so no connection is opened
// between the assignment and the first records: franz-go sends a broker's
// requests one at a time and opens a connection in that turn, so one
// opened then would hold up the listings of the assigned partitions (by 5
// to 7 ms in a traced start of 300 partitions on the real broker), and
// one opened by the first fetch would delay it.
//
// A join on a real broker lasts at least the group's initial rebalance
// delay (3 s by default), kfake's about a millisecond, which the dial can
// outlast on a loaded machine (1 run in 30 under -race). So kfake holds the
// SyncGroup answer, the assignment, until the member has fetched (the
// empty fetch of the dial ahead), for at most 5 s: a member that does not
// dial ahead gets its assignment then, and opens the connection after it.
func TestMemberOpensItsFetchConnectionBeforeItsAssignment(t *testing.T) {
	c := newKafka(t, 4, 10, "t")
	var (
		eng     atomic.Pointer[Engine]
		after   atomic.Int64 // connections opened once partitions were assigned
		fetched = make(chan struct{})
		once    sync.Once
	)
	c.ControlKey(kmsg.SyncGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() {
			select {
			case <-fetched:
			case <-time.After(5 * time.Second):
			}
		})
		return nil, nil, false
	})
	e, log := startMember(t, c, &eng, func(cfg *Config) {
		// No telemetry: its request may open a connection of its own.
		cfg.ClientOpts = []kgo.Opt{kgo.DisableClientMetrics(), kgo.WithHooks(connectHook(func() {
			if e := eng.Load(); e != nil && e.wasAssigned() {
				after.Add(1)
			}
		}), writeHook(func(key int16) {
			if key == kmsg.Fetch.Int16() {
				once.Do(func() { close(fetched) })
			}
		}))}
	})
	readAssigned(t, e, log, 40)
	assert.Zero(t, after.Load(), "connections opened between the assignment and the first records")
}

// connectHook calls its function for every connection a client opens.
type connectHook func()

func (h connectHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h()
	}
}
