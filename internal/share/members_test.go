package share

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// countingObserver counts what an Observer is told.
type countingObserver struct {
	nopObserver
	acquired, delivered, deliveredBytes, batches atomic.Int64
}

func (o *countingObserver) Acquired(_ string, n int64) { o.acquired.Add(n) }
func (o *countingObserver) Delivered(_ string, n, bytes int64) {
	o.batches.Add(1)
	o.delivered.Add(n)
	o.deliveredBytes.Add(bytes)
}

// newMembers starts n members of group on c; closed at the end of the test
// if the test did not close them.
func newMembers(t *testing.T, c *kfake.Cluster, group string, n int, mod func(*Config)) *Members {
	t.Helper()
	c.SetGroupConfigs(group, map[string]string{"share.auto.offset.reset": "earliest"})
	cfg := Config{Seeds: c.ListenAddrs(), Group: group, Topics: []string{topic}, MaxRecords: 10}
	if mod != nil {
		mod(&cfg)
	}
	m, err := NewMembers(cfg, n)
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	require.NoError(t, m.Start(t.Context()), "Start after a successful Start does nothing")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, m.Close(ctx))
	})
	return m
}

// nextOf returns the next batch of m, failing the test after a minute.
func nextOf(t *testing.T, m *Members) *Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := m.Next(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, b.Records)
	return b
}

// TestMembersDeliver: three members of one share group in one process
// deliver every record once through Next; each member delivers (each
// holds one fetch at a time, so three batches out at once are of three
// members); Stats is the members' counts summed, the Observer sees every
// member's acquisitions and each batch Next hands out once, and each
// member's lines name it.
func TestMembersDeliver(t *testing.T) {
	const total = 300
	c := newCluster(t, total)
	obs := &countingObserver{}
	var log logLines
	m := newMembers(t, c, "g", 3, func(cfg *Config) { cfg.Observer = obs; cfg.Logger = &log })

	seen := map[string]int{}
	record := func(b *Batch) {
		for _, v := range values(b) {
			seen[v]++
		}
	}
	var held []*Batch
	for range 3 {
		b := nextOf(t, m)
		record(b)
		held = append(held, b)
	}
	for i, r := range m.readers {
		assert.Positive(t, r.Stats().Acquired, "member %d holds no batch while three are out", i+1)
	}
	for _, b := range held {
		b.Ack()
	}
	for len(seen) < total {
		b := nextOf(t, m)
		record(b)
		b.Ack()
	}
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s delivered %d times", v, n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.Close(ctx))
	var sum Stats
	for _, r := range m.readers {
		sum = sum.Add(r.Stats())
	}
	st := m.Stats()
	assert.Equal(t, sum, st)
	assert.Equal(t, Stats{Acquired: total, Accepted: total}, st)
	assert.Equal(t, int64(total), obs.acquired.Load())
	assert.Equal(t, int64(total), obs.delivered.Load(), "Delivered: once per record handed out")
	var bytes int64
	for v := range seen {
		bytes += int64(len(v))
	}
	assert.Equal(t, bytes, obs.deliveredBytes.Load())
	for i := 1; i <= 3; i++ {
		assert.NotEmptyf(t, log.with("Member "+string(rune('0'+i))+" of 3: Reading [t] as a member of share group g"), "member %d's start line: %q", i, log.lines)
	}
	require.Equal(t, int64(total), shareStart(t, c, "g"))
}

