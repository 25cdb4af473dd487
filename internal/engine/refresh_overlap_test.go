package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// slowMetadata makes every Metadata request take d in the broker
// while slow is set. (A plain sleep in the control function: the cluster
// answers nothing else meanwhile, which only slows the test's reads down;
// kfake's SleepControl, which would not, has a data race of its own when
// several slept requests overlap.)
func slowMetadata(c *kfake.Cluster, d time.Duration, slow *atomic.Bool, n *atomic.Int64) {
	c.ControlKey(kmsg.Metadata.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slow.Load() {
			n.Add(1)
			time.Sleep(d)
		}
		return nil, nil, false
	})
}

// TestBoundedRunEndsWhenRefreshesOverlap: a bounded run (stop_at:
// end) whose refresh (one topic listing) takes a little longer than
// poll_interval never ends. The scheduler checks whether the run is done
// only while no refresh runs (!refreshing && e.finished()); a poll tick that
// comes during a refresh sets again, and when that refresh is over the
// next one starts at once, before the loop comes back to that check. So
// while every refresh outlasts one poll interval (a slow or remote cluster,
// a broker under load, a small poll_interval), refreshes follow each other
// back to back and the check never runs: every record is read and
// acknowledged, and Next never returns ErrEnd.
func TestBoundedRunEndsWhenRefreshesOverlap(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	var slow atomic.Bool
	var listings atomic.Int64
	slowMetadata(c, 120*time.Millisecond, &slow, &listings)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.StopAtEnd = true
		cfg.PollInterval = 100 * time.Millisecond
	})
	slow.Store(true) // from now on a refresh takes ~120 ms, a poll interval is 100 ms

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	t.Logf("records read: %v; Next ended with: %v; %d topic listings (Metadata) in %s", got, err, listings.Load(), 10*time.Second)
	require.Equal(t, 100, got["t/0"], "every record read\n%s", log)
	assert.ErrorIs(t, err, ErrEnd, "a bounded run read and acknowledged everything, and still did not end after 10 s\n%s", log)
}
