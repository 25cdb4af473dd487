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
// poll is done: franz-go accepts whatever the previous poll returned and
// was not acknowledged when the next poll starts, so polling earlier would
// accept records still in the pipeline. Meanwhile, every half
// RenewInterval, it renews the locks of the batches not done that were
// acquired or renewed at least half a RenewInterval ago, so no batch goes
// longer than RenewInterval without a renewal and a young batch is never
// renewed. The loop does not wait for a renewal's answer.
func (r *Reader) run(ctx context.Context) {
	defer close(r.stopped)
	renew := time.NewTicker(r.cfg.RenewInterval / 2)
	defer renew.Stop()
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
		for _, b := range batches {
			if !r.handOver(ctx, b, renew.C) {
				return
			}
		}
		if !r.waitDone(ctx, renew.C) {
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// cut registers the records of fetches as pending batches of at most
// BatchRecords records of one partition each, and counts them acquired.
// It runs even when the poll was cancelled: Close releases what it
// registers.
func (r *Reader) cut(fetches kgo.Fetches) []*Batch {
	var batches []*Batch
	now := time.Now()
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
			if !ok {
				renewed = now
			}
			batches = append(batches, &Batch{Topic: p.Topic, Partition: p.Partition, Records: recs[:k:k], r: r, renewed: renewed})
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

// handOver waits until Next takes b, renewing meanwhile; false when ctx
// ended first.
func (r *Reader) handOver(ctx context.Context, b *Batch, tick <-chan time.Time) bool {
	for {
		select {
		case r.out <- b:
			return true
		case <-tick:
			r.renew()
		case <-ctx.Done():
			return false
		}
	}
}

// waitDone waits until every pending batch is done, renewing meanwhile;
// false when ctx ended first.
func (r *Reader) waitDone(ctx context.Context, tick <-chan time.Time) bool {
	for {
		r.mu.Lock()
		empty := len(r.pending) == 0
		r.mu.Unlock()
		if empty {
			return true
		}
		select {
		case <-r.idle:
		case <-tick:
			r.renew()
		case <-ctx.Done():
			return false
		}
	}
}

// renew renews the acquisition locks of the records of every batch not
// done (handed out or still waiting for Next), and of the records franz-go
// fetched that no poll returned yet (unpolled), that were acquired or
// renewed at least half a RenewInterval ago, and has them sent at once
// (franz-go sends acknowledgements made between fetches after a second,
// which would eat into the lock, and outlast a short one). It does not
// wait for the broker's answer: the loop goes on handing out batches
// meanwhile, and the answer is counted by the acknowledgement callback
// (ackTally). A partition whose last renewal is unanswered is left for a
// later tick: franz-go would ignore the renewal of records whose previous
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
	var hold []*Batch
	for b := range r.pending {
		if b.state != done && now.Sub(b.renewed) >= age && !renewing(tp{b.Topic, b.Partition}) {
			b.renewed = now
			hold = append(hold, b)
		}
	}
	r.mu.Unlock()
	early := r.unpolled.due(now, age, renewing)
	if len(hold) == 0 && len(early) == 0 {
		return
	}
	for _, b := range hold {
		r.mark(kgo.AckRenew, b.Topic, b.Partition, b.Records)
	}
	for k, recs := range early {
		r.mark(kgo.AckRenew, k.topic, k.partition, recs)
	}
	r.sendNow()
}

// sendNow has the client send the acknowledgements and renewals marked so
// far at once, without waiting for their answers: FlushAcks signals every
// broker's share loop to send before it waits, and returns at once with a
// context that has ended.
func (r *Reader) sendNow() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r.cl.FlushAcks(ctx)
}

// warnEvery bounds how often a retried fetch error is logged.
const warnEvery = 10 * time.Second

// fetchErr returns the error that stops the reader, if fetches has one:
// one that retrying cannot fix (authorisation, an unsupported version,
// an invalid group). Others are retried by franz-go and logged at most
// every warnEvery; a cancellation (Close) is no error.
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
