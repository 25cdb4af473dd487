package share

import "sync/atomic"

// Observer sees what the reader counts, for metrics. It follows the
// convention of every Observer (internal/logs' package doc), as the
// engine's does. Its methods are called from the reader's poll loop
// (Acquired), from the goroutine of the caller of Next (Delivered) and from
// franz-go's callback goroutine, which reports the broker's answers to
// acknowledgements (the others), never under the reader's lock, and must be
// cheap, not block and be safe for concurrent use. A nil Config.Observer is
// a nop one.
type Observer interface {
	// Acquired: records of topic were acquired and handed to the reader.
	Acquired(topic string, records int64)
	// Delivered: records of topic (and their value bytes) were handed out
	// by Next (by Members.Next, for several members), as the engine's
	// Delivered.
	Delivered(topic string, records, bytes int64)
	// Accepted, Released, Rejected: the broker took the acknowledgement
	// of records of topic with that type (Batch.Ack; Batch.Nack; Close
	// releases what is still in the pipeline).
	Accepted(topic string, records int64)
	Released(topic string, records int64)
	Rejected(topic string, records int64)
	// Renewed: the broker renewed the acquisition locks of records of
	// topic.
	Renewed(topic string, records int64)
	// LockExpired: the broker refused an acknowledgement of records of
	// the partition because their acquisition lock had expired (they
	// were released, or acquired by another member, before it arrived).
	LockExpired(topic string, partition int32, records int64)
	// AckFailed: an acknowledgement of records of the partition failed
	// for another reason (the member's share session had ended, the
	// partition's leader moved, no answer): the broker delivers them
	// again.
	AckFailed(topic string, partition int32, records int64)
	// RenewFailed: the renewal of records of the partition was refused or
	// lost. Their acknowledgement will fail too, unless it comes before
	// the lock ends.
	RenewFailed(topic string, partition int32, records int64)
	// Replayed: records of topic nacked were replayed in this member
	// (Config.ReplayNacks), to be handed out again after a backoff.
	Replayed(topic string, records int64)
	// Archived: records of the partition whose release the broker took on
	// their last delivery the group allows (share.delivery.count.limit):
	// the broker archived them (counted released too).
	Archived(topic string, partition int32, records int64)
}

// Stats are the reader's counts since New, in records. An acknowledgement
// counts when the broker answers it. Every acquired record ends in one of
// Accepted, Released, Rejected, LockExpired and AckFailed (or is still
// held, or waits for its answer).
type Stats struct {
	Acquired    int64 // acquired from the broker
	Accepted    int64 // acknowledged as processed (Batch.Ack), the broker took it
	Released    int64 // released for redelivery (Batch.Nack, Close), the broker took it
	Rejected    int64 // rejected (Batch.Nack after MaxDeliveries, Batch.Reject): archived by the broker
	Renewed     int64 // acquisition lock renewals the broker took (a record renewed twice counts twice)
	LockExpired int64 // acknowledgements the broker refused because the lock had expired
	AckFailed   int64 // acknowledgements refused for another reason, or lost: the records come again
	RenewFailed int64 // renewals refused or lost
	Stale       int64 // Ack or Nack of a batch that was already done (twice, or released by Close)
	Replayed    int64 // records nacked and replayed in this member (Config.ReplayNacks); a record replayed twice counts twice
	Archived    int64 // of Released: released on their last delivery the group allows, so archived by the broker
}

// Add returns s and o summed, field by field (the counts of several
// readers).
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Acquired:    s.Acquired + o.Acquired,
		Accepted:    s.Accepted + o.Accepted,
		Released:    s.Released + o.Released,
		Rejected:    s.Rejected + o.Rejected,
		Renewed:     s.Renewed + o.Renewed,
		LockExpired: s.LockExpired + o.LockExpired,
		AckFailed:   s.AckFailed + o.AckFailed,
		RenewFailed: s.RenewFailed + o.RenewFailed,
		Stale:       s.Stale + o.Stale,
		Replayed:    s.Replayed + o.Replayed,
		Archived:    s.Archived + o.Archived,
	}
}

// counts holds the reader's Stats.
type counts struct {
	acquired, accepted, released, rejected, renewed, lockExpired, ackFailed, renewFailed, stale, replayed, archived atomic.Int64
}

func (c *counts) stats() Stats {
	return Stats{
		Acquired:    c.acquired.Load(),
		Accepted:    c.accepted.Load(),
		Released:    c.released.Load(),
		Rejected:    c.rejected.Load(),
		Renewed:     c.renewed.Load(),
		LockExpired: c.lockExpired.Load(),
		AckFailed:   c.ackFailed.Load(),
		RenewFailed: c.renewFailed.Load(),
		Stale:       c.stale.Load(),
		Replayed:    c.replayed.Load(),
		Archived:    c.archived.Load(),
	}
}

type nopObserver struct{}

func (nopObserver) Acquired(string, int64)           {}
func (nopObserver) Delivered(string, int64, int64)   {}
func (nopObserver) Accepted(string, int64)           {}
func (nopObserver) Released(string, int64)           {}
func (nopObserver) Rejected(string, int64)           {}
func (nopObserver) Renewed(string, int64)            {}
func (nopObserver) LockExpired(string, int32, int64) {}
func (nopObserver) AckFailed(string, int32, int64)   {}
func (nopObserver) RenewFailed(string, int32, int64) {}
func (nopObserver) Replayed(string, int64)           {}
func (nopObserver) Archived(string, int32, int64)    {}
