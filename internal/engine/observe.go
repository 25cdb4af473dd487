package engine

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// observation is what the engine counts for its Summary, its Progress and
// the Observer. The counters are atomic. staleSeen is the reporter
// goroutine's own. leftDone, leftTotal and startedAt are guarded by
// Engine.mu.
type observation struct {
	records, bytes, ranges atomic.Int64 // records handed out for the first time, their value bytes, ranges complete
	acked                  atomic.Int64 // records of batches the pipeline acknowledged, applied to a current incarnation
	lost                   atomic.Int64 // offsets lost and skipped (SkipDataLoss)
	dropped                atomic.Int64 // records of batches rejected and dropped (ReplayNacks off)
	stale                  atomic.Int64 // acks, nacks, replays and reader results of incarnations that were over, dropped
	staleSeen              int64        // stale as last reported to the observer (the reporter's own)
	firstOut, lastOut      atomic.Int64 // when Next handed out the first and the latest new batch (Unix nanoseconds; 0: none yet)

	leftDone  int64     // offsets acknowledged by incarnations that ended (Progress counts them done)
	leftTotal int64     // offsets of incarnations that ended that Progress keeps in its total: what they acknowledged, and what they left unread when the engine stopped
	startedAt time.Time // when Start succeeded
}

// ended counts what an incarnation that ended leaves in Progress. That is
// the offsets it acknowledged (done and in the total) and the offsets it left
// unread that stay in the total (the engine stops).
func (o *observation) ended(acked, unread int64) {
	o.leftDone += acked
	o.leftTotal += acked + unread
}

// reporter is the reporter goroutine (run). Every reportEvery it logs the
// losses, samples the metrics, checks reachability and a stalled end, and
// beats the pause's clock. With a progress interval it logs the progress.
type reporter struct {
	e *Engine
}

// Observer sees what the engine does, for metrics. Its methods are called
// from the engine's goroutines, never under the engine's lock, and must be
// cheap and safe for concurrent use. That is the convention of every
// Observer (internal/logs' package doc). The plugin implements it with Benthos'
// metrics API.
type Observer interface {
	// RangePlanned: a range was taken from the planner and its reader started.
	RangePlanned(r ranges.Range)
	// RangeRead: a range was read to its end and all of it handed out, in d.
	RangeRead(r ranges.Range, d time.Duration)
	// RangeAcked: every offset of a range is acknowledged.
	RangeAcked(r ranges.Range)
	// RangeReplayed: a nacked batch of r is delivered again.
	RangeReplayed(r ranges.Range)
	// Delivered: records of topic (and their value bytes) were handed out
	// for the first time.
	Delivered(topic string, records, bytes int64)
	// Committed: a commit to the group succeeded or failed.
	Committed(ok bool)
	// Lag: offsets of k between its committed (or, without a group,
	// acknowledged) position and its end offset.
	Lag(k ranges.Key, lag int64)
	// PartitionGone: k is no longer read by this process (revoked, its
	// topic deleted). Its lag is no longer reported.
	PartitionGone(k ranges.Key)
	// InFlight: ranges holding a max-in-flight slot.
	InFlight(n int)
	// Owned: partitions this process reads.
	Owned(n int)
	// Stale: n acknowledgements, rejections or replays of partition
	// incarnations that were over (revoked, lost, topic deleted or
	// recreated) were dropped since the last call.
	Stale(n int64)
	// LostOffsets: n offsets of k were lost and skipped (SkipDataLoss).
	LostOffsets(k ranges.Key, n int64)
	// Dropped: records of topic that the pipeline rejected were dropped
	// without a replay (ReplayNacks off).
	Dropped(topic string, records int64)
	// CacheEvents: counts of cache events since the last call, by event
	// name (continuation, seek, new_client, new_cursor, fetch, eviction,
	// invalidation), and the cursors now.
	CacheEvents(events map[string]int64, open int64)
}

// Progress is how far a bounded read is, reported every
// Config.Hooks.ProgressInterval.
type Progress struct {
	Done, Total int64         // offsets acknowledged and to read in all, since Start (a partition that left keeps what it acknowledged in both, and what it left unread in Total if it left as the engine stopped)
	Records     int64         // records handed out
	Bytes       int64         // their value bytes
	Elapsed     time.Duration // since Start
	Rate        float64       // offsets acknowledged per second over the last reports (progressMeter)
	Left        time.Duration // estimated time left at the acknowledgement rate of the last reports; -1 until that rate is steady
}

