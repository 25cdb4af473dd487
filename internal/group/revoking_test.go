package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// revokeWatcher records, inside Revoked, what Owned says of the revoked
// partitions and whether the member still commits them.
type revokeWatcher struct {
	m        *Member
	assigned chan struct{}
	once     sync.Once
	mu       sync.Mutex
	owned    []ranges.Key // Owned("t") while Revoked ran
	errs     map[ranges.Key]error
	err      error
	revoked  chan struct{}
}

func (h *revokeWatcher) Assigned(context.Context, []ranges.Key) {
	h.once.Do(func() { close(h.assigned) })
}

func (h *revokeWatcher) Revoked(ctx context.Context, keys []ranges.Key) {
	offsets := map[ranges.Key]int64{}
	for _, k := range keys {
		offsets[k] = 0
	}
	owned := h.m.Owned("t")
	errs, err := h.m.Commit(ctx, offsets)
	h.mu.Lock()
	h.owned, h.errs, h.err = owned, errs, err
	h.mu.Unlock()
	close(h.revoked)
}

func (h *revokeWatcher) Lost(context.Context, []ranges.Key) {}
func (h *revokeWatcher) Failed(error)                       {}

// TestRevokingPartitionsAreNotOwned: while Handler.Revoked runs, Owned leaves
// the revoked partitions out (so nothing the engine does meanwhile, such as a
// refused commit's re-assignment or a topic's first listing, waits for them
// again), and the member still commits them. Before, Owned listed them until
// Revoked returned.
func TestRevokingPartitionsAreNotOwned(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h := &revokeWatcher{assigned: make(chan struct{}), revoked: make(chan struct{})}
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"},
		GroupOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}}, h)
	require.NoError(t, err)
	h.m = m
	m.Join()
	select {
	case <-h.assigned:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no assignment")
	}
	require.Len(t, m.Owned("t"), 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Close(ctx)) // leaving revokes both
	select {
	case <-h.revoked:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no revocation")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Empty(t, h.owned, "Owned during the revocation")
	require.NoError(t, h.err)
	assert.Empty(t, h.errs, "the revoked partitions' commit")
	assert.Empty(t, m.Owned("t"), "Owned after the revocation")
}
