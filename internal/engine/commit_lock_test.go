package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// blockingCommitter holds every commit that has offsets until its context
// ends or it is released.
type blockingCommitter struct {
	real    committer
	entered chan struct{} // a commit is held
	release chan struct{}
}

func (b *blockingCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	if len(offsets) > 0 {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.real.Commit(ctx, offsets)
}

// TestCommitWaitsForTheCommitInFlightOnlyAsLongAsItsContext (review 4, read,
// not reproduced): a commit in flight (a revocation's, retried for up to 30 s)
// held the commit lock, and a commit behind it waited for it whatever its
// own context said, so the final commit could run up to 30 s past its limit.
// Now waiting for the lock ends with the waiter's context.
func TestCommitWaitsForTheCommitInFlightOnlyAsLongAsItsContext(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	bc := &blockingCommitter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.CommitPeriod = time.Hour // only the commits of the test
		cfg.wrapCommitter = func(m committer) committer { bc.real = m; return bc }
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err, "%s", log)
	b.Ack()

	inFlight := make(chan error, 1)
	go func() { inFlight <- e.commit(ctx) }() // held in the committer, holding the lock
	select {
	case <-bc.entered:
	case <-ctx.Done():
		t.Fatalf("the first commit was not made\n%s", log)
	}

	waitCtx, waitCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer waitCancel()
	behind := make(chan error, 1)
	go func() { behind <- e.commit(waitCtx) }()
	select {
	case err := <-behind:
		require.ErrorIs(t, err, context.DeadlineExceeded, "the commit behind the one in flight did not end with its context")
	case <-time.After(10 * time.Second):
		t.Error("the commit behind the one in flight still waits, 10 s after its context ended")
	}
	close(bc.release)
	assert.NoError(t, <-inFlight)
	select {
	case err := <-behind:
		t.Logf("the commit behind returned once the first was answered: %v", err)
	default:
	}
}
