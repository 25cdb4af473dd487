package share

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRefusedAckCountsAsFailed: acknowledgements the broker refuses are counted as failed, in
// records, when its answer comes, never as accepted; the warning says why the records come
// back, and they do. The broker answers the first acknowledgement SHARE_SESSION_NOT_FOUND (a
// share session gone, as when the member's connection closed): the client then starts a new
// session, so the acknowledgement of the next batch, acquired in the old one, fails too
// (INVALID_SHARE_SESSION_EPOCH). The four records come back (a 1 s lock) and are accepted.
func TestRefusedAckCountsAsFailed(t *testing.T) {
	c := newCluster(t, 4, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "1000",
		"share.record.lock.sweep.interval.ms": "50",
	}))
	var log logLines
	r := newReader(t, c, "g", func(c *Config) { c.MaxRecords = 4; c.BatchRecords = 2; c.Logger = &log })
	first := next(t, r)
	require.Equal(t, []string{"0", "1"}, values(first))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ShareAcknowledge}, TopLevel: true, Err: kerr.ShareSessionNotFound})
	first.Ack() // sent on its own: the second batch still waits for Next, so nothing is fetched
	require.Eventually(t, func() bool { return r.Stats().AckFailed == 2 }, 30*time.Second, 10*time.Millisecond, "the refused acknowledgement of 2 records: %+v", r.Stats())
	require.Zero(t, r.Stats().Accepted, "%+v", r.Stats())
	warned := log.with("Share group g: t/0: the broker refused the acknowledgement of 2 records (2 accepted, 0 released, 0 rejected)")
	require.Len(t, warned, 1, "%q", log.lines)
	require.Contains(t, warned[0], "0 rejected) (offsets 0-1): SHARE_SESSION_NOT_FOUND: this member's")
	require.Contains(t, warned[0], "this member's share session had ended")
	require.Contains(t, warned[0], "they are delivered again")

	second := next(t, r)
	require.Equal(t, []string{"2", "3"}, values(second))
	second.Ack()
	seen := map[string]int32{}
	for len(seen) < 4 {
		b := next(t, r)
		for i, v := range values(b) {
			seen[v] = b.Records[i].DeliveryCount()
		}
		b.Ack()
	}
	require.Equal(t, map[string]int32{"0": 2, "1": 2, "2": 2, "3": 2}, seen, "the records whose acknowledgement failed come back")
	closeReader(t, r)
	st := r.Stats()
	// The second batch's acknowledgement, refused too, counts as failed,
	// or as a lock expiry when it was made after its 1 s lock ended.
	require.Equal(t, Stats{Acquired: 8, Accepted: 4, AckFailed: st.AckFailed, LockExpired: st.LockExpired}, st)
	require.Equal(t, int64(4), st.AckFailed+st.LockExpired, "%+v", st)
	require.GreaterOrEqual(t, st.AckFailed, int64(2), "%+v", st)
	require.Equal(t, int64(4), shareStart(t, c, "g"))
}