// String formats the progress as one log line. The percentage is of
// acknowledged offsets, the counts are of delivered records (which run
// ahead of the acknowledgements), and each is labelled so. The time left is
// left out until it can be estimated. Counts are plain numbers, rates and
// sizes short (humanCount, humanBytes).
func (p Progress) String() string {
	if p.Total <= 0 {
		return fmt.Sprintf("Progress: no offsets to read; delivered %d records, %s in %s",
			p.Records, humanBytes(float64(p.Bytes)), humanDuration(p.Elapsed))
	}
	s := fmt.Sprintf("Progress: acknowledged %s%% of %d offsets; delivered %d records, %s in %s; %s offsets acknowledged/s",
		percent(p.Done, p.Total), p.Total, p.Records, humanBytes(float64(p.Bytes)), humanDuration(p.Elapsed), humanCount(p.Rate))
	if p.Left >= 0 {
		s += "; about " + humanDuration(p.Left) + " left"
	}
	return s
}

// percent writes done of total as a percentage with one decimal, rounded
// down. It writes 100.0 only once done reaches total (4,999 of 5,000 is
// 99.9, never 100.0), and 0.0 until the first thousandth.
func percent(done, total int64) string {
	if total <= 0 {
		return "0.0"
	}
	tenths := int64(math.Floor(1000 * float64(done) / float64(total)))
	if done < total {
		tenths = min(tenths, 999)
	}
	return fmt.Sprintf("%d.%d", tenths/10, tenths%10)
}

// humanCount writes n with three significant digits and k, M or G from a
// thousand on ("278k", "1.00M"), and as a whole number below ("12").
func humanCount(n float64) string {
	return short(n, "", "k", "M", "G")
}

// humanBytes writes n bytes with three significant digits in B, kB, MB or
// GB (powers of 1000, as MB/s usually are), as in "999 B", "12.3 kB" and
// "2.05 GB".
func humanBytes(n float64) string {
	return short(n, " B", " kB", " MB", " GB")
}

// short writes n in the largest unit of units (each 1000 times the one
// before) that keeps it at 1 or more, with three significant digits. Below
// the second unit as a whole number.
func short(n float64, units ...string) string {
	if n < 999.5 {
		return fmt.Sprintf("%.0f%s", max(n, 0), units[0])
	}
	i := 0
	for i < len(units)-1 && n >= 999.5 {
		n /= 1000
		i++
	}
	switch {
	case n < 9.995:
		return fmt.Sprintf("%.2f%s", n, units[i])
	case n < 99.95:
		return fmt.Sprintf("%.1f%s", n, units[i])
	}
	return fmt.Sprintf("%.0f%s", n, units[i])
}

