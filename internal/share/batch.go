package share

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Batch is acquired records of one partition, handed out by Next. Exactly
// one of Ack and Nack finishes it. Later calls, and calls after Close
// released it, are counted as stale and do nothing.
type Batch struct {
	Topic     string
	Partition int32
	// Records are the acquired records, in offset order. Each one's
	// delivery count (1 on its first delivery, one more on each
	// redelivery) is r.DeliveryCount().
	Records []*kgo.Record

	r     *Reader
	state batchState // guarded by r.mu
	// renewed is when the batch's records were acquired or last renewed
	// (guarded by r.mu). renew leaves a batch younger than half of
	// RenewInterval alone.
	renewed time.Time
	// deadline is when the records' acquisition lock ends, as far as the
	// reader knows (guarded by r.mu): acquired or last renewed (when the
	// broker took the renewal) plus the group's lock duration. Zero when
	// unknown. An acknowledgement made after it is late (ackMark.late).
	deadline time.Time
	// lost: a renewal of the batch was refused, its records are not this
	// member's any more. renew leaves it alone (guarded by r.mu).
	lost bool
	// replays is how many times the batch's records were replayed in this
	// member after a Nack (Config.ReplayNacks). due is when the replay may
	// be handed out (guarded by r.mu).
	replays int32
	due     time.Time
}

// DeliveryCount returns the delivery count of the batch's record i: the
// broker's (Records[i].DeliveryCount(): 1 on its first delivery, one more
// on each redelivery) plus the times this member replayed it
// (Config.ReplayNacks).
func (b *Batch) DeliveryCount(i int) int32 {
	return b.Records[i].DeliveryCount() + b.replays
}

// batchState is where a batch of the current fetch is. Batches move only
// through (*Reader).applyLocked and the transitions table:
//
//	queued --handOut--> out --ack/nack/reject/settle--> done
//	out --split--> done (its two halves start out)
//	queued, out --release (Close)--> done
//
// A nack (or settle) that replays records (Config.ReplayNacks) ends the
// batch done and starts a new one of those records, queued, due after a
// backoff.
type batchState uint8

const (
	queued batchState = iota // acquired, not handed out by Next yet
	out                      // handed out, in the pipeline
	done                     // acknowledged (accepted, released or rejected)
)

func (s batchState) String() string {
	return [...]string{"queued", "out", "done"}[s]
}

// batchEvent is what happens to a batch.
type batchEvent uint8

const (
	handOut  batchEvent = iota // Next returns it
	acked                      // Batch.Ack
	nacked                     // Batch.Nack
	released                   // Close releases it
	rejected                   // Batch.Reject
	split                      // Batch.Split replaced it by its two halves
	settled                    // Batch.Settle
)

func (e batchEvent) String() string {
	return [...]string{"handOut", "ack", "nack", "release", "reject", "split", "settle"}[e]
}

// transitions are the allowed (state, event) pairs and where they lead.
var transitions = map[batchState]map[batchEvent]batchState{
	queued: {handOut: out, released: done},
	out:    {acked: done, nacked: done, released: done, rejected: done, split: done, settled: done},
}

// transition returns where ev leads from s, or false when the pair is not
// allowed.
func transition(s batchState, ev batchEvent) (batchState, bool) {
	to, ok := transitions[s][ev]
	return to, ok
}

// Ack accepts the batch's records. The broker counts them processed and
// never delivers them again. Safe to call twice.
func (b *Batch) Ack() {
	b.r.finish(b, acked)
}

// Nack gives the batch's records back. With Config.ReplayNacks they are
// replayed in this member, after a backoff, their locks renewed meanwhile
// (Next hands them out again, DeliveryCount one more), or rejected (archived
// by the broker, never delivered again) once delivered Config.MaxDeliveries
// times. Without it each is released for redelivery (to any member, its
// delivery count one more), or rejected when it was delivered
// Config.MaxDeliveries times. err is what the pipeline failed with, logged
// at DEBUG. Safe to call twice.
func (b *Batch) Nack(err error) {
	if b.r.finish(b, nacked) {
		b.r.cfg.Logger.Debugf("share group %s: %s/%d: %d records nacked: %v", b.r.cfg.Group, b.Topic, b.Partition, len(b.Records), err)
	}
}

// Reject rejects the batch's records whatever their delivery count. The
// broker archives them and never delivers them again (Benthos'
// auto_replay_nacks: false). err is what the pipeline failed with, logged
// at DEBUG. Safe to call twice.
func (b *Batch) Reject(err error) {
	if b.r.finish(b, rejected) {
		b.r.cfg.Logger.Debugf("share group %s: %s/%d: %d records rejected: %v", b.r.cfg.Group, b.Topic, b.Partition, len(b.Records), err)
	}
}

// Settle finishes the batch record by record, for a pipeline that failed
// some of its records only: the records i for which failed(i) is true are
// given back as Nack gives them back (or rejected at once when reject), the
// others accepted. err is what the pipeline failed with, logged at DEBUG.
// Safe to call twice.
func (b *Batch) Settle(failed func(i int) bool, err error, reject bool) {
	r := b.r
	var bad int
	done := r.finishWith(b, settled, func(late bool) {
		var ok, ko []*kgo.Record
		for i, rec := range b.Records {
			if failed(i) {
				ko = append(ko, rec)
			} else {
				ok = append(ok, rec)
			}
		}
		bad = len(ko)
		r.markBatch(b, kgo.AckAccept, ok, late, "")
		if reject {
			r.markBatch(b, kgo.AckReject, ko, late, whyRejected)
		} else {
			r.markNack(b, ko, late)
		}
	})
	if done && bad > 0 {
		r.cfg.Logger.Debugf("share group %s: %s/%d: %d of %d records failed: %v", r.cfg.Group, b.Topic, b.Partition, bad, len(b.Records), err)
	}
}

// Split cuts a batch handed out by Next, and not finished, into its first n
// records and the rest (0 < n < len(Records)), each then finished on its
// own by Ack, Nack or Reject, and renewed and released by Close as any
// batch handed out: a batching policy cuts a message batch inside it. b
// itself is done. A later Ack or Nack of it is stale. ok is false, and b
// unchanged, when n is out of range or b is not handed out or is done.
func (b *Batch) Split(n int) (head, tail *Batch, ok bool) {
	if n <= 0 || n >= len(b.Records) {
		return nil, nil, false
	}
	r := b.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.state != out || !r.applyLocked(b, split) {
		return nil, nil, false
	}
	head, tail = b.part(b.Records[:n:n], out), b.part(b.Records[n:], out)
	delete(r.pending, b)
	r.pending[head] = struct{}{}
	r.pending[tail] = struct{}{}
	return head, tail, true
}

// part is a batch of recs, records of b, in state st, with b's lock and
// replays.
func (b *Batch) part(recs []*kgo.Record, st batchState) *Batch {
	return &Batch{Topic: b.Topic, Partition: b.Partition, Records: recs, r: b.r, state: st,
		renewed: b.renewed, deadline: b.deadline, lost: b.lost, replays: b.replays}
}

func (b *Batch) String() string {
	if len(b.Records) == 0 {
		return fmt.Sprintf("%s/%d (empty)", b.Topic, b.Partition)
	}
	return fmt.Sprintf("%s/%d offsets %d-%d", b.Topic, b.Partition, b.Records[0].Offset, b.Records[len(b.Records)-1].Offset)
}
