package share

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/kerrs"
)

// run is the poll loop, the reader's one goroutine, stopped by Close
// through ctx. It polls, cuts what the poll acquired into batches, hands
// them to Next one by one, and polls again only once every batch of the
// poll is done and every acknowledgement handed to the client. franz-go
// accepts whatever the previous poll returned and was not acknowledged
// when the next poll starts, so polling earlier would accept records still
// in the pipeline. Meanwhile it hands out again the batches of nacked
// records as they fall due (Config.ReplayNacks). Every half RenewInterval
// it renews the locks of the batches not done that were acquired or
// renewed at least half a RenewInterval ago, so no batch goes longer than
// RenewInterval without a renewal and a young batch is never renewed. And
// every ackFlushEvery it hands the acknowledgements made to the client and
// has them sent (ackTally). The loop does not wait for a renewal's answer.
func (r *Reader) run(ctx context.Context) {
	defer close(r.stopped)
	renew := time.NewTicker(r.cfg.RenewInterval / 2)
	defer renew.Stop()
	flush := time.NewTicker(ackFlushEvery)
	defer flush.Stop()
	var lastWarn time.Time
	for {
		fetches := r.cl.PollFetches(ctx)
		batches := r.cut(fetches)
		if err := r.fetchErr(fetches, &lastWarn); err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			r.cfg.Logger.Errorf("%v", err)
			return
		}
		if !r.serve(ctx, batches, renew.C, flush.C) {
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// ackFlushEvery is how long an acknowledgement waits at most before the
// poll loop hands it to the client and has it sent, while the pipeline
// still holds batches of the fetch (franz-go's own wait is a second too).
const ackFlushEvery = time.Second

// serve hands out the batches of a fetch, then the replays as they fall
// due, renewing and flushing acknowledgements meanwhile, until every batch
// is done and every acknowledgement was handed to the client (flushed last
// without being sent: the next poll's fetch carries them). False when ctx
// ended first.
func (r *Reader) serve(ctx context.Context, batches []*Batch, renewC, flushC <-chan time.Time) bool {
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		next, fromFetch := (*Batch)(nil), false
		var wait time.Duration
		if len(batches) > 0 {
			next, fromFetch = batches[0], true
		} else {
			next, wait = r.dueReplay(time.Now())
		}
		if next == nil && wait == 0 {
			r.mu.Lock()
			empty := len(r.pending) == 0
			r.mu.Unlock()
			if empty {
				if _, waiting := r.acks.flush(); !waiting {
					return true
				}
				// A partition's acknowledgements wait for the answer
				// to its last ones. Have those sent, and wait.
				r.sendNow()
			}
		}
		var outC chan<- *Batch
		if next != nil {
			outC = r.out
		}
		var dueC <-chan time.Time
		if wait > 0 {
			due.Reset(wait)
			dueC = due.C
		}
		select {
		case outC <- next:
			if fromFetch {
				batches = batches[1:]
			} else {
				r.handedReplay(next)
			}
		case <-renewC:
			r.renew()
		case <-flushC:
			if sent, _ := r.acks.flush(); sent {
				r.sendNow()
			}
		case <-r.idle:
		case <-dueC:
		case <-ctx.Done():
			return false
		}
	}
}

// dueReplay returns the replay due first if it is due at now. Otherwise
// how long until it is (0: no replay waits).
func (r *Reader) dueReplay(now time.Time) (*Batch, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first *Batch
	for _, b := range r.replays {
		if first == nil || b.due.Before(first.due) {
			first = b
		}
	}
	if first == nil {
		return nil, 0
	}
	if d := first.due.Sub(now); d > 0 {
		return nil, d
	}
	return first, 0
}

// handedReplay forgets b, a replay Next took.
func (r *Reader) handedReplay(b *Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.replays {
		if x == b {
			r.replays = append(r.replays[:i], r.replays[i+1:]...)
			return
		}
	}
}

// cut registers the records of fetches as pending batches of at most
// BatchRecords records of one partition each, and counts them acquired.
// It runs even when the poll was cancelled. Close releases what it
// registers.
func (r *Reader) cut(fetches kgo.Fetches) []*Batch {
	var batches []*Batch
	now := time.Now()
	lock := r.lockDuration()
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		recs := p.Records
		if len(recs) == 0 {
			return
		}
		n := int64(len(recs))
		r.cnt.acquired.Add(n)
		r.cfg.Observer.Acquired(p.Topic, n)
		size := r.cfg.BatchRecords
		if size <= 0 {
			size = len(recs)
		}
		for len(recs) > 0 {
			k := min(size, len(recs))
			// A batch of records fetched before the poll (unpolled)
			// goes on from their acquisition or last renewal.
			renewed, ok := r.unpolled.take(recs[:k])
			deadline := recs[0].AcquisitionDeadline()
			if lock <= 0 && !deadline.IsZero() {
				// The group's lock duration was not answered at
				// Start. The fetch's own says it (its deadline
				// came with it, a moment ago).
				lock = deadline.Sub(now).Round(100 * time.Millisecond)
				r.lockMillis.CompareAndSwap(0, lock.Milliseconds())
			}
			if !ok {
				renewed = now
			} else if lock > 0 && renewed.Add(lock).After(deadline) {
				deadline = renewed.Add(lock)
			}
			batches = append(batches, &Batch{Topic: p.Topic, Partition: p.Partition, Records: recs[:k:k], r: r, renewed: renewed, deadline: deadline})
			recs = recs[k:]
		}
	})
	r.mu.Lock()
	for _, b := range batches {
		r.pending[b] = struct{}{}
	}
	r.mu.Unlock()
	return batches
}

