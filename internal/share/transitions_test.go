package share

import "testing"

// TestBatchTransitionsAreTheTable: every (state, event) pair outside the
// table is refused, and the pairs that matter are spelled out: a batch not
// handed out cannot be acknowledged or split, one handed out cannot be
// handed out again, and a done batch refuses everything (a second Ack is
// stale, never a second acknowledgement).
func TestBatchTransitionsAreTheTable(t *testing.T) {
	want := map[batchState]map[batchEvent]batchState{
		queued: {handOut: out, released: done},
		out:    {acked: done, nacked: done, released: done, rejected: done, split: done, settled: done},
	}
	for s := queued; s <= done; s++ {
		for ev := handOut; ev <= settled; ev++ {
			to, ok := transition(s, ev)
			wantTo, wantOK := want[s][ev]
			if ok != wantOK || to != wantTo {
				t.Errorf("%s --%s--> (%s, %v), want (%s, %v)", s, ev, to, ok, wantTo, wantOK)
			}
		}
	}
}
