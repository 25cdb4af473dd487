package cache

import (
	"bytes"
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/backoff"
)

// loop is a fetch loop of one broker. It is one goroutine that puts every
// cursor in it that needs data into one FetchRequest per round, on one fetch
// connection to that broker, and hands each cursor its part of the
// response. A round with only caught-up partitions is a long poll. The
// broker answers when records arrive or after FetchMaxWait. The broker's
// loop sends on the shared client (brokerConn). A backlog lane is a loop
// on a connection of its own (lane, lanes.go). conn is all that differs.
type loop struct {
	c         *Cache
	b         *broker              // whose loop or lane it is
	members   map[*cursor]struct{} // under Cache.mu
	rounds    uint64               // rounds built, under Cache.mu
	flying    int                  // fetch requests in flight, under Cache.mu
	holding   int                  // of them, long polls the broker may hold, under Cache.mu
	joined    bool                 // a cursor joined since the last round was built, under Cache.mu
	abandon   context.CancelFunc   // ends the long poll in flight, nil if none or already ended; under Cache.mu
	abandoned time.Time            // when a long poll was last abandoned, under Cache.mu
	wake      chan struct{}        // buffered 1
	conn      conn                 // the connection its rounds go on: *brokerConn or *lane

	emptySince time.Time // when the last cursor left (a lane closes laneLinger after), under Cache.mu
}

// conn is the fetch connection a loop sends its rounds on, and what
// differs with it. The broker's loop (brokerConn) long-polls on the shared
// client. A lane (lanes.go) fetches backlogs on a client of its own.
type conn interface {
	// open readies the connection as the loop's goroutine starts, and
	// returns how many rounds may be in flight at once. false ends the
	// loop.
	open() (depth int, ok bool)
	// ended runs as the loop's goroutine ends, open or not.
	ended()
	// request sends one round.
	request(ctx context.Context, req *kmsg.FetchRequest) (kmsg.Response, error)
	// takes reports whether cur, a member, fetches in this loop now. A
	// member it does not take moves (relane). Under Cache.mu.
	takes(cur *cursor) bool
	// relane moves cur, a member in no fetch, to the loop it belongs in
	// now, if another. Under Cache.mu.
	relane(cur *cursor)
	// ask sets what a round asks of cur. That is rp's bytes, and the
	// request's wait once the loop chose it (wait). Under Cache.mu.
	ask(cur *cursor, rp *kmsg.FetchRequestTopicPartition)
	wait(ms int32) int32
	// nothing handles an answer to cur without records. Under Cache.mu.
	nothing(cur *cursor)
	// retire forgets the loop if it is done (no member, nothing left to
	// wait for) and reports whether it is. linger is how long an empty
	// loop waits before it asks again. Under Cache.mu.
	retire() bool
	linger() time.Duration
}

// brokerConn is the broker's loop's connection. It is the shared client's
// fetch connection to the broker, which carries the long polls of caught-up
// cursors, and every fetch of a near broker.
type brokerConn struct{ l *loop }

func (bc *brokerConn) open() (int, bool) { return maxRounds, true }
func (bc *brokerConn) ended()            {}

func (bc *brokerConn) request(ctx context.Context, req *kmsg.FetchRequest) (kmsg.Response, error) {
	return bc.l.c.cl.Broker(int(bc.l.b.id)).Request(ctx, req)
}

func (bc *brokerConn) takes(*cursor) bool { return true }

// relane moves cur onto a lane of the broker if one takes it.
func (bc *brokerConn) relane(cur *cursor) {
	if to := bc.l.b.laneFor(cur); to != nil {
		bc.l.c.leaveLoopLocked(cur)
		to.enter(cur)
	}
}

func (bc *brokerConn) ask(_ *cursor, rp *kmsg.FetchRequestTopicPartition) {
	rp.PartitionMaxBytes = bc.l.c.cfg.FetchMaxPartitionBytes
}

func (bc *brokerConn) wait(ms int32) int32 { return ms }

func (bc *brokerConn) nothing(*cursor) {} // the next round asks again

// retire forgets the loop once no cursor is in it.
func (bc *brokerConn) retire() bool {
	l := bc.l
	if len(l.members) > 0 || l.b.loop != l {
		return false
	}
	l.b.loop = nil
	return true
}

func (bc *brokerConn) linger() time.Duration { return 0 }

