package engine

import (
	"math"
	"time"
)

// A bounded read's progress line gives a rate and, once it can be trusted,
// the time left. Both are of offsets acknowledged, what the read has done.
// Records handed out run ahead of the pipeline (a rate of them said "0
// records/s" while acknowledgements grew, and 2.00k records/s while the
// broker was down and nothing was acknowledged). Both come from a window of
// the last reports, not from the last interval alone. ranges are handed
// out, and acknowledged, a range at a time, so the count of one interval
// swings between a burst and nothing (a steady run logged full speed and
// "0 records/s" in turn), and the start (listing, connecting, the first
// fetches) makes an estimate from the whole run too slow at first (23
// minutes were said for a job that took under 3).

// progressWindow is how many reports the rates are taken over.
const progressWindow = 6

// progressStable is how far apart (as a ratio) the acknowledgement rates of
// the older and the newer half of the window may be for the time left to
// be said.
const progressStable = 1.5

// progressSample is one report. It holds when, and the offsets
// acknowledged.
type progressSample struct {
	at   time.Time
	done int64
}

// progressMeter turns each report's counts into a smoothed rate and a time
// left (the report goroutine's own).
type progressMeter struct {
	samples []progressSample // the last progressWindow+1 reports, oldest first
}

// observe adds the report p taken at now and sets p.Rate (offsets
// acknowledged per second over the window, or over the run at the first
// report) and p.Left (the offsets not acknowledged at that rate; -1 until
// the window is full and the rates of its two halves agree within
// progressStable).
func (m *progressMeter) observe(now time.Time, p *Progress) {
	m.samples = append(m.samples, progressSample{at: now, done: p.Done})
	if len(m.samples) > progressWindow+1 {
		m.samples = m.samples[1:]
	}
	p.Rate, p.Left = 0, -1
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	if len(m.samples) < 2 {
		if secs := p.Elapsed.Seconds(); secs > 0 {
			p.Rate = float64(p.Done) / secs
		}
		return
	}
	p.Rate = rate(first.done, last.done, first.at, last.at)
	if len(m.samples) < progressWindow+1 || p.Total <= p.Done {
		return
	}
	mid := m.samples[len(m.samples)/2]
	older := rate(first.done, mid.done, first.at, mid.at)
	newer := rate(mid.done, last.done, mid.at, last.at)
	if older <= 0 || newer <= 0 || max(older, newer)/min(older, newer) > progressStable {
		return
	}
	left := float64(p.Total-p.Done) / p.Rate
	if left < math.MaxInt64/float64(time.Second) {
		p.Left = time.Duration(left * float64(time.Second))
	}
}

// rate returns (b-a) per second between from and to, or 0 if no time
// passed.
func rate(a, b int64, from, to time.Time) float64 {
	secs := to.Sub(from).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(b-a) / secs
}
