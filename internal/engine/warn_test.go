package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A retried failure is a warning unless it is a cancelled attempt: a listing
// cut short by a stop or a handover logs at DEBUG (CI once saw "Listing
// watermarks failed, retrying in 200ms: context canceled" at WARN on a normal
// SIGTERM).
func TestRetriedFailureOfACancelledAttemptIsNoWarning(t *testing.T) {
	c := kfakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	e, log := newEngine(t, c, func(cfg *Config) { cfg.Topics = []TopicSpec{{Name: "t"}} })

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	e.log.warnRetry(cancelled, "a", cancelled.Err(), "Listing watermarks failed: %v", cancelled.Err())
	e.log.warnRetry(context.Background(), "b", fmt.Errorf("list offsets: %w", context.Canceled), "Listing topics failed: %v", context.Canceled)
	e.log.warnRetry(context.Background(), "c", errors.New("broker 1: NOT_LEADER_FOR_PARTITION"), "Listing the offsets failed: %v", "NOT_LEADER_FOR_PARTITION")

	var warns, debugs int
	for _, l := range strings.Split(log.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "WARN Listing"):
			warns++
			assert.Contains(t, l, "NOT_LEADER_FOR_PARTITION")
		case strings.HasPrefix(l, "DEBUG Listing"):
			debugs++
		}
	}
	assert.Equal(t, 1, warns, "a real failure is a warning:\n%s", log)
	assert.Equal(t, 2, debugs, "cancelled attempts are logged at DEBUG:\n%s", log)
}

// The line limit logs a key at most once per lineEvery, and forgets the
// keys last logged a window ago (due again anyway), so keys naming
// partitions that come and go do not pile up.
func TestLineLimitForgetsOldKeys(t *testing.T) {
	l := newLineLimit()
	require.True(t, l.due("read:t/0"))
	require.False(t, l.due("read:t/0"), "logged twice within lineEvery")

	long := time.Now().Add(-2 * lineEvery)
	l.mu.Lock()
	l.last["read:gone/0"], l.last["read:t/0"], l.pruned = long, long, long
	l.mu.Unlock()
	require.True(t, l.due("read:t/1"))
	l.mu.Lock()
	_, kept := l.last["read:gone/0"]
	n := len(l.last)
	l.mu.Unlock()
	assert.False(t, kept, "a key last logged a window ago is kept")
	assert.Equal(t, 1, n, "keys kept after pruning")
	assert.True(t, l.due("read:t/0"), "a key forgotten is due again")
}
