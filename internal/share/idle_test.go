package share

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRenewGapBelowConnIdleTimeout (issue 44, from the review's reproduction): a member holding
// records polls no ShareFetch until its pipeline acknowledges them, so between renewals its
// ShareFetch connection is idle. franz-go closes a connection idle for ConnIdleTimeout (30 s by
// default), and the broker then ends the member's share session and releases every record it
// holds, to other members, while the pipeline still processes them. The reader must not let a
// renewal gap reach the client's connection idle timeout: either the renew interval is refused,
// or the client's ConnIdleTimeout is raised above the renewal gap.
func TestRenewGapBelowConnIdleTimeout(t *testing.T) {
	for _, renew := range []time.Duration{10 * time.Second, 25 * time.Second, 50 * time.Second} {
		r, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, RenewInterval: renew})
		if err != nil {
			continue // refused: fine
		}
		cl, err := kgo.NewClient(r.clientOpts()...)
		require.NoError(t, err)
		idle := cl.OptValue(kgo.ConnIdleTimeout).(time.Duration)
		cl.Close()
		// A batch goes up to RenewInterval without a renewal (renewed on the tick after it is
		// half an interval old), and the reaper closes a connection idle for idle when it looks.
		if renew >= idle {
			t.Errorf("share_renew_interval %s accepted, but the client closes its ShareFetch connection after %s idle: the broker then releases the held records to other members", renew, idle)
		}
	}
	// franz-go takes no ConnIdleTimeout above 15 minutes: an interval that would need one is
	// refused by New, naming it.
	_, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, RenewInterval: 8 * time.Minute})
	require.ErrorContains(t, err, "share group g: renew interval must be at most 7m30s, got 8m0s")
}

// TestHeldBatchKeepsItsSession: a member whose client would close a connection idle for 500 ms
// (ClientOpts) holds a batch for 3 s with renewals every 2 s at most. The reader raises its
// client's ConnIdleTimeout above the renewal gap, so the ShareFetch connection, and with it the
// share session, lives: another member gets none of the held records, and the Ack is accepted.
// Without that, kfake (as Kafka) ends the session when the idle connection closes and releases
// the records, which the second member then gets with delivery count 2.
func TestHeldBatchKeepsItsSession(t *testing.T) {
	c := newCluster(t, 5)
	a := newReader(t, c, "g", func(c *Config) {
		c.ClientOpts = []kgo.Opt{kgo.ConnIdleTimeout(500 * time.Millisecond)}
		c.RenewInterval = 2 * time.Second
		c.Logger = tlog{t}
	})
	held := next(t, a)
	require.Equal(t, []string{"0", "1", "2", "3", "4"}, values(held))

	b := newReader(t, c, "g", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second) // the pipeline of a holds its batch
	defer cancel()
	got, err := b.Next(ctx)
	if err == nil {
		t.Fatalf("another member got records the first still held: %v, delivery counts %v", values(got), deliveryCounts(got))
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
	held.Ack()
	closeReader(t, a)
	st := a.Stats()
	require.Equal(t, int64(5), st.Accepted, "%+v", st)
	require.Zero(t, st.LockExpired, "%+v", st)
	require.Equal(t, int64(5), shareStart(t, c, "g"))
}

// logLines records a reader's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(level, f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(f, a...))
}
func (l *logLines) Debugf(f string, a ...any) { l.add("DEBUG", f, a...) }
func (l *logLines) Infof(f string, a ...any)  { l.add("INFO", f, a...) }
func (l *logLines) Warnf(f string, a ...any)  { l.add("WARN", f, a...) }
func (l *logLines) Errorf(f string, a ...any) { l.add("ERROR", f, a...) }

// with returns the lines that contain s.
func (l *logLines) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestStartWarnsOfARenewIntervalNotBelowTheLock: a renew interval that is not shorter than the
// group's acquisition lock (share.record.lock.duration.ms, read from the cluster at Start)
// cannot keep a slow batch's records: Start warns, naming both; below the lock it does not.
func TestStartWarnsOfARenewIntervalNotBelowTheLock(t *testing.T) {
	for _, tc := range []struct {
		renew time.Duration
		warn  bool
	}{{2 * time.Second, true}, {time.Second, true}, {500 * time.Millisecond, false}} {
		c := newCluster(t, 1)
		c.SetGroupConfigs("g", map[string]string{"share.record.lock.duration.ms": "1000"})
		var log logLines
		newReader(t, c, "g", func(c *Config) { c.RenewInterval = tc.renew; c.Logger = &log })
		warned := log.with("is not shorter than the group's acquisition lock")
		if !tc.warn {
			require.Empty(t, warned, "renew interval %s", tc.renew)
			continue
		}
		require.Len(t, warned, 1, "renew interval %s: %q", tc.renew, log.lines)
		require.Contains(t, warned[0], "share_renew_interval: "+tc.renew.String())
		require.Contains(t, warned[0], "share.record.lock.duration.ms: 1000 ms")
	}
}
