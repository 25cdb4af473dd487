package share

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

// ackCounts are records acknowledged, by kind, or renewed.
type ackCounts struct {
	accepted, released, rejected, renewed int64
}

// acknowledged is how many records the counts acknowledge (renewals
// aside): each acquired record is acknowledged once.
func (c ackCounts) acknowledged() int64 { return c.accepted + c.released + c.rejected }

// ackTally counts, per partition, the records acknowledged (or renewed)
// since the broker's last answer for that partition, so that the answer
// counts them: accepted, released, rejected and renewed when the broker
// took them, failed (a lock expiry, or another error) when it refused them
// or they did not reach it. franz-go reports an answer per partition per
// request, and a request carries every acknowledgement of the partition
// made before it was built; one made while it was in flight goes with the
// next, so the tally can attribute it to the earlier answer (the totals
// are exact; which answer a record is counted with is not).
type ackTally struct {
	mu   sync.Mutex // guards sent
	sent map[tp]ackCounts
}

func (a *ackTally) add(topic string, partition int32, status kgo.AckStatus, n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := tp{topic, partition}
	c := a.sent[k]
	switch status {
	case kgo.AckAccept:
		c.accepted += n
	case kgo.AckRelease:
		c.released += n
	case kgo.AckReject:
		c.rejected += n
	case kgo.AckRenew:
		c.renewed += n
	}
	a.sent[k] = c
}

// renewing reports whether a renewal of the partition was marked and the
// broker has not answered the partition since. franz-go ignores a renewal
// of a record whose previous renewal is unanswered (a no-op, which nothing
// answers), so renew leaves such a partition alone until the answer comes.
func (a *ackTally) renewing(k tp) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sent[k].renewed > 0
}

// take returns and forgets the counts of a partition.
func (a *ackTally) take(k tp) ackCounts {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.sent[k]
	delete(a.sent, k)
	return c
}

// takeAll returns and forgets the counts of every partition.
func (a *ackTally) takeAll() map[tp]ackCounts {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := a.sent
	a.sent = map[tp]ackCounts{}
	return all
}

// callback returns the reader's kgo.ShareAckCallback: each answer counts
// the partition's tally (answered).
func (a *ackTally) callback(r *Reader) func(*kgo.Client, kgo.ShareAckResults) {
	return func(_ *kgo.Client, results kgo.ShareAckResults) {
		for _, res := range results {
			r.answered(res.Topic, res.Partition, a.take(tp{res.Topic, res.Partition}), res.Err)
		}
	}
}

// errUnanswered is why acknowledgements still without an answer when the
// reader closed are counted as failed.
var errUnanswered = errors.New("not answered before the member closed")

// answered counts records of a partition whose acknowledgements or
// renewals the broker answered with err: taken (nil), refused because
// their lock had expired (INVALID_RECORD_STATE: lock_expired), or refused
// or lost for another reason (ack_failed; renew_failed for renewals). A
// refusal is logged with what it means for the records.
func (r *Reader) answered(topic string, partition int32, c ackCounts, err error) {
	obs := r.cfg.Observer
	if err == nil {
		for _, n := range []struct {
			n     int64
			count *atomic.Int64
			obs   func(string, int64)
		}{
			{c.accepted, &r.cnt.accepted, obs.Accepted},
			{c.released, &r.cnt.released, obs.Released},
			{c.rejected, &r.cnt.rejected, obs.Rejected},
			{c.renewed, &r.cnt.renewed, obs.Renewed},
		} {
			if n.n > 0 {
				n.count.Add(n.n)
				n.obs(topic, n.n)
			}
		}
		return
	}
	acked := c.acknowledged()
	if acked == 0 && c.renewed == 0 {
		return // only acknowledgements of franz-go's own (gaps)
	}
	if acked > 0 {
		if errors.Is(err, kerr.InvalidRecordState) {
			r.cnt.lockExpired.Add(acked)
			obs.LockExpired(topic, partition, acked)
		} else {
			r.cnt.ackFailed.Add(acked)
			obs.AckFailed(topic, partition, acked)
		}
	}
	if c.renewed > 0 {
		r.cnt.renewFailed.Add(c.renewed)
		obs.RenewFailed(topic, partition, c.renewed)
	}
	var what []string
	if acked > 0 {
		what = append(what, fmt.Sprintf("the acknowledgement of %d records (%d accepted, %d released, %d rejected)", acked, c.accepted, c.released, c.rejected))
	}
	if c.renewed > 0 {
		what = append(what, fmt.Sprintf("the renewal of %d", c.renewed))
	}
	verb := "the broker refused"
	if errors.Is(err, errUnanswered) {
		verb = "the broker did not answer"
	}
	r.cfg.Logger.Warnf("Share group %s: %s/%d: %s %s: %s: %s", r.cfg.Group, topic, partition, verb, strings.Join(what, " and "), errName(err), whyRedelivered(err))
}

// errName is err as the warnings name it: a Kafka error by its name
// (SHARE_SESSION_NOT_FOUND), another as it says.
func errName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

// whyRedelivered says what an acknowledgement refused (or lost) with err
// means for its records, and why they come back.
func whyRedelivered(err error) string {
	switch {
	case errors.Is(err, kerr.InvalidRecordState):
		return "their acquisition lock had expired (they were held longer than the group's share.record.lock.duration.ms without a renewal), so the broker had released them: they are delivered again, to any member, and may be processed twice"
	case errors.Is(err, kerr.ShareSessionNotFound), errors.Is(err, kerr.InvalidShareSessionEpoch):
		return "this member's share session had ended (its connection to the broker closed, or the broker restarted), which releases every record it held: they are delivered again, to any member, and may be processed twice"
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.FencedLeaderEpoch):
		return "the partition's leader changed, and the new leader does not know what this member held: they are delivered again (some with delivery count 1)"
	case errors.Is(err, errUnanswered):
		return "if they did not reach the broker, they are delivered again, to any member, once their lock expires"
	}
	return "the broker delivers them again, to any member, once their lock expires"
}