func (l *loop) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// shortPoll is the longest a round waits while a lease holder that may want
// data is not part of it.
const shortPoll = 5 * time.Millisecond

// maxQueued bounds the fetched, undecoded answers a cursor holds. One is
// being decoded while the next is fetched.
const maxQueued = 2

// joinLoopLocked puts cur into the fetch loop of its leader (or preferred
// read replica), starting the loop if it has to. A cursor whose leader is
// unknown takes it from its topic's metadata if that is answered already
// (knownLeaderLocked), else is revived first if it is idle (a leased one's
// holder learns it).
func (c *Cache) joinLoopLocked(cur *cursor) {
	if cur.gone() || c.closed && !cur.leased() {
		return
	}
	if l := cur.loop; l != nil {
		if l.conn.takes(cur) || cur.inFlight {
			c.relaneLocked(cur)
			cur.loop.kick()
			return
		}
		c.leaveLoopLocked(cur) // off its lane: to its broker's loop below
	}
	if cur.leader < 0 && (cur.leased() || !c.knownLeaderLocked(cur)) {
		if !cur.leased() {
			_ = c.transitionLocked(cur, evRevive, nil)
		}
		return
	}
	id := cur.leader
	if cur.replica >= 0 {
		id = cur.replica
	}
	b := c.brokerLocked(id)
	if ln := b.laneFor(cur); ln != nil {
		ln.enter(cur)
		return
	}
	if cur.laneable() {
		// A range with records to read. The broker's round trip is
		// measured now (at most every rttFresh), so that its lanes may
		// open as soon as its backlog shows.
		b.openLanes()
	}
	l := b.loop
	if l == nil {
		l = newLoop(b)
		l.conn = &brokerConn{l}
		b.loop = l
		c.workers.Add(1)
		go l.run()
	}
	l.members[cur] = struct{}{}
	l.joined = true // the next round polls briefly: more may be joining (see build)
	cur.loop = l
	if cur.started && cur.state == stateFollowing && l.abandon != nil && time.Since(l.abandoned) >= c.cfg.FetchMaxWait {
		// A partition started while the loop's long poll for the others
		// is held (partitions assigned to a running member). The broker
		// would not even read its fetch until that poll ends, up to
		// FetchMaxWait. Abandon the poll (franz-go closes the fetch
		// connection, which carries nothing else then, see build) so the
		// next round takes it with the others. At most once per
		// FetchMaxWait, so that a new connection (a TLS handshake, a SASL
		// login) costs at most what the poll would. A cursor that was
		// already in a loop (a range's, reaching the tail) waits.
		l.abandon()
		l.abandon = nil
		l.abandoned = time.Now()
	}
	cur.started = false
	l.kick()
}

// leaveLoopLocked takes cur out of its loop. The last cursor to leave kicks
// the loop, so that it retires even if it last looked while cur was still in
// it (a round's answer kicks it, but the release may come after that).
func (c *Cache) leaveLoopLocked(cur *cursor) {
	if l := cur.loop; l != nil {
		delete(l.members, cur)
		cur.loop = nil
		if len(l.members) == 0 {
			l.emptySince = time.Now()
			l.kick()
		}
	}
}

// startRevivalLocked starts the revival of an idle cursor whose leader is
// unknown (new, or after a leadership error while it followed the tail),
// for evRevive. The revival is a goroutine that holds the cursor (Acquire
// passes it by) while it learns the leader, validates the position if it must, and puts
// it back into a loop. A permanent error is kept for the cursor's next
// lease (revivalEndedLocked).
func (c *Cache) startRevivalLocked(cur *cursor) {
	// A revival that follows another with no fetch served in between (a
	// leader that keeps failing the cursor's fetches, or a broker that
	// closes every connection) first waits, 100 ms doubling to 5 s. Else
	// the cursor would relearn the same leader and fail again at once,
	// round after round, a connection and a metadata request each.
	pause := revivalPause(cur.revivals)
	cur.revivals++
	if c.onRevive != nil {
		c.onRevive(cur)
		return
	}
	if pause == 0 {
		c.locating++ // until its first try ends: loops poll briefly meanwhile (see build)
	}
	c.workers.Add(1)
	go c.revive(cur, pause)
}

