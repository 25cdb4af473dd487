package cache

import (
	"context"
	"fmt"
	"net"
	"slices"
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
)

// fetchLog records the fetch requests a kfake broker handles, in order:
// each one's MaxWaitMillis and the partitions in it.
type fetchLog struct {
	mu    sync.Mutex // guards waits, mins and parts
	waits []int32
	mins  []int32
	parts [][]int32
}

func (f *fetchLog) add(req *kmsg.FetchRequest) int {
	var ps []int32
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			ps = append(ps, p.Partition)
		}
	}
	slices.Sort(ps)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, req.MaxWaitMillis)
	f.mins = append(f.mins, req.MinBytes)
	f.parts = append(f.parts, ps)
	return len(f.waits)
}

// String describes the fetches so far, under the lock (the log is written
// by kfake's goroutines while a test may fail).
func (f *fetchLog) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("fetches: %v, waits %v", f.parts, f.waits)
}

// firstLong returns the partitions of the first fetch that waited maxWait,
// and whether there was one.
func (f *fetchLog) firstLong(maxWait int32) ([]int32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, w := range f.waits {
		if w == maxWait {
			return f.parts[i], true
		}
	}
	return nil, false
}

// TestStartedPartitionsShareTheFirstLongPoll: partitions started together
// (what the engine does at a start or an assignment: Watch for each, one
// after the other, while their broker's loop already fetches the first
// ones) must all be in the first long poll of their broker. A broker answers
// a connection's requests one at a time, so a partition left out of the
// long poll in flight waits until that poll ends (FetchMaxWait, 500 ms by
// default) before its first fetch is even read; the partitions started
// later then wait behind the first ones' poll, round after round. Here the
// first fetch (partition 0's, started alone) is where partitions 1..7 are
// started, and the first long poll (MaxWaitMillis = FetchMaxWait) must hold
// all eight; a record written to partition 7 is then reported at once.
func TestStartedPartitionsShareTheFirstLongPoll(t *testing.T) {
	const partitions = 8
	c := newCluster(t, partitions, 0)
	var h highs
	const maxWait = time.Minute // a poll held until a record arrives
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = maxWait
		cfg.OnHigh = h.on
	})
	var log fetchLog
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if log.add(kreq.(*kmsg.FetchRequest)) == 1 {
			for p := int32(1); p < partitions; p++ {
				cc.Watch(topic, p, 0)
			}
		}
		return nil, nil, false
	})
	cc.Watch(topic, 0, 0)

	var long []int32
	require.Eventually(t, func() bool {
		var ok bool
		long, ok = log.firstLong(int32(maxWait / time.Millisecond))
		return ok
	}, 10*time.Second, time.Millisecond, "no long poll was sent")
	assert.Equal(t, []int32{0, 1, 2, 3, 4, 5, 6, 7}, long,
		"the first long poll must fetch every partition started: the others wait behind it (%v)", &log)

	produceN(t, c, partitions-1, 1, 10)
	assert.Eventually(t, func() bool { return h.get(partitions-1) == 1 }, 15*time.Second, 5*time.Millisecond,
		"partition 7's record was not reported while the first long poll (FetchMaxWait %s) is held", maxWait)
}

// TestListingsDoNotWaitBehindALongPoll: listings (ListOffsets, Metadata)
// share the cursors' client, so they must not queue behind a fetch the
// broker holds: a broker answers a connection's requests one at a time,
// and a long poll is held up to FetchMaxWait. franz-go sends fetches on a
// connection of their own per broker (cxnFetch) and these on another
// (cxnNormal); this pins it. The long poll here is held for a minute, and
// the listings must be answered while it still is.
func TestListingsDoNotWaitBehindALongPoll(t *testing.T) {
	c := newCluster(t, 1, 0)
	const maxWait = time.Minute
	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxWait = maxWait })
	var log fetchLog
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		log.add(kreq.(*kmsg.FetchRequest))
		return nil, nil, false
	})
	cc.Watch(topic, 0, 0)
	require.Eventually(t, func() bool {
		_, ok := log.firstLong(int32(maxWait / time.Millisecond))
		return ok
	}, 10*time.Second, time.Millisecond, "no long poll was sent")
	held := func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		for _, b := range cc.brokers {
			if l := b.loop; l != nil && l.holding > 0 {
				return true
			}
		}
		return false
	}
	require.True(t, held(), "the long poll is not in flight")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cc.cl)
	began := time.Now()
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err, "ListOffsets waited behind the held fetch")
	require.NoError(t, ends.Error())
	_, err = adm.ListTopics(ctx, topic)
	require.NoError(t, err, "Metadata waited behind the held fetch")
	t.Logf("ListOffsets and Metadata answered in %s while the long poll was held", time.Since(began).Round(time.Microsecond))
	assert.True(t, held(), "the long poll ended before the listings were answered: nothing was shown")
}

