package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/modelwalk"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestTransitionDiagramMatchesTheTable: the diagram in table.go's comment
// and the transitions table say the same, line for line.
func TestTransitionDiagramMatchesTheTable(t *testing.T) {
	src, err := os.ReadFile("table.go")
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^//\t(\w+)\s+--(\w+)-->\s+(\w+)\b`)
	byName := func(names []string, name string) int {
		i := slices.Index(names, name)
		require.GreaterOrEqual(t, i, 0, "diagram names %q, which the table does not have", name)
		return i
	}
	drawn := map[transition]state{}
	for _, m := range line.FindAllStringSubmatch(string(src), -1) {
		from := state(byName(stateNames[:], m[1]))
		ev := event(byName(eventNames[:], m[2]))
		to := state(byName(stateNames[:], m[3]))
		_, twice := drawn[transition{from, ev}]
		require.False(t, twice, "diagram draws %s --%s--> twice", from, ev)
		drawn[transition{from, ev}] = to
	}
	assert.Equal(t, transitions, drawn, "the diagram in table.go and the transitions table")
}

// recordIn returns a record in state s that satisfies the table's own
// invariants, and the counts it adds.
func recordIn(s state) *record {
	r := &record{state: s, committed: -1}
	switch s {
	case stateReading:
		r.cur = &partition{inc: 1}
	case stateWaiting:
		r.wait = waiting{inc: 1}
	}
	return r
}

// TestForbiddenTransitionsAreRefused tries every (state, event) pair outside
// the transitions table: each is refused with errTransition naming the
// partition, the state and the event, the record stays as it was, and
// through the engine the refusal stops it.
func TestForbiddenTransitionsAreRefused(t *testing.T) {
	k := ranges.Key{Topic: "t", Partition: 3}
	refused := 0
	for s := range nStates {
		for ev := range nEvents {
			if _, ok := transitions[transition{s, ev}]; ok {
				continue
			}
			refused++
			t.Run(fmt.Sprintf("%s_%s", s, ev), func(t *testing.T) {
				var tab partTable
				tab.recs = map[ranges.Key]*record{k: recordIn(s)}
				tab.count(s, +1)
				before := *tab.recs[k]
				_, err := tab.apply(k, ev, change{cur: &partition{inc: 7}})
				require.ErrorIs(t, err, errTransition)
				require.ErrorContains(t, err, fmt.Sprintf("partition t/3: event %s in state %s", ev, s))
				assert.Equal(t, before, *tab.recs[k], "record changed by a refused transition")
				require.NoError(t, tab.check())

				e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 10, MaxInFlight: 1, PollInterval: time.Second, Logger: &testLogger{}})
				require.NoError(t, err)
				e.parts = tab
				e.mu.Lock()
				_, ok := e.transitionLocked(k, ev, change{cur: &partition{inc: 7}})
				e.mu.Unlock()
				assert.False(t, ok)
				require.ErrorIs(t, e.Err(), errTransition, "the engine goes on after a refused transition")
			})
		}
	}
	assert.Equal(t, int(nStates)*int(nEvents)-len(transitions), refused)
	assert.Positive(t, refused)

	// A start without an incarnation is refused too.
	var tab partTable
	_, err := tab.apply(k, evStarted, change{})
	require.ErrorIs(t, err, errTransition)
}

// Every allowed transition leads where the table says, with the counts.
func TestAllowedTransitionsApply(t *testing.T) {
	k := ranges.Key{Topic: "t", Partition: 0}
	for tr, to := range transitions {
		t.Run(fmt.Sprintf("%s_%s", tr.from, tr.ev), func(t *testing.T) {
			var tab partTable
			tab.recs = map[ranges.Key]*record{k: recordIn(tr.from)}
			tab.count(tr.from, +1)
			tab.incs = 1
			r, err := tab.apply(k, tr.ev, change{cur: &partition{inc: 2}, from: fromFirst})
			require.NoError(t, err)
			assert.Equal(t, to, r.state)
			require.NoError(t, tab.check())
			if to == stateWaiting && tr.from != stateWaiting {
				assert.Equal(t, uint64(2), r.wait.inc, "a new wait is a new incarnation")
			}
		})
	}
}

// tableModel is the fuzz test's reference: what the group committed, what
// each incarnation delivered and had acknowledged.
type tableModel struct {
	committed map[ranges.Key]int64 // the group's offsets (-1: none)
	logEnd    map[ranges.Key]int64 // each partition's end (logs start at 0)
	incs      map[ranges.Key]uint64
	next      map[uint64]int64      // per incarnation: where its next range must start
	acked     map[uint64][]bool     // per incarnation: acknowledged offsets (index: offset)
	sent      map[uint64][]bool     // per incarnation: delivered offsets
	inflight  []delivered           // delivered, not acknowledged
	lastInc   map[ranges.Key]uint64 // the highest incarnation seen of each partition
	firstFrom map[uint64]int64      // where each incarnation had to start
}

// delivered is a range handed out by incarnation inc.
type delivered struct {
	r   ranges.Range
	inc uint64
}

