package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The engine's model walk (FuzzPartitionTable, TestPartitionTableModelWalk):
// random sequences of what happens to partitions, driven through the
// engine's own code without Kafka, against a model of what must hold. The
// engine is a real one (New) whose planner, tracker, batches channel and
// committer the walk installs; the scheduler's and the readers' goroutines
// are replaced by the walk, which runs their steps one at a time through
// the engine's methods: launch (walkLaunch mirrors Engine.launch without
// its goroutine), a reader's emit, skipLost, readerFailed and
// emitRead, Next, (*Batch).Ack, Nack, Split and AckAll, the commit path
// (Engine.commit), the group handler's Assigned, Revoked (with its drain)
// and Lost, startPartitionsLocked, startWaitingLocked, startAddedLocked,
// extendEndsLocked, onHigh and topicGone.
//
// A sequence's first two bytes choose the run: with a group member or with
// pinned partitions (a group that only stores offsets, explicit start
// offsets on some), start_from (earliest, latest, committed, timestamp),
// whether nacks are replayed, and the logs, the group's offsets and the
// explicit offsets at the start. The rest are (event, argument) pairs.

const (
	walkMaxLog   = 160 // the most offsets a log of the walk reaches
	walkRange    = 7   // MaxRangeRecords
	walkInFlight = 4   // MaxInFlight
)

// walkKeys are the walk's partitions: topic t's 0 and 1, topic u's 0.
var walkKeys = []ranges.Key{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "u", Partition: 0}}

// walkLog is one partition's log as the walk's cluster has it.
type walkLog struct {
	exists bool
	gen    int   // the topic's incarnation: +1 each time it is created again
	start  int64 // log start offset: offsets below were deleted
	end    int64 // log end offset
	stamp  int64 // the first offset at or after StartMillis
}

// record reports whether offset o holds a record (the others are
// transaction markers, aborted or compacted records), deleted or not.
func (l *walkLog) record(o int64) bool { return (o*5+int64(l.gen)*3)%7 != 3 }

// marks are the watermarks a listing shows now.
func (l *walkLog) marks() marks {
	return marks{start: l.start, end: l.end, high: l.end, from: min(max(l.stamp, l.start), l.end)}
}

// walkInc is one incarnation as the model sees it.
type walkInc struct {
	k         ranges.Key
	inc       uint64
	gen       int
	first     int64
	next      int64          // where its next range must start
	lastEnd   int64          // end of the last span Next handed out for the first time
	acked     map[int64]bool // records the pipeline acknowledged (Ack, Nack without replay)
	covered   map[int64]bool // offsets the tracker must hold acknowledged: acked spans, read tails, skipped losses
	delivered map[int64]bool // records handed out
	committed int64          // last offset committed for it, -1 if none
	ended     bool
}

// frontier is what the tracker's frontier must be: the end of the covered
// prefix from first.
func (in *walkInc) frontier() int64 {
	o := in.first
	for in.covered[o] {
		o++
	}
	return o
}

// walkWait is a wait to start a new incarnation, as the model sees it.
type walkWait struct {
	inc        uint64
	from       origin
	classified bool
	groupNew   bool
}

// walkPart is what the model knows of one partition.
type walkPart struct {
	state   state
	wait    walkWait // with stateWaiting
	cur     *walkInc // with stateReading
	owned   bool     // the group assigned it to this member (member runs)
	existed bool     // listed at the start, its topic not gone since
	losses  int      // the engine's loss spans of it already checked
}

// walkReader is a reader goroutine the walk plays.
type walkReader struct {
	st      *rangeState
	in      *walkInc
	pos     int64
	stalled bool
	done    bool // read to its end: fetchRange returned true
	began   time.Time
}

// walkListing is a listing taken at one time and answered later.
type walkListing struct {
	waits   map[ranges.Key]waiting
	listing group.Listing
	wm      map[ranges.Key]marks
}

// walkCommitter is the group (or offset store) the engine commits to.
type walkCommitter struct {
	mu     sync.Mutex
	refuse map[ranges.Key]bool // refused with a retriable error
	calls  []walkCommit
}

type walkCommit struct {
	offsets map[ranges.Key]int64
	failed  map[ranges.Key]error
}

func (c *walkCommitter) Commit(_ context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	failed := map[ranges.Key]error{}
	for k := range offsets {
		if c.refuse[k] {
			failed[k] = fmt.Errorf("commit %s: %w", k, kerr.CoordinatorNotAvailable)
		}
	}
	c.calls = append(c.calls, walkCommit{offsets: offsets, failed: failed})
	return failed, nil
}