// revive is the revival goroutine of cur (startRevivalLocked).
func (c *Cache) revive(cur *cursor, pause time.Duration) {
	defer c.workers.Done()
	if pause > 0 {
		// Not counted in locating. A cursor that waits does not make the
		// loops poll briefly meanwhile.
		if backoff.Wait(c.ctx, pause) != nil {
			c.mu.Lock()
			c.revivalEndedLocked(cur, nil, false)
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		if cur.gone() {
			c.mu.Unlock()
			return
		}
		c.locating++
		c.mu.Unlock()
	}
	delay := 100 * time.Millisecond
	first := true
	for {
		c.mu.Lock()
		since := cur.needSince
		c.mu.Unlock()
		leaderErr, err := c.locate(c.ctx, cur, since)
		c.mu.Lock()
		if first {
			first = false
			c.locating--
		}
		if err == nil && leaderErr == nil || err != nil && c.ctx.Err() == nil || cur.gone() {
			c.revivalEndedLocked(cur, err, true)
			c.mu.Unlock()
			return
		}
		if c.ctx.Err() != nil {
			c.revivalEndedLocked(cur, nil, false)
			c.mu.Unlock()
			return
		}
		cur.needSince = time.Now()
		c.mu.Unlock()
		if backoff.Wait(c.ctx, delay) != nil {
			c.mu.Lock()
			c.revivalEndedLocked(cur, nil, false)
			c.mu.Unlock()
			return
		}
		delay = backoff.Double(delay, 5*time.Second)
	}
}

// revivalPause is how long a revival waits before it learns the leader,
// after revivals revivals in a row with no fetch served in between. It is
// zero for the first, then 100 ms doubling to 5 s.
func revivalPause(revivals int) time.Duration {
	if revivals <= 0 {
		return 0
	}
	return min(100*time.Millisecond<<min(revivals-1, 6), 5*time.Second)
}

// sent is one cursor's part of a fetch request.
type sent struct {
	cur *cursor
	gen uint64
	at  int64
}

// maxRounds is how many rounds a loop has in flight at once. The next one
// is written while the broker answers the last, so a partition read by
// several ranges at once (each its own cursor, one per round) and the
// decoding of one answer overlap the next fetch. The broker still answers a
// connection's requests in order.
const maxRounds = 2

func (l *loop) run() {
	c := l.c
	defer c.workers.Done()
	defer l.conn.ended()
	depth, ok := l.conn.open()
	if !ok {
		return
	}
	slots := make(chan struct{}, depth)
	for {
		c.mu.Lock()
		linger := l.conn.linger()
		c.mu.Unlock()
		var timeout <-chan time.Time
		var timer *time.Timer
		if linger > 0 {
			timer = time.NewTimer(linger)
			timeout = timer.C
		}
		select {
		case <-l.wake:
		case <-timeout:
		case <-c.ctx.Done():
			return
		}
		if timer != nil {
			timer.Stop()
		}
		for c.ctx.Err() == nil {
			select {
			case slots <- struct{}{}:
			default:
				goto wait // every round in flight: the next answer kicks the loop
			}
			// Cursors whose preferred replica failed lately fetch without
			// the rack, in a request of their own, so the leader serves
			// them instead of pointing at the replica again.
			now := time.Now()
			reqs := make([]*kmsg.FetchRequest, 0, 2)
			partss := make([][]sent, 0, 2)
			holds := make([]bool, 0, 2)
			for _, rackless := range []bool{false, true} {
				if rackless && c.cfg.Rack == "" {
					continue
				}
				if req, parts, hold := l.build(rackless, now); req != nil {
					reqs, partss, holds = append(reqs, req), append(partss, parts), append(holds, hold)
				}
			}
			if len(reqs) == 0 {
				<-slots
				break
			}
			rctx, cancel := context.WithCancel(c.ctx)
			c.mu.Lock()
			for i, req := range reqs {
				if len(reqs) > 1 {
					req.MaxWaitMillis = min(req.MaxWaitMillis, int32(shortPoll/time.Millisecond))
					holds[i] = false
				}
				l.flying++
				if holds[i] {
					l.holding++
					l.abandon = cancel
				}
			}
			c.mu.Unlock()
			c.workers.Add(1)
			go func() {
				defer c.workers.Done()
				defer cancel()
				for i, req := range reqs {
					c.counts.fetches.Add(1)
					sent := time.Now()
					kresp, err := l.conn.request(rctx, req)
					took := time.Since(sent)
					var resp *kmsg.FetchResponse
					if err == nil {
						resp = kresp.(*kmsg.FetchResponse)
						if rerr := kerr.ErrorForCode(resp.ErrorCode); rerr != nil {
							err = rerr
						}
					}
					abandoned := err != nil && rctx.Err() != nil && c.ctx.Err() == nil
					if err == nil {
						c.mu.Lock()
						l.b.noteRTT(took) // a round trip at least
						c.mu.Unlock()
					}
					l.dispatch(partss[i], holds[i], abandoned, resp, err)
				}
				<-slots
				l.kick()
			}()
		}
	wait:
		if len(slots) == 0 && l.retire() {
			return
		}
	}
}

// newLoop returns a loop of broker b, without its conn.
func newLoop(b *broker) *loop {
	return &loop{c: b.c, b: b, members: map[*cursor]struct{}{}, wake: make(chan struct{}, 1)}
}

// retire ends the loop if no cursor is in it and no round is in flight. So a
// broker whose cursors all left (released, or moved to another leader, and
// a broker gone from the metadata loses them all) keeps no goroutine. A
// cursor that joins later starts a new loop. A lane waits laneLinger
// empty first.
func (l *loop) retire() bool {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.conn.retire()
}

// build takes every member that needs data into one request, or returns
// nil if none does. It takes at most one cursor per partition, so two
// ranges of one partition read in parallel take turns. With rackless it
// takes only the cursors that fetch without the rack now (their replica
// failed lately), else the others. hold reports a long poll that the broker may hold. Every cursor
// in it is caught up as far as the loop knows.
//
// Caught-up cursors go into one long poll together, never split over two
// rounds. The broker reads a connection's next request only once it
// answered the last, so a partition outside the poll in flight is not even
// asked for until that poll ends (FetchMaxWait), and two long polls in
// flight would make each half wait for the other's records, round after
// round. So while a long poll may be held nothing more is sent (its answer
// kicks the loop, and the next round takes everyone). While a round that
// will be answered at once is in flight, a second one goes only for a lease
// holder or a cursor known to have records to fetch (pipelining a read),
// and polls briefly. A round built just after a cursor joined the loop, or
// while cursors are learning their leader for the first time (partitions
// being started together, at a start or an assignment), polls briefly too,
// so that the first long poll of a start holds all of them. While the
// cache is held (Hold: partitions being started), nothing is sent.
func (l *loop) build(rackless bool, now time.Time) (req *kmsg.FetchRequest, parts []sent, hold bool) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.holding > 0 || c.holds > 0 {
		return nil, nil, false // (Hold's release kicks the loops)
	}
	busy := l.flying > 0
	// One cursor per partition. A leased one goes before a follower, then
	// the one that waited longest, so no cursor starves behind another of its
	// partition.
	best := map[key]*cursor{}
	var off []*cursor         // no longer this loop's (a lane's, no longer laneable): moved
	reading := map[key]bool{} // partitions with a leased cursor in the loop, in a round or not
	for cur := range l.members {
		if cur.leased() && c.cfg.RoundBytes > 0 {
			reading[key{cur.topic, cur.partition}] = true
		}
		if !cur.fetchable() {
			continue
		}
		if !l.conn.takes(cur) {
			off = append(off, cur)
			continue
		}
		if cur.racklessAt(now) != rackless {
			continue
		}
		k := key{cur.topic, cur.partition}
		if b := best[k]; b == nil || cur.leased() && !b.leased() || cur.leased() == b.leased() && cur.lastRound < b.lastRound {
			best[k] = cur
		}
	}
	for _, cur := range off {
		c.relaneLocked(cur)
	}
	if busy {
		urgent := false
		for _, cur := range best {
			if cur.leased() || cur.fetchAt < cur.high {
				urgent = true
				break
			}
		}
		if !urgent {
			return nil, nil, false // caught up: they wait for the round in flight, then go together
		}
	}
	l.rounds++
	topics := map[string]int{}
	req = kmsg.NewPtrFetchRequest()
	budget := c.idle.budget()
	asked := int64(0) // what this round's idle cursors with more to fetch may bring
	boost := c.roundShare(len(reading))
	caughtUp := true // every cursor of the round, as far as the loop knows
	for _, cur := range best {
		if !cur.leased() && cur.fetchAt < cur.high {
			// An idle cursor that knows there is more to fetch takes a
			// share of the idle budget that is left. A caught-up follower
			// always long-polls. A full budget stops idle cursors from
			// buffering more, never from seeing their partition's end
			// move (OnHigh).
			if c.idle.bytes+asked >= budget {
				c.idle.starved = true
				continue
			}
			asked += int64(c.cfg.FetchMaxPartitionBytes)
		}
		cur.inFlight = true
		cur.lastRound = l.rounds
		if rackless && cur.racklessLeft > 0 {
			cur.racklessLeft--
		}
		if cur.fetchAt < cur.high {
			caughtUp = false
		}
		parts = append(parts, sent{cur: cur, gen: cur.gen, at: cur.fetchAt})
		i, ok := topics[cur.topic]
		if !ok {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = cur.topic
			rt.TopicID = cur.topicID
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
			topics[cur.topic] = i
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = cur.partition
		rp.FetchOffset = cur.fetchAt
		rp.CurrentLeaderEpoch = cur.epoch
		rp.LogStartOffset = -1
		l.conn.ask(cur, &rp)
		if cur.leased() && boost > rp.PartitionMaxBytes {
			rp.PartitionMaxBytes = cur.roundAsk(boost, rp.PartitionMaxBytes)
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		if cur.replica >= 0 {
			c.counts.replicaFetches.Add(1)
		}
	}
	if len(parts) == 0 {
		return nil, nil, false
	}
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(c.cfg.FetchMaxWait / time.Millisecond)
	short := busy || l.joined || c.locating > 0
	l.joined = false
	if short || l.holderWaitsLocked() {
		// A lease holder of this broker that may want data is not in this
		// round (it waits behind another cursor of its partition, is in
		// the other round in flight, or is about to join). A long poll
		// would keep it waiting until the broker answers, since the
		// connection serves one request at a time. Poll briefly instead.
		// The next round takes it. Holders of other brokers fetch on other
		// connections, and holders learning their leader belong to no
		// broker yet. Neither shortens this loop's polls.
		req.MaxWaitMillis = min(req.MaxWaitMillis, int32(shortPoll/time.Millisecond))
	}
	req.MaxWaitMillis = l.conn.wait(req.MaxWaitMillis)
	hold = caughtUp && time.Duration(req.MaxWaitMillis)*time.Millisecond > shortPoll
	req.MinBytes = c.cfg.FetchMinBytes
	req.MaxBytes = c.cfg.FetchMaxBytes
	if c.cfg.ReadCommitted {
		req.IsolationLevel = 1
	}
	req.SessionID = 0
	req.SessionEpoch = -1 // no fetch session: see the package doc
	if !rackless {
		req.Rack = c.cfg.Rack
	}
	return req, parts, hold
}

// roundShare is what a leased cursor of a round asks at the least:
// Config.RoundBytes shared among the partitions the loop's leased cursors
// read (0 without RoundBytes or leased cursors). It counts partitions, not
// the round's cursors, so partitions split between the two rounds in
// flight ask no more than they would together, and a partition's ranges,
// which take turns (a round carries one cursor of a partition), share one
// part. Under Cache.mu.
func (c *Cache) roundShare(partitions int) int32 {
	if c.cfg.RoundBytes <= 0 || partitions == 0 {
		return 0
	}
	return c.cfg.RoundBytes / int32(partitions)
}

// roundSlack is what a leased cursor's round share asks past what its
// bytes per offset so far say is left of its range: a batch's worth, since
// a fetch returns whole batches.
const roundSlack = 64 << 10

// roundAsk is what cur, leased, asks of a round whose share is share:
// leftAsk's, never less than floor. Under Cache.mu.
func (cur *cursor) roundAsk(share, floor int32) int32 {
	return max(cur.leftAsk(share), floor)
}

// leftAsk is most, or less: what is left of cur's range by its bytes per
// offset so far, plus its largest batch of the last answer and roundSlack.
// Records fetched past the range are another cursor's to fetch again when
// the next range of the partition is read in parallel (10,000-record ranges
// of 1 KiB asked 4 MiB each cost about a tenth more CPU for that; on a
// distant broker's lanes, a fifth more bytes through the network). A
// broker returns batches whole and only while they fit, so the batch in
// which the range ends fits in the same answer, not in a round trip of its
// own. Under Cache.mu.
func (cur *cursor) leftAsk(most int32) int32 {
	if cur.offsetBytes > 0 && cur.want > cur.fetchAt && cur.want != math.MaxInt64 {
		if left := float64(cur.want-cur.fetchAt)*cur.offsetBytes + float64(cur.batchBytes) + roundSlack; left < float64(most) {
			return int32(left)
		}
	}
	return most
}

// holderWaitsLocked reports whether a lease holder whose cursor is in this
// loop, or whose leader (or preferred replica) is this loop's broker, may
// want data and is not part of the round being built.
func (l *loop) holderWaitsLocked() bool {
	for h := range l.c.holders {
		if h.emitting.Load() || h.loop == l && h.inFlight && h.lastRound == l.rounds {
			continue
		}
		id := h.leader
		switch {
		case h.loop != nil:
			id = h.loop.b.id
		case h.replica >= 0:
			id = h.replica
		}
		if id == l.b.id {
			return true
		}
	}
	return false
}

type highNote struct {
	topic     string
	partition int32
	high      int64
}

// dispatch hands every cursor of a round its part of the response (or the
// error of the request), then reports the ends that moved. held is build's
// hold of the round. abandoned says the loop ended the round itself (see
// joinLoopLocked). Its cursors are then only fetched again.
func (l *loop) dispatch(parts []sent, held, abandoned bool, resp *kmsg.FetchResponse, err error) {
	c := l.c
	var notes []highNote
	var index map[partRef]*kmsg.FetchResponseTopicPartition
	if resp != nil && len(parts) > 8 {
		index = indexParts(resp)
	}
	c.mu.Lock()
	sh := c.shareLocked(resp, len(parts))
	l.flying--
	if held {
		l.holding--
		l.abandon = nil
	}
	for _, s := range parts {
		cur := s.cur
		if cur.gen != s.gen || cur.gone() {
			continue // the cursor moved (or was forgotten) meanwhile
		}
		cur.inFlight = false
		if abandoned {
			continue
		}
		fail := func(part *kmsg.FetchResponseTopicPartition, why error) {
			c.fetchFailedLocked(cur, &fetchError{topic: cur.topic, partition: cur.partition, offset: s.at, broker: l.b.id, part: part, err: why})
		}
		if err != nil {
			if c.ctx.Err() != nil {
				cur.setErrLocked(ErrClosed)
				continue
			}
			if cur.replica == l.b.id {
				c.replicaFailedLocked(cur) // gone: back to the leader
				continue
			}
			fail(nil, err)
			continue
		}
		var part *kmsg.FetchResponseTopicPartition
		if index != nil {
			if part = index[partRef{topic: cur.topic, partition: cur.partition}]; part == nil && cur.topicID != ([16]byte{}) {
				part = index[partRef{id: cur.topicID, partition: cur.partition}]
			}
		}
		if part == nil {
			part = findPart(resp, cur)
		}
		if part == nil {
			// Left out of a response that reached FetchMaxBytes (kfake
			// does so, Kafka answers such partitions empty). The next
			// round asks again, as kgo's consumer does.
			continue
		}
		if perr := kerr.ErrorForCode(part.ErrorCode); perr != nil {
			if cur.replica >= 0 {
				// The preferred replica could not serve it (behind, or
				// gone). Back to the leader (KIP-392).
				c.replicaFailedLocked(cur)
				continue
			}
			fail(part, perr)
			continue
		}
		cur.revivals = 0 // its broker serves it: the next revival goes at once
		if cur.replica >= 0 {
			cur.replicaFails = 0 // the replica serves
		}
		if pr := part.PreferredReadReplica; pr >= 0 && pr != l.b.id && c.cfg.Rack != "" && !cur.racklessAt(time.Now()) {
			// The leader points at a replica in our rack. Fetch there.
			cur.replica = pr
			c.leaveLoopLocked(cur)
			c.joinLoopLocked(cur)
			continue
		}
		high := part.HighWatermark
		if c.cfg.ReadCommitted && part.LastStableOffset >= 0 {
			high = part.LastStableOffset
		}
		if high > cur.high {
			cur.high = high
			if c.cfg.OnHigh != nil {
				notes = append(notes, highNote{cur.topic, cur.partition, high})
			}
		}
		if len(part.RecordBatches) == 0 {
			l.conn.nothing(cur)
			continue
		}
		raw := &rawFetch{part: *part, at: s.at, gen: cur.gen, bytes: int64(len(part.RecordBatches))}
		switch {
		case len(parts) == 1:
			// A round of one partition. The response is about its answer.
		case sh != nil && cur.leased():
			// Its holder takes it soon. It keeps the response, counted
			// once in pinned, until the last of the round's answers is
			// decoded or dropped (or copied when its lease ends).
			raw.shared = sh
			sh.refs++
		default:
			// The answer shares the response buffer with the round's other
			// partitions. Make one copy of it, so that what an idle cursor
			// keeps pins its own bytes, never the whole response.
			raw.part.RecordBatches = bytes.Clone(part.RecordBatches)
		}
		cur.laneless = false
		end, largest := batchesSpan(part.RecordBatches, s.at)
		if end > s.at {
			cur.offsetBytes = float64(raw.bytes) / float64(end-s.at)
			cur.batchBytes = int32(min(largest, math.MaxInt32))
		}
		c.queueLocked(cur, raw, end)
		c.relaneLocked(cur)
	}
	if sh != nil && sh.refs == 0 {
		c.pinned -= sh.bytes // no leased cursor queued an answer of it
	}
	l.b.openLanes() // if its backlog wants them
	if c.idle.bytes > c.idle.budget() {
		// Followers brought more than the idle budget holds. What a round
		// brings is bounded by the in-flight term of the package doc's
		// memory bound, what is kept after it by IdleBufferBytes.
		c.idle.trim()
	}
	c.mu.Unlock()
	for _, n := range notes {
		c.cfg.OnHigh(n.topic, n.partition, n.high)
	}
}

// queueLocked queues raw, a fetch answer not decoded yet, on cur, which
// fetches next from fetchAt. What an idle cursor keeps so is counted.
func (c *Cache) queueLocked(cur *cursor, raw *rawFetch, fetchAt int64) {
	cur.queue = append(cur.queue, raw)
	cur.queueBytes += raw.bytes
	cur.fetchAt = fetchAt
	if cur.listed() {
		c.idle.keep(cur, raw.bytes)
		c.idle.recount(cur)
	}
	cur.signal()
}

// fetchFailedLocked hands cur what its fetch brought instead of records.
// Its holder takes the error. An idle cursor learns its leader again after
// a leadership or request error (and goes on following), dropping the
// batches it fetched from the old leader and did not decode, or keeps any
// other error for its next lease.
func (c *Cache) fetchFailedLocked(cur *cursor, fe *fetchError) {
	c.leaveLoopLocked(cur)
	cur.leader = -1
	cur.needSince = time.Now()
	if cur.leased() {
		cur.setErrLocked(fe)
		return
	}
	if fe.part == nil || isLeaderErr(fe.err) {
		cur.leaderChanged()
		c.dropQueueLocked(cur)
		_ = c.transitionLocked(cur, evRevive, nil)
		return
	}
	_ = c.transitionLocked(cur, evFail, fe)
}

// partRef names a response partition by topic name or, in responses that
// carry only topic IDs (fetch v13 and later), by topic ID.
type partRef struct {
	topic     string
	id        [16]byte
	partition int32
}

// indexParts maps a response's partitions, for rounds of many partitions
// (findPart's scan would make a round quadratic).
func indexParts(resp *kmsg.FetchResponse) map[partRef]*kmsg.FetchResponseTopicPartition {
	n := 0
	for i := range resp.Topics {
		n += len(resp.Topics[i].Partitions)
	}
	out := make(map[partRef]*kmsg.FetchResponseTopicPartition, n)
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			ref := partRef{topic: t.Topic, partition: t.Partitions[j].Partition}
			if t.Topic == "" {
				ref = partRef{id: t.TopicID, partition: t.Partitions[j].Partition}
			}
			out[ref] = &t.Partitions[j]
		}
	}
	return out
}

