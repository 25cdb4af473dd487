package cache

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The lanes' model (issue 52): runLaneModel drives one broker's loop, its
// backlog lanes and its round-trip measures through the real code, without
// a broker or a goroutine (Cache.onLane and Cache.onMeasure record what
// would start one), and checks at every step the promises of the package
// doc ("Backlog lanes") and docs/backfills.md ("Backfills from a distant
// cluster") as properties:
//
//   - the verdict: "the first answer under 2 ms (a probe's, or any
//     fetch's at any time) makes the broker near; 6 answers that took 2 ms
//     and 8 times the input's own delay around them more ... with none
//     under 2 ms, make it distant"; "a measure that reaches neither ... or
//     whose request fails keeps what was decided before, near until
//     something is"; "A distant broker is near again from its first answer
//     under 1.5 ms": an oracle written from those sentences follows every
//     answer, and the broker's verdict is always the oracle's (a slow
//     fetch answer, a long poll's, never counts towards distant);
//   - "Closer brokers ... are read as before": no cursor moves onto a
//     lane while the broker is near or a lane of it failed to connect
//     within laneRetry ("one whose connection fails gives the broker no
//     lane for 10 s"), and no lane opens then unless its measure under way
//     leans to distant ("3 quiet answers and none under 2 ms open its
//     lanes' connections ahead");
//   - "fetch_connections − 1 lanes, opened together": never more lanes
//     than that; a lane opens only for a backlog (a range with one); and
//     after every answer of a distant broker's round with a range with a
//     backlog, it has them all (open or opening);
//   - "A lane never waits for records" and asks LanePartitionBytes; "Each
//     range fetches on one lane, one fetch in flight at a time": a cursor
//     is in one round at a time, on a lane or on its broker's loop;
//   - "It goes back to the broker's loop once caught up ..., at its
//     range's end, released, when an answer brings nothing ..., and on any
//     error of its fetch", and once the broker is near: a cursor answered
//     on a lane stays there only while it has records known to exist
//     ahead (the model's own predicate, not laneable) and its broker is
//     distant; an empty answer on a lane sends it to the broker's loop,
//     and no lane takes it again until an answer brings records; a cursor
//     on a lane is leased;
//   - "A seek forgets the epoch": a seek starts a new fetch generation,
//     drops what was fetched, and forgets the leader epoch; no round is in
//     a fetch session (KIP-227 is not used);
//   - Read: "in offset order": every range's records are delivered in
//     offset order, each once, over its leases (a read failed by a lane's
//     connection is read again from where it stopped, as the engine does),
//     and a read completes at its range's end;
//   - every bounded walk ends: once the broker answers with records and
//     its lanes connect, every range is read to its end within a bounded
//     number of rounds, whatever state the walk left it in;
//   - the cursor model's invariants (checkCursorModel).
//
// The walk's events: leases, reads, releases and seeks; the broker's
// loop's and the lanes' rounds, answered with records, nothing, a
// leadership error or a dropped connection, fast or slow (a distant
// broker, a long poll held); probe answers near, quiet, busy or failed;
// lanes connecting or failing to; the network turning far or near; time
// passing (a measure due, laneRetry and a lane's linger over, records
// written). TestCursorModelWalk and FuzzCursorModel run it on each
// sequence after the cursor model; each property was seen to fail with a
// bug injected (the lane mutants of resources/mutate among them).

// laneModelHigh is the end of the partition's log in the lanes' model:
// the most its end (high) grows to, and where ranges end at the latest.
const laneModelHigh = 400

// laneRange is one range a model lease reads: over several leases if a
// read fails.
type laneRange struct {
	start, end int64
	next       int64 // the next offset to deliver
	l          *Lease
	done       bool // the read reached end
}

// laneRound is a round in flight of one loop (the broker's or a lane's).
type laneRound struct {
	l     *loop
	parts []sent
	held  bool
}