// take returns the commits since the last take.
func (c *walkCommitter) take() []walkCommit {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

// walk is one sequence's engine and model.
type walk struct {
	t     *testing.T
	e     *Engine
	com   *walkCommitter
	rng   *rand.Rand
	event string // what the current event is, for failure messages

	member    bool
	startFrom StartFrom
	replay    bool
	ordered   bool // Config.Ordered (ops[0] bit 6)
	bounded   bool // Config.StopAtEnd, with pinned partitions (ops[0] bit 7)
	explicit  map[ranges.Key]int64
	founding  bool // a founder of the group (partTable.founding): nothing that existed at the start is new to it
	trace     bool // walkTraceEnv

	logs      map[ranges.Key]*walkLog
	committed map[ranges.Key]int64 // the group's offsets; -1 none
	parts     map[ranges.Key]*walkPart
	incs      map[uint64]*walkInc
	maxInc    uint64 // the highest incarnation number seen
	floor     uint64 // maxInc when the event began: what it starts is above
	readers   []*walkReader
	chanQ     []*Batch // sent to Next's channel, not taken yet, in order
	pipeline  []*Batch // handed out by Next (or split off), not finished by the pipeline
	replays   []*Batch // nacked, waiting for their replay
	handed    []*Batch // every batch ever handed out (or split off)
	stale     int64    // what Summary.Stale must be
	pending   *walkListing

	// Per event: what loss spans may appear and which starts to check.
	gone   map[string]bool          // topics deleted or recreated in this event
	starts map[ranges.Key]startWant // partitions expected to start in this event
	before map[ranges.Key]*walkInc  // the incarnations read when the event began
}

// startWant is where an incarnation must start, by the documented rule.
type startWant struct {
	at      int64
	lost    [][2]int64 // loss spans it records as it starts
	skipped bool       // start_from committed and no offset: not read
}

// runTableModel walks one sequence: ops[0] chooses the run (bit 0: pinned
// partitions instead of a group member; bits 1-2: start_from; bit 3: nacks
// dropped instead of replayed; bit 4: topic u created after the start; bit
// 5: a group member that found the group without offsets and members at its
// start, a founder; bit 6: ordered; bit 7, with pinned partitions: a bounded
// run, stop_at end, which runToEnd drains to its end instead of settle),
// ops[1] seeds the logs, the group's offsets and the explicit start offsets;
// then come (event, argument) pairs: the event by walkEventNames (modulo
// their number), the partition by the argument modulo 3, the argument's
// other bits what the event needs.
func runTableModel(t *testing.T, ops []byte) {
	if len(ops) < 2 {
		return
	}
	w := newWalk(t, ops[0], ops[1])
	defer w.e.sched.baseCancel()
	for i := 2; i+1 < len(ops); i += 2 {
		w.step(i, ops[i], ops[i+1])
	}
	if w.bounded {
		w.runToEnd()
		return
	}
	w.settle()
}

// runToEnd checks docs/configuration.md's stop_at "end: snapshot the end
// offsets at start, read to them, then end" (docs/backfills.md: "the run
// ends once the last batch flushes, every record acknowledged and
// committed") of a bounded walk, once its events are drained: every
// listing answered, every range launched, read and emitted, every batch
// handed out and acknowledged, every commit taken, the scheduler finds
// every partition read to its end and, as it then does, ends the run:
// Next returns ErrEnd. Whatever the events did (losses, truncations,
// deleted and recreated topics, failed reads, nacks), a bounded run ends.
func (w *walk) runToEnd() {
	e := w.e
	w.pending = nil // an answer never given: the next listing lists again
	for round := 0; ; round++ {
		require.Less(w.t, round, 200, "stop_at end: the run does not end once every event is drained: %s", w.waitsFor())
		progress := false
		w.event = fmt.Sprintf("run to end, round %d", round)
		w.beginEvent()
		w.listing(0)
		w.endEvent()
		for {
			w.beginEvent()
			n := len(w.readers)
			w.launch()
			w.endEvent()
			if len(w.readers) == n {
				break
			}
			progress = true
		}
		if len(w.readers) > 0 {
			progress = true
		}
		for _, rd := range slices.Clone(w.readers) {
			w.beginEvent()
			w.read(rd, walkRange)
			w.readerEnds(rd)
			w.endEvent()
		}
		for len(w.chanQ) > 0 || len(w.replays) > 0 || len(w.pipeline) > 0 {
			w.beginEvent()
			e.mu.Lock()
			for _, b := range e.out.replay {
				b.due = time.Time{}
			}
			e.mu.Unlock()
			queued, pipe := len(w.chanQ)+len(w.replays), len(w.pipeline)
			w.next()
			w.endEvent()
			for len(w.pipeline) > 0 {
				w.beginEvent()
				w.ack(w.pipeline[0])
				w.endEvent()
			}
			if len(w.chanQ)+len(w.replays) == queued && pipe == 0 {
				break // only what Next will not hand out
			}
			progress = true
		}
		w.beginEvent()
		w.commit(0)
		w.endEvent()
		e.mu.Lock()
		done := e.parts.ownWorkDone(e.sched.readers)
		e.mu.Unlock()
		if done {
			break
		}
		if !progress && len(w.readers) == 0 {
			require.Fail(w.t, "stop_at end: a bounded run stalls once every event is drained", "%s", w.waitsFor())
		}
	}
	// The scheduler's end (schedule's readToEnd, then its deferred close).
	e.mu.Lock()
	e.sched.reachedEnd = true
	e.mu.Unlock()
	e.sched.baseCancel()
	close(e.out.batches)
	e.mu.Lock()
	e.out.readersGone()
	e.mu.Unlock()
	e.out.signal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.ErrorIs(w.t, err, ErrEnd, "stop_at end: every partition read to its end, Next hands out %v: %s", b, w.waitsFor())
}

// waitsFor says, for a bounded run that does not end, what each partition
// waits in.
func (w *walk) waitsFor() string {
	e := w.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "readers %d, waiting %d, batches pending %d, replays %d, slots used %d;", e.sched.readers, e.parts.nWaiting, e.parts.nPending, len(e.out.replay), e.sched.slots.used)
	for _, k := range walkKeys {
		r := e.parts.peek(k)
		fmt.Fprintf(&b, " %s %v", k, r.state)
		if r.state == stateReading {
			pos, end, _ := e.parts.planner.Position(k)
			fmt.Fprintf(&b, " (planned to %d of %d, %d ranges open, failing %d, stalled %d, held %v, ended %d, committed %d)", pos, end, len(r.cur.open), r.cur.failing, r.cur.stalled, r.cur.held, r.ended, r.cur.committed)
		}
	}
	return b.String()
}

func newWalk(t *testing.T, mode, layout byte) *walk {
	w := &walk{
		t:         t,
		com:       &walkCommitter{},
		rng:       rand.New(rand.NewPCG(uint64(mode), uint64(layout))),
		member:    mode&1 == 0,
		startFrom: StartFrom(mode >> 1 & 3),
		replay:    mode>>3&1 == 0,
		ordered:   mode>>6&1 == 1,
		bounded:   mode&1 == 1 && mode>>7&1 == 1,
		trace:     os.Getenv(walkTraceEnv) == "1",
		logs:      map[ranges.Key]*walkLog{},
		committed: map[ranges.Key]int64{},
		parts:     map[ranges.Key]*walkPart{},
		incs:      map[uint64]*walkInc{},
		explicit:  map[ranges.Key]int64{},
	}
	for _, k := range walkKeys {
		l := &walkLog{exists: true, start: int64(w.rng.IntN(8)), end: 20 + int64(w.rng.IntN(20))}
		l.stamp = l.start + int64(w.rng.IntN(int(l.end-l.start)+1))
		later := k.Topic == "u" && mode>>4&1 == 1 // created after the start
		if later && !w.member {
			l.exists = false // a listing finds it later
		}
		w.logs[k] = l
		w.committed[k] = -1
		if w.rng.IntN(2) == 0 && l.exists {
			w.committed[k] = int64(w.rng.IntN(int(l.end) + 1))
		}
		w.parts[k] = &walkPart{existed: !later}
	}
	topics := []TopicSpec{{Name: "t"}, {Name: "u"}}
	if !w.member {
		// Pinned partitions of t, some with an explicit start offset; u whole.
		topics[0].Partitions = []int32{0, 1}
		for _, k := range walkKeys[:2] {
			if w.rng.IntN(2) == 0 {
				o := int64(w.rng.IntN(int(w.logs[k].end) + 1))
				w.explicit[k] = o
				if topics[0].Offsets == nil {
					topics[0].Offsets = map[int32]int64{}
				}
				topics[0].Offsets[k.Partition] = o
			}
		}
	}
	if w.startFrom == StartCommitted && w.member {
		// Some partitions without an offset are then never read: give
		// most of them one.
		for _, k := range walkKeys {
			if w.committed[k] < 0 && w.rng.IntN(3) > 0 {
				w.committed[k] = w.logs[k].start
			}
		}
	}
	e, err := New(Config{
		Seeds: []string{"127.0.0.1:1"}, Topics: topics, Group: GroupConfig{Name: "g", Membership: w.member, CommitPeriod: time.Second},
		StartFrom: w.startFrom, StartMillis: 1, SkipDataLoss: true, ReplayNacks: w.replay, Ordered: w.ordered, StopAtEnd: w.bounded,
		MaxRangeRecords: walkRange, MaxInFlight: walkInFlight, PollInterval: time.Second,
		Hooks: Hooks{Prepare: func(b *Batch) any { w.chanQ = append(w.chanQ, b); return nil }},
	})
	require.NoError(t, err)
	e.parts.planner, e.parts.tracker = ranges.NewPlanner(walkRange), ranges.NewTracker()
	e.sched.baseCtx, e.sched.baseCancel = context.WithCancel(context.Background())
	e.out.batches = make(chan *Batch, 4096)
	e.group.committer = w.com
	e.kafka.topicIDs = map[string][16]byte{}
	e.started = true
	e.parts.founding = w.member && mode>>5&1 == 1
	w.founding = e.parts.founding
	w.e = e
	w.start()
	return w
}

