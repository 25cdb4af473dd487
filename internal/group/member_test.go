package group

import (
	"context"
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

// TestRetryBackoff: 100ms doubling to 1s, each within 20% jitter.
func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails int
		want  time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{12, time.Second},
		{1000, time.Second},
	} {
		for range 20 {
			got := retryBackoff(tc.fails)
			assert.GreaterOrEqual(t, got, tc.want*8/10, "retryBackoff(%d) = %s, want %s ± 20%%", tc.fails, got, tc.want)
			assert.LessOrEqual(t, got, tc.want*12/10, "retryBackoff(%d) = %s, want %s ± 20%%", tc.fails, got, tc.want)
		}
	}
}

// committingHandler commits each revoked partition at offset 1, as the
// engine commits what was acknowledged.
type committingHandler struct {
	m        atomic.Pointer[Member]
	assigned chan struct{}
	once     sync.Once
}

func (h *committingHandler) Assigned(context.Context, []ranges.Key) {
	h.once.Do(func() { close(h.assigned) })
}

func (h *committingHandler) Revoked(ctx context.Context, keys []ranges.Key) {
	offsets := map[ranges.Key]int64{}
	for _, k := range keys {
		offsets[k] = 1
	}
	_, _ = h.m.Load().Commit(ctx, offsets) // the test checks how long Close takes, not the commit
}

func (h *committingHandler) Lost(context.Context, []ranges.Key) {}

func (h *committingHandler) Failed(error) {}

// TestCloseHonoursContext: Close of a member whose coordinator does not
// answer (commits and leaving held in the broker) returns when its context
// ends, not after franz-go's own retries; once the coordinator answers, a
// second Close returns nil.
func TestCloseHonoursContext(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h := &committingHandler{assigned: make(chan struct{})}
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"},
		GroupOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}}, h)
	require.NoError(t, err)
	h.m.Store(m)
	m.Join()
	select {
	case <-h.assigned:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no assignment")
	}

	thawed := make(chan struct{})
	var frozen atomic.Bool
	frozen.Store(true)
	for _, key := range []kmsg.Key{kmsg.OffsetCommit, kmsg.LeaveGroup, kmsg.Heartbeat} {
		c.ControlKey(key.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if frozen.Load() {
				c.SleepControl(func() { <-thawed })
			}
			return nil, nil, false
		})
	}
	thaw := sync.OnceFunc(func() { frozen.Store(false); close(thawed) })
	t.Cleanup(thaw)

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- m.Close(ctx) }()
	select {
	case err = <-closed:
	case <-time.After(10 * time.Second):
		thaw()
		require.FailNow(t, "Close with a 1s context still running after 10s")
	}
	assert.Less(t, time.Since(start), 5*time.Second, "Close with a 1s context")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	thaw()
	ctx2, cancel2 := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel2()
	require.NoError(t, m.Close(ctx2), "second Close")
}

// TestMemberListsNothingForAssignedPartitions: the member's franz-go client
// fetches the committed offsets of the partitions assigned to it, but starts
// no consumer of its own on them: no ListOffsets for a partition without a
// commit, no OffsetForLeaderEpoch for one with a commit. Before, it sent
// both on the connection the engine lists the same partitions on, and a
// start's listings waited behind them (17 ms at 300 partitions).
func TestMemberListsNothingForAssignedPartitions(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	require.NoError(t, adm.ProduceSync(t.Context(), &kgo.Record{Topic: "t", Partition: 0, Value: []byte("a")}).FirstErr())
	committed := kadm.Offsets{}
	committed.Add(kadm.Offset{Topic: "t", Partition: 0, At: 1, LeaderEpoch: 0})
	resp, err := kadm.NewClient(adm).CommitOffsets(t.Context(), "g", committed)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	var (
		mu      sync.Mutex // guards written, fetched
		written = map[int16]int{}
		fetched = make(chan struct{}) // closed once an OffsetFetch was answered after the assignment
		once    sync.Once
		h       = &committingHandler{assigned: make(chan struct{})}
	)
	hooks := rwHook{
		write: func(key int16) {
			mu.Lock()
			written[key]++
			mu.Unlock()
		},
		read: func(key int16) {
			select {
			case <-h.assigned:
				if key == kmsg.OffsetFetch.Int16() {
					once.Do(func() { close(fetched) })
				}
			default:
			}
		},
	}
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"},
		ClientOpts: []kgo.Opt{kgo.WithHooks(hooks)}}, h)
	require.NoError(t, err)
	h.m.Store(m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, m.Close(ctx))
	})
	m.Join()
	select {
	case <-fetched:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no OffsetFetch answered after the assignment")
	}
	// franz-go would list or validate at once with the fetched offsets.
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, written[kmsg.ListOffsets.Int16()], "ListOffsets requests of the member's client")
	assert.Zero(t, written[kmsg.OffsetForLeaderEpoch.Int16()], "OffsetForLeaderEpoch requests of the member's client")
	assert.Zero(t, written[kmsg.Fetch.Int16()], "Fetch requests of the member's client")
}

// rwHook calls write with the key of every request a client writes, and
// read with the key of every response it reads.
type rwHook struct{ write, read func(key int16) }

func (h rwHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	h.write(key)
}

func (h rwHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	h.read(key)
}
