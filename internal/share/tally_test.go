package share

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tallyReader is a reader not started whose tally hands its sets to a
// recorder instead of a client: sent lists each set's status and records.
type tallyReader struct {
	*Reader
	log  *logLines
	sent []handover
	cb   func(*kgo.Client, kgo.ShareAckResults)
}

func newTallyReader(t *testing.T) *tallyReader {
	t.Helper()
	tr := &tallyReader{log: &logLines{}}
	r, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Logger: tr.log})
	require.NoError(t, err)
	r.acks.send = func(s kgo.AckStatus, recs []*kgo.Record) { tr.sent = append(tr.sent, handover{s, recs}) }
	tr.Reader, tr.cb = r, r.acks.callback(r)
	return tr
}

// recs are records of t/0 at offsets [from, from+n).
func recs(from, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{Topic: "t", Partition: 0, Offset: int64(from + i)}
	}
	return out
}

// answer is the broker's answer to t/0's last request.
func (tr *tallyReader) answer(err error) {
	tr.cb(nil, kgo.ShareAckResults{{Topic: "t", Partition: 0, Err: err}})
}

// TestTallyRenewalRefusedThenAcceptTakenCountsExactly (review 7): a renewal of 10 records of t/0
// is sent and, while it waits for its answer, the pipeline accepts another 10 of t/0. The broker
// refuses the renewal (INVALID_RECORD_STATE) and takes the accept: 10 renewals failed, 10
// accepted, no lock expiry. The accept waits for the renewal's answer before it goes to the
// client, so each answer is its own request's.
func TestTallyRenewalRefusedThenAcceptTakenCountsExactly(t *testing.T) {
	tr := newTallyReader(t)
	tr.mark(kgo.AckRenew, "t", 0, recs(0, 10))
	tr.acks.flush() // request 1: the renewal
	tr.mark(kgo.AckAccept, "t", 0, recs(10, 10))
	_, waiting := tr.acks.flush()
	require.True(t, waiting, "the accept is handed over while the renewal waits for its answer")
	require.Len(t, tr.sent, 1)
	tr.answer(kerr.InvalidRecordState) // answer to 1; the accept goes: request 2
	require.Len(t, tr.sent, 2)
	assert.Equal(t, kgo.AckAccept, tr.sent[1].status)
	tr.answer(nil) // answer to 2

	st := tr.Stats()
	t.Logf("stats %+v; log %q", st, tr.log.lines)
	assert.Equal(t, int64(10), st.RenewFailed, "the refused renewal")
	assert.Equal(t, int64(10), st.Accepted, "the accept the broker took")
	assert.Zero(t, st.LockExpired, "an accept the broker took counted lock_expired")
	assert.Len(t, tr.log.with("the broker refused the renewal of 10 (offsets 0-9): INVALID_RECORD_STATE"), 1, "%q", tr.log.lines)
}

// TestTallyAcceptRefusedAfterRenewalTakenIsCounted (review 7): the other order: the renewal is
// taken, the accept made after it refused (the session ended): 10 renewed, 10 failed, warned.
func TestTallyAcceptRefusedAfterRenewalTakenIsCounted(t *testing.T) {
	tr := newTallyReader(t)
	tr.mark(kgo.AckRenew, "t", 0, recs(0, 10))
	tr.acks.flush()
	tr.mark(kgo.AckAccept, "t", 0, recs(10, 10))
	tr.acks.flush()
	tr.answer(nil)
	tr.answer(kerr.InvalidShareSessionEpoch)

	st := tr.Stats()
	t.Logf("stats %+v; log %q", st, tr.log.lines)
	assert.Zero(t, st.Accepted, "an accept the broker refused counted accepted")
	assert.Equal(t, int64(10), st.Renewed)
	assert.Equal(t, int64(10), st.AckFailed, "the refused accept")
	assert.Len(t, tr.log.with("the broker refused the acknowledgement of 10 records (10 accepted, 0 released, 0 rejected) (offsets 10-19): INVALID_SHARE_SESSION_EPOCH"), 1, "%q", tr.log.lines)
}

// TestTallySetsAreOneStatusAndRenewalsFirst: acknowledgements of one partition made together go
// to the client one status at a time (one MarkAcks, so one request), renewals first; each
// answer counts its set; an answer to a request that carried none of ours (franz-go's gap
// acknowledgements) counts nothing.
func TestTallySetsAreOneStatusAndRenewalsFirst(t *testing.T) {
	tr := newTallyReader(t)
	tr.answer(nil) // nothing of ours in flight: counts nothing
	tr.mark(kgo.AckAccept, "t", 0, recs(0, 3))
	tr.mark(kgo.AckRelease, "t", 0, recs(3, 2))
	tr.mark(kgo.AckAccept, "t", 0, recs(5, 3))
	tr.mark(kgo.AckRenew, "t", 0, recs(10, 4))
	tr.acks.flush()
	require.Len(t, tr.sent, 1)
	assert.Equal(t, kgo.AckRenew, tr.sent[0].status)
	tr.answer(nil)
	require.Len(t, tr.sent, 2)
	assert.Equal(t, kgo.AckAccept, tr.sent[1].status)
	assert.Len(t, tr.sent[1].recs, 6, "both accepts in one set")
	tr.answer(nil)
	require.Len(t, tr.sent, 3)
	assert.Equal(t, kgo.AckRelease, tr.sent[2].status)
	tr.answer(kerr.InvalidRecordState)
	tr.answer(nil) // gaps only
	assert.Equal(t, Stats{Accepted: 6, Renewed: 4, LockExpired: 2}, tr.Stats())
	assert.False(t, tr.acks.waiting())
}

// TestTallyLateAcceptCountsAsLockExpired: an accept made after its batch's lock deadline counts
// as a lock expiry even when the broker takes it (the broker may have delivered the records
// again meanwhile), and the warning says so and names the offsets.
func TestTallyLateAcceptCountsAsLockExpired(t *testing.T) {
	tr := newTallyReader(t)
	b := &Batch{Topic: "t", Partition: 0, Records: recs(0, 10), r: tr.Reader, state: out, deadline: time.Now().Add(-time.Second)}
	tr.pending[b] = struct{}{}
	b.Ack()
	tr.acks.flush()
	tr.answer(nil)
	st := tr.Stats()
	assert.Equal(t, Stats{LockExpired: 10}, st)
	assert.Len(t, tr.log.with("the acknowledgement of 10 records (10 accepted, 0 released, 0 rejected; offsets 0-9) was made after their acquisition lock ended"), 1, "%q", tr.log.lines)

	onTime := &Batch{Topic: "t", Partition: 0, Records: recs(10, 10), r: tr.Reader, state: out, deadline: time.Now().Add(time.Minute)}
	tr.pending[onTime] = struct{}{}
	onTime.Ack()
	tr.acks.flush()
	tr.answer(nil)
	assert.Equal(t, Stats{LockExpired: 10, Accepted: 10}, tr.Stats())
}

func TestOffsetRanges(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want string
	}{
		{nil, "none"},
		{[]int64{3}, "3"},
		{[]int64{5, 3, 4, 9}, "3-5, 9"},
		{[]int64{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, "0, 2, 4, 6, 8, 10, 12, 14, and 2 more"},
	} {
		assert.Equal(t, c.want, offsetRanges(c.in), "offsetRanges(%v)", c.in)
	}
}
