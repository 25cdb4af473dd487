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

// Backlog lanes. A broker's loop sends its rounds on the shared client's
// one fetch connection, at most maxRounds at once, and a round asks for
// one cursor of a partition. So a partition read by several leased cursors
// at once got at most maxRounds × FetchMaxPartitionBytes per round trip
// there. Leased cursors with a backlog fetch on lanes instead. A lane is a
// loop of the same code whose conn is a lane. That is a connection of its
// own (a client of its own, seeded with the broker's advertised address
// only).
// It asks only for offsets known to exist, never waits, and keeps a round
// in flight for each of its cursors. A cursor stays on its lane while it
// has a backlog. Caught up, at its range's end or released, it leaves.
// After a leadership or request error it goes the broker's loop's way (its
// holder relearns the leader). Followers and every long poll stay on the
// broker's loop, so a caught-up reader keeps its connections.

const (
	// laneCursors is how many laneable cursors of a broker a lane is for
	// while others open, and over which a lane gives a cursor to a lane
	// under it (relane). The default 4 connections, 3 lanes, carry
	// max_in_flight's default 16 ranges at 5 or 6 each.
	laneCursors = 4
	// laneGuessBytes is the bytes of a record taken for a range's
	// backlog before its first answer (backlogged): 1 KiB, so a range of
	// 2,048 offsets or more with the defaults.
	laneGuessBytes = 1 << 10
	// laneBacklog is the backlog, in FetchMaxPartitionBytes, that counts
	// for opening a lane (backlogged). Less is read in a round trip or two
	// on the connection already open.
	laneBacklog = 2
	// laneDepth bounds the rounds a lane has in flight at once. Each takes
	// a cursor that is in no other round, so its cursors bound them first.
	laneDepth = 64
	// laneLinger is how long a lane with no cursor keeps its connection,
	// for the next ranges of a backfill, before it closes.
	laneLinger = 3 * time.Second
	// laneRetry is how long a broker whose lane could not connect gets no
	// lane.
	laneRetry = 10 * time.Second
)

// defaultLaneMinRTT is Config.LaneMinRTT's default. It is the round trip to
// a broker from which its backlog is read on lanes. Closer, one connection
// answers fast enough, and reads stay as they were (bench -mode wan through
// the proxy at 0 ms measured no gain from lanes, within the machine's
// noise).
const defaultLaneMinRTT = 2 * time.Millisecond

// laneable reports whether cur may fetch on a lane. It may when it is
// leased, no error waits for its holder, and records are known to exist
// from its fetch position on below what it wants. What it wants is the
// partition's end as its last fetch showed it, or its range's end, since
// ranges are planned below listed ends. It may not if an answer on a lane
// brought nothing there (laneless).
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
// opening lanes. That is at least laneBacklog × partBytes left to fetch
// below what it wants, by the bytes per offset of its last answer. Before
// its first answer, its range must span as many records of
// laneGuessBytes each: lanes take two round trips to open, so a range
// that waited for its first answer to show its backlog read its first
// three on the broker's loop (a tenth of a 410 MB read 100 ms away).
func (cur *cursor) backlogged(partBytes int32) bool {
	if !cur.laneable() {
		return false
	}
	if cur.offsetBytes <= 0 {
		return cur.high < 0 && cur.want-cur.fetchAt >= laneBacklog*int64(partBytes)/laneGuessBytes
	}
	end := min(cur.want, max(cur.high, cur.fetchAt))
	return float64(end-cur.fetchAt)*cur.offsetBytes >= laneBacklog*float64(partBytes)
}

// fetchBroker is the broker cur fetches from, or would. That is its loop's,
// its preferred read replica, else its leader (-1 if unknown).
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
// whose ranges with a backlog go on lanes. That needs more than one fetch
// connection allowed and the broker judged distant by its measured round
// trip (see the package's Distance). A broker not judged yet reports false. There several ranges of one
// partition read at once fetch in parallel. To a near broker its loop
// takes one cursor of a partition per round, so ranges started before the
// last one read would only be read ahead, at the cost of their memory.
func (l *Lease) Distant() bool {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.distantLocked(l.cur.fetchBroker())
}

