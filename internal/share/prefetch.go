package share

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// unpolled are the records franz-go fetched and buffered that no poll has
// returned yet, with when each was acquired or last renewed. The poll loop
// polls only once every batch of the last fetch is done and the client
// fetches only while polled (kgo.MaxConcurrentFetches(0)), but franz-go
// lets one more fetch start at the end of a poll. The poll takes the
// buffered fetch, which wakes the fetch loop, and the fetch it then asks
// for is allowed while the poll still counts as active, before it returns.
// That fetch acquires records while the pipeline holds the last ones, and
// nothing hands them out until the next poll. Their lock runs out behind a
// pipeline slower than the lock, and their renewals and acknowledgement
// are refused (INVALID_RECORD_STATE) and they are delivered again. So the
// reader renews them as it renews batches (renew), from when they were
// buffered, and a batch cut from them keeps that time (cut).
//
// It is the client's kgo.HookFetchRecordBuffered and
// kgo.HookFetchRecordUnbuffered, called from franz-go's goroutines.
type unpolled struct {
	mu   sync.Mutex // guards recs
	recs map[*kgo.Record]time.Time
}

// OnFetchRecordBuffered implements kgo.HookFetchRecordBuffered. r was
// acquired and buffered, ready to be polled.
func (u *unpolled) OnFetchRecordBuffered(r *kgo.Record) {
	now := time.Now()
	u.mu.Lock()
	u.recs[r] = now
	u.mu.Unlock()
}

// OnFetchRecordUnbuffered implements kgo.HookFetchRecordUnbuffered: a
// record dropped without a poll (an assignment change) is forgotten. A
// polled one is taken by cut.
func (u *unpolled) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled {
		return
	}
	u.mu.Lock()
	delete(u.recs, r)
	u.mu.Unlock()
}

// take forgets recs, which a poll returned, and returns when the oldest of
// them was acquired or last renewed. ok is false when none was known.
func (u *unpolled) take(recs []*kgo.Record) (oldest time.Time, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, r := range recs {
		at, known := u.recs[r]
		if !known {
			continue
		}
		delete(u.recs, r)
		if !ok || at.Before(oldest) {
			oldest, ok = at, true
		}
	}
	return oldest, ok
}

// due returns the records acquired or last renewed at least age before now,
// by partition, except those of the partitions skip says to leave alone,
// and counts them renewed now.
func (u *unpolled) due(now time.Time, age time.Duration, skip func(tp) bool) map[tp][]*kgo.Record {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out map[tp][]*kgo.Record
	for r, at := range u.recs {
		k := tp{r.Topic, r.Partition}
		if now.Sub(at) < age || skip(k) {
			continue
		}
		if out == nil {
			out = map[tp][]*kgo.Record{}
		}
		out[k] = append(out[k], r)
		u.recs[r] = now
	}
	return out
}