func findPart(resp *kmsg.FetchResponse, cur *cursor) *kmsg.FetchResponseTopicPartition {
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != cur.topic && (t.TopicID == [16]byte{} || t.TopicID != cur.topicID) {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == cur.partition {
				return &t.Partitions[j]
			}
		}
	}
	return nil
}

// batchesEnd returns the offset after the last complete batch in raw, read
// from the batch headers (base offset and last offset delta). That is where
// the next fetch of the partition starts. It returns -1 if a batch is not of
// the current format (magic 2) or no batch ends past at. Then the cursor
// fetches again only once the holder decoded the batches.
func batchesEnd(raw []byte, at int64) int64 {
	end, _ := batchesSpan(raw, at)
	return end
}

// batchesSpan returns batchesEnd's offset and the bytes of the largest
// complete batch in raw.
func batchesSpan(raw []byte, at int64) (int64, int) {
	end := int64(-1)
	ok := true
	largest := 0
	batches(raw, func(base int64, b []byte) bool {
		largest = max(largest, len(b))
		if len(b) < batchHeaderMinimum || b[batchMagicAt] != 2 {
			ok = false
			return false
		}
		last := base + int64(int32(uint32(b[batchLastDeltaAt])<<24|uint32(b[batchLastDeltaAt+1])<<16|uint32(b[batchLastDeltaAt+2])<<8|uint32(b[batchLastDeltaAt+3])))
		end = last + 1
		return true
	})
	if !ok || end <= at {
		return -1, largest
	}
	return end, largest
}

