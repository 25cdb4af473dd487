package group

import (
	"context"
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

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// assignedHandler closes assigned at the member's first assignment.
type assignedHandler struct {
	assigned chan struct{}
	once     sync.Once
}

func (h *assignedHandler) Assigned(context.Context, []ranges.Key) {
	h.once.Do(func() { close(h.assigned) })
}
func (h *assignedHandler) Revoked(context.Context, []ranges.Key) {}
func (h *assignedHandler) Lost(context.Context, []ranges.Key)    {}
func (h *assignedHandler) Failed(error)                          {}

// heldJoin is a group on kfake whose coordinator holds our member's
// JoinGroup (every JoinGroup without an instance ID) while a second member
// (instance ID "joiner") joins, as a coordinator holds it while it waits for
// a member that died, until its session ends.
type heldJoin struct {
	c        *kfake.Cluster
	m        *Member
	adm      *kadm.Client
	held     atomic.Int32 // our JoinGroups held so far
	commits  atomic.Int32 // OffsetCommit requests the coordinator received
	leaves   atomic.Int32 // LeaveGroup requests the coordinator received
	release  func()       // lets the held JoinGroups through
	memberID string       // ours, before the join was held
}

// newHeldJoin starts our member on topic t (2 partitions), waits for its
// assignment, then holds its next JoinGroup and starts the joiner, and
// returns once our member's rejoin is held.
func newHeldJoin(t *testing.T) *heldJoin {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h := &heldJoin{c: c}
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		h.commits.Add(1)
		return nil, nil, false
	})
	c.ControlKey(kmsg.LeaveGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		h.leaves.Add(1)
		return nil, nil, false
	})
	handler := &assignedHandler{assigned: make(chan struct{})}
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"},
		GroupOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}}, handler)
	require.NoError(t, err)
	h.m = m
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	h.adm = kadm.NewClient(cl)
	topics, err := h.adm.ListTopics(t.Context(), "t")
	require.NoError(t, err)
	m.SetTopicID("t", topics["t"].ID) // as the engine's listing does
	m.Join()
	select {
	case <-handler.assigned:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no assignment")
	}
	h.memberID, _ = m.Client().GroupMetadata()

	released := make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	c.ControlKey(kmsg.JoinGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req, ok := r.(*kmsg.JoinGroupRequest); ok && req.InstanceID == nil && holding.Load() {
			h.held.Add(1)
			c.SleepControl(func() { <-released })
		}
		return nil, nil, false
	})
	h.release = func() {
		if holding.CompareAndSwap(true, false) {
			close(released)
		}
	}
	t.Cleanup(h.release)

	joiner, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("t"), kgo.InstanceID("joiner"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			joiner.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-polled; joiner.Close() })
	require.Eventually(t, func() bool { return h.held.Load() > 0 }, 15*time.Second, 10*time.Millisecond, "our member never rejoined")
	return h
}

// committed returns the group's committed offset and metadata of t/p.
func (h *heldJoin) committed(t *testing.T, p int32) (int64, string) {
	t.Helper()
	offs, err := h.adm.FetchOffsets(t.Context(), "g")
	require.NoError(t, err)
	o, _ := offs.Lookup("t", p)
	return o.At, o.Metadata
}

