package cache

import (
	"context"
	"math"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Backlog lanes. A broker's loop (lane 0) sends its rounds on the shared
// client's one fetch connection, at most maxRounds at once, and a round
// asks for one cursor of a partition, so a partition read by several leased
// cursors at once got at most maxRounds × FetchMaxPartitionBytes per round
// trip there. Leased cursors with a backlog fetch on lanes instead: loops of
// the same code, each on a connection of its own (a client of its own,
// seeded with the broker's advertised address only), that ask only for
// offsets known to exist, never wait, and keep a round in flight for each
// of their cursors. A cursor stays on its lane while it has a backlog;
// caught up, at its range's end or released it leaves it, and a leadership
// or request error sends it through lane 0's path (its holder relearns the
// leader). Followers and every long poll stay on lane 0, so a caught-up
// reader keeps its connections.

const (
	// laneCursors is how many laneable cursors of a broker a lane is for:
	// a broker gets another lane while each has this many, up to
	// FetchConnections-1 (the default 4 connections carry max_in_flight's
	// default 16 ranges).
	laneCursors = 4
	// laneMinCursors is the fewest backlogged cursors of a broker for
	// which its first lane opens: one cursor has lane 0's rounds to itself.
	laneMinCursors = 2
	// laneBacklog is the backlog, in FetchMaxPartitionBytes, that counts
	// for opening a lane (backlogged): less is read in a round trip or two
	// on the connection already open.
	laneBacklog = 2
	// laneDepth bounds the rounds a lane has in flight at once; each takes
	// a cursor that is in no other round, so its cursors bound them first.
	laneDepth = 64
	// laneLinger is how long a lane with no cursor keeps its connection,
	// for the next ranges of a backfill, before it closes.
	laneLinger = 3 * time.Second
	// laneRetry is how long a broker whose lane could not connect gets no
	// lane.
	laneRetry = 10 * time.Second
)

// defaultLaneMinRTT is Config.LaneMinRTT's default: the round trip to a
// broker from which its backlog is read on lanes. Closer, one connection
// answers fast enough, and reads stay as they were (bench -mode wan through
// the proxy at 0 ms measured no gain from lanes, within the machine's
// noise).
const defaultLaneMinRTT = 2 * time.Millisecond

// laneable reports whether cur may fetch on a lane: leased, no error
// waiting for its holder, and records known to exist from its fetch
// position on below what it wants (the partition's end as its last fetch
// showed it, or its range's end: ranges are planned below listed ends),
// unless an answer on a lane brought nothing there (laneless).
func (cur *cursor) laneable() bool {
	if cur.state != stateLeased || cur.fetchAt < 0 || cur.err != nil || cur.laneless {
		return false
	}
	end := cur.want
	if cur.high >= 0 {
		end = min(end, cur.high)
	}
	return cur.fetchAt < end && end < math.MaxInt64
}

// backlogged reports whether cur, laneable, has a backlog that counts for
// opening a lane: at least laneBacklog × partBytes left to fetch below what
// it wants, by the bytes per offset of its last answer (none yet: not
// known, so no).
func (cur *cursor) backlogged(partBytes int32) bool {
	if !cur.laneable() || cur.offsetBytes <= 0 {
		return false
	}
	end := min(cur.want, max(cur.high, cur.fetchAt))
	return float64(end-cur.fetchAt)*cur.offsetBytes >= laneBacklog*float64(partBytes)
}

// fetchBroker is the broker cur fetches from, or would: its loop's, its
// preferred read replica, else its leader (-1: unknown).
func (cur *cursor) fetchBroker() int32 {
	switch {
	case cur.loop != nil:
		return cur.loop.b.id
	case cur.replica >= 0:
		return cur.replica
	}
	return cur.leader
}

// Distant reports whether the lease's partition is fetched from a broker
// whose ranges with a backlog go on lanes: more than one fetch connection
// allowed and the broker judged distant by its measured round trip (see
// the package's Distance; not judged yet: no). There several ranges of one
// partition read at once fetch in parallel; to a near broker its loop
// takes one cursor of a partition per round, so ranges started before the
// last one read would only be read ahead, at the cost of their memory.
func (l *Lease) Distant() bool {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.distantLocked(l.cur.fetchBroker())
}

// lanesOpen reports whether leased cursors of the broker may fetch on
// lanes: its address known from the cursors' metadata, no lane of it
// failed to connect within laneRetry, the cache open, and the broker
// distant. It starts a measure of the broker's round trip when one is due
// (measure): until a measure judges it distant, it says no.
func (b *broker) lanesOpen() bool {
	c := b.c
	if c.cfg.FetchConnections <= 1 || c.closed || c.cl == nil || c.laneErr != nil || b.addr == "" ||
		time.Since(b.laneDown) < laneRetry {
		return false
	}
	b.measure()
	return b.distant()
}

// relaneLocked moves cur, in a loop and in no fetch, to the loop it
// belongs in now: off its lane once it is no longer laneable or its
// broker no longer distant (to its broker's loop), onto a lane from its broker's loop once it is and a lane
// takes it, and from a lane with more than laneCursors cursors to one with
// fewer (a lane just opened). The loops call it after each answer.
func (c *Cache) relaneLocked(cur *cursor) {
	l := cur.loop
	switch {
	case l == nil || cur.inFlight:
	case l.lane > 0 && (!cur.laneable() || !l.b.distant()):
		c.leaveLoopLocked(cur)
		c.joinLoopLocked(cur)
	case l.lane > 0:
		if len(l.members) <= laneCursors {
			return
		}
		for _, o := range l.b.lanes {
			if o.warm && len(o.members) < laneCursors {
				c.leaveLoopLocked(cur)
				c.enterLaneLocked(cur, o)
				return
			}
		}
	case l.lane == 0:
		if to := l.b.laneFor(cur); to != nil {
			c.leaveLoopLocked(cur)
			c.enterLaneLocked(cur, to)
		}
	}
}

// enterLaneLocked puts cur, in no loop, on lane l.
func (c *Cache) enterLaneLocked(cur *cursor, l *loop) {
	l.members[cur] = struct{}{}
	cur.loop = l
	cur.started = false
	l.kick()
}

// laneFor returns the lane of the broker that cur, a cursor joining a
// loop, fetches on, or nil: lane 0 then. The least loaded lane whose
// connection is open (ties: the one with fewer cursors of cur's partition,
// whose ranges are the parallelism). A lane opens if the broker's backlog
// wants one more (openLane); until its connection is open, cur fetches
// where it would have, and may move when it is (warmLane).
func (b *broker) laneFor(cur *cursor) *loop {
	if !cur.laneable() || !b.lanesOpen() {
		return nil
	}
	b.openLane()
	var best *loop
	for _, l := range b.lanes {
		if !l.warm {
			continue
		}
		if best == nil || l.loadFor(cur) < best.loadFor(cur) || l.loadFor(cur) == best.loadFor(cur) && l.lane < best.lane {
			best = l
		}
	}
	return best
}

// openLane opens another lane of the broker if none is opening, fewer than
// FetchConnections-1 are open, and the broker's backlogged leased cursors
// would fill more: laneMinCursors for the first, laneCursors for each (so
// one cursor keeps lane 0's rounds to itself).
func (b *broker) openLane() {
	c := b.c
	n := b.backlogged()
	if n < laneMinCursors || !b.lanesOpen() {
		return
	}
	open := 0
	for _, l := range b.lanes {
		if !l.warm {
			return // one at a time: it takes cursors once its connection is open
		}
		open++
	}
	if open >= c.cfg.FetchConnections-1 {
		return
	}
	if n <= open*laneCursors {
		return
	}
	lane := 1
	for b.lanes[lane] != nil {
		lane++
	}
	l := &loop{c: c, b: b, lane: lane, addr: b.addr, members: map[*cursor]struct{}{}, wake: make(chan struct{}, 1), emptySince: time.Now()}
	b.lanes[lane] = l
	c.lanesOpened.Add(1)
	c.workers.Add(1)
	go l.run()
}

// loadFor is how busy l is for cur: its cursors, and twice over those of
// cur's partition (a round takes one cursor of a partition).
func (l *loop) loadFor(cur *cursor) int {
	n := len(l.members)
	for o := range l.members {
		if o.topic == cur.topic && o.partition == cur.partition {
			n += 2
		}
	}
	return n
}

// backlogged counts the leased cursors of the broker that are backlogged.
func (b *broker) backlogged() int {
	n := 0
	for h := range b.c.holders {
		if h.fetchBroker() == b.id && h.backlogged(b.c.cfg.FetchMaxPartitionBytes) {
			n++
		}
	}
	return n
}

// laneClient creates the client of lane l: the options of every client the
// cache creates (Config.ClientOpts: TLS, SASL, the dialer), seeded with the
// broker's advertised address only; its seed broker's fetch connection is
// the lane's. It asks for no metadata (MetadataMaxAge: an hour, the most
// franz-go allows).
func (c *Cache) laneClient(l *loop) (*kgo.Client, error) {
	opts := append(slices.Clone(c.cfg.ClientOpts), kgo.SeedBrokers(l.addr), kgo.MetadataMaxAge(time.Hour))
	return kgo.NewClient(opts...)
}

// warmLane opens lane l's connection with an empty fetch (answered at
// once), then makes it warm: the broker's laneable cursors on lane 0 move
// to it, and later ones join it. If the connection fails, the lane closes
// (false) and the broker gets no lane for laneRetry: its cursors fetch on
// lane 0 meanwhile, as they would without lanes.
func (c *Cache) warmLane(l *loop) bool {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MaxBytes = 1
	req.SessionID = 0
	req.SessionEpoch = -1 // no fetch session, as the loops' fetches
	ctx, cancel := context.WithTimeout(c.ctx, metaTimeout)
	_, err := l.cl.SeedBrokers()[0].Request(ctx, req)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.b.lanes[l.lane] != l {
		return false // closed meanwhile (laneFailedLocked)
	}
	if err != nil {
		delete(l.b.lanes, l.lane)
		l.b.laneDown = time.Now()
		return false
	}
	l.warm = true
	l.b.spread()
	return true
}

// spread moves the laneable leased cursors of the broker's loop that are
// in no fetch onto its lanes (relaneLocked): after a lane warmed up, or a
// measure ended. Cursors over laneCursors on the other lanes move to a new
// lane after their next answer.
func (b *broker) spread() {
	if b.loop != nil {
		for cur := range b.loop.members {
			b.c.relaneLocked(cur)
		}
	}
}

// laneEnded forgets lane l as its goroutine ends (retired, closed with the
// cache, or failed to connect): its cursors, if any are left, go to their
// broker's loop.
func (c *Cache) laneEnded(l *loop) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.b.lanes[l.lane] == l {
		delete(l.b.lanes, l.lane)
	}
	for cur := range l.members {
		c.leaveLoopLocked(cur)
		if c.ctx.Err() == nil {
			c.joinLoopLocked(cur)
		}
	}
}

// laneFailedLocked closes every lane (their cursors go back to lane 0) and
// opens no more: a lane's client could not be created, from the options
// that made the other clients, so this is not expected.
func (c *Cache) laneFailedLocked(err error) {
	c.laneErr = err
	for _, b := range c.brokers {
		for n, l := range b.lanes {
			delete(b.lanes, n)
			for cur := range l.members {
				c.leaveLoopLocked(cur)
				c.joinLoopLocked(cur)
			}
		}
	}
}

// lingerLocked is how long lane l, empty, waits before it closes (0 for
// lane 0, or a lane with cursors).
func (l *loop) lingerLocked() time.Duration {
	if l.lane == 0 || len(l.members) > 0 {
		return 0
	}
	return max(laneLinger-time.Since(l.emptySince), time.Nanosecond)
}

// noteBrokersLocked keeps the advertised address of every broker of a
// metadata answer, for the lanes' clients.
func (c *Cache) noteBrokersLocked(brokers []kmsg.MetadataResponseBroker) {
	for _, mb := range brokers {
		c.brokerLocked(mb.NodeID).addr = net.JoinHostPort(mb.Host, strconv.Itoa(int(mb.Port)))
	}
}
