package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A retried failure is a warning unless it is a cancelled attempt: a listing
// cut short by a stop or a handover logs at DEBUG (CI once saw "Listing
// watermarks failed, retrying in 200ms: context canceled" at WARN on a normal
// SIGTERM).
func TestRetriedFailureOfACancelledAttemptIsNoWarning(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e, log := newEngine(t, c, func(cfg *Config) { cfg.Topics = []TopicSpec{{Name: "t"}} })

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	e.warnRetry(cancelled, "a", cancelled.Err(), "Listing watermarks failed: %v", cancelled.Err())
	e.warnRetry(context.Background(), "b", fmt.Errorf("list offsets: %w", context.Canceled), "Listing topics failed: %v", context.Canceled)
	e.warnRetry(context.Background(), "c", errors.New("broker 1: NOT_LEADER_FOR_PARTITION"), "Listing the offsets failed: %v", "NOT_LEADER_FOR_PARTITION")

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