// TestCommitGoesAroundAHeldJoin: while the coordinator holds the member's
// JoinGroup (it waits for a member that died, up to its session timeout),
// franz-go holds every commit of the member; the member's commit does not
// wait for it: it is sent with the generation the member holds, and the
// coordinator (preparing the rebalance) takes it, with the metadata the
// caller set (PreCommitContext). Exactly one OffsetCommit is sent per
// commit: franz-go's attempt, let through once the join is answered, is
// refused. While franz-go still holds it, the next commit goes around too;
// once franz-go lets commits through again, commits go through franz-go.
func TestCommitGoesAroundAHeldJoin(t *testing.T) {
	h := newHeldJoin(t)
	owned := h.m.Owned("t")
	require.NotEmpty(t, owned)
	k := owned[0]
	meta := func(v string) context.Context {
		return PreCommitContext(t.Context(), func(req *kmsg.OffsetCommitRequest) error {
			for i := range req.Topics {
				for j := range req.Topics[i].Partitions {
					req.Topics[i].Partitions[j].Metadata = kmsg.StringPtr(v)
				}
			}
			return nil
		})
	}
	commit := func(ctx context.Context, at int64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		errs, err := h.m.Commit(ctx, map[ranges.Key]int64{k: at})
		require.NoError(t, err, "commit during a held join")
		require.Empty(t, errs, "commit during a held join")
	}
	before := h.commits.Load()

	commit(meta("first"), 5)
	at, md := h.committed(t, k.Partition)
	assert.Equal(t, int64(5), at, "committed during the held join")
	assert.Equal(t, "first", md, "the caller's metadata (PreCommitContext)")
	assert.Equal(t, before+1, h.commits.Load(), "one OffsetCommit per commit")
	require.NotNil(t, h.m.held.Load(), "franz-go still holds its attempt")

	commit(meta("second"), 6) // around at once: franz-go still holds commits
	at, md = h.committed(t, k.Partition)
	assert.Equal(t, int64(6), at)
	assert.Equal(t, "second", md)
	assert.Equal(t, before+2, h.commits.Load(), "one OffsetCommit per commit")

	h.release()
	require.Eventually(t, func() bool { return h.m.held.Load() == nil }, 15*time.Second, 10*time.Millisecond,
		"franz-go never let its held attempt through")
	assert.Equal(t, before+2, h.commits.Load(), "franz-go sent its held attempt too, after the member sent it")

	// The group settled: commits go through franz-go again.
	require.Eventually(t, func() bool {
		d, err := h.adm.DescribeGroups(t.Context(), "g")
		return err == nil && d["g"].State == "Stable" && len(d["g"].Members) == 2 && len(h.m.Owned("t")) == 1
	}, 15*time.Second, 10*time.Millisecond, "the rebalances never ended")
	k = h.m.Owned("t")[0]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, around, err := h.m.commitOnce(ctx, map[string]map[int32]kgo.EpochOffset{k.Topic: {k.Partition: {Epoch: -1, Offset: 7}}}, nil, true)
	require.NoError(t, err)
	assert.False(t, around, "a commit once the group settled went around franz-go")
	assert.False(t, joinAnswered(resp), "refused: %v", resp)
	at, _ = h.committed(t, k.Partition)
	assert.Equal(t, int64(7), at)
	assert.Equal(t, before+3, h.commits.Load(), "one OffsetCommit per commit")
}

// TestCloseLeavesDuringAHeldJoin: Close of a member whose JoinGroup the
// coordinator holds leaves the group at once (LeaveGroup with its member
// ID), where franz-go's leave waits until the join is answered (45 s after
// a member died, by default): Benthos' shutdown_timeout (20 s) then killed
// the process before it left, and the group waited another session for it.
func TestCloseLeavesDuringAHeldJoin(t *testing.T) {
	h := newHeldJoin(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.m.Close(ctx), "Close during a held join")
	assert.Positive(t, h.leaves.Load(), "no LeaveGroup sent")
	d, err := h.adm.DescribeGroups(t.Context(), "g")
	require.NoError(t, err)
	var ids []string
	for _, mb := range d["g"].Members {
		ids = append(ids, mb.MemberID)
	}
	assert.False(t, slices.Contains(ids, h.memberID), "the member is still in the group: %v", ids)
}

// TestCommitAroundNeedsAGeneration: a member without a member ID and
// generation (it never joined, or its session ended and franz-go dropped
// them) sends no commit around franz-go: the coordinator of an empty group
// would take one without them (an admin's commit), unfenced.
func TestCommitAroundNeedsAGeneration(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}}, &assignedHandler{assigned: make(chan struct{})})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = m.commitAround(ctx, map[string]map[int32]kgo.EpochOffset{"t": {0: {Epoch: -1, Offset: 5}}}, nil)
	require.ErrorIs(t, err, errNoGeneration)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "g")
	if err == nil {
		_, ok := offs.Lookup("t", 0)
		assert.False(t, ok, "committed without a generation")
	}
}
