package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPermanentCommitErrorStops: a commit the coordinator refuses for good
// (every OffsetCommit answered GROUP_AUTHORIZATION_FAILED) stops the input
// with an error naming the group and the partitions, instead of a warning
// every 10s and a stall once every slot waits for a commit (defect 9).
func TestPermanentCommitErrorStops(t *testing.T) {
	for _, tc := range []struct {
		name       string
		membership bool
	}{
		{"member", true},
		{"pinned partitions", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 2, 300, "t")
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.GroupAuthorizationFailed, Count: -1})
			e, log := startEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				if !tc.membership {
					cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0, 1}}}
				}
				cfg.Group = "g"
				cfg.Membership = tc.membership
				cfg.MaxInFlight = 2 // every slot soon waits for a commit
			})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			_, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd, "Next after a refused commit\n%s", log)
			require.ErrorIs(t, e.Err(), kerr.GroupAuthorizationFailed)
			assert.Regexp(t, `group "g"`, e.Err().Error(), "the error names the group")
			assert.Regexp(t, `t/[01]`, e.Err().Error(), "the error names the partitions")
			closeCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.ErrorIs(t, e.Close(closeCtx), kerr.GroupAuthorizationFailed, "Close: the final commit is refused too")
			assert.NotContains(t, log.String(), "attempt 2 of", "a refused final commit is retried")
		})
	}
}

// TestRetriableCommitErrorIsRetried: a commit answered with a retriable
// error (the coordinator is loading) for a while is retried, logged, and the
// input goes on and commits once the coordinator answers.
func TestRetriableCommitErrorIsRetried(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.CoordinatorLoadInProgress, Count: 3})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 2
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	require.NoError(t, e.Err(), "a retriable commit error stopped the input\n%s", log)
	assert.Equal(t, map[string]int{"t/0": 300}, got)
	assert.Equal(t, 3, h.Hits(), "every fault was answered")
}

// startEngine starts an engine like newEngine, for tests that check Close
// themselves; it is closed at cleanup too, whatever Close returns then.
func startEngine(t *testing.T, c *kfake.Cluster, mod func(*Config)) (*Engine, *testLogger) {
	t.Helper()
	e, log := newTestEngine(t, c, mod)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx) // the test checked what it needs of Close
		if t.Failed() {
			t.Logf("engine log:\n%s", log)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.Start(ctx))
	return e, log
}
