package cache

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Follower fetching (KIP-392) against kfake, which does not implement
// preferred read replicas: rackFake answers partition 0's fetches as Kafka
// with a rack-aware replica selector would.

// rackFake makes a three-broker kfake cluster point the fetches of
// partition 0 of topic at a replica: the leader answers a fetch it is told
// to redirect with PreferredReadReplica = replica and no records, as Kafka's
// leader does once its replica selector picked another broker; the replica,
// a follower kfake lets serve fetches (SetFollowers), answers normally, or
// with code while fail says so, as a lagging or deposed follower would. It
// counts what each broker was asked and the rack of every fetch.
type rackFake struct {
	leader, replica int32
	end             int64 // the partition's high watermark, for the redirects

	// redirect and fail get the count of the leader's (the replica's)
	// fetches so far, this one included.
	redirect func(n int) bool
	fail     func(n int) bool
	code     int16
	// anyRack makes the leader redirect requests without a rack too (a
	// Kafka broker's rack-aware selector only answers a rack).
	anyRack bool
	// slow delays the leader's answers with records (a slow fetch: a
	// distant broker, a busy machine).
	slow time.Duration

	mu             sync.Mutex // guards the counters below
	leaderFetches  int
	replicaFetches int
	redirects      int
	failures       int
	racks          map[string]int // fetch requests by their Rack
}

// newRackFake seeds partition 0 of topic with n records on a three-broker
// cluster and installs the fake; with redirect or fail nil, the leader
// always redirects and the replica never fails.
func newRackFake(t *testing.T, n int, redirect, fail func(int) bool, code int16) (*kfake.Cluster, *rackFake) {
	t.Helper()
	c := newClusterWith(t, 1, n, kfake.NumBrokers(3))
	leader := c.LeaderFor(topic, 0)
	f := &rackFake{
		leader: leader, replica: otherNode(leader, 0), end: int64(n),
		redirect: redirect, fail: fail, code: code,
		racks: map[string]int{},
	}
	if f.redirect == nil {
		f.redirect = func(int) bool { return true }
	}
	if f.fail == nil {
		f.fail = func(int) bool { return false }
	}
	c.SetFollowers(topic, 0, []int32{f.replica})
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return f.control(c.CurrentNode(), kreq.(*kmsg.FetchRequest))
	})
	return c, f
}

func (f *rackFake) control(node int32, req *kmsg.FetchRequest) (kmsg.Response, error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.racks[req.Rack]++
	hit := false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			hit = hit || rp.Partition == 0
		}
	}
	if !hit {
		return nil, nil, false
	}
	switch node {
	case f.leader:
		f.leaderFetches++
		if req.Rack == "" && !f.anyRack || !f.redirect(f.leaderFetches) {
			time.Sleep(f.slow) // in kfake's run loop: this fake serves one partition
			return nil, nil, false
		}
		f.redirects++
		return f.answer(req, func(sp *kmsg.FetchResponseTopicPartition) {
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = f.end, f.end, 0
			sp.PreferredReadReplica = f.replica
		}), nil, true
	case f.replica:
		f.replicaFetches++
		if !f.fail(f.replicaFetches) {
			return nil, nil, false // kfake serves it: the replica is a follower
		}
		f.failures++
		return f.answer(req, func(sp *kmsg.FetchResponseTopicPartition) {
			sp.ErrorCode = f.code
			sp.HighWatermark, sp.LastStableOffset = -1, -1
		}), nil, true
	}
	return nil, nil, false
}

// answer builds a response without records to req, with set applied to
// every partition.
func (f *rackFake) answer(req *kmsg.FetchRequest, set func(*kmsg.FetchResponseTopicPartition)) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.RecordBatches = []byte{}
			set(&sp)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// counts returns the fake's counters.
func (f *rackFake) counts() (leaderFetches, replicaFetches, redirects, failures int, racks map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	racks = map[string]int{}
	for k, v := range f.racks {
		racks[k] = v
	}
	return f.leaderFetches, f.replicaFetches, f.redirects, f.failures, racks
}