// laneOracle is the broker's verdict as the docs state the rule.
type laneOracle struct {
	distant   bool
	measuring bool
	near      bool // this measure saw an answer under the near bound
	quiet     int  // this measure's quiet answers
	answers   int  // this measure's requests
}

// nearBound is the time under which an answer proves the broker near.
func (o *laneOracle) nearBound() time.Duration {
	if o.distant {
		return 1500 * time.Microsecond
	}
	return 2 * time.Millisecond
}

// answered takes an answer that took took; local < 0: a fetch's.
func (o *laneOracle) answered(took, local time.Duration) {
	switch {
	case took < o.nearBound():
		o.distant = false
		if o.measuring {
			o.near = true
		}
	case local >= 0 && took-2*time.Millisecond >= 8*local:
		o.quiet++
	}
}

// concluded ends the measure.
func (o *laneOracle) concluded() {
	switch {
	case o.near:
		o.distant = false
	case o.quiet >= 6:
		o.distant = true
	}
	*o = laneOracle{distant: o.distant}
}

// probeAnswers are the probe answers the model gives: the time one took
// and the local delay around it.
var probeAnswers = []struct{ took, local time.Duration }{
	{300 * time.Microsecond, 10 * time.Microsecond},  // near
	{5 * time.Millisecond, 50 * time.Microsecond},    // quiet, distant
	{40 * time.Millisecond, 5 * time.Millisecond},    // a busy machine's: not quiet
	{60 * time.Millisecond, 3 * time.Millisecond},    // a distant broker on a busy machine: quiet
	{1800 * time.Microsecond, 10 * time.Microsecond}, // under 2 ms, over 1.5
	{5 * time.Millisecond, 50 * time.Microsecond},    // quiet, distant (twice as likely)
	{3 * time.Millisecond, 200 * time.Microsecond},   // over 2 ms, but not by 8 local delays
}

// laneModelReach counts what the lanes' model walks reached, over every
// sequence of a test: TestCursorModelWalk requires each (a property of a
// state the walk never reaches cannot fail).
type laneModelReach struct {
	distant    int // steps with the broker judged distant
	opened     int // lanes opened
	laneRounds int // lanes' rounds answered
	delivered  int // ranges read to their end
	failed     int // reads failed by a dropped connection, read again
	backToLoop int // cursors answered on a lane, back on the broker's loop
}

var laneReach laneModelReach

