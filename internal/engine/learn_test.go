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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAssignedPartitionsLearnTheirLeadersWhileListed: when the group assigns
// partitions, the cursors' metadata of their topic is requested at once,
// while the engine lists their committed offsets (the OffsetFetch after the
// assignment, held here until that request was sent or 5 s passed), not once
// the listed partitions start: the start's first fetch then goes as soon as
// the listings are answered. Before, the cursors asked for their leaders
// only once they existed, after the listings, and the first records waited
// for that request too (4 to 9 ms at 300 partitions on a loaded machine).
func TestAssignedPartitionsLearnTheirLeadersWhileListed(t *testing.T) {
	c := newKafka(t, 2, 10, "t")
	var (
		eng    atomic.Pointer[Engine]
		armed  atomic.Bool // the first committed-offsets listing after the assignment is held
		learnt atomic.Bool // the cursors' metadata request was sent while it was held
	)
	armed.Store(true)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // before the cluster closes: no sleeper outlives the test
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		e := eng.Load()
		if e == nil || !e.wasAssigned() || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		c.SleepControl(func() {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if e.cursorMetadataRequests() > 0 {
					learnt.Store(true)
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
		return nil, nil, false
	})
	e, log := startMember(t, c, &eng, nil)
	readAssigned(t, e, log, 20)
	require.False(t, armed.Load(), "no committed offsets were listed after the assignment\n%s", log)
	assert.True(t, learnt.Load(), "the cursors asked for their topic's metadata only after the assigned partitions were listed")
}

// wasAssigned reports whether the group assigned this engine partitions.
func (e *Engine) wasAssigned() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.coord.assigned
}

// cursorMetadataRequests is how many metadata requests the cursors' cache sent.
func (e *Engine) cursorMetadataRequests() int64 {
	e.mu.Lock()
	c := e.kafka.cache
	e.mu.Unlock()
	if c == nil {
		return 0
	}
	return c.Stats().Metadata
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

// writeHook calls its function with the key of every request a client
// writes.
type writeHook func(key int16)

func (h writeHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	h(key)
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

// startMember starts an engine on c that reads topic "t" as a member of
// group "g", with mod (if any) applied to its config, and closes it at
// cleanup. If eng is not nil, it holds the engine before the engine starts
// (the test's broker controls and client hooks read it).
func startMember(t *testing.T, c *kfake.Cluster, eng *atomic.Pointer[Engine], mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	e, log := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		if mod != nil {
			mod(cfg)
		}
	})
	if eng != nil {
		eng.Store(e)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, e.Close(ctx), "Close")
		if t.Failed() {
			t.Logf("engine log:\n%s", log)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, e.Start(ctx))
	return e, log
}

// readAssigned takes and acknowledges batches of e until n records came.
func readAssigned(t *testing.T, e *Engine, log *testLogger, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		b, err := e.Next(ctx)
		require.NoError(t, err, "the assigned partitions were not read\n%s", log)
		got += len(b.Records)
		b.Ack()
	}
}