// TestMembersOneFailingStopsTheRest: when one member stops on an error
// retrying cannot fix (here its fetch is refused TOPIC_AUTHORIZATION_FAILED,
// the others' are not), Next returns that error from then on, whatever
// the other members hold, Err says it, and Close closes every member,
// releasing what they held.
func TestMembersOneFailingStopsTheRest(t *testing.T) {
	const total = 100
	c := newCluster(t, total)
	var (
		mu      sync.Mutex
		victim  string // the member ID of the first member that fetched
		fetches int
	)
	c.ControlKey(int16(kmsg.ShareFetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ShareFetchRequest)
		if req.MemberID == nil || len(req.Topics) == 0 {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		if victim == "" {
			victim = *req.MemberID
		}
		if *req.MemberID != victim {
			return nil, nil, false
		}
		fetches++
		if fetches == 1 { // its first fetch is served: it delivers, then fails
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewShareFetchResponseTopic()
			t.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewShareFetchResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = kerr.TopicAuthorizationFailed.Code
				p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = -1, -1
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	m := newMembers(t, c, "g", 3, func(cfg *Config) { cfg.Logger = tlog{t} })

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stopped error
	for stopped == nil {
		b, err := m.Next(ctx)
		if err != nil {
			stopped = err
			break
		}
		b.Ack()
	}
	require.ErrorIs(t, stopped, kerr.TopicAuthorizationFailed)
	require.ErrorIs(t, m.Err(), kerr.TopicAuthorizationFailed)
	for range 5 {
		_, err := m.Next(ctx)
		require.ErrorIs(t, err, kerr.TopicAuthorizationFailed, "Next after a member stopped")
	}
	require.NoError(t, m.Close(ctx))
	st := m.Stats()
	require.Equal(t, st.Acquired, st.Accepted+st.Released, "what was acquired was accepted, or released on Close: %+v", st)
	_, err := m.Next(ctx)
	require.ErrorIs(t, err, ErrClosed)
}

// TestMembersCloseWithBatchesOutstanding: Close while the pipeline holds
// batches handed out by Next, and the members hold more (queued in their
// fetch, or taken by a pump and not handed over), releases all of them:
// an Ack after Close is stale, Next returns ErrClosed, and the records
// come back to another member with their delivery count one more. Close
// is safe twice and concurrently.
func TestMembersCloseWithBatchesOutstanding(t *testing.T) {
	const total = 60
	c := newCluster(t, total)
	m := newMembers(t, c, "g", 2, func(cfg *Config) { cfg.BatchRecords = 5 })
	out := []*Batch{nextOf(t, m), nextOf(t, m)}
	require.Eventually(t, func() bool { return m.Queued() > 0 }, 10*time.Second, 10*time.Millisecond, "the members hold more batches than handed out")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- m.Close(ctx) }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	for _, b := range out {
		b.Ack()
	}
	st := m.Stats()
	require.Zero(t, st.Accepted, "%+v", st)
	require.Equal(t, st.Acquired, st.Released, "every batch, handed out or not, released: %+v", st)
	require.Equal(t, int64(len(out)), st.Stale, "the Acks after Close: %+v", st)
	_, err := m.Next(ctx)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, m.Start(ctx), ErrClosed)

	r := newReader(t, c, "g", nil)
	first := map[string]bool{}
	for _, b := range out {
		for _, v := range values(b) {
			first[v] = true
		}
	}
	again := 0
	for again < len(first) {
		b := next(t, r)
		for i, v := range values(b) {
			if first[v] {
				again++
				assert.Equal(t, int32(2), b.Records[i].DeliveryCount(), "record %s", v)
			}
		}
		b.Ack()
	}
}

// TestMembersBeforeStart: Next before Start says so; NewMembers refuses no
// member; Close before Start closes.
func TestMembersBeforeStart(t *testing.T) {
	_, err := NewMembers(Config{Seeds: []string{"a:1"}, Group: "g", Topics: []string{topic}}, 0)
	require.ErrorContains(t, err, "members must be at least 1, got 0")
	m, err := NewMembers(Config{Seeds: []string{"a:1"}, Group: "g", Topics: []string{topic}}, 2)
	require.NoError(t, err)
	_, err = m.Next(t.Context())
	require.ErrorIs(t, err, ErrNotStarted)
	require.Zero(t, m.Queued())
	require.NoError(t, m.Close(t.Context()))
	require.ErrorIs(t, m.Start(t.Context()), ErrClosed)
}
