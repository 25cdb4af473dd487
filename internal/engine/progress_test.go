package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestProgressMeterSmoothsTheRate: offsets acknowledged a range at a time (a
// burst every other report) give a steady rate over the window, where the
// rate of the last interval alone swung between full speed and 0.
func TestProgressMeterSmoothsTheRate(t *testing.T) {
	var m progressMeter
	t0 := time.Unix(0, 0)
	var records, done int64
	var rates []float64
	for i := 1; i <= 12; i++ {
		if i%2 == 0 {
			done += 20000 // one burst every 2 s: 10,000 offsets/s
		}
		records += 10000
		p := Progress{Done: done, Total: 1_000_000, Records: records, Elapsed: time.Duration(i) * time.Second}
		m.observe(t0.Add(time.Duration(i)*time.Second), &p)
		if i > progressWindow {
			rates = append(rates, p.Rate)
		}
	}
	for _, r := range rates {
		assert.InDelta(t, 10000, r, 2000, "rate over the window, %v", rates)
		assert.NotZero(t, r)
	}
}

// TestProgressMeterSaysTheTimeLeftOnceSteady: no time left until the window
// is full, none while the acknowledgement rate changes (a slow start), and
// then the time left at the window's rate. Before, the first estimate (from
// the whole run, slow start included) said 23 minutes for a job of under 3.
func TestProgressMeterSaysTheTimeLeftOnceSteady(t *testing.T) {
	var m progressMeter
	t0 := time.Unix(0, 0)
	const total = 1_000_000
	var done int64
	steps := []int64{0, 0, 1000, 5000, 20000, 50000, 50000, 50000, 50000, 50000, 50000, 50000, 50000, 50000} // per second
	var lefts []time.Duration
	for i, d := range steps {
		done += d
		p := Progress{Done: done, Total: total, Records: done, Elapsed: time.Duration(i+1) * time.Second}
		m.observe(t0.Add(time.Duration(i+1)*time.Second), &p)
		lefts = append(lefts, p.Left)
	}
	for i := range progressWindow {
		assert.Equal(t, time.Duration(-1), lefts[i], "time left before the window is full (report %d): %v", i, lefts)
	}
	assert.Equal(t, time.Duration(-1), lefts[6], "time left while the rate still grows: %v", lefts)
	last := lefts[len(lefts)-1]
	wantLeft := time.Duration(float64(total-done) / 50000 * float64(time.Second))
	assert.InDelta(t, float64(wantLeft), float64(last), float64(time.Second), "time left once steady: %v", lefts)
}

// TestProgressMeterWithNothingLeft: a read with nothing left says no time
// left, and a report at the same instant as the last gives no rate.
func TestProgressMeterWithNothingLeft(t *testing.T) {
	var m progressMeter
	t0 := time.Unix(0, 0)
	for i := range progressWindow + 2 {
		p := Progress{Done: 100, Total: 100, Records: 100, Elapsed: time.Second}
		m.observe(t0.Add(time.Duration(i)*time.Second), &p)
		assert.Equal(t, time.Duration(-1), p.Left)
	}
	p := Progress{Done: 100, Total: 100, Records: 100}
	m.observe(t0.Add(time.Duration(progressWindow+1)*time.Second), &p)
	assert.False(t, p.Rate < 0)
}

// TestProgressRateIsOfAcknowledgedOffsets (issue 44): the rate is of offsets acknowledged, not
// records handed out: a pipeline that acknowledges what it was handed before, while nothing new
// is handed out, goes at its rate (it said 0 records/s), and records handed out while nothing
// is acknowledged (the broker dead, the output stuck) add nothing (it said 2.00k records/s).
func TestProgressRateIsOfAcknowledgedOffsets(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name          string
		records, done int64 // per report, a second apart
		wantRate      float64
	}{
		{"acknowledged, none handed out", 0, 5000, 5000},
		{"handed out, none acknowledged", 2000, 0, 0},
	} {
		var m progressMeter
		var records, done int64 = 10000, 10000 // where the read was at its first report, 2 s in
		for i := 0; i <= progressWindow+2; i++ {
			p := Progress{Done: done, Total: 1_000_000, Records: records, Elapsed: time.Duration(i+2) * time.Second}
			m.observe(t0.Add(time.Duration(i+2)*time.Second), &p)
			if i == 0 {
				assert.InDelta(t, 5000.0, p.Rate, 1, "%s: the first report's rate, over the run so far", tc.name)
			} else {
				assert.InDelta(t, tc.wantRate, p.Rate, 1, "%s: report %d", tc.name, i)
			}
			records += tc.records
			done += tc.done
		}
	}
}
