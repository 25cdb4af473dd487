package share

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// What the reader says of records gone for good: rejected (archived by the
// broker: a poison record after share_max_deliveries, or a nack with
// auto_replay_nacks: false) or released at the group's delivery count
// limit (share.delivery.count.limit: the broker archives a record released
// on its last allowed delivery). Both are logged at WARN with their topic,
// partition, offsets and delivery counts, at most warnBurst lines every
// warnEvery, the rest counted in the next line.

// warnBurst is how many lines about records gone for good one reader logs
// per warnEvery.
const warnBurst = 5

// warnLimit rate-limits log lines: at most warnBurst per warnEvery.
type warnLimit struct {
	mu         sync.Mutex // guards the fields
	start      time.Time  // of the current window
	n          int        // lines logged in the window
	suppressed int64      // records not logged since the last line
}

// allow reports whether a line may be logged now and how many records
// were left unlogged before it. When it may not, it counts n records
// suppressed.
func (w *warnLimit) allow(n int64) (ok bool, suppressed int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.start) >= warnEvery {
		w.start, w.n = now, 0
	}
	if w.n >= warnBurst {
		w.suppressed += n
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

// suppressedNote says how many records earlier lines left out.
func suppressedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d records rejected or archived since the last such line, not logged)", n)
}

// deliveries names the delivery counts of recs (the broker's, plus
// replays): one count, or the lowest and highest.
func deliveries(recs []*kgo.Record, replays int32) string {
	lo, hi := int32(0), int32(0)
	for i, rec := range recs {
		d := rec.DeliveryCount() + replays
		if i == 0 || d < lo {
			lo = d
		}
		if d > hi {
			hi = d
		}
	}
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// warnRejected logs records the broker took a rejection of: archived,
// never delivered again.
func (r *Reader) warnRejected(topic string, partition int32, m ackMark) {
	ok, suppressed := r.warned.allow(int64(len(m.recs)))
	if !ok {
		return
	}
	why := m.why
	if why == "" {
		why = "rejected"
	}
	r.cfg.Logger.Warnf("Share group %s: %s/%d: %d records rejected, archived by the broker and never delivered again (offsets %s, delivery count %s): %s%s",
		r.cfg.Group, topic, partition, len(m.recs), offsetsOf([]ackMark{m}, func(ackMark) bool { return true }), deliveries(m.recs, m.replays), why, suppressedNote(suppressed))
}

// archivedByRelease counts and logs the records of a release the broker
// took that were on their last delivery the group allows
// (share.delivery.count.limit): the broker archives them instead of
// delivering them again.
func (r *Reader) archivedByRelease(topic string, partition int32, m ackMark) {
	limit := r.deliveryLimit.Load()
	if limit <= 0 {
		return
	}
	var gone []*kgo.Record
	for _, rec := range m.recs {
		if rec.DeliveryCount() >= limit {
			gone = append(gone, rec)
		}
	}
	if len(gone) == 0 {
		return
	}
	n := int64(len(gone))
	r.cnt.archived.Add(n)
	r.cfg.Observer.Archived(topic, partition, n)
	ok, suppressed := r.warned.allow(n)
	if !ok {
		return
	}
	r.cfg.Logger.Warnf("Share group %s: %s/%d: %d records released on their last delivery the group allows (share.delivery.count.limit: %d), so the broker archived them: never delivered again (offsets %s)%s",
		r.cfg.Group, topic, partition, n, limit, offsetsOf([]ackMark{{recs: gone}}, func(ackMark) bool { return true }), suppressedNote(suppressed))
}

// lockDuration is the group's acquisition lock duration
// (share.record.lock.duration.ms), 0 when not known.
func (r *Reader) lockDuration() time.Duration {
	return time.Duration(r.lockMillis.Load()) * time.Millisecond
}
