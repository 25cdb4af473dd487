package engine

import (
	"strings"
	"time"
)

// A bounded read ends (Next returns ErrEnd) once everything up to its end is
// handed out and every batch handed out is done. Benthos ends an input only
// once the messages it handed out are acknowledged (its input layer waits
// for them before it closes the stream's transactions), and a batching
// policy downstream that has no period (an output's `batching` with `count`
// or `byte_size`, a `broker` input's `batching`) flushes an incomplete batch
// only once those transactions close. So the last records of such a run wait
// in that batch for ever. Nothing in this engine can flush it. The plugin
// refuses that configuration where it sees the whole config (plugin.RunCLI).
// For a stream built otherwise, the reporter says what holds the run.

// endStallAfter is how long a bounded read that handed out everything waits
// without an acknowledgement before it says what holds it.
const endStallAfter = 10 * time.Second

// endStall is what the reporter goroutine remembers between its looks at a
// bounded read that handed out everything (its own).
type endStall struct {
	acked  int64     // stats.acked plus stats.dropped at the last look
	since  time.Time // when acked last changed, or the read handed out its last batch
	warned bool      // said for this stall; a new acknowledgement re-arms it
}

// checkEndStall is the reporter's look at a bounded read's end, every
// reportEvery. Once every range up to the end is handed out and batches
// handed out see no acknowledgement for endStallAfter, it warns once what
// holds them.
func (rp *reporter) checkEndStall(s *endStall, now time.Time) {
	e := rp.e
	if !e.cfg.StopAtEnd {
		return
	}
	e.mu.Lock()
	waiting := e.out.closed && len(e.out.replay) == 0 && e.parts.nPending > 0
	batches := e.parts.nPending
	e.mu.Unlock()
	acked := e.stats.acked.Load() + e.stats.dropped.Load()
	if !waiting || acked != s.acked || s.since.IsZero() {
		if acked != s.acked || !waiting {
			s.warned = false
		}
		s.acked, s.since = acked, now
		return
	}
	if s.warned || now.Sub(s.since) < endStallAfter {
		return
	}
	s.warned = true
	p := e.Progress()
	e.log.Warnf("Every range up to the end offsets was handed to the pipeline, but %d batches (%d offsets) have not been acknowledged for %s, and the input ends only once they are. "+
		"A batching policy without a period downstream (an output's batching with count or byte_size, a broker input's batching) holds them: "+
		"Benthos flushes it only once the input has ended, and ends the input only once its messages are acknowledged. "+
		"Give that policy a period (for example period: 1s), or batch in this input's own batching field, which flushes at every range's end",
		batches, p.Total-p.Done, humanDuration(now.Sub(s.since)))
	e.log.Infof("What each partition waits for:\n  %s", strings.Join(e.Waiting(), "\n  "))
}
