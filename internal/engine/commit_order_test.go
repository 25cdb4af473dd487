package engine

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// holdingCommitter holds the first commit made once armed until a second
// commit has been answered (or a few seconds passed), and makes that second
// commit wait until the held one was answered: if the two can overlap, the
// older offsets land last.
type holdingCommitter struct {
	real     committer
	armed    atomic.Bool
	held     atomic.Bool
	release  chan struct{} // closed by the second commit once answered
	heldDone chan struct{} // closed once the held commit was answered
	once     sync.Once
}

func (h *holdingCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	if len(offsets) == 0 || !h.armed.Load() {
		return h.real.Commit(ctx, offsets)
	}
	if h.held.CompareAndSwap(false, true) {
		defer close(h.heldDone)
		select {
		case <-h.release:
		case <-time.After(3 * time.Second): // commits are serialised: no second commit comes
		case <-ctx.Done():
		}
		return h.real.Commit(ctx, offsets)
	}
	failed, err := h.real.Commit(ctx, offsets)
	h.once.Do(func() { close(h.release) })
	select {
	case <-h.heldDone:
	case <-ctx.Done():
	}
	return failed, err
}

// TestRevokedCommitIsNotOverwrittenByOlderCommit: the commit loop takes its
// offsets, then a revocation commits a newer frontier of the revoked
// partition, then the loop's older commit is answered: the group's offset
// must not move back to the older one ("Also check" of issue 15).
func TestRevokedCommitIsNotOverwrittenByOlderCommit(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	hc := &holdingCommitter{release: make(chan struct{}), heldDone: make(chan struct{})}
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
		cfg.MaxRangeRecords = 50
		cfg.MaxInFlight = 12
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1, 1 // small batches: several per range
		cfg.wrapCommitter = func(m committer) committer { hc.real = m; return hc }
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// One unacknowledged batch of each partition; then the commit that
	// covers both is held.
	first := map[int32]*Batch{}
	acked := map[int32]int64{} // end of the last batch acknowledged, by partition
	for len(first) < 2 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		if first[b.Range.Partition] == nil {
			first[b.Range.Partition] = b
			continue
		}
		b.Nack(nil) // delivered again later, after the held batches
	}
	hc.armed.Store(true)
	for p, b := range first {
		b.Ack()
		acked[p] = b.Span.End
	}
	require.Eventually(t, hc.held.Load, 5*time.Second, 5*time.Millisecond, "no commit was held")
	// Both partitions move on past the held offsets.
	moved := map[int32]bool{}
	for len(moved) < 2 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		p := b.Range.Partition
		if b.Span.Start != acked[p] {
			b.Nack(nil)
			continue
		}
		b.Ack()
		acked[p] = b.Span.End
		moved[p] = true
	}

	// A second member joins: one partition is revoked and committed.
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond))
	require.NoError(t, err)
	polled := make(chan struct{})
	t.Cleanup(func() { cancel(); <-polled; other.Close() })
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			other.PollFetches(ctx) // the other member's records are not needed
		}
	}()
	var revoked int32 = -1
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for p := range int32(2) {
			k := ranges.Key{Topic: "t", Partition: p}
			if !e.parts.stateOf(k).held() {
				revoked = p
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "no partition was revoked\n%s", log)
	select {
	case <-hc.heldDone:
	case <-ctx.Done():
		require.FailNow(t, "the held commit never finished")
	}
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "revoked 1 partitions") }, 10*time.Second, 10*time.Millisecond,
		"the revocation did not finish")

	adm := kadm.NewClient(kgoClient(t, c))
	offs, err := adm.FetchOffsets(ctx, "g")
	require.NoError(t, err)
	o, ok := offs.Lookup("t", revoked)
	require.True(t, ok, "revoked partition %d has no commit", revoked)
	assert.GreaterOrEqual(t, o.At, acked[revoked], "the group's offset of revoked partition %d moved back to the held, older commit", revoked)
}