// lanesOpen reports whether leased cursors of the broker may fetch on
// lanes. They may when its address is known from the cursors' metadata, no
// lane of it failed to connect within laneRetry, the cache is open, and the
// broker is distant. It starts a measure of the broker's round trip when
// one is due (measure). Until a measure judges it distant, it says no.
func (b *broker) lanesOpen() bool {
	if !b.lanesAllowed() {
		return false
	}
	b.measure()
	return b.distant()
}

// lanesAllowed reports whether the broker may have lanes, distant or not:
// more than one fetch connection allowed, its address known, no lane of it
// failed to connect within laneRetry, the cache open.
func (b *broker) lanesAllowed() bool {
	c := b.c
	return c.cfg.FetchConnections > 1 && !c.closed && (c.cl != nil || c.onLane != nil) && c.laneErr == nil && b.addr != "" &&
		time.Since(b.laneDown) >= laneRetry
}

// relaneLocked moves cur, in a loop and in no fetch, to the loop it
// belongs in now (the loop's conn.relane). It moves off its lane (to its
// broker's loop) once it is no longer laneable or its broker no longer
// distant. It moves onto a lane from its broker's loop once it is laneable
// and a lane takes it. It moves from a lane with more than laneCursors
// cursors to one with fewer (a lane just opened). The loops call it after each answer.
func (c *Cache) relaneLocked(cur *cursor) {
	if l := cur.loop; l != nil && !cur.inFlight {
		l.conn.relane(cur)
	}
}

// laneFor returns the lane of the broker that cur, a cursor joining a
// loop, fetches on, or nil for the broker's loop. It is the least loaded
// lane whose connection is open. On a tie it is the one with fewer cursors
// of cur's partition, whose ranges are the parallelism. While other lanes
// of the broker are still opening, a lane with its share of the broker's
// laneable leased cursors takes no more: cur waits on the broker's loop
// for them (they were opened together, so they open within a round trip
// of each other), and the ranges that start together spread over every
// lane instead of all fetching on the first to open, whose answers then
// come one after the other. Until a lane's connection is open, cur fetches
// where it would have, and may move when it is (lane.warmUp).
func (b *broker) laneFor(cur *cursor) *lane {
	if !cur.laneable() || !b.lanesOpen() {
		return nil
	}
	b.openLanes()
	var best *lane
	opening := false
	for _, ln := range b.lanes {
		if !ln.warm {
			opening = true
			continue
		}
		if best == nil || ln.l.loadFor(cur) < best.l.loadFor(cur) || ln.l.loadFor(cur) == best.l.loadFor(cur) && ln.n < best.n {
			best = ln
		}
	}
	if opening && best != nil && len(best.l.members) >= b.laneShare() {
		return nil
	}
	return best
}

// laneShare is each lane's share of the broker's laneable leased cursors,
// rounded up.
func (b *broker) laneShare() int {
	n := 0
	for h := range b.c.holders {
		if h.fetchBroker() == b.id && h.laneable() {
			n++
		}
	}
	return max(1, (n+len(b.lanes)-1)/max(1, len(b.lanes)))
}

// openLanes opens the broker's lanes, all FetchConnections-1 of them at
// once, when one of its leased cursors has a backlog (backlogged) and the
// broker is judged distant, or its measure under way leans that way
// (brokerRTT.leaning). Lanes that open before the verdict only open their
// connections: cursors move onto them once the broker is judged distant,
// and a lane left without cursors closes after laneLinger. Opening them
// one after another, each once the one before was open, as the backlog
// grew, took three of the first ten round trips of a range of 410 MB at
// 50 ms.
func (b *broker) openLanes() {
	c := b.c
	if !b.lanesAllowed() {
		return
	}
	b.measure()
	if !b.distant() && (b.rtt == nil || !b.rtt.leaning()) {
		return
	}
	if len(b.lanes) >= c.cfg.FetchConnections-1 || !b.backlogged() {
		return
	}
	for len(b.lanes) < c.cfg.FetchConnections-1 {
		b.newLane()
	}
}