// replicaFailedLocked moves cur from its preferred read replica back to the
// leader after the replica failed it, and has it fetch from the leader
// without the rack for a while. The while is 100 ms and 16 fetches, each
// doubling with each failure in a row (to 30 s and 1,024 fetches). So a
// leader that keeps pointing at a failing replica serves the records itself
// instead of the two bouncing the cursor for ever. Time alone would end the while
// after one fetch or two where fetches are slow (a broker 50 ms away, a
// busy machine), and fetches alone too soon where they are fast.
func (c *Cache) replicaFailedLocked(cur *cursor) {
	cur.replica = -1
	cur.replicaFails++
	cur.racklessUntil = time.Now().Add(min(100*time.Millisecond<<min(cur.replicaFails-1, 10), 30*time.Second))
	cur.racklessLeft = racklessFetches << min(cur.replicaFails-1, 6)
	c.leaveLoopLocked(cur)
	c.joinLoopLocked(cur)
}

// racklessFetches is how many fetches a cursor sends to the leader
// without the rack after its replica's first failure in a row.
const racklessFetches = 16

// racklessAt reports whether cur fetches without the rack at now
// (replicaFailedLocked).
func (cur *cursor) racklessAt(now time.Time) bool {
	return now.Before(cur.racklessUntil) || cur.racklessLeft > 0
}

