package share

import (
	"slices"
	"sync"
	"time"

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
// aside). Each acquired record is acknowledged once.
func (c ackCounts) acknowledged() int64 { return c.accepted + c.released + c.rejected }

func (c *ackCounts) add(status kgo.AckStatus, n int64) {
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
}

// ackMark is one acknowledgement (or renewal) of records of one partition,
// from when the pipeline (or a renewal tick, or Close) makes it until the
// broker's answer counts it.
type ackMark struct {
	status kgo.AckStatus
	recs   []*kgo.Record
	// batch is the batch a renewal renews (its lock deadline moves on when
	// the broker takes it). nil for a terminal acknowledgement and for
	// records fetched early (prefetch.go).
	batch *Batch
	// late: made after the records' lock deadline (acquired or last
	// renewed, plus the group's lock duration): counted lock_expired (a
	// renewal: renew_failed) whatever the broker answers, since the broker
	// may have delivered the records again meanwhile.
	late bool
	// why a reject rejects (for its warning).
	why string
	// replays is how many times this member replayed the records (their
	// delivery counts, in warnings, are the broker's plus it).
	replays int32
}

// partAcks are one partition's acknowledgements on their way.
type partAcks struct {
	// sent were handed to the client (MarkAcks) in one call, so all in
	// one request. The partition's next answer is theirs. All have one
	// status.
	sent   []ackMark
	sentAt time.Time
	// queued wait for sent's answer before they are handed to the client.
	queued []ackMark
}

// ackTally counts acknowledgements per request. franz-go answers per
// partition and request (kgo.ShareAckCallback), without saying which
// records a request carried. A request takes every acknowledgement of the
// partition marked before it was built. So the tally hands a partition's
// acknowledgements to the client (send) one set at a time, one MarkAcks
// call of one status, and the next set only once the broker answered the
// last. Each answer is then the answer of exactly the set sent, and counts
// it (answered). Meanwhile the partition's new acknowledgements wait in
// queued. The poll loop hands them over (flush) when it polls (so they go
// with the fetch, as franz-go would send them), every ackFlushEvery, when
// it renews, and on Close. An answer hands over the next set at once.
//
// Two cases can still count records with another request's answer: a
// request whose partition carried only franz-go's own acknowledgements
// (gaps of compacted or transactional batches) built in the instant
// between a set's MarkAcks and its request, and the acknowledgements
// franz-go drops before sending (records of an ended share session) when
// others of the set go out. Both need the share session to end or the log
// to have gaps. The totals stay exact.
type ackTally struct {
	// send hands records to the client: the reader's MarkAcks. Never
	// called under mu.
	send func(status kgo.AckStatus, recs []*kgo.Record)
	// unanswered counts a set that got no answer in answerWait. Never
	// called under mu.
	unanswered func(k tp, marks []ackMark)

	mu     sync.Mutex // guards parts and closed
	parts  map[tp]*partAcks
	closed bool // Close counted what was left: later answers count nothing
}

// queue adds m to the acknowledgements of its partition, to be handed to
// the client by the next flush.
func (a *ackTally) queue(k tp, m ackMark) {
	if len(m.recs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.parts[k]
	if p == nil {
		p = &partAcks{}
		a.parts[k] = p
	}
	p.queued = append(p.queued, m)
}

// handover is a set of marks to hand to the client.
type handover struct {
	status kgo.AckStatus
	recs   []*kgo.Record
}

// nextLocked moves p's next set of queued marks (its renewals, which
// cannot wait, or else the first queued mark's status: every queued mark of
// that status) to sent, and returns what to hand to the client. p.sent
// must be empty.
func (p *partAcks) nextLocked(now time.Time) (handover, bool) {
	if len(p.queued) == 0 {
		return handover{}, false
	}
	status := p.queued[0].status
	if slices.ContainsFunc(p.queued, func(m ackMark) bool { return m.status == kgo.AckRenew }) {
		status = kgo.AckRenew
	}
	h := handover{status: status}
	rest := p.queued[:0:0]
	for _, m := range p.queued {
		if m.status == status {
			p.sent = append(p.sent, m)
			h.recs = append(h.recs, m.recs...)
		} else {
			rest = append(rest, m)
		}
	}
	p.queued = rest
	p.sentAt = now
	return h, true
}

// flush hands to the client the next set of every partition whose last set
// was answered, and reports whether it handed over any, and whether a
// partition still has acknowledgements queued (behind a set not answered
// yet).
func (a *ackTally) flush() (sent, waiting bool) {
	now := time.Now()
	var hs []handover
	expired := map[tp][]ackMark{}
	a.mu.Lock()
	for k, p := range a.parts {
		if len(p.sent) > 0 && now.Sub(p.sentAt) > answerWait {
			// No answer will come (franz-go dropped the set without
			// a word): count it unanswered rather than hold the
			// partition's acknowledgements for ever.
			expired[k], p.sent = p.sent, nil
		}
		if len(p.sent) == 0 {
			if h, ok := p.nextLocked(now); ok {
				hs = append(hs, h)
			}
		}
		if len(p.queued) > 0 {
			waiting = true
		}
	}
	a.mu.Unlock()
	for k, marks := range expired {
		a.unanswered(k, marks)
	}
	for _, h := range hs {
		a.send(h.status, h.recs)
	}
	return len(hs) > 0, waiting
}

// answerWait is how long a set handed to the client waits for its answer
// at most before flush counts it unanswered (errNoAnswer). franz-go
// answers every request it sends, in a round trip or, when the broker is
// unreachable, once its retries give up.
const answerWait = 5 * time.Minute

// flushAll hands every queued acknowledgement to the client, answered or
// not: Close's last resort, so that they go with the leave's last request
// when the wait for answers ran out of time (an answer may then count
// another set's records).
func (a *ackTally) flushAll() {
	var hs []handover
	a.mu.Lock()
	for _, p := range a.parts {
		for len(p.queued) > 0 {
			sent := p.sent
			p.sent = nil
			h, _ := p.nextLocked(time.Now())
			p.sent = append(sent, p.sent...)
			hs = append(hs, h)
		}
	}
	a.mu.Unlock()
	for _, h := range hs {
		a.send(h.status, h.recs)
	}
}

// waiting reports whether acknowledgements are queued, not handed to the
// client yet.
func (a *ackTally) waiting() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.parts {
		if len(p.queued) > 0 {
			return true
		}
	}
	return false
}

// renewing reports whether a renewal of the partition waits, queued or
// sent and not answered. renew leaves such a partition for a later tick
// (franz-go ignores the renewal of a record whose last one is unanswered).
func (a *ackTally) renewing(k tp) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.parts[k]
	if p == nil {
		return false
	}
	for _, m := range p.sent {
		if m.status == kgo.AckRenew {
			return true
		}
	}
	for _, m := range p.queued {
		if m.status == kgo.AckRenew {
			return true
		}
	}
	return false
}

