package cache

import "time"

// broker is what the cache keeps for one broker: its fetch loop on the
// shared client, its backlog lanes (lanes.go), its measured round trip
// (distance.go), its advertised address (the lanes' seed) and when its
// fetch connection was last opened ahead (dialAhead). The cache creates it
// when it first meets the broker (a metadata answer that names it, a
// cursor that joins its loop) and keeps it while the cache lives. A
// cluster has few brokers. Its fields and methods are under Cache.mu.
type broker struct {
	c        *Cache
	id       int32
	addr     string        // advertised host:port, from the cursors' metadata ("": not known yet)
	loop     *loop         // the fetch loop on the shared client; nil while none runs
	lanes    map[int]*lane // the backlog lanes by number, 1 and up
	laneDown time.Time     // when a lane last failed to connect
	rtt      *brokerRTT    // the round trip as measured; nil until the first measure
	dialled  time.Time     // when dialAhead last opened the fetch connection
	told     bool          // a verdict was logged (verdictLine)
	toldFar  bool          // the verdict last logged: distant
}

// brokerLocked returns broker id's record, creating it.
func (c *Cache) brokerLocked(id int32) *broker {
	b := c.brokers[id]
	if b == nil {
		b = &broker{c: c, id: id, lanes: map[int]*lane{}}
		c.brokers[id] = b
	}
	return b
}

// kick wakes the broker's loop and its lanes.
func (b *broker) kick() {
	if b.loop != nil {
		b.loop.kick()
	}
	for _, ln := range b.lanes {
		ln.l.kick()
	}
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