// firstUnacked returns the first offset from start that incarnation inc has
// not acknowledged.
func (m *tableModel) firstUnacked(inc uint64, start int64) int64 {
	a := m.acked[inc]
	o := start
	for o < int64(len(a)) && a[o] {
		o++
	}
	return o
}

// FuzzPartitionTable drives random sequences of the engine's partition
// events (assign, a listing answering or failing, a range read, ack, nack,
// revoke with its commit, lose, topic deleted, topic recreated under the
// member, periodic commit) through the
// engine's own transitions and methods (no Kafka: the planner, the tracker
// and the table), and checks after each event:
//   - the table agrees with itself (partTable.check) and no transition was
//     refused (the engine did not stop);
//   - the planner and the tracker hold exactly the partitions in the
//     reading state;
//   - nothing is committed past an unacknowledged offset of the
//     incarnation it was taken from;
//   - nothing is delivered twice within one incarnation, and a partition's
//     ranges come in offset order, each starting where the last ended;
//   - no offset is skipped: an incarnation starts at the group's committed
//     offset where there is one (its topic not deleted since), else at the
//     partition's first offset (start_from earliest);
//   - incarnations of a partition only grow;
//   - the planner is done exactly when every partition read was planned to
//     its end and none waits (a bounded run's end).
//
// The seeds run with go test; a long run is `make fuzz-model`.
func FuzzPartitionTable(f *testing.F) {
	f.Add([]byte{0, 1, 3, 3, 4, 6, 0, 1, 3, 4})
	f.Add([]byte{0, 16, 1, 17, 3, 3, 3, 19, 4, 20, 6, 0, 1, 3, 4, 9})
	f.Add([]byte{0, 1, 3, 7, 0, 1, 3, 3, 4, 4, 9, 6})
	f.Add([]byte{0, 2, 0, 1, 8, 0, 1, 3, 5, 4, 6, 0, 1, 3})
	f.Add([]byte{0, 16, 32, 1, 17, 33, 3, 19, 35, 3, 4, 20, 36, 6, 22, 38, 0, 1, 3})
	f.Add([]byte{0, 6, 1, 0, 1, 3, 4, 7, 0, 16, 1, 17, 8, 24, 9, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		runTableModel(t, ops)
	})
}

// TestPartitionTableModelWalk runs FuzzPartitionTable's model on random
// event sequences for KBR_MODEL_TIME (a duration; 2s unless set: `make
// model` runs each model for 30 minutes), the sequence that fails logged
// with its seed. It complements go test -fuzz, whose coordinator stalls on
// this machine's Go 1.26 after a minute (on FuzzTracker too: 0 execs/s).
func TestPartitionTableModelWalk(t *testing.T) {
	modelwalk.Run(t, 300, func(ops []byte) { runTableModel(t, ops) })
}