// dropRenewals forgets the queued renewals of b, which is done. Its
// records have their terminal acknowledgement, and franz-go would ignore a
// renewal after it (nothing would answer it).
func (a *ackTally) dropRenewals(k tp, b *Batch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.parts[k]
	if p == nil {
		return
	}
	p.queued = slices.DeleteFunc(p.queued, func(m ackMark) bool { return m.status == kgo.AckRenew && m.batch == b })
}

// take returns and forgets the sent set of a partition, whose answer came,
// and hands the partition's next set to the client. Next reports whether
// it did.
func (a *ackTally) take(k tp) (sent []ackMark, next bool) {
	a.mu.Lock()
	p := a.parts[k]
	if p == nil || a.closed {
		a.mu.Unlock()
		return nil, false
	}
	sent, p.sent = p.sent, nil
	var h handover
	if len(sent) > 0 {
		h, next = p.nextLocked(time.Now())
	}
	if len(p.sent) == 0 && len(p.queued) == 0 {
		delete(a.parts, k)
	}
	a.mu.Unlock()
	if next {
		a.send(h.status, h.recs)
	}
	return sent, next
}

// takeAll returns and forgets every partition's marks, sent or queued, and
// counts no answer after it.
func (a *ackTally) takeAll() map[tp][]ackMark {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := map[tp][]ackMark{}
	for k, p := range a.parts {
		all[k] = append(p.sent, p.queued...)
	}
	a.parts = map[tp]*partAcks{}
	a.closed = true
	return all
}

// callback returns the reader's kgo.ShareAckCallback. Each answer counts
// the partition's set (answered). When it handed the partition's next set
// to the client, it has it sent at once and wakes the poll loop, which may
// wait for it before it polls.
func (a *ackTally) callback(r *Reader) func(*kgo.Client, kgo.ShareAckResults) {
	return func(_ *kgo.Client, results kgo.ShareAckResults) {
		more := false
		for _, res := range results {
			sent, next := a.take(tp{res.Topic, res.Partition})
			r.answered(res.Topic, res.Partition, sent, res.Err)
			more = more || next
		}
		if more {
			r.sendNow()
		}
		r.poke()
	}
}
