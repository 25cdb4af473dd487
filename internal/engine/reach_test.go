package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
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
	assert.Equal(t, 1, countLines(log, "WARN", "retrying (reported not ready meanwhile"), "one warning when the outage is said\n%s", log)
}

// TestNothingIsHandedOutWhileSaidUnreachable (issue 50, defect 6): once the
// log says the cluster is unreachable ("reported not ready"), Next hands out
// nothing, not even the batches its readers read before the outage, so the
// plugin reports the input not ready (Benthos' /ready answers 503) exactly
// while the log says so; it answered 200 for minutes while a large buffer
// drained. Once a broker answers again ("answers again"), they go out.
func TestNothingIsHandedOutWhileSaidUnreachable(t *testing.T) {
	c := newKafka(t, 2, 2000, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.UnreachableTimeout = 0 // retried for ever: the test decides when a broker answers
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	b.Ack()
	c.Close() // its readers hold batches already read, and their cursors more
	require.Eventually(t, func() bool { return countLines(log, "WARN", "reported not ready") > 0 }, 30*time.Second, 20*time.Millisecond,
		"the outage was never said\n%s", log)

	for i := range 20 {
		nctx, ncancel := context.WithTimeout(ctx, 50*time.Millisecond)
		b, err := e.Next(nctx)
		ncancel()
		if b != nil {
			require.Failf(t, "handed out while said unreachable", "Next %d after the log said the input is reported not ready returned the batch %s", i, b.Span)
		}
		require.ErrorIs(t, err, ErrUnreachable, "Next %d after the log said the input is reported not ready", i)
	}
	assert.Zero(t, countLines(log, "INFO", "answers again"), "a broker answers again: the cluster is closed\n%s", log)

	e.kafka.reach.answered() // as a broker's answer would
	b, err = e.Next(ctx)
	require.NoError(t, err, "a broker answered: the batches read before the outage go out\n%s", log)
	b.Ack()
	assert.Equal(t, 1, countLines(log, "INFO", "answers again", "reported ready"), "the log says the input is ready again\n%s", log)
	assert.Equal(t, 1, countLines(log, "WARN", "reported not ready"), "one line for the outage\n%s", log)
}

// TestARunThatReadEverythingEndsWhileUnreachable: a bounded run whose
// readers are done (its scheduler ended) goes to its end once the pipeline
// acknowledged what it holds, whether a broker answers or not: Next
// withholds only what a broker is needed for, and Ended says so to the
// plugin's Connect.
func TestARunThatReadEverythingEndsWhileUnreachable(t *testing.T) {
	c := newKafka(t, 1, 50, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.UnreachableTimeout = 0
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(50), b.Span.End, "one batch holds the whole partition")
	// Its reader is done: the scheduler ends (which may take a listing)
	// before the cluster goes.
	require.Eventually(t, func() bool { return countLines(log, "INFO", "Read every range up to the end offsets") > 0 },
		20*time.Second, 10*time.Millisecond, "the scheduler did not end\n%s", log)
	c.Close()
	// A run that read everything may send no request for a while: the
	// outage is made to have begun unreachableAfter ago (again, should an
	// answer on its way as the cluster closed end it).
	r := &e.kafka.reach
	require.Eventually(t, func() bool {
		if countLines(log, "WARN", "reported not ready") > 0 {
			return true
		}
		r.failed(kgo.BrokerMetadata{Host: "127.0.0.1", Port: 1}, errors.New("connection refused"))
		r.mu.Lock()
		r.down = time.Now().Add(-unreachableAfter)
		r.mu.Unlock()
		return false
	}, 30*time.Second, 20*time.Millisecond, "the outage was never said\n%s", log)
	assert.False(t, e.Ended(), "a batch is not acknowledged yet")
	b.Ack()
	// Next ends, without a broker; until the scheduler's goroutine closed
	// the batches channel (after its line) it says the cluster is
	// unreachable, and the plugin's Connect asks again (Ended), as this
	// loop does.
	require.Eventually(t, func() bool {
		nctx, ncancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer ncancel()
		b, err := e.Next(nctx)
		require.Nil(t, b, "a batch handed out: everything was read and acknowledged")
		if errors.Is(err, ErrEnd) {
			return true
		}
		require.ErrorIs(t, err, ErrUnreachable, "Next before its end")
		return false
	}, 5*time.Second, 20*time.Millisecond, "Next did not end: everything was read and acknowledged\n%s", log)
	assert.True(t, e.Ended())
}
