package share

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSplitHalvesAreFinishedOnTheirOwn: a batch split in two is finished
// half by half: the accepted half is never delivered again, the released
// half is, with its delivery count one more; the split batch itself is done
// (its Ack is stale), and Queued counts what Next has not handed out.
func TestSplitHalvesAreFinishedOnTheirOwn(t *testing.T) {
	c := newCluster(t, 6)
	r := newReader(t, c, "g", func(c *Config) { c.BatchRecords = 3 })
	b := next(t, r)
	require.Equal(t, []string{"0", "1", "2"}, values(b))
	require.Eventually(t, func() bool { return r.Queued() == 1 }, 10*time.Second, 5*time.Millisecond, "the fetch's second batch waits for Next")
	_, _, ok := b.Split(0)
	require.False(t, ok, "split at 0")
	_, _, ok = b.Split(3)
	require.False(t, ok, "split at the length")
	head, tail, ok := b.Split(1)
	require.True(t, ok)
	require.Equal(t, []string{"0"}, values(head))
	require.Equal(t, []string{"1", "2"}, values(tail))
	_, _, ok = b.Split(1)
	require.False(t, ok, "a split batch is done")
	b.Ack() // stale
	head.Ack()
	tail.Nack(errors.New("failed"))
	second := next(t, r)
	require.Equal(t, 0, r.Queued())
	require.Equal(t, []string{"3", "4", "5"}, values(second))
	second.Ack()

	again := next(t, r)
	require.Equal(t, []string{"1", "2"}, values(again))
	require.Equal(t, []int32{2, 2}, deliveryCounts(again))
	again.Ack()
	closeReader(t, r)
	require.Equal(t, Stats{Acquired: 8, Accepted: 6, Released: 2, Stale: 1}, r.Stats())
	require.Equal(t, int64(6), shareStart(t, c, "g"))
}

// TestRejectArchivesAtOnce: Reject archives records on their first
// delivery, whatever MaxDeliveries is.
func TestRejectArchivesAtOnce(t *testing.T) {
	c := newCluster(t, 2)
	r := newReader(t, c, "g", func(c *Config) { c.MaxDeliveries = 5 })
	b := next(t, r)
	require.Equal(t, []int32{1, 1}, deliveryCounts(b))
	b.Reject(errors.New("poison"))
	produce(t, c, 2, 3)
	b = next(t, r)
	require.Equal(t, []string{"2"}, values(b), "a rejected record was delivered again")
	b.Ack()
	closeReader(t, r)
	require.Equal(t, Stats{Acquired: 3, Accepted: 1, Rejected: 2}, r.Stats())
}

// TestSettleAcceptsAllButTheFailed: Settle accepts the records that did
// not fail and releases those that did, which alone come again.
func TestSettleAcceptsAllButTheFailed(t *testing.T) {
	c := newCluster(t, 5)
	r := newReader(t, c, "g", nil)
	b := next(t, r)
	require.Equal(t, []string{"0", "1", "2", "3", "4"}, values(b))
	b.Settle(func(i int) bool { return i == 1 || i == 3 }, errors.New("two failed"), false)
	b.Ack() // stale
	again := next(t, r)
	require.Equal(t, []string{"1", "3"}, values(again))
	require.Equal(t, []int32{2, 2}, deliveryCounts(again))
	again.Settle(func(i int) bool { return i == 0 }, errors.New("one failed"), true)
	produce(t, c, 5, 6)
	last := next(t, r)
	require.Equal(t, []string{"5"}, values(last), "a rejected record came again")
	last.Ack()
	closeReader(t, r)
	require.Equal(t, Stats{Acquired: 8, Accepted: 5, Released: 2, Rejected: 1, Stale: 1}, r.Stats())
}

// TestYoungBatchesAreNotRenewed: a batch handed out a moment ago keeps its
// fresh lock: renewing it would only make the poll loop wait for the
// broker's answer (with one member, a stall of up to a second every
// RenewInterval). Batches held 100 ms each, for 2.5 s, with RenewInterval
// 1 s: no renewal.
func TestYoungBatchesAreNotRenewed(t *testing.T) {
	c := newCluster(t, 30)
	r := newReader(t, c, "g", func(c *Config) { c.MaxRecords = 1; c.RenewInterval = time.Second })
	for range 25 {
		b := next(t, r)
		time.Sleep(100 * time.Millisecond)
		b.Ack()
	}
	closeReader(t, r)
	require.Zero(t, r.Stats().Renewed, "renewals of batches younger than RenewInterval")
}

// TestRenewalDoesNotHoldUpTheFlow: a batch waiting for Next is handed out while a renewal
// waits for the broker's answer. The broker (kfake) holds every renewal for up to 3 s, less than
// the 4 s the reader would wait for an answer. Before, the poll loop waited for the answer
// and handed out nothing meanwhile: with a short renew interval a member spent most of its
// time waiting (issue 44: 1,200 records took 105 s for 13 s of work at 200 ms).
func TestRenewalDoesNotHoldUpTheFlow(t *testing.T) {
	c := newCluster(t, 3)
	var (
		held     = make(chan struct{}, 16) // a renewal reached the broker
		release  = make(chan struct{})     // closed: answer the held renewals
		answered atomic.Int32              // renewals the broker answered
	)
	c.ControlKey(kmsg.ShareAcknowledge.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !req.(*kmsg.ShareAcknowledgeRequest).IsRenewAck {
			return nil, nil, false
		}
		held <- struct{}{}
		c.SleepControl(func() {
			select {
			case <-release:
			case <-time.After(3 * time.Second):
			}
			answered.Add(1)
		})
		return nil, nil, false // kfake answers it
	})
	r := newReader(t, c, "g", func(c *Config) {
		c.MaxRecords = 3
		c.BatchRecords = 1
		c.RenewInterval = 4 * time.Second
		c.Logger = tlog{t}
	})
	first := next(t, r)
	select {
	case <-held: // the three batches (two still waiting for Next) are being renewed
	case <-time.After(time.Minute):
		t.Fatal("no renewal within a minute")
	}
	second := next(t, r)
	waited := answered.Load() > 0
	close(release)
	require.False(t, waited, "the second batch was handed out only once the renewal was answered")
	first.Ack()
	second.Ack()
	next(t, r).Ack()
	closeReader(t, r)
	st := r.Stats()
	require.Equal(t, int64(3), st.Accepted, "%+v", st)
	require.Positive(t, st.Renewed, "%+v", st)
}