// sharedResp is a fetch response of several partitions whose answers to
// leased cursors are queued without a copy (loop.dispatch). Each such
// rawFetch pins the whole response buffer, which counts once in
// Cache.pinned, at most FetchMaxBytes in all (a term of the memory bound),
// until the last of them is decoded or dropped. A cursor whose lease ends
// copies what it still queues of it (ownQueueLocked), so what idle cursors
// keep is always their own bytes. Copying each answer out of the response
// was 15 to 18% of the input's CPU at 256 partitions.
type sharedResp struct {
	bytes  int64  // counted in *pinned
	refs   int    // rawFetches holding it
	pinned *int64 // Cache.pinned
}

// shareLocked returns the sharedResp for resp, a round of n partitions,
// counted in Cache.pinned, or nil if it is not shared. It is not shared for
// a round of one partition (its answer keeps the response as it is), for no
// response, or with no room within FetchMaxBytes (its answers are then
// copied).
func (c *Cache) shareLocked(resp *kmsg.FetchResponse, n int) *sharedResp {
	if resp == nil || n < 2 {
		return nil
	}
	var total int64
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			total += int64(len(resp.Topics[i].Partitions[j].RecordBatches))
		}
	}
	if total == 0 || c.pinned+total > int64(c.cfg.FetchMaxBytes) {
		return nil
	}
	c.pinned += total
	return &sharedResp{bytes: total, pinned: &c.pinned}
}

// ownQueueLocked copies the answers cur queues that share a response into
// memory of their own, as its lease ends. An idle cursor may keep them a
// long time, and its kept bytes must be what it really retains.
func (c *Cache) ownQueueLocked(cur *cursor) {
	for _, raw := range cur.queue {
		if raw.shared != nil {
			raw.part.RecordBatches = bytes.Clone(raw.part.RecordBatches)
			raw.releaseLocked()
		}
	}
}