// TestCaughtUpFollowersShareOneLongPoll: caught-up followers of one broker,
// once started, are fetched in one long poll at a time (MaxWaitMillis
// FetchMaxWait, MinBytes FetchMinBytes, every follower in it), never in
// rounds the broker answers at once: over 1.2 s with FetchMaxWait 300 ms
// that is at most 4 rounds, and a busy loop would send thousands.
func TestCaughtUpFollowersShareOneLongPoll(t *testing.T) {
	const partitions = 8
	c := newCluster(t, partitions, 3)
	const maxWait = 300 * time.Millisecond
	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxWait = maxWait })
	var log fetchLog
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		log.add(kreq.(*kmsg.FetchRequest))
		return nil, nil, false
	})
	for p := range int32(partitions) {
		cc.Watch(topic, p, 3)
	}
	require.Eventually(t, func() bool {
		_, ok := log.firstLong(int32(maxWait / time.Millisecond))
		return ok
	}, 10*time.Second, time.Millisecond, "no long poll was sent")
	log.mu.Lock()
	from := len(log.waits)
	log.mu.Unlock()
	time.Sleep(1200 * time.Millisecond)

	log.mu.Lock()
	defer log.mu.Unlock()
	rounds := len(log.waits) - from
	assert.LessOrEqual(t, rounds, 5, "caught-up followers were fetched %d times in 1.2 s with FetchMaxWait %s: not long polls", rounds, maxWait)
	for i := from - 1; i < len(log.waits) && i < from+10; i++ {
		assert.Equal(t, int32(maxWait/time.Millisecond), log.waits[i], "round %d's MaxWaitMillis", i)
		assert.Equal(t, int32(1), log.mins[i], "round %d's MinBytes", i)
		assert.Equal(t, []int32{0, 1, 2, 3, 4, 5, 6, 7}, log.parts[i], "round %d's partitions", i)
	}
}

// TestPartitionStartedWhileALongPollIsHeldIsFollowedAtOnce: a partition
// started while its broker holds the loop's long poll for the others (an
// assignment added to a running member) must not wait for that poll to end
// (FetchMaxWait, a minute here) before its first fetch: the held poll is
// abandoned, and the next round fetches every follower. A record written
// to the new partition is then reported while the old poll would still be
// held.
func TestPartitionStartedWhileALongPollIsHeldIsFollowedAtOnce(t *testing.T) {
	c := newCluster(t, 2, 0)
	var h highs
	const maxWait = time.Minute
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = maxWait
		cfg.OnHigh = h.on
	})
	var log fetchLog
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		log.add(kreq.(*kmsg.FetchRequest))
		return nil, nil, false
	})
	cc.Watch(topic, 0, 0)
	require.Eventually(t, func() bool {
		_, ok := log.firstLong(int32(maxWait / time.Millisecond))
		return ok
	}, 10*time.Second, time.Millisecond, "no long poll was sent")

	cc.Watch(topic, 1, 0)
	produceN(t, c, 1, 1, 10)
	assert.Eventually(t, func() bool { return h.get(1) == 1 }, 15*time.Second, 5*time.Millisecond,
		"partition 1, started while partition 0's long poll (FetchMaxWait %s) was held, was not followed (%v)", maxWait, &log)
	produceN(t, c, 0, 1, 10)
	assert.Eventually(t, func() bool { return h.get(0) == 1 }, 15*time.Second, 5*time.Millisecond,
		"partition 0 is no longer followed after its poll was abandoned")
}

// TestLearnedLeadersServeTheCursorsStartedNext: Learn asks for a topic's
// metadata at once, before any cursor of it exists (the engine calls it when
// partitions are assigned, while it lists their offsets), and the cursors
// started next (Watch, as the engine starts the listed partitions) follow
// their partitions with that answer, without a request of their own. Before,
// the first cursor asked once it existed, after the listings, and the
// start's first fetch waited for that answer too.
func TestLearnedLeadersServeTheCursorsStartedNext(t *testing.T) {
	const partitions = 8
	c := newCluster(t, partitions, 0)
	cc := newCache(t, c, nil)
	cc.Learn(topic)
	require.Eventually(t, func() bool { return cc.Stats().Metadata == 1 }, 5*time.Second, time.Millisecond,
		"Learn sent no metadata request before a cursor existed")
	watchAll(cc, partitions)
	require.Eventually(t, func() bool {
		return following(cc, partitions)
	}, 5*time.Second, time.Millisecond, "the started partitions are not followed")
	assert.Equal(t, int64(1), cc.Stats().Metadata, "the cursors started after Learn asked for the metadata again")
}