// newLane opens a lane of the broker: its loop's goroutine connects it.
func (b *broker) newLane() {
	c := b.c
	ln := &lane{n: 1, addr: b.addr}
	for b.lanes[ln.n] != nil {
		ln.n++
	}
	ln.l = newLoop(b)
	ln.l.conn = ln
	ln.l.emptySince = time.Now()
	b.lanes[ln.n] = ln
	c.counts.lanesOpened.Add(1)
	if c.onLane != nil {
		c.onLane(ln)
		return
	}
	c.workers.Add(1)
	go ln.l.run()
}

// loadFor is how busy l is for cur. It counts its cursors, and twice over
// those of cur's partition (a round takes one cursor of a partition).
func (l *loop) loadFor(cur *cursor) int {
	n := len(l.members)
	for o := range l.members {
		if o.topic == cur.topic && o.partition == cur.partition {
			n += 2
		}
	}
	return n
}

// backlogged reports whether a leased cursor of the broker is backlogged.
func (b *broker) backlogged() bool {
	for h := range b.c.holders {
		if h.fetchBroker() == b.id && h.backlogged(b.c.cfg.FetchMaxPartitionBytes) {
			return true
		}
	}
	return false
}

// lane is a backlog lane of a broker. It is a loop on a fetch connection of
// its own, the seed connection of a client of its own (Config.ClientOpts,
// seeded with the broker's advertised address only), that its loop's
// goroutine creates, owns and closes. A lane takes only laneable cursors,
// asks LanePartitionBytes of each, never waits (what it asks for exists),
// and keeps up to laneDepth rounds in flight. It lingers laneLinger empty
// before it closes.
type lane struct {
	l    *loop
	n    int         // its number among the broker's lanes, 1 and up
	addr string      // the broker's advertised address, its client's seed
	cl   *kgo.Client // its loop's goroutine's
	warm bool        // its connection is open (its first, empty, fetch was answered), under Cache.mu
}

// open creates the lane's client and opens its connection (warm). A client
// that cannot be created closes every lane (laneFailedLocked).
func (ln *lane) open() (int, bool) {
	c := ln.l.c
	cl, err := ln.client()
	if err != nil {
		c.mu.Lock()
		c.laneFailedLocked(err)
		c.mu.Unlock()
		return 0, false
	}
	ln.cl = cl
	return laneDepth, ln.warmUp()
}

// client creates the lane's client. It has the options of every client the
// cache creates (Config.ClientOpts, with TLS, SASL and the dialer), seeded
// with the broker's advertised address only. Its seed broker's fetch
// connection is the lane's. It asks for no metadata (MetadataMaxAge is an
// hour, the most franz-go allows).
func (ln *lane) client() (*kgo.Client, error) {
	opts := append(slices.Clone(ln.l.c.cfg.ClientOpts), kgo.SeedBrokers(ln.addr), kgo.MetadataMaxAge(time.Hour))
	return kgo.NewClient(opts...)
}

// warmUp opens the lane's connection with an empty fetch (answered at
// once), then makes it warm. The broker's laneable cursors on its loop move
// to it, and later ones join it. If the connection fails, the lane closes
// (false) and the broker gets no lane for laneRetry. Its cursors fetch on
// its loop meanwhile, as they would without lanes.
func (ln *lane) warmUp() bool {
	c := ln.l.c
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MaxBytes = 1
	req.SessionID = 0
	req.SessionEpoch = -1 // no fetch session, as the loops' fetches
	ctx, cancel := context.WithTimeout(c.ctx, metaTimeout)
	_, err := ln.cl.SeedBrokers()[0].Request(ctx, req)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	return ln.warmedLocked(err)
}

// warmedLocked ends warmUp with the empty fetch's error. The lane is warm
// (true), or it closes and its broker gets no lane for laneRetry.
func (ln *lane) warmedLocked(err error) bool {
	b := ln.l.b
	if b.lanes[ln.n] != ln {
		return false // closed meanwhile (laneFailedLocked)
	}
	if err != nil {
		delete(b.lanes, ln.n)
		b.laneDown = time.Now()
		return false
	}
	ln.warm = true
	b.spread()
	return true
}

