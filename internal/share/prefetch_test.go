package share

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// slowPollReturn makes a poll that returns records slow to return (50 ms
// on the poll's goroutine before it returns, in franz-go's hook of
// unbuffered records), so franz-go's fetch loop, woken when the poll took
// its buffered fetch, has time to be allowed another fetch while the poll
// still counts as active: the fetch franz-go then makes is the one this
// package must expect (prefetch.go), made every poll instead of rarely.
type slowPollReturn struct{ last atomic.Int64 }

func (h *slowPollReturn) OnFetchRecordUnbuffered(_ *kgo.Record, polled bool) {
	if !polled {
		return
	}
	now := time.Now().UnixNano()
	if time.Duration(now-h.last.Load()) > 200*time.Millisecond { // once per poll
		h.last.Store(now)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPrefetchedRecordsAreRenewed: franz-go can fetch once more at the end
// of a poll, while the poll loop hands out what the poll returned, so
// records are acquired, their lock running, before any poll returns them.
// Here every poll does so, and the pipeline holds each batch three times
// the group's lock (1 s): the records fetched meanwhile are renewed with
// the batches, so none loses its lock: every record is delivered once,
// with delivery count 1, and every acknowledgement is taken. Before, each
// prefetched batch's lock expired while it waited: its renewals and its
// acknowledgement were refused (INVALID_RECORD_STATE) and its records came
// again.
func TestPrefetchedRecordsAreRenewed(t *testing.T) {
	const total = 15
	c := newCluster(t, total, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "1000",
		"share.record.lock.sweep.interval.ms": "50",
	}))
	var log logLines
	r := newReader(t, c, "g", func(cfg *Config) {
		cfg.MaxRecords = 5
		cfg.RenewInterval = 300 * time.Millisecond
		cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(&slowPollReturn{})}
		cfg.Logger = &log
	})
	seen := map[string][]int32{}
	for n := 0; n < total; {
		b := next(t, r)
		for i, v := range values(b) {
			seen[v] = append(seen[v], b.Records[i].DeliveryCount())
		}
		n += len(b.Records)
		time.Sleep(3 * time.Second) // a slow pipeline: three locks
		b.Ack()
	}
	closeReader(t, r)
	for v, ds := range seen {
		require.Equal(t, []int32{1}, ds, "record %s: its delivery counts", v)
	}
	st := r.Stats()
	require.Equal(t, Stats{Acquired: total, Accepted: total, Renewed: st.Renewed}, st, "log: %q", log.lines)
	require.Equal(t, int64(total), shareStart(t, c, "g"))
}