// TestLearnOpensTheFetchConnections: once Learn has a topic's metadata, it
// opens the fetch connection to each of its partitions' leaders (an empty
// fetch), so the first fetches of the cursors started next find it open:
// they open no connection of their own. Before, a start's first fetch opened
// it, a dial and an ApiVersions exchange after the listings (1 to 22 ms
// measured at a start of 300 partitions on a loaded machine).
func TestLearnOpensTheFetchConnections(t *testing.T) {
	const partitions = 8
	c := newClusterWith(t, partitions, 0, kfake.NumBrokers(2))
	var dials atomic.Int64
	cc := newCache(t, c, func(cfg *Config) {
		// No telemetry: its request opens a connection of its own at any time.
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.DisableClientMetrics(), kgo.WithHooks(connectHook(func() { dials.Add(1) })))
	})
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	md, err := kadm.NewClient(adm).Metadata(t.Context(), topic)
	require.NoError(t, err)
	leaders := map[int32]bool{}
	for _, p := range md.Topics[topic].Partitions {
		leaders[p.Leader] = true
	}

	cc.Learn(topic)
	require.Eventually(t, func() bool { return cc.Stats().DialledAhead == int64(len(leaders)) }, 5*time.Second, time.Millisecond,
		"Learn opened no fetch connection to the topic's %d leaders", len(leaders))
	// Learn measures the leaders' round trips too, on their other
	// connection, which its probes may be opening still: the count starts
	// once every measure ended.
	require.Eventually(t, func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		for id := range leaders {
			if b := cc.brokers[id]; b == nil || b.rtt == nil || b.rtt.probing {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the leaders' round trips were not measured")
	before := dials.Load()
	watchAll(cc, partitions)
	require.Eventually(t, func() bool {
		return following(cc, partitions) && cc.Stats().Fetches >= int64(len(leaders))
	}, 5*time.Second, time.Millisecond, "the started partitions are not followed")
	assert.Equal(t, before, dials.Load(), "connections the first fetches opened after Learn")
	assert.Equal(t, int64(len(leaders)), cc.Stats().DialledAhead, "fetch connections opened ahead")
}

// connectHook calls its function for every connection a client opens.
type connectHook func()

func (h connectHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h()
	}
}

// TestPartitionsStartedUnderHoldShareTheFirstRound: partitions started
// while the loops are held (Hold, as the engine does while it starts an
// assignment's partitions one after the other) all go into their broker's
// first round, however slowly they are started. Without the hold the first
// round went with the first partition alone, and the others waited until
// the broker answered it (a short poll here: up to 5 ms, more on a busy
// broker), before their first fetch was even read.
func TestPartitionsStartedUnderHoldShareTheFirstRound(t *testing.T) {
	const partitions = 8
	c := newCluster(t, partitions, 0)
	cc := newCache(t, c, nil)
	var log fetchLog
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := kreq.(*kmsg.FetchRequest); len(req.Topics) > 0 { // not Learn's empty fetch
			log.add(req)
		}
		return nil, nil, false
	})
	release := cc.Hold()
	for p := range int32(partitions) {
		cc.Watch(topic, p, 0)
		time.Sleep(5 * time.Millisecond) // a slow start: the loop has time to send a round
	}
	release()
	release() // a second call does nothing
	require.Eventually(t, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.parts) > 0
	}, 5*time.Second, time.Millisecond, "nothing was fetched after the release")
	log.mu.Lock()
	first := log.parts[0]
	log.mu.Unlock()
	assert.Equal(t, []int32{0, 1, 2, 3, 4, 5, 6, 7}, first, "the first round must fetch every partition started under the hold (%v)", &log)
}

// watchAll makes partitions 0 to n-1 of topic follow the tail from offset 0.
func watchAll(cc *Cache, n int32) {
	for p := range n {
		cc.Watch(topic, p, 0)
	}
}

// following reports whether partitions 0 to n-1 of topic have a follower.
func following(cc *Cache, n int32) bool {
	for p := range n {
		if !cc.Following(topic, p) {
			return false
		}
	}
	return true
}