// ended closes the lane's client and forgets the lane as its goroutine
// ends (retired, closed with the cache, or failed to connect). Its cursors,
// if any are left, go to their broker's loop.
func (ln *lane) ended() {
	if ln.cl != nil {
		ln.cl.Close()
	}
	c, b := ln.l.c, ln.l.b
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.lanes[ln.n] == ln {
		delete(b.lanes, ln.n)
	}
	for cur := range ln.l.members {
		c.leaveLoopLocked(cur)
		if c.ctx.Err() == nil {
			c.joinLoopLocked(cur)
		}
	}
}

// request sends req on the lane's connection.
func (ln *lane) request(ctx context.Context, req *kmsg.FetchRequest) (kmsg.Response, error) {
	ln.l.c.counts.laneFetches.Add(1)
	return ln.cl.SeedBrokers()[0].Request(ctx, req)
}

// takes reports whether cur is laneable.
func (ln *lane) takes(cur *cursor) bool { return cur.laneable() }

// relane moves cur off the lane, to its broker's loop, once it is no
// longer laneable or the broker no longer distant. And from a lane over
// laneCursors cursors to one under it.
func (ln *lane) relane(cur *cursor) {
	c, b := ln.l.c, ln.l.b
	if !cur.laneable() || !b.distant() {
		c.leaveLoopLocked(cur)
		c.joinLoopLocked(cur)
		return
	}
	if len(ln.l.members) <= laneCursors {
		return
	}
	for _, o := range b.lanes {
		if o.warm && len(o.l.members) < laneCursors {
			c.leaveLoopLocked(cur)
			o.enter(cur)
			return
		}
	}
}

// enter puts cur, in no loop, on the lane.
func (ln *lane) enter(cur *cursor) {
	ln.l.members[cur] = struct{}{}
	cur.loop = ln.l
	cur.started = false
	ln.l.kick()
}

// ask asks LanePartitionBytes of a cursor, which has a backlog, so it
// gets more per round trip. It asks no more than what is left of its range
// (leftAsk). A distant partition's next range is read at once on another
// cursor, which fetches what this one would bring past its end again.
func (ln *lane) ask(cur *cursor, rp *kmsg.FetchRequestTopicPartition) {
	rp.PartitionMaxBytes = cur.leftAsk(ln.l.c.cfg.LanePartitionBytes)
}

// wait is 0. A lane asks only for offsets known to exist, so the broker
// answers at once, and a lane never holds a poll.
func (ln *lane) wait(int32) int32 { return 0 }

// nothing marks cur laneless. An answer without records where records were
// known to be is not a lane's to wait for. The broker's loop asks again, and polls.
func (ln *lane) nothing(cur *cursor) {
	cur.laneless = true
	ln.l.c.leaveLoopLocked(cur)
	ln.l.c.joinLoopLocked(cur)
}

// retire forgets the lane once it has been empty laneLinger. A lane
// closed with the others (laneFailedLocked) retires at once.
func (ln *lane) retire() bool {
	b := ln.l.b
	if len(ln.l.members) > 0 || b.lanes[ln.n] != ln || time.Since(ln.l.emptySince) < laneLinger {
		return b.lanes[ln.n] != ln
	}
	delete(b.lanes, ln.n)
	return true
}

// linger is how long the lane, empty, waits before it closes (0 while it
// has cursors).
func (ln *lane) linger() time.Duration {
	if len(ln.l.members) > 0 {
		return 0
	}
	return max(laneLinger-time.Since(ln.l.emptySince), time.Nanosecond)
}

// laneFailedLocked closes every lane (their cursors go back to their
// broker's loop) and opens no more. A lane's client could not be created,
// from the options that made the other clients, so this is not expected.
func (c *Cache) laneFailedLocked(err error) {
	c.laneErr = err
	for _, b := range c.brokers {
		for n, ln := range b.lanes {
			delete(b.lanes, n)
			for cur := range ln.l.members {
				c.leaveLoopLocked(cur)
				c.joinLoopLocked(cur)
			}
		}
	}
}

// noteBrokersLocked keeps the advertised address of every broker of a
// metadata answer, for the lanes' clients.
func (c *Cache) noteBrokersLocked(brokers []kmsg.MetadataResponseBroker) {
	for _, mb := range brokers {
		c.brokerLocked(mb.NodeID).addr = net.JoinHostPort(mb.Host, strconv.Itoa(int(mb.Port)))
	}
}
