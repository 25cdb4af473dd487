package engine

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The partition table. What the engine knows of each partition across its
// incarnations, one record per partition (partTable, Engine.parts). It
// replaces the maps that each had their own rule for when an entry appears
// and disappears (the partitions being read, which existed at the start, the
// group's committed offsets, the partitions start_from committed leaves
// unread, the batches in the pipeline per partition, the group's cut
// ranges, the losses to log, a bounded group run's snapshot, the
// partitions waiting for their watermarks).
//
// A record's lifecycle is one stored state (record.state), changed only by
// partTable.apply, which looks the (state, event) pair up in transitions and
// refuses any other pair with an error that stops the engine
// (errTransition, naming the partition, the state and the event). The
// transitions, one line each (a test keeps this diagram and the table in
// step):
//
//	idle        --assigned-->  waiting      the group assigned it (assigned, the refresh, a refused commit while still owned)
//	uncommitted --assigned-->  waiting      assigned again: start_from committed is checked again
//	waiting     --assigned-->  waiting      already waits: nothing changes
//	reading     --assigned-->  reading      already read: nothing changes
//	idle        --queued-->    waiting      Start listed it without its watermarks (startPartitionsLocked)
//	idle        --topicBack--> waiting      its topic was created again and it is owned (topicGone)
//	idle        --started-->   reading      an incarnation starts (startLocked: Start, a partition that appeared)
//	waiting     --started-->   reading      its watermarks were listed (startWaitingLocked, then startLocked)
//	idle        --skipped-->   uncommitted  start_from committed, no group offset (skipUncommitted)
//	waiting     --skipped-->   uncommitted  the same, once listed
//	idle        --released-->  idle         revoked or lost while not read: nothing changes
//	waiting     --released-->  idle         revoked, lost, its topic gone, its drain began, no snapshot to read to
//	uncommitted --released-->  idle         revoked, lost, its topic gone: checked again when assigned again
//	reading     --dropped-->   idle         its incarnation ends: revoked, lost, its topic gone (dropLocked)
//
// Every field of a record changes through partTable's methods. apply
// changes the state, the wait and the incarnation being read. handedOut and
// returned count the batches in the pipeline. The others are lose and
// takeLosses, setCut and adoptCuts, listedAtStart, snapped, groupListed,
// classify and topicGone. What a transition implies beyond the record is
// done in one place beside apply. started (Engine.startLocked) goes with
// the planner's and the tracker's entry, the readers' context and the
// cursor's Watch. dropped (Engine.dropLocked) goes with the readers'
// cancellation, the freed slots, the planner's and the tracker's removal
// and the drains' wake. apply itself keeps the counts of partitions read
// and waiting and of batches in the pipeline. It also hands out the
// incarnation a wait starts as. A partition that a bounded run read to its
// end stays reading, with nothing left to plan.

// record is one partition's row of the table. Guarded by Engine.mu.
type record struct {
	state     state          // the lifecycle (partTable.apply)
	cur       *incarnation   // with stateReading: the incarnation being read (its inc says which)
	wait      waiting        // with stateWaiting: the incarnation it will start as, and its origin
	existed   bool           // listed when the engine started (Start): where the group has no offset it starts where start_from says (unless new to the group: groupNew)
	committed int64          // the group's committed offset as last listed; -1 if none (or not listed): the group's, whatever incarnation
	ended     int            // batches handed out by Next and not done of its ended incarnations (the current one's: cur.pending); ordered mode waits for them
	cut       cut            // with sharesCuts: the range cut short at an end inside its block (cuts.go), the group's; zero if none
	acked     []ranges.Range // offsets the group's commit metadata says were acknowledged above ackedFrom (acked.go), for the incarnation that starts there
	ackedFrom int64          // the committed offset acked lies above; -1 if none
	losses    []lossSpan     // lost spans not logged yet (SkipDataLoss; loss.go), of every incarnation: each is logged whichever saw it
	snapped   bool           // with Membership and StopAtEnd: snap is the partition's end when the engine started (or first listed)
	snap      marks          // the snapshot, if snapped: of the topic listed then (partTable.topicGone forgets it)
	snapErr   error          // with Membership and StopAtEnd: why the partition's end could not be listed yet; nil once snapped
	recreated bool           // its topic was deleted (and maybe created again) while the engine ran: its topics entry's start offset was the old topic's (explicitStart)
}

// state is a partition's lifecycle as the engine sees it now
// (record.state).
type state int

