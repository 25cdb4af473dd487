package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnreachableClusterEndsABoundedRun: once the cluster is gone (kfake
// closed mid-run, its listener refusing connections), Next says so with
// ErrUnreachable (the plugin reports the input not connected) once no
// broker answered for unreachableAfter, naming the seed broker; a bounded
// run then stops after UnreachableTimeout without progress, and Next ends.
func TestUnreachableClusterEndsABoundedRun(t *testing.T) {
	c := newKafka(t, 2, 1000, "t")
	seeds := c.ListenAddrs()
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 1
		cfg.Fetch.MaxPartitionBytes = 1024                        // many fetches: the run is far from its end when the cluster goes
		cfg.UnreachableTimeout = unreachableAfter + 3*time.Second // the stop comes after Next said unreachable, not in the same check
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	b.Ack()
	require.NoError(t, e.Reachable(), "a broker answered")
	c.Close()
	closed := time.Now()

	var unreachable, end error
	for end == nil {
		b, err := e.Next(ctx)
		switch {
		case errors.Is(err, ErrUnreachable):
			if unreachable == nil {
				unreachable = err
				t.Logf("Next said %v after %s", err, time.Since(closed).Round(100*time.Millisecond))
			}
			time.Sleep(100 * time.Millisecond) // as Benthos backs off before Connect
		case err != nil:
			end = err
		default:
			b.Ack()
		}
	}
	require.ErrorIs(t, end, ErrEnd, "Next ends once the run stopped\n%s", log)
	require.Error(t, unreachable, "Next never said the cluster is unreachable\n%s", log)
	assert.GreaterOrEqual(t, time.Since(closed), unreachableAfter, "said unreachable before unreachableAfter")
	assert.ErrorContains(t, unreachable, "no broker of "+seeds[0]+" answered for ")
	require.ErrorIs(t, e.Err(), ErrUnreachable, "the run's error\n%s", log)
	assert.ErrorContains(t, e.Err(), "unreachable_timeout (8s)")
	assert.Contains(t, log.String(), "retrying (reported not ready meanwhile)", "one warning when the outage is said")
}
