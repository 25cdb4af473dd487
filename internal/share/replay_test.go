package share

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestNackReplaysInTheMemberUnderRenewals (issue 51): with ReplayNacks a nacked batch is handed
// out again by this member, after a backoff, for as long as the pipeline fails it (here 3 s, three
// times the group's lock), its locks renewed meanwhile: the broker never gets it back, so its
// delivery count there stays 1 and its lock never expires; DeliveryCount counts the replays. Once
// the pipeline takes it, it is accepted: nothing released, nothing archived, lost or delivered
// twice by the broker.
func TestNackReplaysInTheMemberUnderRenewals(t *testing.T) {
	c := newCluster(t, 5, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "1000",
		"share.record.lock.sweep.interval.ms": "50",
	}))
	var log logLines
	r := newReader(t, c, "g", func(c *Config) {
		c.ReplayNacks = true
		c.RenewInterval = 300 * time.Millisecond
		c.Logger = &log
	})
	start := time.Now()
	var b *Batch
	var seen []int32
	for {
		b = next(t, r)
		require.Equal(t, []string{"0", "1", "2", "3", "4"}, values(b))
		require.Equal(t, []int32{1, 1, 1, 1, 1}, deliveryCounts(b), "the broker delivered the records again")
		seen = append(seen, b.DeliveryCount(0))
		if time.Since(start) > 3*time.Second {
			break
		}
		b.Nack(errors.New("output down"))
	}
	b.Ack()
	closeReader(t, r)
	st := r.Stats()
	t.Logf("%d deliveries in the member (counts %v); %+v", len(seen), seen, st)
	for i, d := range seen {
		require.Equal(t, int32(i+1), d, "DeliveryCount counts the replays")
	}
	assert.Equal(t, int64(5), st.Acquired, "the broker delivered the records again: %+v", st)
	assert.Equal(t, int64(5), st.Accepted)
	assert.Zero(t, st.Released+st.Rejected+st.LockExpired+st.AckFailed+st.RenewFailed, "%+v", st)
	assert.Positive(t, st.Renewed, "the replayed records' locks were renewed")
	assert.Equal(t, int64(5*(len(seen)-1)), st.Replayed)
	assert.Equal(t, int64(5), shareStart(t, c, "g"))
	assert.Empty(t, log.with("WARN"), "%q", log.lines)
}

// TestReplayRejectsAtMaxDeliveries (issue 51): with ReplayNacks and MaxDeliveries 3, a record the
// pipeline always fails is delivered 3 times in the member, then rejected: archived by the broker
// and warned with its offset and delivery count; the others of its batch are accepted.
func TestReplayRejectsAtMaxDeliveries(t *testing.T) {
	c := newCluster(t, 3)
	var log logLines
	r := newReader(t, c, "g", func(c *Config) {
		c.ReplayNacks = true
		c.MaxDeliveries = 3
		c.Logger = &log
	})
	var deliveries []int32
	for len(deliveries) < 3 {
		b := next(t, r)
		bad := -1
		for i, v := range values(b) {
			if v == "1" {
				bad = i
				deliveries = append(deliveries, b.DeliveryCount(i))
			}
		}
		require.NotEqual(t, -1, bad, "record 1 not delivered again: %v", values(b))
		b.Settle(func(i int) bool { return i == bad }, errors.New("poison"), false)
	}
	require.Equal(t, []int32{1, 2, 3}, deliveries)
	produce(t, c, 3, 4)
	b := next(t, r)
	require.Equal(t, []string{"3"}, values(b), "the rejected record was delivered again")
	b.Ack()
	closeReader(t, r)
	st := r.Stats()
	assert.Equal(t, Stats{Acquired: 4, Accepted: 3, Rejected: 1, Replayed: 2}, st)
	warned := log.with("1 records rejected, archived by the broker and never delivered again (offsets 1, delivery count 3): the pipeline failed them on each of their 3 deliveries (share_max_deliveries: 3)")
	assert.Len(t, warned, 1, "%q", log.lines)
}

// TestCloseReleasesReplays (issue 51): records waiting for a replay when the member closes are
// released, to be delivered again to another member.
func TestCloseReleasesReplays(t *testing.T) {
	c := newCluster(t, 2)
	r := newReader(t, c, "g", func(c *Config) { c.ReplayNacks = true })
	b := next(t, r)
	b.Nack(errors.New("output down"))
	closeReader(t, r)
	assert.Equal(t, Stats{Acquired: 2, Released: 2, Replayed: 2}, r.Stats())
	other := newReader(t, c, "g", nil)
	again := next(t, other)
	assert.Equal(t, []string{"0", "1"}, values(again))
	assert.Equal(t, []int32{2, 2}, deliveryCounts(again))
	again.Ack()
}

// TestReleaseAtTheDeliveryLimitIsArchived (issue 51): a release the broker takes of a record on
// the last delivery the group allows (share.delivery.count.limit, read at Start: 2 here) archives
// it: the member counts it archived (and released) and warns with its offset; it never comes back.
func TestReleaseAtTheDeliveryLimitIsArchived(t *testing.T) {
	c := newCluster(t, 1, kfake.BrokerConfigs(map[string]string{"group.share.delivery.count.limit": "2"}))
	c.SetGroupConfigs("g", map[string]string{"share.delivery.count.limit": "2"})
	var log logLines
	r := newReader(t, c, "g", func(c *Config) { c.Logger = &log })
	b := next(t, r)
	b.Nack(errors.New("down")) // released: delivery count 1
	b = next(t, r)
	require.Equal(t, []int32{2}, deliveryCounts(b))
	b.Nack(errors.New("down")) // released on the last delivery: archived
	produce(t, c, 1, 2)
	b = next(t, r)
	require.Equal(t, []string{"1"}, values(b), "the archived record came back")
	b.Ack()
	closeReader(t, r)
	assert.Equal(t, Stats{Acquired: 3, Accepted: 1, Released: 2, Archived: 1}, r.Stats())
	assert.Len(t, log.with("1 records released on their last delivery the group allows (share.delivery.count.limit: 2), so the broker archived them: never delivered again (offsets 0)"), 1, "%q", log.lines)
}
