package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// waitingLimit is the most partitions Waiting describes. The rest are
// counted.
const waitingLimit = 20

// Waiting says, one line per partition, what a bounded read that has not
// ended waits for: each partition read or to be read that has not reached
// its end and had every offset acknowledged, with its lifecycle state and
// what holds it (ranges being read, batches in the pipeline, a failing
// read, a wait for its watermarks, a drain). At most waitingLimit lines,
// then how many more. Nil once nothing is waited for. Tests name the
// partition and the state a run that does not end waits in with it. The
// stop of a bounded run before its end logs it.
func (e *Engine) Waiting() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]ranges.Key, 0, len(e.parts.recs))
	for k, r := range e.parts.recs {
		if r.state == stateWaiting || r.state == stateReading || r.ended > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, ranges.Key.Compare)
	var lines []string
	for _, k := range keys {
		line, ok := e.parts.waitingFor(k, e.group.committer != nil)
		if !ok {
			continue
		}
		if len(lines) == waitingLimit {
			lines = append(lines, "and more partitions")
			break
		}
		lines = append(lines, line)
	}
	return lines
}

// waitingFor describes what partition k waits for, or reports false if
// it waits for nothing (read to its end, every offset acknowledged and,
// with a group, committed).
func (t *partTable) waitingFor(k ranges.Key, commits bool) (string, bool) {
	r := t.recs[k]
	var b strings.Builder
	switch r.state {
	case stateWaiting:
		fmt.Fprintf(&b, "%s: waiting to start incarnation %d: its watermarks or the group's offsets are not listed yet", k, r.wait.inc)
	case stateReading:
		p := r.cur
		next, end, _ := t.planner.Position(k)
		frontier, _ := t.tracker.Frontier(k)
		done := next >= end && len(p.open) == 0 && p.pending == 0 && r.ended == 0 && frontier >= end &&
			(!commits || p.committed >= end || !t.cfg.Group.Membership)
		if done {
			return "", false
		}
		fmt.Fprintf(&b, "%s: reading (incarnation %d): planned to %d of end %d, acknowledged to %d", k, p.inc, next, end, frontier)
		if commits {
			fmt.Fprintf(&b, ", committed %d", p.committed)
		}
		if len(p.open) > 0 {
			starts := slices.Sorted(func(yield func(int64) bool) {
				for s := range p.open {
					if !yield(s) {
						return
					}
				}
			})
			var open []string
			for _, s := range starts {
				st := p.open[s]
				what := "read to " + fmt.Sprint(st.sent.Load())
				if st.failing {
					what = "failing, retried"
				} else if st.waitsForBefore() {
					what = "waits for the range before it to be read"
				} else if st.stalled {
					what = "no record read yet"
				}
				open = append(open, fmt.Sprintf("%s (%s)", st.r, what))
			}
			fmt.Fprintf(&b, "; ranges open: %s", strings.Join(open, ", "))
		}
		if len(p.held) > 0 {
			fmt.Fprintf(&b, "; %d ranges read and acknowledged, waiting for the commit that covers them", len(p.held))
		}
		if p.pending > 0 {
			fmt.Fprintf(&b, "; %d batches handed out and not acknowledged", p.pending)
		}
		if p.draining {
			b.WriteString("; revoked, draining")
		}
	default:
		fmt.Fprintf(&b, "%s: %s", k, r.state)
	}
	if r.ended > 0 {
		fmt.Fprintf(&b, "; %d batches of an ended incarnation handed out and not acknowledged", r.ended)
	}
	return b.String(), true
}
