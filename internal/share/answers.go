package share

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// This file says what an answer of the broker means. It holds the counts of
// the marks it answers (answered), and the warnings, which name the records'
// offsets.

// errUnanswered is why acknowledgements still without an answer when the
// reader closed are counted as failed.
// errNoAnswer, the sets that got no answer within answerWait.
var (
	errUnanswered = errors.New("not answered before the member closed")
	errNoAnswer   = fmt.Errorf("not answered within %s", answerWait)
)

// answered counts the marks of a partition that the broker answered with
// err: taken (nil), refused because their lock had expired
// (INVALID_RECORD_STATE: lock_expired), or refused or lost for another
// reason (ack_failed; renew_failed for renewals). A mark made after its
// records' lock deadline counts as a lock expiry (a renewal as failed)
// whatever the answer. Refusals and late marks are logged with what they
// mean for the records, rejections and archived releases too.
func (r *Reader) answered(topic string, partition int32, marks []ackMark, err error) {
	if len(marks) == 0 {
		return // only acknowledgements of franz-go's own (gaps)
	}
	obs := r.cfg.Observer
	var taken, refused, late ackCounts
	now := time.Now()
	for _, m := range marks {
		n := int64(len(m.recs))
		switch {
		case m.late:
			late.add(m.status, n)
		case err == nil:
			taken.add(m.status, n)
		default:
			refused.add(m.status, n)
		}
		if err == nil && !m.late {
			switch m.status {
			case kgo.AckRenew:
				r.extended(m, now)
			case kgo.AckReject:
				r.warnRejected(topic, partition, m)
			case kgo.AckRelease:
				r.archivedByRelease(topic, partition, m)
			}
		}
	}
	for _, n := range []struct {
		n     int64
		count *atomic.Int64
		obs   func(string, int64)
	}{
		{taken.accepted, &r.cnt.accepted, obs.Accepted},
		{taken.released, &r.cnt.released, obs.Released},
		{taken.rejected, &r.cnt.rejected, obs.Rejected},
		{taken.renewed, &r.cnt.renewed, obs.Renewed},
	} {
		if n.n > 0 {
			n.count.Add(n.n)
			n.obs(topic, n.n)
		}
	}
	if n := late.acknowledged(); n > 0 {
		r.cnt.lockExpired.Add(n)
		obs.LockExpired(topic, partition, n)
		answer := "the broker took it"
		if err != nil {
			answer = "the broker refused it: " + errName(err)
		}
		r.cfg.Logger.Warnf("Share group %s: %s/%d: the acknowledgement of %d records (%d accepted, %d released, %d rejected; offsets %s) was made after their acquisition lock ended (the group's share.record.lock.duration.ms after they were acquired or last renewed), %s: counted as lock expiries, since the broker may have delivered them again meanwhile, to any member, and they may be processed twice; renew the locks more often (share_renew_interval) or hold records for less time",
			r.cfg.Group, topic, partition, n, late.accepted, late.released, late.rejected, offsetsOf(marks, func(m ackMark) bool { return m.late && m.status != kgo.AckRenew }), answer)
	}
	if late.renewed > 0 {
		r.cnt.renewFailed.Add(late.renewed)
		obs.RenewFailed(topic, partition, late.renewed)
	}
	if err == nil {
		return
	}
	acked := refused.acknowledged()
	if acked == 0 && refused.renewed == 0 {
		return
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
	if refused.renewed > 0 {
		r.cnt.renewFailed.Add(refused.renewed)
		obs.RenewFailed(topic, partition, refused.renewed)
		r.renewLost(marks)
	}
	var what []string
	if acked > 0 {
		what = append(what, fmt.Sprintf("the acknowledgement of %d records (%d accepted, %d released, %d rejected)", acked, refused.accepted, refused.released, refused.rejected))
	}
	if refused.renewed > 0 {
		what = append(what, fmt.Sprintf("the renewal of %d", refused.renewed))
	}
	offsets := offsetsOf(marks, func(m ackMark) bool { return !m.late })
	switch {
	case errors.Is(err, errUnanswered), errors.Is(err, errNoAnswer):
		r.cfg.Logger.Warnf("Share group %s: %s/%d: the broker did not answer %s (offsets %s): %v: %s",
			r.cfg.Group, topic, partition, strings.Join(what, " and "), offsets, err, whyRedelivered(err))
	case transportErr(err):
		r.cfg.Logger.Warnf("Share group %s: %s/%d: the connection to the broker failed before it answered %s (offsets %s): %v: %s",
			r.cfg.Group, topic, partition, strings.Join(what, " and "), offsets, err, whyRedelivered(err))
	default:
		r.cfg.Logger.Warnf("Share group %s: %s/%d: the broker refused %s (offsets %s): %s: %s",
			r.cfg.Group, topic, partition, strings.Join(what, " and "), offsets, errName(err), whyRedelivered(err))
	}
}

// extended moves the lock deadline of the batch a renewal renewed, which
// the broker took by at: the group's lock duration from then.
func (r *Reader) extended(m ackMark, at time.Time) {
	d := r.lockDuration()
	if m.batch == nil || d <= 0 {
		return
	}
	r.mu.Lock()
	if dl := at.Add(d); dl.After(m.batch.deadline) {
		m.batch.deadline = dl
	}
	r.mu.Unlock()
}

// renewLost marks the batches of refused renewals as not to be renewed
// again. Their records are no longer this member's (franz-go keeps them
// in its renewing state, and would ignore another renewal of them).
func (r *Reader) renewLost(marks []ackMark) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range marks {
		if m.status == kgo.AckRenew && m.batch != nil {
			m.batch.lost = true
		}
	}
}

// transportErr reports whether err is no answer of the broker's but the
// connection failing (EOF, a reset, a timeout). Whether the broker took
// the request is unknown.
func transportErr(err error) bool {
	var ke *kerr.Error
	return !errors.As(err, &ke) && !errors.Is(err, errUnanswered) && !errors.Is(err, errNoAnswer)
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
	case errors.Is(err, errUnanswered), errors.Is(err, errNoAnswer):
		return "if they did not reach the broker, they are delivered again, to any member, once their lock expires"
	case transportErr(err):
		return "a closed connection ends this member's share session (a broker restart closes every one), and the broker releases what the member held at once: they are delivered again, to any member, and may be processed twice; if the broker took the acknowledgement before the connection closed, they are not (the count of failed acknowledgements then counts records that were not delivered again)"
	}
	return "the broker delivers them again, to any member, once their lock expires"
}

// offsetsOf names the offsets of the records of the marks that pick
// keeps, as ranges ("0-9, 15"), at most maxRanges of them.
func offsetsOf(marks []ackMark, pick func(ackMark) bool) string {
	var offs []int64
	for _, m := range marks {
		if !pick(m) {
			continue
		}
		for _, rec := range m.recs {
			offs = append(offs, rec.Offset)
		}
	}
	return offsetRanges(offs)
}

// maxRanges bounds the ranges a log line names.
const maxRanges = 8

// offsetRanges names offsets as sorted ranges, at most maxRanges of them.
func offsetRanges(offs []int64) string {
	if len(offs) == 0 {
		return "none"
	}
	offs = slices.Clone(offs)
	slices.Sort(offs)
	offs = slices.Compact(offs)
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if len(parts) == maxRanges {
			parts = append(parts, fmt.Sprintf("and %d more", len(offs)-i))
			break
		}
		if i == j {
			parts = append(parts, fmt.Sprint(offs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", offs[i], offs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