const (
	// stateIdle means not read by this engine. The partition was never
	// listed, not assigned, revoked, lost, or its topic is gone (and it is
	// not owned again).
	stateIdle state = iota
	// stateWaiting means to be read as a new incarnation (record.wait) once
	// its watermarks are listed (startWaitingLocked).
	stateWaiting
	// stateReading means its current incarnation (record.cur) is read. A
	// bounded run keeps it there once read to its end.
	stateReading
	// stateUncommitted means start_from committed and the group had no
	// offset for it, so it is not read (uncommitted.go).
	stateUncommitted
	nStates
)

var stateNames = [nStates]string{"idle", "waiting", "reading", "uncommitted"}

func (s state) String() string {
	if s >= 0 && s < nStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// held reports whether the engine reads s's partition or waits to.
func (s state) held() bool { return s == stateReading || s == stateWaiting }

// event is what happens to a partition (partTable.apply).
type event int

const (
	evAssigned  event = iota // the group assigned it to this member (again)
	evQueued                 // Start listed it but not its watermarks yet
	evTopicBack              // its topic was created again, and it is owned
	evStarted                // an incarnation starts being read
	evSkipped                // start_from committed and the group has no offset for it
	evReleased               // not read and no longer waited for: revoked, lost, its topic gone
	evDropped                // its incarnation being read ends: revoked, lost, its topic gone
	nEvents
)

var eventNames = [nEvents]string{"assigned", "queued", "topicBack", "started", "skipped", "released", "dropped"}

func (ev event) String() string {
	if ev >= 0 && ev < nEvents {
		return eventNames[ev]
	}
	return fmt.Sprintf("event(%d)", int(ev))
}

// transitions is every allowed (state, event) pair and the state it leads
// to. apply refuses any other pair. The package's diagram above says the
// same (TestTransitionDiagramMatchesTheTable).
var transitions = map[transition]state{
	{stateIdle, evAssigned}:        stateWaiting,
	{stateUncommitted, evAssigned}: stateWaiting,
	{stateWaiting, evAssigned}:     stateWaiting,
	{stateReading, evAssigned}:     stateReading,
	{stateIdle, evQueued}:          stateWaiting,
	{stateIdle, evTopicBack}:       stateWaiting,
	{stateIdle, evStarted}:         stateReading,
	{stateWaiting, evStarted}:      stateReading,
	{stateIdle, evSkipped}:         stateUncommitted,
	{stateWaiting, evSkipped}:      stateUncommitted,
	{stateIdle, evReleased}:        stateIdle,
	{stateWaiting, evReleased}:     stateIdle,
	{stateUncommitted, evReleased}: stateIdle,
	{stateReading, evDropped}:      stateIdle,
}

// transition is a (state, event) pair.
type transition struct {
	from state
	ev   event
}

// partTable is the partition table. It holds one record per partition.
// Every change of a record goes through its methods, and every change of
// its state through apply. It also holds the planner and the tracker, which hold an entry of each partition being
// read (startLocked, dropLocked). Guarded by Engine.mu.
type partTable struct {
	cfg       *Config         // set by New, never changed
	founding  bool            // with Membership: the group had no committed offset and no member when Start looked (groupNew; set by Start)
	planner   *ranges.Planner // what to read next of each partition read (set by Start)
	tracker   *ranges.Tracker // what of it is acknowledged (set by Start)
	recs      map[ranges.Key]*record
	nReading  int    // records in stateReading (record.cur set)
	nWaiting  int    // records in stateWaiting (record.wait set)
	incs      uint64 // incarnations handed out so far: the next is incs+1
	nPending  int    // batches handed out by Next and not done, of every partition and incarnation (handedOut, returned)
	snapshots bool   // with Membership and StopAtEnd: Start listed the partitions' ends (record.snap, record.snapErr)
}

// change is what a transition into a state carries. It is the incarnation
// that starts (evStarted), or where a wait starts from (evAssigned,
// evQueued, evTopicBack, where apply hands out the incarnation).
type change struct {
	cur  *incarnation
	from origin
}

// apply applies ev to k's record. It looks (state, ev) up in transitions and
// refuses any other pair (the record is left as it was). Otherwise it moves
// the record to the new state, keeping the counts, clearing what belonged
// to the state it left (an incarnation that ends leaves its batches in the
// pipeline to record.ended) and setting what the new one holds (a wait's new
// incarnation, the incarnation being read). A transition to the same state
// changes nothing. It returns the record.
func (t *partTable) apply(k ranges.Key, ev event, c change) (*record, error) {
	r := t.ensure(k)
	to, ok := transitions[transition{r.state, ev}]
	if !ok {
		return r, fmt.Errorf("%w: partition %s: event %s in state %s", errTransition, k, ev, r.state)
	}
	if ev == evStarted && (c.cur == nil || c.cur.inc == 0) {
		return r, fmt.Errorf("%w: partition %s: event %s without an incarnation", errTransition, k, ev)
	}
	if to == r.state {
		return r, nil
	}
	t.count(r.state, -1)
	t.count(to, +1)
	r.state = to
	if r.cur != nil {
		// Its batches still in the pipeline are an ended incarnation's now.
		r.ended += r.cur.pending
		r.cur.pending = 0
	}
	r.cur, r.wait = nil, waiting{}
	switch to {
	case stateReading:
		r.cur = c.cur
	case stateWaiting:
		t.incs++
		r.wait = waiting{inc: t.incs, from: c.from}
	}
	return r, nil
}

// count adds d to the count of s.
func (t *partTable) count(s state, d int) {
	switch s {
	case stateReading:
		t.nReading += d
	case stateWaiting:
		t.nWaiting += d
	}
}

// nextInc returns a new incarnation number.
func (t *partTable) nextInc() uint64 {
	t.incs++
	return t.incs
}

// ensure returns k's record, adding an empty one if there is none.
func (t *partTable) ensure(k ranges.Key) *record {
	r := t.recs[k]
	if r == nil {
		if t.recs == nil {
			t.recs = map[ranges.Key]*record{}
		}
		r = &record{committed: -1, ackedFrom: -1}
		t.recs[k] = r
	}
	return r
}

// peek returns k's record, or an empty one (not added) if there is none.
// For reads that must not grow the table.
func (t *partTable) peek(k ranges.Key) record {
	if r := t.recs[k]; r != nil {
		return *r
	}
	return record{committed: -1}
}

// check reports the first way the table disagrees with itself. The ways are
// a state outside the lifecycle, an incarnation being read outside stateReading (or
// none in it), a wait outside stateWaiting (or none in it), a negative count
// of batches in the pipeline, counts that differ from the records, slots
// taken that differ from the slots the incarnations being read hold. The
// model test calls it after every event.
func (t *partTable) check(used *slots) error {
	var reading, waits, pending, holding int
	for k, r := range t.recs {
		switch {
		case r.state < 0 || r.state >= nStates:
			return fmt.Errorf("%s: %s", k, r.state)
		case (r.state == stateReading) != (r.cur != nil):
			return fmt.Errorf("%s: %s with incarnation being read %v", k, r.state, r.cur != nil)
		case (r.state == stateWaiting) != (r.wait.inc != 0):
			return fmt.Errorf("%s: %s with wait %+v", k, r.state, r.wait)
		case r.ended < 0 || (r.cur != nil && r.cur.pending < 0):
			return fmt.Errorf("%s: batches in the pipeline: %d of ended incarnations, %d of the current one", k, r.ended, r.pending()-r.ended)
		}
		pending += r.pending()
		if r.cur != nil {
			holding += r.cur.holding()
		}
		t := r.state
		if t == stateReading {
			reading++
		}
		if t == stateWaiting {
			waits++
		}
	}
	if reading != t.nReading || waits != t.nWaiting || pending != t.nPending {
		return fmt.Errorf("counts: %d reading, %d waiting, %d batches in the pipeline; records say %d, %d and %d", t.nReading, t.nWaiting, t.nPending, reading, waits, pending)
	}
	if holding != used.used {
		return fmt.Errorf("slots: %d taken; the incarnations being read hold %d", used.used, holding)
	}
	return nil
}

// stateOf returns k's lifecycle state (idle if it has no record).
func (t *partTable) stateOf(k ranges.Key) state {
	if r := t.recs[k]; r != nil {
		return r.state
	}
	return stateIdle
}

// cur returns k's incarnation being read, or nil if it is not read.
func (t *partTable) cur(k ranges.Key) *incarnation {
	if r := t.recs[k]; r != nil {
		return r.cur
	}
	return nil
}

// reading yields every partition being read and its current incarnation,
// in no order.
func (t *partTable) reading() iter.Seq2[ranges.Key, *incarnation] {
	return func(yield func(ranges.Key, *incarnation) bool) {
		for k, r := range t.recs {
			if r.cur != nil && !yield(k, r.cur) {
				return
			}
		}
	}
}

// current reports whether st's incarnation of its partition is the one
// being read now.
func (t *partTable) current(st *rangeState) bool { return t.cur(st.r.Key()) == st.part }

// owned returns how many partitions the engine reads or waits to.
func (t *partTable) owned() int { return t.nReading + t.nWaiting }

// waiting returns the partitions waiting for their watermarks, with their
// waits.
func (t *partTable) waiting() map[ranges.Key]waiting {
	m := map[ranges.Key]waiting{}
	for k, r := range t.recs {
		if r.state == stateWaiting {
			m[k] = r.wait
		}
	}
	return m
}

// keysWhere returns the partitions whose record satisfies f, sorted.
func (t *partTable) keysWhere(f func(*record) bool) []ranges.Key {
	var keys []ranges.Key
	for k, r := range t.recs {
		if f(r) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, ranges.Key.Compare)
	return keys
}

// pending returns the batches of r handed out by Next and not done, of
// every incarnation.
func (r *record) pending() int {
	n := r.ended
	if r.cur != nil {
		n += r.cur.pending
	}
	return n
}

// handedOut counts a batch of incarnation p of k as handed out by Next and
// not done. It is counted in p while p is k's current incarnation, else in
// k's count of ended incarnations' batches (a part split off a batch of
// one). Each batch
// is counted in one place.
func (t *partTable) handedOut(k ranges.Key, p *incarnation) {
	t.nPending++
	if r := t.ensure(k); r.cur == p {
		p.pending++
	} else {
		r.ended++
	}
}

// returned uncounts a batch of incarnation p of k, handed out and now done
// (handedOut). It reports whether p is k's current incarnation.
func (t *partTable) returned(k ranges.Key, p *incarnation) bool {
	t.nPending--
	r := t.ensure(k)
	if r.cur == p {
		p.pending--
		return true
	}
	r.ended--
	return false
}

// lose records s as a lost span of k, to be logged (takeLosses).
func (t *partTable) lose(k ranges.Key, s lossSpan) {
	r := t.ensure(k)
	r.losses = append(r.losses, s)
}

// takeLosses returns the lost spans not logged yet, by partition, and
// forgets them.
func (t *partTable) takeLosses() map[ranges.Key][]lossSpan {
	losses := map[ranges.Key][]lossSpan{}
	for k, r := range t.recs {
		if len(r.losses) > 0 {
			losses[k], r.losses = r.losses, nil
		}
	}
	return losses
}

// setCut records c as the range of k cut short at an end inside its block
// (cuts.go).
func (t *partTable) setCut(k ranges.Key, c cut) { t.ensure(k).cut = c }

// classify keeps, in k's wait, that it was classified at a listing of the
// group's offsets and, if groupNew, that it is new to the group (read from
// its first offset). It returns the wait.
func (t *partTable) classify(k ranges.Key, groupNew bool) waiting {
	r := t.ensure(k)
	r.wait.classified = true
	if groupNew {
		r.wait.from = fromGroupNew
	}
	return r.wait
}

// listedAtStart records the partitions Start listed, with the group's
// offsets then and, with Membership and StopAtEnd, their snapshot ends
// (or why one could not be listed).
func (t *partTable) listedAtStart(p plan) {
	for _, k := range p.all {
		t.ensure(k).existed = true
	}
	for k, c := range p.committed {
		t.ensure(k).committed = c
	}
	t.snapshots = p.snapshot != nil
	for k, m := range p.snapshot {
		t.snapped(k, m)
	}
	for k, err := range p.unsnapped {
		t.ensure(k).snapErr = err
	}
}

// snapped records m as k's snapshot, the end a bounded group run reads it
// to.
func (t *partTable) snapped(k ranges.Key, m marks) {
	r := t.ensure(k)
	r.snapped, r.snap, r.snapErr = true, m, nil
}

// groupListed records the group's committed offset of k as listed now. ok
// false means the group has none.
func (t *partTable) groupListed(k ranges.Key, c int64, ok bool) {
	if !ok {
		c = -1
	}
	t.ensure(k).committed = c
}

// transition applies ev to k's record (apply) and returns apply's error.
// That error is a pair the table refuses, which stops the engine
// (Engine.failLocked).
func (t *partTable) transition(k ranges.Key, ev event, c change) error {
	_, err := t.apply(k, ev, c)
	return err
}

// startLocked applies evStarted to k's record. Incarnation p (its inc,
// first, emitFrom, extendTo and committed set) starts being read, planned
// from p.first to planEnd. With it starts what the transition implies. That
// is the planner's and the tracker's entry, the readers' context, and the
// cursor's Watch. An error leaves everything as it was. Such an error is a
// bug, where the planner, the tracker or the table refused.
func (e *Engine) startLocked(k ranges.Key, p *incarnation, planEnd int64) error {
	if err := e.parts.planner.Add(k, p.first, planEnd); err != nil {
		return fmt.Errorf("plan %s: %w", k, err)
	}
	if err := e.parts.tracker.Start(k, p.first); err != nil {
		e.parts.planner.Remove(k)
		return fmt.Errorf("track %s: %w", k, err)
	}
	p.open, p.began = map[int64]*rangeState{}, time.Now()
	if p.preAcked = e.parts.takeAcked(k, p.first); len(p.preAcked) > 0 {
		n := int64(0)
		for _, s := range p.preAcked {
			n += s.End - s.Start
		}
		e.log.Infof("Partition %s starts at its committed offset %d; %d offsets above it were acknowledged before that commit (its metadata) and are not handed out again", k, p.first, n)
	}
	p.ctx, p.cancel = context.WithCancel(e.sched.baseCtx)
	if _, err := e.parts.apply(k, evStarted, change{cur: p}); err != nil {
		p.cancel()
		e.parts.tracker.Remove(k)
		e.parts.planner.Remove(k)
		return err
	}
	e.parts.watch(k, e.kafka.cache)
	return nil
}

// dropLocked applies evDropped to k's record. Incarnation p, being read,
// ends, and with it what the transition implies. Its readers are
// cancelled, the slots of its ranges (in flight or waiting for a commit)
// are freed, the planner and the tracker forget it (so whatever of it
// arrives later, acknowledgements, nacks, reader results, is dropped as
// stale), and a drain no longer waits for it. What it acknowledged stays
// counted in Progress (observation.leftDone, leftTotal), and so does what it
// had left to read if the engine is stopping (the close hands every
// partition back, so what it leaves unread is this run's). It does not if
// the group handed it to another member mid-run. The caller closes its cached
// clients and reports it gone.
func (e *Engine) dropLocked(k ranges.Key, p *incarnation) {
	p.cancel()
	if at, ok := e.parts.tracker.Frontier(k); ok {
		unread := int64(0)
		if e.shut.IsSoftStopSignalled() || e.fatal != nil {
			_, end, _ := e.parts.planner.Position(k)
			unread = max(0, end-at)
		}
		e.stats.ended(at-p.first, unread)
	}
	e.sched.slots.drop(p)
	e.parts.planner.Remove(k)
	e.parts.tracker.Remove(k)
	e.failLocked(e.parts.transition(k, evDropped, change{}))
	e.out.drainWake(p)
}

// assigned is the group's assignment of k. Unless it is read or waits
// already, it waits to start as a new incarnation. It starts from where
// start_from says if it existed at the start, or from its first offset if
// it is new to the group (groupNew). Otherwise it starts from its first
// offset.
func (t *partTable) assigned(k ranges.Key) error {
	from := fromFirst
	if t.peek(k).existed {
		from = fromConfig // or new to the group: classifyWait
	}
	_, err := t.apply(k, evAssigned, change{from: from})
	return err
}

// topicGone forgets what the records of topic name say about the topic
// that is gone (deleted, or deleted and created again). It forgets the
// group's offsets (the coordinator deletes them too), the skip of
// start_from committed (released, so checked again), the cuts, the
// snapshot, and that its partitions existed at the start. A topic of that
// name assigned later was created since, so it is read from its first
// offset. Each record is marked
// recreated (explicitStart). Batches still in the pipeline stay
// counted. It returns the first error of a transition refused.
func (t *partTable) topicGone(name string) error {
	var first error
	for k, r := range t.recs {
		if k.Topic != name {
			continue
		}
		r.existed, r.committed, r.cut, r.recreated = false, -1, cut{}, true
		r.snapped, r.snap, r.snapErr = false, marks{}, nil
		if r.state == stateUncommitted {
			if _, err := t.apply(k, evReleased, change{}); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// waiting is a partition to read whose watermarks are not listed yet.
type waiting struct {
	inc        uint64 // the incarnation it will start as
	from       origin
	classified bool // from says whether it is new to the group, decided at the first listing of the group's offsets (classifyWait)
}

// unwait ends k's wait for its watermarks if it waits (revoked, its
// drain began, its topic gone).
func (t *partTable) unwait(k ranges.Key) error {
	if t.stateOf(k) != stateWaiting {
		return nil
	}
	_, err := t.apply(k, evReleased, change{})
	return err
}