// readWhole reads [0, n) of partition 0 in ranges of size through cc,
// continuing cursor to cursor, and returns the offsets delivered.
func readWhole(t *testing.T, cc *Cache, n, size int64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var got []int64
	for start := int64(0); start < n; start += size {
		end := min(start+size, n)
		l, err := cc.Acquire(ctx, topic, 0, start)
		require.NoError(t, err)
		pos, err := l.Read(ctx, start, end, func(recs []*kgo.Record, _ int64) error {
			for _, r := range recs {
				got = append(got, r.Offset)
			}
			return nil
		})
		l.Release(err)
		require.NoErrorf(t, err, "Read(%d, %d) at %d", start, end, pos)
		require.Equal(t, end, pos)
	}
	return got
}

// rackRecords are the records of the rack tests: 20 batches, read in about
// 10 fetches of 512 bytes.
const rackRecords = 400

// TestPreferredReadReplicaIsFollowed: with Config.Rack set, the leader's
// first answer (no records, PreferredReadReplica = another broker) moves
// the cursor to that broker, which serves the whole range exactly; every
// fetch carries the rack and every later fetch goes to the replica.
func TestPreferredReadReplicaIsFollowed(t *testing.T) {
	c, f := newRackFake(t, rackRecords, nil, nil, 0)
	counter := newRequestCounter()
	cc := newCache(t, c, func(cfg *Config) {
		cfg.Rack = "rack-b"
		cfg.FetchMaxPartitionBytes = 512
		cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(counter)}
	})
	require.Equal(t, seq(0, rackRecords), readWhole(t, cc, rackRecords, 100), "records lost, duplicated or out of order")

	leaderFetches, replicaFetches, redirects, _, racks := f.counts()
	st := cc.Stats()
	t.Logf("leader %d: %d fetches (%d redirected), replica %d: %d fetches; stats %+v", f.leader, leaderFetches, redirects, f.replica, replicaFetches, st)
	assert.Equal(t, 1, leaderFetches, "fetches the leader answered: only the first, redirected")
	assert.Equal(t, 1, redirects)
	assert.Greater(t, replicaFetches, 4, "the replica served the range")
	assert.Equal(t, 1, counter.fetches(f.leader), "fetch requests sent to the leader")
	assert.Equal(t, replicaFetches, counter.fetches(f.replica), "fetch requests sent to the replica")
	assert.Zero(t, counter.fetches(3-f.leader-f.replica), "fetch requests sent to the third broker")
	assert.Equal(t, int64(replicaFetches), st.ReplicaFetches, "Stats.ReplicaFetches")
	assert.Equal(t, map[string]int{"rack-b": leaderFetches + replicaFetches}, racks, "fetch requests by rack")
	assert.Zero(t, st.Invalidations, "no read failed")
}