// renew renews the acquisition locks of the records of every batch not
// done (handed out or still waiting for Next), and of the records franz-go
// fetched that no poll returned yet (unpolled), that were acquired or
// renewed at least half a RenewInterval ago, and has them sent at once
// (franz-go sends acknowledgements made between fetches after a second,
// which would eat into the lock, and outlast a short one). It does not
// wait for the broker's answer. The loop goes on handing out batches
// meanwhile, and the answer is counted by the acknowledgement callback
// (ackTally). A partition whose last renewal is unanswered is left for a
// later tick. franz-go would ignore the renewal of records whose previous
// one is under way, and the tally would count it.
func (r *Reader) renew() {
	now := time.Now()
	age := r.cfg.RenewInterval / 2
	busy := map[tp]bool{}
	renewing := func(k tp) bool {
		b, seen := busy[k]
		if !seen {
			b = r.acks.renewing(k)
			busy[k] = b
		}
		return b
	}
	r.mu.Lock()
	var hold []ackMark
	var keys []tp
	for b := range r.pending {
		if b.state != done && !b.lost && now.Sub(b.renewed) >= age && !renewing(tp{b.Topic, b.Partition}) {
			b.renewed = now
			late := !b.deadline.IsZero() && now.After(b.deadline)
			hold = append(hold, ackMark{status: kgo.AckRenew, recs: b.Records, batch: b, late: late})
			keys = append(keys, tp{b.Topic, b.Partition})
		}
	}
	r.mu.Unlock()
	early := r.unpolled.due(now, age, renewing)
	if len(hold) == 0 && len(early) == 0 {
		return
	}
	for i, m := range hold {
		r.acks.queue(keys[i], m)
	}
	for k, recs := range early {
		r.mark(kgo.AckRenew, k.topic, k.partition, recs)
	}
	r.acks.flush()
	r.sendNow()
}

// sendNow has the client send the acknowledgements and renewals marked so
// far at once, without waiting for their answers. FlushAcks signals every
// broker's share loop to send before it waits, and returns at once with a
// context that has ended.
func (r *Reader) sendNow() {
	if r.cl == nil { // not started: nothing was handed over
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r.cl.FlushAcks(ctx)
}

// warnEvery bounds how often a retried fetch error is logged.
const warnEvery = 10 * time.Second

// fetchErr returns the error that stops the reader, if fetches has one:
// one that retrying cannot fix (authorisation, an unsupported version,
// an invalid group). Others are retried by franz-go and logged at most
// every warnEvery. A cancellation (Close) is no error.
func (r *Reader) fetchErr(fetches kgo.Fetches, lastWarn *time.Time) error {
	for _, fe := range fetches.Errors() {
		err := fe.Err
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrClientClosed):
			continue
		case permanent(err):
			if fe.Topic == "" {
				return fmt.Errorf("share group %s: %w", r.cfg.Group, err)
			}
			return fmt.Errorf("share group %s: topic %s partition %d: %w", r.cfg.Group, fe.Topic, fe.Partition, err)
		}
		if time.Since(*lastWarn) >= warnEvery {
			*lastWarn = time.Now()
			r.cfg.Logger.Warnf("share group %s: topic %s partition %d: %v (retrying)", r.cfg.Group, fe.Topic, fe.Partition, err)
		}
	}
	return nil
}

// permanent reports whether retrying cannot fix err: a refusal of access
// (internal/kerrs' one list: authorisation, SASL authentication), or an
// answer to the share requests that says the broker or the group cannot
// serve them (UNSUPPORTED_VERSION, INVALID_GROUP_ID, INVALID_REQUEST).
func permanent(err error) bool {
	return kerrs.Permanent(err, kerr.UnsupportedVersion, kerr.InvalidGroupID, kerr.InvalidRequest)
}