func runTableModel(t *testing.T, ops []byte) {
	keys := []ranges.Key{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "u", Partition: 0}}
	e, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Topics: []TopicSpec{{Name: "t"}, {Name: "u"}}, MaxRangeRecords: 7, MaxInFlight: 100, PollInterval: time.Second, SkipDataLoss: true, Logger: &testLogger{}, Membership: true, Group: "g", CommitPeriod: time.Second})
	require.NoError(t, err)
	e.planner, e.tracker, e.baseCtx = ranges.NewPlanner(7), ranges.NewTracker(), context.Background()
	m := &tableModel{committed: map[ranges.Key]int64{}, logEnd: map[ranges.Key]int64{}, incs: map[ranges.Key]uint64{},
		next: map[uint64]int64{}, acked: map[uint64][]bool{}, sent: map[uint64][]bool{},
		lastInc: map[ranges.Key]uint64{}, firstFrom: map[uint64]int64{}}
	for _, k := range keys {
		m.committed[k], m.logEnd[k] = -1, 40
	}
	commitCheck := func(k ranges.Key, inc uint64, at int64) {
		t.Helper()
		require.LessOrEqual(t, at, m.firstUnacked(inc, m.firstFrom[inc]), "%s: committed %d past an unacknowledged offset of incarnation %d", k, at, inc)
		m.committed[k] = at
	}
	for i, op := range ops {
		k := keys[int(op>>4)%len(keys)]
		e.mu.Lock()
		switch op & 0xf {
		case 0: // assigned
			e.assignedLocked(k)
		case 1: // a listing answers k's watermarks and the group's offsets
			offsets := map[ranges.Key]int64{}
			for kk, c := range m.committed {
				if c >= 0 {
					offsets[kk] = c
				}
			}
			if w, ok := e.waitingLocked()[k]; ok {
				from := int64(0)
				if c := m.committed[k]; c >= 0 && w.from != fromNewTopic {
					from = c
				}
				e.startWaitingLocked(map[ranges.Key]waiting{k: w}, group.Listing{Offsets: offsets, Topics: map[string]bool{}},
					map[ranges.Key]marks{k: {start: 0, end: m.logEnd[k], high: m.logEnd[k], from: -1}})
				if p := e.partLocked(k); p != nil && p.inc == w.inc {
					m.firstFrom[p.inc], m.next[p.inc] = from, from
					require.Equal(t, from, p.first, "%s incarnation %d starts at %d, want %d (the group's offset or the first)", k, p.inc, p.first, from)
				}
			}
		case 2: // a listing fails: k gets nothing
			e.startWaitingLocked(e.waitingLocked(), group.Listing{}, nil)
		case 3, 10, 11: // a range is planned and delivered
			r, ok := e.planner.Next(func(ranges.Key) bool { return false })
			if ok {
				require.NoError(t, e.tracker.Add(r))
				p := e.partLocked(r.Key())
				require.NotNil(t, p)
				inc := p.inc
				require.Equal(t, m.next[inc], r.Start, "%s incarnation %d: range %s does not start where the last ended", r.Key(), inc, r)
				m.next[inc] = r.End
				if m.sent[inc] == nil {
					m.sent[inc], m.acked[inc] = make([]bool, 64), make([]bool, 64)
				}
				for o := r.Start; o < r.End; o++ {
					require.False(t, m.sent[inc][o], "%s offset %d delivered twice in incarnation %d", r.Key(), o, inc)
					m.sent[inc][o] = true
				}
				m.inflight = append(m.inflight, delivered{r, inc})
			}
		case 4, 12: // the oldest (or a later) range in flight is acknowledged
			if len(m.inflight) > 0 {
				j := int(op>>4) % len(m.inflight)
				r, inc := m.inflight[j].r, m.inflight[j].inc
				m.inflight = slices.Delete(m.inflight, j, j+1)
				if p := e.partLocked(r.Key()); p != nil && p.inc == inc {
					_, _, err := e.tracker.Ack(r)
					require.NoError(t, err)
					for o := r.Start; o < r.End; o++ {
						m.acked[inc][o] = true
					}
				} // else: stale, dropped
			}
		case 5: // nacked: delivered again later (stays in flight)
		case 13: // its topic is deleted and created again under the member: read again from the new topic's first offset
			e.mu.Unlock()
			e.topicGone(k.Topic, nil)
			e.mu.Lock()
			for _, kk := range keys {
				if kk.Topic == k.Topic {
					m.committed[kk] = -1
				}
			}
		case 6: // revoked: the final commit of its frontier
			inc := uint64(0)
			if p := e.partLocked(k); p != nil {
				inc = p.inc
			}
			e.mu.Unlock()
			e.drainRevoked(context.Background(), []ranges.Key{k}) // revoke_drain_timeout 0: marks it draining, waits for nothing
			offsets := e.release([]ranges.Key{k}, true)
			e.mu.Lock()
			if at, ok := offsets[k]; ok {
				commitCheck(k, inc, at)
			}
		case 7: // lost: nothing committed
			e.mu.Unlock()
			e.release([]ranges.Key{k}, false)
			e.mu.Lock()
		case 8: // its topic is deleted and created again empty: the coordinator drops its offsets
			e.mu.Unlock()
			e.topicGone(k.Topic, fmt.Errorf("topic %q: %w", k.Topic, errMissing))
			e.mu.Lock()
			for _, kk := range keys {
				if kk.Topic == k.Topic {
					m.committed[kk] = -1
				}
			}
		case 9: // a periodic commit of every frontier
			for kk, p := range e.readingLocked() {
				if at, ok := e.tracker.Frontier(kk); ok {
					commitCheck(kk, p.inc, at)
				}
			}
		}
		// Invariants after each event.
		require.NoError(t, e.fatal, "event %d (%#x)", i, op)
		require.NoError(t, e.parts.check(), "event %d (%#x)", i, op)
		reading := []ranges.Key{}
		for kk, p := range e.readingLocked() {
			reading = append(reading, kk)
			_, ok := e.tracker.Frontier(kk)
			require.True(t, ok, "%s read but not tracked", kk)
			require.GreaterOrEqual(t, p.inc, m.lastInc[kk], "%s: incarnation went back", kk)
			m.lastInc[kk] = p.inc
		}
		slices.SortFunc(reading, ranges.Key.Compare)
		// Every partition read to its end and none waiting: nothing is left to plan.
		allRead := e.parts.nWaiting == 0
		for _, p := range e.readingLocked() {
			allRead = allRead && m.next[p.inc] == 40
		}
		require.Equal(t, allRead, e.planner.Done() && e.parts.nWaiting == 0, "event %d (%#x): the planner's end and the model's", i, op)
		planned := append([]ranges.Key{}, e.planner.Keys()...)
		slices.SortFunc(planned, ranges.Key.Compare)
		require.Equal(t, reading, planned, "event %d (%#x): the planner's partitions and the reading ones", i, op)
		for _, kk := range keys {
			if e.stateLocked(kk) != stateReading {
				_, ok := e.tracker.Frontier(kk)
				require.False(t, ok, "%s tracked but not read", kk)
			}
		}
		e.mu.Unlock()
	}
	require.False(t, errors.Is(e.Err(), errTransition))
}