// humanDuration prints tenths of a second below a minute ("0.7 s"), and
// whole seconds above ("3m10s").
func humanDuration(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

type nopObserver struct{}

func (nopObserver) RangePlanned(ranges.Range)             {}
func (nopObserver) RangeRead(ranges.Range, time.Duration) {}
func (nopObserver) RangeAcked(ranges.Range)               {}
func (nopObserver) RangeReplayed(ranges.Range)            {}
func (nopObserver) Delivered(string, int64, int64)        {}
func (nopObserver) Committed(bool)                        {}
func (nopObserver) Lag(ranges.Key, int64)                 {}
func (nopObserver) PartitionGone(ranges.Key)              {}
func (nopObserver) InFlight(int)                          {}
func (nopObserver) Stale(int64)                           {}
func (nopObserver) Owned(int)                             {}
func (nopObserver) CacheEvents(map[string]int64, int64)   {}
func (nopObserver) LostOffsets(ranges.Key, int64)         {}
func (nopObserver) Dropped(string, int64)                 {}

// reportEvery is how often lag, in-flight, ownership and cache metrics are
// sampled.
const reportEvery = time.Second

// run is the reporter goroutine. It samples the gauges and cache counters
// every reportEvery and, for a bounded read, logs progress every
// ProgressInterval, until the engine stops.
func (rp *reporter) run() {
	e := rp.e
	defer e.wg.Done()
	ctx, cancel := e.shut.SoftStopCtx(context.Background())
	defer cancel()
	sample := time.NewTicker(reportEvery)
	defer sample.Stop()
	var progress <-chan time.Time
	if e.cfg.StopAtEnd && e.cfg.Hooks.ProgressInterval > 0 {
		t := time.NewTicker(e.cfg.Hooks.ProgressInterval)
		defer t.Stop()
		progress = t.C
	}
	var last cache.Stats
	var meter progressMeter
	var rs reachState
	var stall endStall
	for {
		select {
		case <-ctx.Done():
			rp.flushLosses()
			rp.sample(last) // the final values, once every acknowledgement is in
			return
		case now := <-sample.C:
			rp.flushLosses()
			last = rp.sample(last)
			rp.checkReach(&rs, now)
			rp.checkEndStall(&stall, now)
			e.mu.Lock()
			e.out.pause.tick(time.Now(), e.group.member) // not now: a tick delivered after a SIGSTOP carries the time it fell due (pause.go)
			e.mu.Unlock()
		case now := <-progress:
			p := e.Progress()
			meter.observe(now, &p)
			e.log.Infof("%s", p)
			if e.cfg.Hooks.OnProgress != nil {
				e.cfg.Hooks.OnProgress(p)
			}
		}
	}
}

// sample reports the gauges and the cache events since last.
func (rp *reporter) sample(last cache.Stats) cache.Stats {
	e := rp.e
	type lag struct {
		k ranges.Key
		n int64
	}
	e.mu.Lock()
	lags := make([]lag, 0, e.parts.nReading)
	for k, p := range e.parts.reading() {
		_, end, _ := e.parts.planner.Position(k)
		at, _ := e.parts.tracker.Frontier(k)
		if e.group.committer != nil && p.committed >= 0 {
			at = p.committed
		}
		lags = append(lags, lag{k, max(0, end-at)})
	}
	inflight, owned := e.sched.slots.used, e.parts.owned()
	e.mu.Unlock()
	for _, l := range lags {
		e.obs.Lag(l.k, l.n)
	}
	e.obs.InFlight(inflight)
	e.obs.Owned(owned)
	if n := e.stats.stale.Load() - e.stats.staleSeen; n > 0 {
		e.stats.staleSeen += n
		e.obs.Stale(n)
	}
	s := e.kafka.cache.Stats()
	e.obs.CacheEvents(map[string]int64{
		"continuation": s.Continuations - last.Continuations,
		"seek":         s.Seeks - last.Seeks,
		"new_client":   s.NewClients - last.NewClients,
		"new_cursor":   s.NewCursors - last.NewCursors,
		"fetch":        s.Fetches - last.Fetches,
		"eviction":     (s.EvictionsIdle + s.EvictionsCapacity) - (last.EvictionsIdle + last.EvictionsCapacity),
		"invalidation": s.Invalidations - last.Invalidations,
		"refused":      s.Refused - last.Refused, // a cursor state change refused: a bug, reported by ErrInternal
	}, s.Open)
	return s
}

// Progress returns how far the read is, as offsets acknowledged against the
// offsets planned since Start (for a bounded read, its whole snapshot). A
// partition that left (revoked, lost, its topic gone) keeps what its
// incarnation acknowledged in both. What it had left to read is no longer
// this engine's to read and leaves the total, unless it left because the
// engine stopped (dropLocked). Then it stays, not acknowledged.
func (e *Engine) Progress() Progress {
	e.mu.Lock()
	done, total := e.stats.leftDone, e.stats.leftTotal
	for k, p := range e.parts.reading() {
		_, end, _ := e.parts.planner.Position(k)
		at, _ := e.parts.tracker.Frontier(k)
		done += at - p.first
		total += end - p.first
	}
	startedAt := e.stats.startedAt
	e.mu.Unlock()
	p := Progress{Done: done, Total: total, Records: e.stats.records.Load(), Bytes: e.stats.bytes.Load(), Left: -1}
	if !startedAt.IsZero() {
		p.Elapsed = time.Since(startedAt)
	}
	return p
}