func runLaneModel(t *testing.T, ops []byte) {
	arg := func(i int) byte {
		if i < len(ops) {
			return ops[i]
		}
		return 0
	}
	conns := 2 + int(arg(0)%3) // FetchConnections: 1 to 3 lanes
	c := modelCache(Config{
		Capacity: 4, IdleTimeout: time.Hour,
		FetchConnections: conns, FetchMaxPartitionBytes: 64, LanePartitionBytes: 128,
	})
	b := c.brokers[0]
	b.addr = "broker0:9092"
	var opening []*lane // opened, their connection not open yet
	var running []*lane // their connection open: their loop runs
	var measures []bool // a measure waits for its next probe answer (at most one)
	var rounds []laneRound
	var checkOpen func() // checks a lane opening, under Cache.mu (set below)
	c.onLane = func(ln *lane) {
		opening = append(opening, ln)
		checkOpen()
	}
	var oracle laneOracle
	c.onMeasure = func(mb *broker, r *brokerRTT) {
		require.Same(t, b, mb)
		require.Empty(t, measures, "two measures of one broker at once")
		measures = append(measures, true)
		oracle = laneOracle{distant: oracle.distant, measuring: true}
	}
	var revivals []*cursor // idle cursors whose revival the model runs
	c.onRevive = func(cur *cursor) { revivals = append(revivals, cur) }
	blocked := false // a lane of the broker failed to connect within laneRetry
	var ranges []*laneRange
	// emptied: the cursors whose last answer on a lane brought nothing,
	// since they brought records or were leased.
	emptied := map[*cursor]bool{}
	pick := func(x byte, n int) int { return int(x) % n }

	// join puts a holder's cursor into its loop as take does: learning
	// its leader (broker 0) first if it has none. Under Cache.mu.
	join := func(cur *cursor) {
		if cur.loop == nil && cur.leader < 0 {
			cur.leader, cur.epoch = 0, 0
			cur.validate = false // locate validated the position
		}
		c.joinLoopLocked(cur)
	}
	// acquire leases a cursor for r's rest and starts its read, as Read
	// does: the holder learns the leader (broker 0) and joins its loop.
	acquire := func(r *laneRange) {
		l, err := c.Acquire(t.Context(), topic, 0, r.next)
		require.NoError(t, err)
		c.mu.Lock()
		delete(emptied, l.cur) // a new lease may try lanes again
		held := c.startReadLocked(l.cur, r.next, r.end)
		require.NoError(t, held, "a read kept an error for the next lease")
		require.Equal(t, r.next, l.cur.next, "a read of [%d, %d) starts at %d", r.next, r.end, l.cur.next)
		join(l.cur)
		c.mu.Unlock()
		r.l = l
	}
	release := func(i int, err error) {
		r := ranges[i]
		ranges = slices.Delete(ranges, i, i+1)
		r.l.Release(err)
	}
	// lanesAllowed: cursors may move onto the broker's lanes as the docs
	// say; opensAllowed: its lanes may open.
	lanesAllowed := func() bool { return oracle.distant && !blocked }
	opensAllowed := func() bool {
		return !blocked && (oracle.distant || oracle.measuring && !oracle.near && oracle.quiet >= 3)
	}
	onLane := func(cur *cursor) *lane {
		if cur.loop == nil {
			return nil
		}
		if ln, ok := cur.loop.conn.(*lane); ok {
			return ln
		}
		return nil
	}

	far := arg(1)&1 != 0 // the network: the broker is far (its answers slow and quiet) or near
	// The partition's end: records are written up to laneModelHigh as
	// the walk goes, so a range may end past what its cursor last saw of
	// the end (a leased cursor caught up there long-polls on its broker's
	// loop until more arrive).
	high := min(int64(200+int(arg(1)>>1)%5*50), laneModelHigh)
	var answered []sent // the parts of the rounds answered in this step

	// known reports whether cur has records known to exist ahead of its
	// fetch position, as the docs say a lane's cursor must: leased, no
	// error, below what its read wants and the partition's end as its
	// last answer showed it, and no answer on a lane brought nothing
	// since it last brought records. Under Cache.mu.
	known := func(cur *cursor) bool {
		if cur.state != stateLeased || cur.err != nil || emptied[cur] || cur.fetchAt < 0 {
			return false
		}
		end := cur.want
		if cur.high >= 0 {
			end = min(end, cur.high)
		}
		return cur.fetchAt < end && end < math.MaxInt64
	}
	// backlog counts the leased cursors with a backlog (at least 2 ×
	// FetchMaxPartitionBytes known to exist ahead, by the bytes per
	// offset of their last answer, or before it a range that many records
	// of 1 KiB would fill). Under Cache.mu.
	backlog := func() int {
		n := 0
		for h := range c.holders {
			switch {
			case !known(h):
			case h.offsetBytes > 0:
				ahead := min(h.want, max(h.high, h.fetchAt)) - h.fetchAt
				if float64(ahead)*h.offsetBytes >= 2*float64(c.cfg.FetchMaxPartitionBytes) {
					n++
				}
			case h.high < 0:
				// "before its first answer, a range of 2 ×
				// fetch_max_partition_bytes / 1 KiB offsets or more"
				if h.want-h.fetchAt >= 2*int64(c.cfg.FetchMaxPartitionBytes)/1024 {
					n++
				}
			}
		}
		return n
	}

	// checkOpen checks, as a lane opens, that lanes may open (the broker
	// distant, or its measure leaning to distant, and no lane failed to
	// connect within laneRetry), and no more than FetchConnections-1.
	// "Lanes open, fetch_connections − 1 together, once a range has a
	// backlog."
	checkOpen = func() {
		laneReach.opened++
		require.True(t, opensAllowed(), "a lane opened to a broker judged near, not leaning to distant, or whose lane failed to connect within laneRetry (oracle %+v, blocked %v, measure %+v)", oracle, blocked, b.rtt)
		require.LessOrEqual(t, len(b.lanes), conns-1, "lanes open or opening with FetchConnections %d", conns)
	}
	// moves checks, under Cache.mu, what changed since it last ran: lanes
	// opened only for a backlog (a range with one), and a cursor moves
	// onto a lane only while lanes are allowed (the broker distant, no
	// lane failed to connect within laneRetry), and only a cursor with
	// records known to exist ahead.
	opened := int64(0)
	lastLane := map[*cursor]*lane{}
	moves := func() {
		if n := c.counts.lanesOpened.Load(); n > opened {
			require.GreaterOrEqual(t, backlog(), 1, "a lane opened with no range with a backlog")
			opened = n
		}
		for _, all := range c.byKey {
			for _, cur := range all {
				ln := onLane(cur)
				if ln != nil && lastLane[cur] != ln {
					// While a lane that failed to connect blocks new ones,
					// the lanes open may still even out their cursors (a
					// lane over 4 gives one to another); none comes from
					// the broker's loop.
					require.True(t, lanesAllowed() || oracle.distant && lastLane[cur] != nil, "a cursor moved onto lane %d of a broker judged near or whose lane failed to connect within laneRetry (distant %v, blocked %v, from lane %v)", ln.n, oracle.distant, blocked, lastLane[cur] != nil)
					require.True(t, known(cur), "a cursor with nothing known to fetch moved onto lane %d (fetchAt %d, want %d, high %d, err %v)", ln.n, cur.fetchAt, cur.want, cur.high, cur.err)
				}
				lastLane[cur] = ln
			}
		}
	}

	// take: a holder takes what its cursor fetched, or waits for it.
	take := func(j int) {
		r := ranges[j]
		if r.done {
			return
		}
		cur := r.l.cur
		c.mu.Lock()
		ready := len(cur.queue) > 0 || cur.err != nil
		if !ready {
			join(cur) // as take does before it waits
		}
		c.mu.Unlock()
		if !ready {
			return
		}
		raw, leaderErr, err := c.take(t.Context(), cur)
		defer func() {
			c.mu.Lock()
			moves()
			c.mu.Unlock()
		}()
		switch {
		case err != nil:
			// The read fails (a connection error): its lease is
			// released with the error, and the range is read again
			// from where it stopped, as the engine does.
			var fe *fetchError
			require.ErrorAs(t, err, &fe, "a read failed with %v", err)
			require.Nil(t, fe.part, "a fetch error of a partition failed the read: %v", err)
			require.False(t, Permanent(err), "a failed request is retriable: %v", err)
			require.Equal(t, r.next, cur.next, "the read failed at %d, %d delivered", cur.next, r.next)
			release(j, err)
			laneReach.failed++
			ranges = append(ranges, r)
			acquire(r)
		case leaderErr != nil:
			// The holder learns the leader again (broker 0 still).
			c.mu.Lock()
			join(cur)
			c.mu.Unlock()
		default:
			// Decoded: the batch's offsets are records; those below
			// the range's end are delivered, in order, each once.
			require.Equal(t, cur.fetched, raw.at, "%s/0: an answer for %d decoded at position %d", topic, raw.at, cur.fetched)
			e := batchesEnd(raw.part.RecordBatches, raw.at)
			require.Greater(t, e, raw.at)
			for o := raw.at; o < e; o++ {
				cur.buf = append(cur.buf, &kgo.Record{Topic: topic, Offset: o})
			}
			cur.fetched, cur.lastEpoch = e, 0
			c.mu.Lock()
			cur.dropDecodingLocked()
			c.mu.Unlock()
			require.NoError(t, cur.deliver(r.end, func(recs []*kgo.Record, _ int64) error {
				for _, rec := range recs {
					require.Equal(t, r.next, rec.Offset, "range [%d, %d): offset %d delivered after %d", r.start, r.end, rec.Offset, r.next-1)
					r.next++
				}
				return nil
			}))
			if len(cur.buf) > 0 || cur.fetched >= r.end {
				require.Equal(t, r.end, r.next, "range [%d, %d) ended with %d delivered", r.start, r.end, r.next)
				cur.next, r.done = r.end, true
				laneReach.delivered++
			}
		}
	}
	// build: loop l builds a round, if it may.
	build := func(l *loop) {
		ln, isLane := l.conn.(*lane)
		if l.flying >= maxRounds && !isLane || l.flying >= laneDepth {
			return
		}
		req, parts, hold := l.build(false, time.Now())
		if req == nil {
			return
		}
		require.Zero(t, req.SessionID, "a round in a fetch session")
		require.Equal(t, int32(-1), req.SessionEpoch, "a round in a fetch session (KIP-227 is not used)")
		if isLane {
			require.Zero(t, req.MaxWaitMillis, "lane %d's round waits for records", ln.n)
			require.False(t, hold, "lane %d holds a long poll", ln.n)
			for _, rt := range req.Topics {
				for _, rp := range rt.Partitions {
					require.Equal(t, c.cfg.LanePartitionBytes, rp.PartitionMaxBytes, "lane %d asks other than LanePartitionBytes", ln.n)
				}
			}
		}
		c.mu.Lock()
		l.flying++ // as run does
		if hold {
			l.holding++
		}
		c.mu.Unlock()
		rounds = append(rounds, laneRound{l: l, parts: parts, held: hold})
	}
	// answer: round j is answered, as a chooses: per partition records,
	// nothing or a leadership error, or the request failed (the
	// connection dropped); fast or slow as the network is (a slow answer
	// is a distant broker's, or a long poll held FetchMaxWait).
	answer := func(j int, a byte, clean bool) {
		rd := rounds[j]
		rounds = slices.Delete(rounds, j, j+1)
		var resp *kmsg.FetchResponse
		var err error
		if a%16 == 15 && !clean {
			err = errors.New("connection closed")
		} else {
			resp = kmsg.NewPtrFetchResponse()
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = topic
			for k, s := range rd.parts {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = s.cur.partition
				rp.HighWatermark = high
				kind := (int(a>>4) + k) % 12
				if clean {
					kind = 0
				}
				switch kind {
				default:
					if s.at < high {
						rp.RecordBatches = modelBatch(s.at, int(min(int64(1+(int(a)+k)%8), high-s.at)))
					}
				case 10: // nothing
				case 11:
					rp.ErrorCode = kerr.NotLeaderForPartition.Code
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		took := 500 * time.Millisecond // a long poll held, or a slow broker
		if !far && a&0x20 == 0 {
			took = 400 * time.Microsecond
		}
		if err == nil {
			c.mu.Lock()
			b.noteRTT(took) // as the loop's run does
			c.mu.Unlock()
			if b.rtt != nil {
				oracle.answered(took, -1)
			}
		}
		_, onALane := rd.l.conn.(*lane)
		live := map[*cursor]bool{} // the parts whose cursor takes the answer
		c.mu.Lock()
		for _, s := range rd.parts {
			live[s.cur] = s.cur.gen == s.gen && !s.cur.gone()
		}
		c.mu.Unlock()
		rd.l.dispatch(rd.parts, rd.held, false, resp, err)
		answered = append(answered, rd.parts...)
		// Answered, a cursor stays on a lane only while it has records
		// known to exist ahead and its broker is distant; an answer on a
		// lane that brings nothing sends it to its broker's loop, which
		// polls, until an answer brings records.
		c.mu.Lock()
		for _, s := range rd.parts {
			cur := s.cur
			if !live[cur] || err != nil {
				continue
			}
			switch p := findPart(resp, cur); {
			case p.ErrorCode != 0:
			case len(p.RecordBatches) > 0:
				delete(emptied, cur)
			case onALane:
				emptied[cur] = true
				require.False(t, onLane(cur) != nil && !cur.inFlight, "a cursor whose lane's answer brought nothing stays on lane %d", laneOf(rd.l))
			}
			if cur.gen != s.gen || cur.gone() || cur.inFlight {
				continue
			}
			if ln := onLane(cur); ln != nil {
				require.True(t, oracle.distant, "a cursor answered on lane %d stays there though its broker is near", ln.n)
				require.True(t, known(cur), "a cursor answered on lane %d stays there with nothing known to fetch (fetchAt %d, want %d, high %d, emptied %v, err %v)", ln.n, cur.fetchAt, cur.want, cur.high, emptied[cur], cur.err)
			}
		}
		moves()
		if lanesAllowed() {
			// FetchConnections-1 lanes once a range has a backlog: after
			// an answer, the broker has them all, open or opening.
			if n := backlog(); n >= 1 {
				require.Equal(t, conns-1, len(b.lanes), "lanes of a distant broker with %d ranges with a backlog", n)
			}
		}
		c.mu.Unlock()
		if _, ok := rd.l.conn.(*lane); ok {
			laneReach.laneRounds++
			c.mu.Lock()
			for _, s := range rd.parts {
				if s.cur.loop == b.loop && b.loop != nil {
					laneReach.backToLoop++
				}
			}
			c.mu.Unlock()
		}
	}
	// probe: the measure's next probe is answered as the network is (or
	// as a chooses), or fails.
	probe := func(a byte) {
		if len(measures) == 0 {
			return
		}
		k := int(a) % (len(probeAnswers) + 1)
		switch {
		case a&0x70 == 0: // as a chooses
		case far:
			k = []int{1, 3, 5}[int(a>>4)%3]
		default:
			k = []int{0, 0, 2}[int(a>>4)%3]
		}
		var took, local time.Duration
		var perr error
		if k < len(probeAnswers) {
			took, local = probeAnswers[k].took, probeAnswers[k].local
		} else {
			perr = errors.New("probe refused")
		}
		oracle.answers++
		if perr == nil {
			oracle.answered(took, local)
		}
		c.mu.Lock()
		done, failed := b.probed(b.rtt, took, local, false, perr)
		var tell func()
		require.Equal(t, perr != nil || oracle.near || oracle.quiet >= 6, done, "a measure's end after %d answers (oracle %+v, measure %+v)", oracle.answers, oracle, b.rtt)
		if done || oracle.answers >= 16 {
			measures = nil
			tell = b.measured(b.rtt, failed)
		}
		c.mu.Unlock()
		if tell != nil {
			tell()
			oracle.concluded()
		}
	}

	for i := 2; i < len(ops); i += 2 {
		op, a := ops[i]%16, arg(i+1)
		answered = nil
		switch op {
		case 0, 1: // a range is leased: [at, at+len) within the partition
			if len(ranges) >= 12 {
				break
			}
			at := int64(pick(a, 8)) * 50
			end := min(at+int64(10+int(a>>3)%8*8), laneModelHigh)
			r := &laneRange{start: at, end: end, next: at}
			ranges = append(ranges, r)
			acquire(r)
		case 2: // a lease's holder takes what its cursor fetched, or waits for it
			if len(ranges) > 0 {
				take(pick(a, len(ranges)))
			}
		case 3: // a lease is released (its read done, or abandoned)
			if len(ranges) > 0 && a&1 == 0 {
				release(pick(a>>1, len(ranges)), nil)
			}
		case 4: // a lease seeks: its holder reads another range
			if len(ranges) == 0 {
				break
			}
			r := ranges[pick(a, len(ranges))]
			at := int64(pick(a>>4, 8)) * 50
			if at == r.l.cur.next {
				at += 10
			}
			r.start, r.next, r.end, r.done = at, at, min(at+60, laneModelHigh), false
			c.mu.Lock()
			gen := r.l.cur.gen
			require.NoError(t, c.startReadLocked(r.l.cur, r.start, r.end))
			require.Greater(t, r.l.cur.gen, gen, "a seek kept the fetch generation: answers to the old position would be queued")
			require.Empty(t, r.l.cur.queue, "a seek kept the answers to the old position")
			require.Equal(t, int32(-1), r.l.cur.lastEpoch, "a seek kept the leader epoch of what was read before: the new range would be validated against it")
			require.False(t, r.l.cur.validate, "a seek kept a validation of the old position")
			join(r.l.cur)
			c.mu.Unlock()
		case 5: // the broker's loop builds a round (at most maxRounds in flight)
			if b.loop != nil {
				build(b.loop)
			}
		case 6: // a lane builds a round
			if len(running) > 0 {
				build(running[pick(a, len(running))].l)
			}
		case 7: // a round's answer
			if len(rounds) > 0 {
				answer(pick(a, len(rounds)), a, false)
			}
		case 8: // a probe of the broker's measure is answered, or fails
			probe(a)
		case 9: // a lane's connection opens, or fails to
			if len(opening) == 0 {
				break
			}
			j := pick(a, len(opening))
			ln := opening[j]
			opening = slices.Delete(opening, j, j+1)
			var werr error
			if a&0x70 == 0 {
				werr = errors.New("connection refused")
			}
			c.mu.Lock()
			ok := ln.warmedLocked(werr)
			c.mu.Unlock()
			if werr != nil {
				blocked = true
			}
			if ok {
				require.NoError(t, werr)
				running = append(running, ln)
			} else {
				ln.ended() // its goroutine ends
			}
		case 10: // time passes: a measure is due, laneRetry passed, a lane's linger passed
			c.mu.Lock()
			if a&1 != 0 && b.rtt != nil && !b.rtt.probing {
				b.rtt.again = time.Time{}
			}
			if a&2 != 0 {
				b.laneDown = time.Time{}
				blocked = false
			}
			if a&8 != 0 {
				high = min(high+50, laneModelHigh) // records written
			}
			if a&4 != 0 {
				for _, ln := range running {
					ln.l.emptySince = ln.l.emptySince.Add(-3 * time.Second)
				}
			}
			c.mu.Unlock()
			// A lane with no round in flight retires if it may: "A lane
			// ... closes 3 s after its last range", not sooner.
			for k := 0; k < len(running); k++ {
				ln := running[k]
				if ln.l.flying > 0 {
					continue
				}
				c.mu.Lock()
				listed, empty := b.lanes[ln.n] == ln, len(ln.l.members) == 0
				over := time.Since(ln.l.emptySince) >= 3*time.Second
				c.mu.Unlock()
				retired := ln.l.retire()
				if listed {
					require.Equal(t, empty && over, retired, "lane %d with %d cursors, empty for 3 s %v: retired", ln.n, len(ln.l.members), over)
				}
				if retired {
					running = slices.Delete(running, k, k+1)
					k--
					ln.ended()
				}
			}
		case 11: // the holders join their loops again (as each take does); revivals end
			c.mu.Lock()
			for _, cur := range revivals {
				cur.leader = 0
				cur.validate = false
				c.revivalEndedLocked(cur, nil, true)
			}
			revivals = nil
			for _, r := range ranges {
				if !r.done && len(r.l.cur.queue) == 0 && r.l.cur.err == nil {
					join(r.l.cur)
				}
			}
			c.mu.Unlock()
		case 12, 13: // the loops run: every loop builds its rounds, every round is answered, every holder takes
			if b.loop != nil {
				build(b.loop)
			}
			for _, ln := range running {
				for range len(ln.l.members) {
					build(ln.l)
				}
			}
			for k := 0; len(rounds) > 0; k++ {
				answer(0, a+byte(k)*37, false)
			}
			for k := len(ranges) - 1; k >= 0; k-- {
				if k < len(ranges) {
					take(k)
				}
			}
			if len(opening) > 0 && a&0x80 != 0 {
				c.mu.Lock()
				ln := opening[0]
				ok := ln.warmedLocked(nil)
				c.mu.Unlock()
				opening = opening[1:]
				if ok {
					running = append(running, ln)
				} else {
					ln.ended()
				}
			}
		case 14: // the network changes: the broker is far, or near
			far = !far
		case 15: // the measure's probes are answered until it ends
			for k := 0; len(measures) > 0 && k < 16; k++ {
				probe(a&0x8f + byte(k)*16)
			}
		}

		// The properties, after every step.
		c.mu.Lock()
		require.Equal(t, oracle.distant, b.distant(), "the verdict: the docs' rule says distant=%v (oracle %+v, measure %+v)", oracle.distant, oracle, b.rtt)
		require.LessOrEqual(t, len(b.lanes), conns-1, "more lanes than fetch_connections - 1")
		if oracle.distant {
			laneReach.distant++
		}
		moves()
		inRound := map[*cursor]bool{}
		for _, rd := range rounds {
			for _, s := range rd.parts {
				if s.cur.gen != s.gen || s.cur.gone() {
					continue
				}
				require.False(t, inRound[s.cur], "a cursor in two rounds at once")
				inRound[s.cur] = true
			}
		}
		for _, ln := range b.lanes {
			for cur := range ln.l.members {
				require.True(t, cur.leased(), "a %s cursor on lane %d", cur.state, ln.n)
			}
		}
		c.mu.Unlock()
		var leases []*modelLease
		for _, r := range ranges {
			leases = append(leases, &modelLease{l: r.l})
		}
		checkCursorModel(t, c, leases, truncations{}, map[*cursor]bool{})
	}
	// Every bounded walk ends: from here the broker answers every fetch
	// with records and every lane connects; each range is read to its
	// end within a bounded number of rounds, whatever the walk left
	// (cursors on lanes, in flight, waiting for a leader or a lane).
	high = laneModelHigh
	for k := 0; k < 400; k++ {
		c.mu.Lock()
		for _, cur := range revivals {
			cur.leader = 0
			cur.validate = false
			c.revivalEndedLocked(cur, nil, true)
		}
		revivals = nil
		for _, ln := range opening {
			if ln.warmedLocked(nil) {
				running = append(running, ln)
			} else {
				defer ln.ended()
			}
		}
		opening = nil
		moves()
		c.mu.Unlock()
		if b.loop != nil {
			build(b.loop)
		}
		for _, ln := range running {
			for range len(ln.l.members) {
				build(ln.l)
			}
		}
		for len(rounds) > 0 {
			answer(0, byte(k), true)
		}
		for j := len(ranges) - 1; j >= 0; j-- {
			if j < len(ranges) {
				take(j)
			}
		}
		all := true
		for _, r := range ranges {
			all = all && r.done
		}
		if all {
			break
		}
	}
	for _, r := range ranges {
		c.mu.Lock()
		cur := r.l.cur
		require.True(t, r.done, "range [%d, %d) never ends: %d delivered; its cursor (%s) fetches at %d, in a loop %v (lane %v), in flight %v, queues %d, err %v", r.start, r.end, r.next, cur.state, cur.fetchAt, cur.loop != nil, onLane(cur) != nil, cur.inFlight, len(cur.queue), cur.err)
		c.mu.Unlock()
	}
	for len(ranges) > 0 {
		release(0, nil)
	}
	for _, ln := range append(opening, running...) {
		ln.ended()
	}
	require.NoError(t, c.Close(t.Context()))
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.byKey, "cursors left after Close")
}