// TestReplicaErrorFallsBackToTheLeader: a replica that answers with an
// error, as a follower that lags (OFFSET_OUT_OF_RANGE) or no longer holds
// the partition (NOT_LEADER_OR_FOLLOWER) would, sends the cursor back to
// the leader, asked without the rack for a while (100 ms and 16 fetches,
// doubling with each failure in a row), so the leader serves it instead of
// pointing at the replica again. The error never reaches the reader: the
// range is read exactly, without a failed read. With the leader's fetches
// 30 ms slow (a distant broker, a busy machine, where the test once saw two
// redirects), the while still covers the rest of the read: it counts
// fetches too, not only time.
func TestReplicaErrorFallsBackToTheLeader(t *testing.T) {
	always := func(int) bool { return true }
	tests := []struct {
		name     string
		redirect func(n int) bool // the leader's n-th fetch is redirected
		fail     func(n int) bool // the replica's n-th fetch fails
		slow     time.Duration    // the leader's answers with records come this late
		// The fake's counters afterwards (-1: not checked).
		redirects, failures, replicaFetches int
	}{{
		name:      "the leader serves",
		redirect:  func(n int) bool { return n == 1 },
		fail:      always,
		redirects: 1, failures: 1, replicaFetches: 1,
	}, {
		name:      "the leader would point at the replica again",
		redirect:  always,
		fail:      func(n int) bool { return n <= 2 },
		redirects: 1, failures: 1, replicaFetches: 1,
	}, {
		name:      "mid-read",
		redirect:  always,
		fail:      func(n int) bool { return n == 5 },
		redirects: 1, failures: 1, replicaFetches: 5,
	}, {
		name:      "the leader would point at the replica again, its fetches slow",
		redirect:  always,
		fail:      func(n int) bool { return n <= 2 },
		slow:      30 * time.Millisecond,
		redirects: 1, failures: 1, replicaFetches: 1,
	}}
	for _, code := range []*kerr.Error{kerr.OffsetOutOfRange, kerr.NotLeaderForPartition} {
		for _, tt := range tests {
			t.Run(code.Message+"/"+tt.name, func(t *testing.T) {
				c, f := newRackFake(t, rackRecords, tt.redirect, tt.fail, code.Code)
				f.mu.Lock()
				f.slow = tt.slow
				f.mu.Unlock()
				cc := newCache(t, c, func(cfg *Config) {
					cfg.Rack = "rack-b"
					cfg.FetchMaxPartitionBytes = 512
				})
				require.Equal(t, seq(0, rackRecords), readWhole(t, cc, rackRecords, 100), "records lost, duplicated or out of order")

				leaderFetches, replicaFetches, redirects, failures, _ := f.counts()
				st := cc.Stats()
				t.Logf("leader: %d fetches (%d redirected), replica: %d fetches (%d failed); stats %+v", leaderFetches, redirects, replicaFetches, failures, st)
				assert.Equal(t, tt.redirects, redirects, "fetches the leader redirected")
				assert.Equal(t, tt.failures, failures, "fetches the replica failed")
				if tt.replicaFetches >= 0 {
					assert.Equal(t, tt.replicaFetches, replicaFetches, "fetches the replica answered")
				} else {
					assert.Greater(t, replicaFetches, failures, "fetches the replica answered")
				}
				assert.Equal(t, int64(replicaFetches), st.ReplicaFetches, "Stats.ReplicaFetches")
				assert.Zero(t, st.Invalidations, "a read failed")
			})
		}
	}
}

// TestPreferredReadReplicaIgnoredWithoutRack: without Config.Rack, a
// PreferredReadReplica in an answer is ignored: the cursor fetches from
// the leader again, never from the replica, and the requests carry no rack.
func TestPreferredReadReplicaIgnoredWithoutRack(t *testing.T) {
	c, f := newRackFake(t, rackRecords, func(n int) bool { return n <= 3 }, nil, 0)
	f.mu.Lock()
	f.anyRack = true
	f.mu.Unlock()
	counter := newRequestCounter()
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxPartitionBytes = 512
		cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(counter)}
	})
	require.Equal(t, seq(0, rackRecords), readWhole(t, cc, rackRecords, 100), "records lost, duplicated or out of order")

	leaderFetches, replicaFetches, redirects, _, racks := f.counts()
	st := cc.Stats()
	t.Logf("leader: %d fetches (%d pointing at the replica), replica: %d fetches; stats %+v", leaderFetches, redirects, replicaFetches, st)
	assert.Equal(t, 3, redirects, "answers pointing at the replica")
	assert.Greater(t, leaderFetches, redirects, "the leader served the range")
	assert.Zero(t, replicaFetches, "fetches the replica answered")
	assert.Zero(t, counter.fetches(f.replica), "fetch requests sent to the replica")
	assert.Equal(t, leaderFetches, counter.fetches(f.leader), "fetch requests sent to the leader")
	assert.Zero(t, st.ReplicaFetches, "Stats.ReplicaFetches")
	assert.Equal(t, map[string]int{"": leaderFetches}, racks, "fetch requests by rack")
}