// start is Start's part after its listing: the partitions listed, and
// without a group member those started (or queued for their watermarks).
func (w *walk) start() {
	e := w.e
	w.event = "start"
	w.beginEvent()
	p := plan{marks: map[ranges.Key]marks{}, committed: map[ranges.Key]int64{}}
	for _, k := range walkKeys {
		if w.parts[k].existed {
			p.all = append(p.all, k)
		}
	}
	if !w.member {
		p.keys = p.all
		for _, k := range p.keys {
			if w.rng.IntN(4) > 0 {
				p.marks[k] = w.logs[k].marks()
			}
			if c := w.committed[k]; c >= 0 {
				p.committed[k] = c
			}
		}
	}
	for _, k := range p.keys {
		if m, ok := p.marks[k]; ok {
			w.starts[k] = w.wantStart(k, fromConfig, w.committed[k], false, m)
		}
	}
	e.mu.Lock()
	e.parts.listedAtStart(p)
	losses, _, _ := e.startPartitionsLocked(p)
	e.mu.Unlock()
	require.Empty(w.t, losses, "start")
	for _, k := range p.keys {
		if _, ok := p.marks[k]; ok {
			w.started(k, w.starts[k])
		} else {
			w.waits(k, fromConfig)
		}
	}
	w.endEvent()
}

// Events, by the low five bits of an event byte.
const (
	evwAssign = iota
	evwListing
	evwListingBegins
	evwListingAnswers
	evwLaunch
	evwRead
	evwReadFails
	evwReaderEnds
	evwNext
	evwAck
	evwNack
	evwSplit
	evwTimePasses
	evwCommit
	evwRevoke
	evwLose
	evwDelete
	evwRecreate
	evwTruncate
	evwProduce
	evwOtherCommits
	evwLaunchMore
	evwReadMore
	evwNextMore
	evwAckMore
	nWalkEvents
)

var walkEventNames = [nWalkEvents]string{"assign", "listing", "listing begins", "listing answers", "launch", "read", "read fails",
	"reader ends", "next", "ack", "nack", "split", "time passes", "commit", "revoke", "lose", "delete topic", "recreate topic",
	"truncate", "produce", "another member commits", "launch", "read", "next", "ack"}

func (w *walk) step(i int, op, arg byte) {
	ev := int(op) % nWalkEvents
	k := walkKeys[int(arg)%len(walkKeys)]
	w.event = fmt.Sprintf("event %d (%#x %#x: %s %s)", i/2, op, arg, walkEventNames[ev], k)
	if w.trace {
		w.t.Logf("%s; %s", w.event, w.state())
	}
	w.beginEvent()
	switch ev {
	case evwAssign:
		w.assign(k)
	case evwListing:
		w.listing(arg)
	case evwListingBegins:
		w.listingBegins(arg)
	case evwListingAnswers:
		w.listingAnswers()
	case evwLaunch, evwLaunchMore:
		w.launch()
	case evwRead, evwReadMore:
		if rd := w.reader(arg); rd != nil {
			w.read(rd, 1+int64(arg>>3)%8)
		}
	case evwReadFails:
		if rd := w.reader(arg); rd != nil {
			w.readFails(rd)
		}
	case evwReaderEnds:
		if rd := w.reader(arg); rd != nil {
			w.readerEnds(rd)
		}
	case evwNext, evwNextMore:
		w.next()
	case evwAck, evwAckMore:
		if b := w.pick(arg); b != nil {
			w.ack(b)
		}
	case evwNack:
		if b := w.pick(arg); b != nil {
			w.nack(b)
		}
	case evwSplit:
		if b := w.pick(arg); b != nil {
			w.split(b, arg)
		}
	case evwTimePasses:
		w.e.mu.Lock()
		for _, b := range w.e.out.replay {
			b.due = time.Time{}
		}
		w.e.mu.Unlock()
	case evwCommit:
		w.commit(arg)
	case evwRevoke:
		w.revoke(k, arg)
	case evwLose:
		w.lose(k)
	case evwDelete:
		w.deleteTopic(k.Topic)
	case evwRecreate:
		w.recreateTopic(k.Topic, arg)
	case evwTruncate:
		if l := w.logs[k]; l.exists {
			l.start = min(l.end, l.start+1+int64(arg>>2)%12)
		}
	case evwProduce:
		if l := w.logs[k]; l.exists && l.end < walkMaxLog {
			l.end = min(walkMaxLog, l.end+1+int64(arg>>2)%9)
			if !w.bounded { // a bounded run's cursors have no onHigh (Start)
				w.e.onHigh(k.Topic, k.Partition, l.end)
			}
		}
	case evwOtherCommits:
		if w.member && !w.parts[k].owned && w.logs[k].exists {
			w.committed[k] = int64(arg>>2) % (w.logs[k].end + 1)
		}
	}
	w.endEvent()
}

// walkTraceEnv names the variable that logs every event of a walk with the
// model's state before it (to read a failing sequence: run it as a seed).
const walkTraceEnv = "KBR_MODEL_TRACE"

// state says what the model holds now, in one line.
func (w *walk) state() string {
	var b strings.Builder
	for _, k := range walkKeys {
		mp, l := w.parts[k], w.logs[k]
		fmt.Fprintf(&b, "%s %s log [%d, %d) gen %d group %d", k, mp.state, l.start, l.end, l.gen, w.committed[k])
		if mp.cur != nil {
			fmt.Fprintf(&b, " inc %d from %d next %d", mp.cur.inc, mp.cur.first, mp.cur.next)
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "%d readers, %d in the channel, %d in the pipeline, %d replays", len(w.readers), len(w.chanQ), len(w.pipeline), len(w.replays))
	return b.String()
}

// beginEvent clears the per-event expectations.
func (w *walk) beginEvent() {
	w.gone = map[string]bool{}
	w.starts = map[ranges.Key]startWant{}
	w.before = map[ranges.Key]*walkInc{}
	w.floor = w.maxInc
	for k, mp := range w.parts {
		w.before[k] = mp.cur
	}
}

// --- The group's and the listings' events.

func (w *walk) assign(k ranges.Key) {
	if !w.member || !w.logs[k].exists {
		return
	}
	mp := w.parts[k]
	mp.owned = true
	(*handler)(w.e).Assigned(context.Background(), []ranges.Key{k})
	switch mp.state {
	case stateIdle, stateUncommitted:
		from := fromFirst
		if mp.existed {
			from = fromConfig
		}
		w.waits(k, from)
	}
}

// waits records that k waits to start, as a new incarnation from origin
// from, and learns that incarnation's number from the engine.
func (w *walk) waits(k ranges.Key, from origin) {
	w.e.mu.Lock()
	r := w.e.parts.peek(k)
	w.e.mu.Unlock()
	require.Equal(w.t, stateWaiting, r.state, "%s: %s does not wait", w.event, k)
	require.Greater(w.t, r.wait.inc, w.floor, "%s: %s waits as incarnation %d, not a new one", w.event, k, r.wait.inc)
	w.maxInc = max(w.maxInc, r.wait.inc)
	mp := w.parts[k]
	mp.state, mp.cur, mp.wait = stateWaiting, nil, walkWait{inc: r.wait.inc, from: from}
}

// groupListing is the group's offsets as a listing shows them now.
func (w *walk) groupListing() group.Listing {
	l := group.Listing{Offsets: map[ranges.Key]int64{}, Topics: map[string]bool{}}
	for k, c := range w.committed {
		if c >= 0 {
			l.Offsets[k], l.Topics[k.Topic] = c, true
		}
	}
	return l
}

// listingNow takes a listing: the waits, the group's offsets, and the
// watermarks of every partition of an existing topic (those whose bit in
// fail is set fail to be listed).
func (w *walk) listingNow(fail byte) *walkListing {
	w.e.mu.Lock()
	waits := w.e.parts.waiting()
	w.e.mu.Unlock()
	wm := map[ranges.Key]marks{}
	for i, k := range walkKeys {
		if w.logs[k].exists && fail>>(i+3)&1 == 0 {
			wm[k] = w.logs[k].marks()
		}
	}
	return &walkListing{waits: waits, listing: w.groupListing(), wm: wm}
}

// listing is the scheduler's refresh: every partition waiting for its
// watermarks starts if they were listed, new partitions of whole topics
// start (without a member), and the ends of the partitions read move.
func (w *walk) listing(fail byte) {
	e := w.e
	l := w.listingNow(fail)
	var added []ranges.Key
	if !w.member && !w.bounded { // a bounded run reads what existed at its start (refresh.go)
		for _, k := range walkKeys {
			if _, ok := l.wm[k]; ok && w.parts[k].state == stateIdle {
				added = append(added, k)
			}
		}
	}
	w.expectListing(l)
	for _, k := range added {
		w.starts[k] = w.wantStart(k, fromFirst, -1, false, l.wm[k])
	}
	e.mu.Lock()
	known := e.parts.planner.Keys()
	if e.startWaitingLocked(l.waits, l.listing, l.wm) {
		_, ok := e.startAddedLocked(added, l.wm)
		require.True(w.t, ok, "%s: new partitions did not start: %v", w.event, e.fatal)
		if !w.bounded {
			e.extendEndsLocked(known, l.wm, time.Now())
		}
	}
	e.mu.Unlock()
	w.listed(l)
	for _, k := range added {
		w.started(k, w.starts[k])
	}
}

// expectListing says which waits of l start and where, by the model.
func (w *walk) expectListing(l *walkListing) {
	for k, wt := range l.waits {
		mp := w.parts[k]
		if mp.state != stateWaiting || mp.wait.inc != wt.inc {
			continue // an older incarnation's wait: the answer is stale
		}
		if !mp.wait.classified {
			// New to the group (groupNew), decided at the wait's first
			// listing, as the engine does; never a pinned partition, which
			// starts where start_from says whether it was listable at the
			// start or not.
			mp.wait.classified = true
			_, committed := l.listing.Offsets[k]
			_, explicit := w.explicit[k]
			mp.wait.groupNew = w.member && mp.wait.from == fromConfig && (w.startFrom == StartLatest || w.startFrom == StartTimestamp) &&
				!explicit && !committed && len(l.listing.Topics) > 0 && !w.founding
		}
		m, ok := l.wm[k]
		if !ok {
			continue
		}
		c, ok := l.listing.Offsets[k]
		if !ok {
			c = -1
		}
		w.starts[k] = w.wantStart(k, mp.wait.from, c, mp.wait.groupNew, m)
	}
}

// listed applies what the model expected of listing l.
func (w *walk) listed(l *walkListing) {
	for k := range l.waits {
		if want, ok := w.starts[k]; ok && w.parts[k].state == stateWaiting {
			w.started(k, want)
		}
	}
}

// started checks that k started (or was skipped) as want says, and records
// its new incarnation.
func (w *walk) started(k ranges.Key, want startWant) {
	e := w.e
	mp := w.parts[k]
	e.mu.Lock()
	r := e.parts.peek(k)
	e.mu.Unlock()
	if want.skipped {
		require.Equal(w.t, stateUncommitted, r.state, "%s: %s has no committed offset under start_from committed", w.event, k)
		mp.state, mp.cur = stateUncommitted, nil
		return
	}
	require.Equal(w.t, stateReading, r.state, "%s: %s did not start", w.event, k)
	p := r.cur
	if mp.state == stateWaiting {
		require.Equal(w.t, mp.wait.inc, p.inc, "%s: %s started as another incarnation than it waited as", w.event, k)
	} else {
		require.Greater(w.t, p.inc, w.floor, "%s: %s started as an old incarnation", w.event, k)
	}
	w.maxInc = max(w.maxInc, p.inc)
	require.Equal(w.t, want.at, p.first, "%s: %s incarnation %d starts at %d, want %d (log [%d, %d), group offset %d, explicit %v, start_from %d)",
		w.event, k, p.inc, p.first, want.at, w.logs[k].start, w.logs[k].end, w.committed[k], w.explicit[k], w.startFrom)
	in := &walkInc{k: k, inc: p.inc, gen: w.logs[k].gen, first: p.first, next: p.first, lastEnd: p.first, committed: -1,
		acked: map[int64]bool{}, covered: map[int64]bool{}, delivered: map[int64]bool{}}
	w.incs[p.inc] = in
	mp.state, mp.cur, mp.wait = stateReading, in, walkWait{}
}

// wantStart is where k starts, with origin from, the group's offset c (-1:
// none) and watermarks m, by the documented rule: the group's committed
// offset (unless the topic is a new one of the same name), else for a
// partition that existed at the start (or was created since, its topic
// never deleted) its explicit offset, else start_from; a partition created
// since, or new to the group, from its first offset.
// An offset below the log start is a counted loss up to it.
func (w *walk) wantStart(k ranges.Key, from origin, c int64, groupNew bool, m marks) startWant {
	if from == fromNewTopic {
		c = -1
	}
	o, explicit := w.explicit[k]
	// An explicit offset applies to a partition listed at the start, or
	// created after it, never to one of a topic deleted since (its offset
	// was the old topic's): a committed offset wins over it.
	explicit = explicit && (from == fromConfig || from == fromFirst && w.logs[k].gen == 0)
	var s startWant
	if w.startFrom == StartCommitted && c < 0 && !explicit {
		return startWant{skipped: true}
	}
	switch {
	case c >= 0 && c < m.start:
		s.at, s.lost = m.start, [][2]int64{{c, m.start}}
	case c >= 0:
		s.at = c
	case explicit && o < m.start:
		s.at, s.lost = m.start, [][2]int64{{o, m.start}}
	case explicit:
		s.at = o
	case from != fromConfig || groupNew:
		s.at = m.start
	case w.startFrom == StartLatest:
		s.at = m.end
	case w.startFrom == StartTimestamp:
		s.at = max(m.from, m.start)
	default:
		s.at = m.start
	}
	return s
}

// listingBegins takes a listing that answers later (listingAnswers).
func (w *walk) listingBegins(fail byte) {
	if w.pending == nil {
		w.pending = w.listingNow(fail)
	}
}

// listingAnswers answers the listing taken earlier: only the waits it was
// taken for that still wait as the same incarnation may start from it
// (startWaitingLocked's incarnation check).
func (w *walk) listingAnswers() {
	l := w.pending
	if l == nil {
		return
	}
	w.pending = nil
	w.expectListing(l)
	w.e.mu.Lock()
	w.e.startWaitingLocked(l.waits, l.listing, l.wm)
	w.e.mu.Unlock()
	w.listed(l)
}

func (w *walk) revoke(k ranges.Key, arg byte) {
	if !w.member || !w.parts[k].owned {
		return
	}
	e := w.e
	mp := w.parts[k]
	in := mp.cur
	full := arg&2 == 0 // the pipeline finishes every batch of it during the drain
	e.cfg.Group.RevokeDrainTimeout = 0
	if full {
		e.cfg.Group.RevokeDrainTimeout = time.Minute
	}
	w.com.refuse = map[ranges.Key]bool{k: arg&4 != 0 && arg&8 != 0}
	var mine []*Batch
	if in != nil {
		for _, b := range w.pipeline {
			if b.st.part.inc == in.inc {
				mine = append(mine, b)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		(*handler)(e).Revoked(context.Background(), []ranges.Key{k})
	}()
	if full && in != nil && len(mine) > 0 {
		w.await(func() bool { p := in.part(e); return p == nil || p.draining }, "the revocation marked %s draining", k)
		w.next() // nothing of it is handed out now
		for j, b := range mine {
			if arg>>(4+j%4)&1 == 0 || !w.replay {
				w.ack(b)
			} else {
				w.nack(b)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		w.t.Fatalf("%s: the revocation of %s did not end once every batch of it handed out was done", w.event, k)
	}
	commits := w.com.take()
	w.applyCommits(commits, map[ranges.Key]*walkInc{k: in})
	if in != nil && !w.com.refuse[k] {
		require.Equal(w.t, in.frontier(), w.committed[k], "%s: the revocation did not commit %s's acknowledged frontier", w.event, k)
	}
	mp.owned = false
	w.ends(k)
}

// await waits until f, called under the engine's lock, holds.
func (w *walk) await(f func() bool, format string, args ...any) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.e.mu.Lock()
		ok := f()
		w.e.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: waited in vain until %s", w.event, fmt.Sprintf(format, args...))
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// part returns the engine's partition of in, or nil if in is not the
// current incarnation (under the engine's lock).
func (in *walkInc) part(e *Engine) *incarnation {
	if p := e.parts.cur(in.k); p != nil && p.inc == in.inc {
		return p
	}
	return nil
}

func (w *walk) lose(k ranges.Key) {
	if !w.member || !w.parts[k].owned {
		return
	}
	(*handler)(w.e).Lost(context.Background(), []ranges.Key{k})
	require.Empty(w.t, w.com.take(), "%s: a lost partition was committed", w.event)
	w.parts[k].owned = false
	w.ends(k)
}

// ends records that k's incarnation, or its wait, ended: it is idle.
func (w *walk) ends(k ranges.Key) {
	mp := w.parts[k]
	if mp.cur != nil {
		mp.cur.ended = true
	}
	mp.state, mp.cur, mp.wait = stateIdle, nil, walkWait{}
}

func (w *walk) deleteTopic(name string) {
	if !w.logs[walkKeys[topicIndex(name)]].exists {
		return
	}
	w.gone[name] = true
	w.e.topicGone(name, fmt.Errorf("topic %q: %w", name, errMissing))
	for _, k := range walkKeys {
		if k.Topic != name {
			continue
		}
		w.logs[k].exists = false
		w.committed[k] = -1 // the coordinator deletes them too
		w.parts[k].existed = false
		w.ends(k)
	}
}

func topicIndex(name string) int {
	return slices.IndexFunc(walkKeys, func(k ranges.Key) bool { return k.Topic == name })
}

// recreateTopic creates topic name again, with new logs: a listing sees
// its new ID (recreated under this engine if it existed, else after a
// listing saw it deleted).
func (w *walk) recreateTopic(name string, arg byte) {
	w.gone[name] = true
	w.e.topicGone(name, nil)
	for _, k := range walkKeys {
		if k.Topic != name {
			continue
		}
		l := w.logs[k]
		*l = walkLog{exists: true, gen: l.gen + 1, end: int64(arg>>2)%30 + 1}
		l.stamp = l.end / 2
		w.committed[k] = -1
		mp := w.parts[k]
		mp.existed = false
		if w.member && mp.owned {
			// What topicGone's deferred function does with the member's
			// ownership (the walk has no group.Member): it is read again
			// from the new topic's first offset.
			w.e.mu.Lock()
			if !w.e.parts.stateOf(k).held() && w.e.fatal == nil {
				w.e.failLocked(w.e.parts.transition(k, evTopicBack, change{from: fromNewTopic}))
			}
			w.e.mu.Unlock()
		}
		w.ends(k)
		if w.member && mp.owned {
			w.waits(k, fromNewTopic)
		}
	}
}

// --- The scheduler and its readers.

// walkLaunch is Engine.launch for at most one range, without the reader
// goroutine (the walk plays it): the scheduler's own launchOneLocked.
func walkLaunch(e *Engine) *rangeState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.launchOneLocked()
}

func (w *walk) launch() {
	w.e.mu.Lock()
	slots := w.e.sched.slots.used
	w.e.mu.Unlock()
	st := walkLaunch(w.e)
	if st == nil {
		return
	}
	// docs/configuration.md: max_in_flight is the most ranges in flight at
	// once; a range starts only while one of them is free.
	require.Less(w.t, slots, walkInFlight, "%s: range %s started while %d ranges held a slot (max_in_flight %d)", w.event, st.r, slots, walkInFlight)
	r := st.r
	in := w.parts[r.Key()].cur
	require.NotNil(w.t, in, "%s: range %s launched for a partition the model does not read", w.event, r)
	require.Equal(w.t, in.inc, st.part.inc, "%s: range %s launched for incarnation %d, not %d", w.event, r, st.part.inc, in.inc)
	require.Equal(w.t, in.next, r.Start, "%s: range %s does not start where the last ended (%d)", w.event, r, in.next)
	require.LessOrEqual(w.t, r.End, w.logs[r.Key()].end, "%s: range %s past the log end", w.event, r)
	require.LessOrEqual(w.t, r.End-r.Start, int64(walkRange), "%s: range %s longer than max_range_records", w.event, r)
	if w.ordered {
		w.checkOrderedLaunch(st)
		// The walk plays the reader, which in ordered mode waits for each
		// batch's end before sending the next: it sends without waiting.
		st.ackSig = nil
	}
	in.next = r.End
	w.readers = append(w.readers, &walkReader{st: st, in: in, pos: r.Start, stalled: true, began: time.Now()})
}

// reader picks a reader by arg, or nil.
func (w *walk) reader(arg byte) *walkReader {
	if len(w.readers) == 0 {
		return nil
	}
	return w.readers[int(arg)%len(w.readers)]
}

// read is the reader's lease reading up to n offsets of its range: the
// records that exist there are emitted; offsets deleted under it are
// skipped as lost (fetchRange's OffsetOutOfRangeError, skipLost).
func (w *walk) read(rd *walkReader, n int64) {
	e := w.e
	st, r := rd.st, rd.st.r
	ctx := st.part.ctx
	if ctx.Err() != nil || rd.done {
		return
	}
	l := w.logs[r.Key()]
	if !l.exists || l.gen != rd.in.gen {
		w.readFails(rd) // vanished: listed again, retried
		return
	}
	if rd.pos < l.start {
		e.mu.Lock()
		before, _, _ := e.parts.planner.Position(r.Key())
		e.mu.Unlock()
		rd.pos = (&reader{e: e, st: st}).skipLost(rd.pos, l.start)
		e.mu.Lock()
		after, _, _ := e.parts.planner.Position(r.Key())
		e.mu.Unlock()
		for o := before; o < after; o++ {
			rd.in.covered[o] = true // skipped unplanned: added and acknowledged
		}
		rd.in.next = max(rd.in.next, after)
		if rd.pos >= r.End {
			rd.done = true
		}
		return
	}
	to := min(r.End, rd.pos+n)
	var recs []*kgo.Record
	for o := rd.pos; o < to; o++ {
		if l.record(o) {
			recs = append(recs, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: o, Value: []byte("v")})
		}
	}
	if len(recs) > 0 {
		if rd.stalled {
			(&reader{e: e, st: st}).note(func(s *slots, current bool) bool { return st.readerRead(s, current, true) }) // as from a distant broker: the most ranges at once
			rd.stalled = false
		}
		require.NoError(w.t, (&reader{e: e, st: st}).emit(ctx, recs, l.end), "%s: emit", w.event)
	}
	rd.pos = to
	if to == r.End {
		rd.done = true
		if rd.stalled {
			(&reader{e: e, st: st}).note(func(s *slots, current bool) bool { return st.readerRead(s, current, true) }) // as from a distant broker: the most ranges at once
			rd.stalled = false
		}
	}
}

// readFails is a failed read attempt: the reader backs off.
func (w *walk) readFails(rd *walkReader) {
	if rd.st.part.ctx.Err() != nil || rd.done {
		return
	}
	(&reader{e: w.e, st: rd.st}).note(rd.st.readerFailed)
	rd.stalled = true
}

// readerEnds ends a reader: one whose partition's readers were cancelled
// (revoked, lost, its topic gone), or one read to its end whose turn to
// emit came (emitRead). Then read's deferred part.
func (w *walk) readerEnds(rd *walkReader) {
	e := w.e
	st, r := rd.st, rd.st.r
	ctx := st.part.ctx
	if ctx.Err() == nil {
		if !rd.done {
			return // still reading
		}
		select {
		case <-st.turn:
		default:
			return // waits for its turn
		}
		emitted := st.emitted
		(&reader{e: e, st: st}).emitRead(ctx, rd.began)
		e.mu.Lock()
		if st.readDone {
			for o := emitted; o < r.End; o++ {
				rd.in.covered[o] = true // the offsets after its last record
			}
		}
		e.mu.Unlock()
	}
	(&reader{e: e, st: st}).note(st.readerEnded)
	e.mu.Lock()
	e.sched.readers--
	e.mu.Unlock()
	e.out.signal()
	e.sched.signal()
	w.readers = slices.DeleteFunc(w.readers, func(o *walkReader) bool { return o == rd })
}

// --- The pipeline.

// deliverable reports whether Next hands b out now (under the engine's
// lock): its incarnation is current and not being drained.
func (w *walk) deliverable(b *Batch) bool {
	return w.e.parts.current(b.st) && !b.st.part.draining && w.e.fatal == nil
}

// next takes a batch from Next when the model says Next has one to hand
// out (a due replay, a batch in the channel that is not stale); with only
// stale batches in the channel, it lets Next drop them.
func (w *walk) next() {
	e := w.e
	e.mu.Lock()
	var want *Batch
	replayed := false
	for _, b := range e.out.replay {
		if w.deliverable(b) {
			if !b.due.After(time.Now()) {
				want, replayed = b, true
			}
			break
		}
	}
	if want == nil {
		for _, b := range w.chanQ {
			if w.deliverable(b) {
				want = b
				break
			}
		}
	}
	before := len(e.out.batches)
	e.mu.Unlock()
	if want == nil && before == 0 {
		return
	}
	wait := 5 * time.Second
	if want == nil {
		wait = 5 * time.Millisecond // it drops the stale ones, then waits
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	b, err := e.Next(ctx)
	cancel()
	taken := before - len(e.out.batches)
	for j := range taken {
		q := w.chanQ[j]
		if q != b {
			e.mu.Lock()
			ok := w.deliverable(q)
			e.mu.Unlock()
			require.False(w.t, ok, "%s: Next dropped a batch it had to hand out (%s of incarnation %d)", w.event, q.Span, q.st.part.inc)
		}
	}
	w.chanQ = w.chanQ[taken:]
	if want == nil {
		require.Error(w.t, err, "%s: Next handed out %v, which the model says it must not", w.event, b)
		return
	}
	require.NoError(w.t, err, "%s: Next handed out nothing, want %s of incarnation %d", w.event, want.Span, want.st.part.inc)
	require.Same(w.t, want, b, "%s: Next handed out %s of incarnation %d, want %s of incarnation %d", w.event, b.Span, b.st.part.inc, want.Span, want.st.part.inc)
	in := w.incs[b.st.part.inc]
	if replayed {
		require.Contains(w.t, w.replays, b, "%s: a replay the model did not nack", w.event)
		w.replays = slices.DeleteFunc(w.replays, func(o *Batch) bool { return o == b })
		require.Greater(w.t, b.Attempts, 1, "%s: a replay counted as a first delivery", w.event)
	} else {
		// A first delivery: its records are the incarnation's next ones,
		// each once, inside its span, inside its range.
		require.Equal(w.t, 1, b.Attempts, "%s: attempts of a first delivery", w.event)
		require.GreaterOrEqual(w.t, b.Span.Start, in.lastEnd, "%s: batch %s handed out after %d of incarnation %d: out of order", w.event, b.Span, in.lastEnd, in.inc)
		require.True(w.t, b.Span.Start >= b.Range.Start && b.Span.End <= b.Range.End && b.Span.Start < b.Span.End, "%s: span %s outside its range %s", w.event, b.Span, b.Range)
		for _, rec := range b.Records {
			require.True(w.t, rec.Offset >= b.Span.Start && rec.Offset < b.Span.End, "%s: record %d outside its batch's span %s", w.event, rec.Offset, b.Span)
			require.False(w.t, in.delivered[rec.Offset], "%s: %s offset %d delivered twice in incarnation %d", w.event, b.Range.Key(), rec.Offset, in.inc)
			in.delivered[rec.Offset] = true
		}
		in.lastEnd = b.Span.End
		w.handed = append(w.handed, b)
	}
	w.pipeline = append(w.pipeline, b)
}

// pick picks a batch in the pipeline by arg, or nil.
func (w *walk) pick(arg byte) *Batch {
	if len(w.pipeline) == 0 {
		return nil
	}
	return w.pipeline[int(arg>>2)%len(w.pipeline)]
}

// finish takes b out of the pipeline, and reports whether its incarnation
// is current and not drained (the model's view of what its ack does).
func (w *walk) finish(b *Batch) (current, draining bool) {
	w.pipeline = slices.DeleteFunc(w.pipeline, func(o *Batch) bool { return o == b })
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	return w.e.parts.current(b.st), b.st.part.draining
}

// acked records b's acknowledgement in its incarnation.
func (w *walk) acked(b *Batch) {
	in := w.incs[b.st.part.inc]
	for _, rec := range b.Records {
		in.acked[rec.Offset] = true
	}
	for o := b.Span.Start; o < b.Span.End; o++ {
		in.covered[o] = true
	}
}

func (w *walk) ack(b *Batch) {
	current, _ := w.finish(b)
	b.Ack()
	require.True(w.t, b.Done(), "%s: an acknowledged batch is not done", w.event)
	if current {
		w.acked(b)
	} else {
		w.stale++
	}
}

func (w *walk) nack(b *Batch) {
	current, draining := w.finish(b)
	b.Nack(errors.New("rejected"))
	switch {
	case !w.replay: // dropped: counts as acknowledged
		if current {
			w.acked(b)
		} else {
			w.stale++
		}
	case !current:
		require.True(w.t, b.Done(), "%s: a rejection of an incarnation that is over waits for a replay", w.event)
		w.stale++
	case draining:
		require.True(w.t, b.Done(), "%s: a batch of a partition being drained was rejected and waits for a replay", w.event)
	default:
		require.False(w.t, b.Done(), "%s: a rejected batch is done before its replay", w.event)
		w.replays = append(w.replays, b)
	}
}

// split cuts b before one of its records; the pipeline then acknowledges
// both parts at once (AckAll) or leaves them in the pipeline.
func (w *walk) split(b *Batch, arg byte) {
	if len(b.Records) < 2 || b.Done() {
		return
	}
	i := 1 + int(arg>>5)%(len(b.Records)-1)
	span := b.Span
	tail := b.Split(i)
	require.Equal(w.t, span.Start, b.Span.Start, "%s: split moved the head's start", w.event)
	require.Equal(w.t, b.Span.End, tail.Span.Start, "%s: split parts %s and %s are not adjacent", w.event, b.Span, tail.Span)
	require.Equal(w.t, span.End, tail.Span.End, "%s: split moved the tail's end", w.event)
	for _, part := range []*Batch{b, tail} {
		for _, rec := range part.Records {
			require.True(w.t, rec.Offset >= part.Span.Start && rec.Offset < part.Span.End, "%s: split: record %d outside its part's span %s", w.event, rec.Offset, part.Span)
		}
	}
	w.handed = append(w.handed, tail)
	w.pipeline = append(w.pipeline, tail)
	if arg&2 != 0 {
		current, _ := w.finish(b)
		w.finish(tail)
		AckAll([]*Batch{b, tail})
		if current {
			w.acked(b)
			w.acked(tail)
		} else {
			w.stale++ // once for the pipeline's one acknowledgement
		}
	}
}

// commit is a periodic commit; the coordinator refuses the partitions
// whose bit in arg is set (retriably).
func (w *walk) commit(arg byte) {
	w.com.refuse = map[ranges.Key]bool{}
	for i, k := range walkKeys {
		w.com.refuse[k] = arg>>(i+5)&1 == 1
	}
	owners := map[ranges.Key]*walkInc{}
	for _, k := range walkKeys {
		owners[k] = w.parts[k].cur
	}
	_ = w.e.commit(context.Background())
	w.applyCommits(w.com.take(), owners)
	// What was not refused is committed: the group has each frontier.
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	for k, p := range w.e.parts.reading() {
		if f, _ := w.e.parts.tracker.Frontier(k); !w.com.refuse[k] {
			require.Equal(w.t, f, w.committed[k], "%s: %s's frontier (incarnation %d) was not committed", w.event, k, p.inc)
		}
	}
}

// applyCommits checks the commits made for the incarnations of owners and
// records them as the group's offsets: nothing is committed past a record
// that exists and the incarnation did not have acknowledged, or below where
// it started, or below its last commit.
func (w *walk) applyCommits(calls []walkCommit, owners map[ranges.Key]*walkInc) {
	for _, c := range calls {
		for k, at := range c.offsets {
			if c.failed[k] != nil {
				continue
			}
			in := owners[k]
			require.NotNil(w.t, in, "%s: committed %s at %d, which the model does not read", w.event, k, at)
			l := w.logs[k]
			require.GreaterOrEqual(w.t, at, in.first, "%s: %s committed at %d, below where incarnation %d started (%d)", w.event, k, at, in.inc, in.first)
			require.GreaterOrEqual(w.t, at, in.committed, "%s: %s's commits went back from %d to %d", w.event, k, in.committed, at)
			for o := in.first; o < at; o++ {
				if l.gen == in.gen && o >= l.start && o < l.end && l.record(o) {
					require.True(w.t, in.acked[o], "%s: %s committed at %d past offset %d, which incarnation %d did not have acknowledged", w.event, k, at, o, in.inc)
				}
			}
			in.committed = at
			w.committed[k] = at
		}
	}
}

// --- Checks.

// endEvent checks what must hold after every event.
func (w *walk) endEvent() {
	t, e := w.t, w.e
	// Replays dropped (their incarnation over or drained) are counted.
	w.replays = slices.DeleteFunc(w.replays, func(b *Batch) bool {
		if !b.Done() {
			return false
		}
		w.stale++
		return true
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NoError(t, e.fatal, "%s: the engine stopped", w.event)
	require.NoError(t, e.parts.check(&e.sched.slots), w.event)
	reading := []ranges.Key{}
	for _, k := range walkKeys {
		mp := w.parts[k]
		r := e.parts.peek(k)
		require.Equal(t, mp.state, r.state, "%s: %s's state", w.event, k)
		switch mp.state {
		case stateReading:
			require.Equal(t, mp.cur.inc, r.cur.inc, "%s: %s is read as another incarnation", w.event, k)
			reading = append(reading, k)
			f, ok := e.parts.tracker.Frontier(k)
			require.True(t, ok, "%s: %s read but not tracked", w.event, k)
			require.Equal(t, mp.cur.frontier(), f, "%s: %s's frontier (incarnation %d from %d)", w.event, k, mp.cur.inc, mp.cur.first)
		case stateWaiting:
			require.Equal(t, mp.wait.inc, r.wait.inc, "%s: %s waits as another incarnation", w.event, k)
			fallthrough
		default:
			_, ok := e.parts.tracker.Frontier(k)
			require.False(t, ok, "%s: %s tracked but not read", w.event, k)
		}
		w.checkLosses(k, r)
	}
	planned := e.parts.planner.Keys()
	slices.SortFunc(planned, ranges.Key.Compare)
	require.Equal(t, reading, planned, "%s: the planner's partitions and the ones read", w.event)

	// Counts: slots, readers, batches handed out and not done, stale.
	slots := 0
	for k, p := range e.parts.reading() {
		slots += p.holding()
		for _, end := range p.held {
			require.Greater(t, end, p.committed, "%s: %s's range ending at %d keeps its slot, though the commit of %d covers it", w.event, k, end, p.committed)
		}
	}
	require.Equal(t, slots, e.sched.slots.used, "%s: ranges holding a slot", w.event)
	if w.ordered {
		// docs/configuration.md's ordered: "One range per partition in
		// flight, so each partition arrives in offset order."
		for k, p := range e.parts.reading() {
			require.LessOrEqual(t, len(p.open), 1, "%s: ordered: %s has %d ranges in flight (one range per partition in flight)", w.event, k, len(p.open))
		}
	}
	w.checkCrashBound(slots)
	require.Equal(t, len(w.readers), e.sched.readers, "%s: readers", w.event)
	open := 0
	perKey := map[ranges.Key]int{}
	perInc := map[uint64]int{}
	for _, b := range w.handed {
		if !b.Done() {
			open++
			perKey[b.Range.Key()]++
			perInc[b.st.part.inc]++
		}
	}
	require.Equal(t, open, e.parts.nPending, "%s: batches handed out and not done", w.event)
	for _, k := range walkKeys {
		r := e.parts.peek(k)
		require.Equal(t, perKey[k], r.pending(), "%s: %s's batches in the pipeline", w.event, k)
	}
	for _, p := range e.parts.reading() {
		require.Equal(t, perInc[p.inc], p.pending, "%s: incarnation %d's batches in the pipeline", w.event, p.inc)
	}
	require.Equal(t, w.stale, e.stats.stale.Load(), "%s: stale acknowledgements counted", w.event)
	var lost int64
	for _, r := range e.parts.recs {
		for _, s := range r.losses {
			lost += s.to - s.from
		}
	}
	require.Equal(t, lost, e.stats.lost.Load(), "%s: lost offsets counted and recorded", w.event)
}

// checkCrashBound checks docs/design.md's "A range keeps its max_in_flight
// slot until a commit covers it, so a crash re-reads at most max_in_flight ×
// max_range_records records" at every step: the records a crash now would
// hand out again (those of the current incarnations handed out at or past
// the offset committed for them) fit in the ranges holding a slot, and
// those are max_in_flight at most, but for the ranges of a partition whose
// read failed, which give their slots to others until it reads again and
// then take them back (design.md: one failing partition never stops the
// others). walk.launch checks that a range starts only while a slot is free.
func (w *walk) checkCrashBound(slots int) {
	reRead := 0
	for _, k := range walkKeys {
		mp := w.parts[k]
		if mp.state != stateReading {
			continue
		}
		from := max(mp.cur.first, mp.cur.committed)
		for o := range mp.cur.delivered {
			if o >= from {
				reRead++
			}
		}
	}
	bound := walkRange * max(walkInFlight, slots)
	require.LessOrEqual(w.t, reRead, bound, "%s: a crash now re-reads %d records handed out past the committed offsets, more than the %d ranges holding a slot hold (max_in_flight %d × max_range_records %d)",
		w.event, reRead, max(walkInFlight, slots), walkInFlight, walkRange)
}

// checkOrderedLaunch checks, in ordered mode, docs/configuration.md's
// "One range per partition in flight, so each partition arrives in offset
// order" and docs/several-instances.md's "With ordered: true a partition
// that comes back to the same process is read again only once its earlier
// incarnation's batches are out of the pipeline" as range st starts: its
// partition has no other range in flight and no batch of an earlier
// incarnation in the pipeline. (launch checks that it starts where the
// incarnation's last range ended, so each offset is planned once per
// incarnation and in offset order; next, that each is handed out once
// and in order, replays of a nacked batch aside.)
func (w *walk) checkOrderedLaunch(st *rangeState) {
	e := w.e
	e.mu.Lock()
	defer e.mu.Unlock()
	k := st.r.Key()
	for start := range st.part.open {
		require.Equal(w.t, st.r.Start, start, "%s: ordered: range %s started while %s's range from %d is in flight (one range per partition in flight)", w.event, st.r, k, start)
	}
	require.Zero(w.t, e.parts.peek(k).ended, "%s: ordered: range %s of incarnation %d started while batches of an earlier incarnation are in the pipeline", w.event, st.r, st.part.inc)
	for _, b := range w.pipeline {
		if b.Range.Key() == k && b.st.part.inc != st.part.inc && !b.Done() {
			require.Fail(w.t, "ordered: a new incarnation read before the old one's batches left the pipeline", "%s: range %s of incarnation %d started while batch %s of incarnation %d is in the pipeline", w.event, st.r, st.part.inc, b.Span, b.st.part.inc)
		}
	}
}

// checkLosses checks the loss spans k's record gained in this event: at a
// start exactly those the documented rule says; otherwise only offsets
// deleted (below the log start, or the whole topic deleted or recreated),
// never a record the incarnation handed out.
func (w *walk) checkLosses(k ranges.Key, r record) {
	mp := w.parts[k]
	spans := r.losses[mp.losses:]
	mp.losses = len(r.losses)
	if want, ok := w.starts[k]; ok && !want.skipped {
		var got, wantLost [][2]int64
		for _, s := range spans {
			got = append(got, [2]int64{s.from, s.to})
		}
		for _, s := range want.lost {
			if s[0] < s[1] {
				wantLost = append(wantLost, s)
			}
		}
		require.Equal(w.t, wantLost, got, "%s: %s's losses as it started at %d", w.event, k, want.at)
		return
	}
	for _, s := range spans {
		if !w.gone[k.Topic] {
			require.LessOrEqual(w.t, s.to, w.logs[k].start, "%s: %s lost [%d, %d), which exists (log starts at %d)", w.event, k, s.from, s.to, w.logs[k].start)
		}
		for _, in := range []*walkInc{w.before[k], mp.cur} {
			for o := s.from; in != nil && o < s.to; o++ {
				require.False(w.t, in.delivered[o], "%s: %s lost offset %d, which incarnation %d handed out", w.event, k, o, in.inc)
			}
		}
	}
}

// settle finishes the pipeline and checks that nothing stays counted: every
// batch handed out acknowledged, every reader ended, then every partition
// released.
func (w *walk) settle() {
	w.event = "settle"
	w.beginEvent()
	for len(w.pipeline) > 0 {
		w.ack(w.pipeline[0])
	}
	for _, rd := range slices.Clone(w.readers) {
		rd.st.part.cancel()
		w.readerEnds(rd)
	}
	w.endEvent()
	w.beginEvent()
	for _, k := range walkKeys {
		if w.member && w.parts[k].owned {
			w.lose(k)
		}
	}
	if !w.member {
		for _, name := range []string{"t", "u"} {
			w.deleteTopic(name)
		}
	}
	w.endEvent()
	e := w.e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropStaleReplaysLocked()
	require.Zero(w.t, e.parts.nPending, "settle: batches left counted")
	require.Zero(w.t, e.sched.slots.used, "settle: slots left taken")
	require.Zero(w.t, e.sched.readers, "settle: readers left counted")
	require.Zero(w.t, e.parts.owned(), "settle: partitions left owned")
	var lost int64
	for _, r := range e.parts.recs {
		for _, s := range r.losses {
			lost += s.to - s.from
		}
	}
	require.Equal(w.t, lost, e.stats.lost.Load(), "settle: lost offsets counted and recorded")
	require.False(w.t, errors.Is(e.fatal, errTransition))
}
