package cache

import (
	"container/list"
	"time"
)

// idleList is the cache's listed cursors (idle, following, being revived,
// failed or truncated: those no lease holds), most recently used at the
// front, and what they keep, within Capacity and IdleBufferBytes. Its
// fields and methods are under Cache.mu.
type idleList struct {
	c       *Cache
	lru     *list.List // the listed cursors, most recently used at the front
	bytes   int64      // what they keep (the sum of their keptBytes)
	keeping int        // of them, those counted by Capacity (cursor.keeps)
	starved bool       // a loop skipped an idle cursor for want of budget: kick the loops when it frees
}

func newIdleList(c *Cache) idleList {
	return idleList{c: c, lru: list.New()}
}

// budget is what idle cursors may keep in all: IdleBufferBytes.
func (il *idleList) budget() int64 { return max(il.c.cfg.IdleBufferBytes, 0) }

// add puts a cursor whose lease ended (or a new follower) on the list,
// counting what it keeps.
func (il *idleList) add(cur *cursor) {
	cur.lastUsed = time.Now()
	cur.elem = il.lru.PushFront(cur)
	cur.keptBytes = cur.kept()
	il.bytes += cur.keptBytes
	il.recount(cur)
}

// remove takes cur off the list, with what it keeps.
func (il *idleList) remove(cur *cursor) {
	il.bytes -= cur.keptBytes
	cur.keptBytes = 0
	il.lru.Remove(cur.elem)
	cur.elem = nil
	il.recount(cur)
	il.freed()
}

// keep counts n more bytes (fewer, if negative) that cur, listed, keeps.
func (il *idleList) keep(cur *cursor, n int64) {
	cur.keptBytes += n
	il.bytes += n
}

// kept is what an idle cursor keeps. Its decoded records and the fetched
// bytes it has not decoded.
func (cur *cursor) kept() int64 {
	n := cur.queueBytes
	for _, r := range cur.buf {
		n += RecordBytes(r)
	}
	return n
}

// keeps reports whether cur counts in idleList.keeping: on the list, not
// following its partition's tail, keeping records.
func (cur *cursor) keeps() bool {
	return cur.elem != nil && !cur.follower() && cur.keptBytes > 0
}

// recount brings keeping up to date with cur, after anything that may
// change cur.keeps(): its place on the list, its kept bytes, its state.
func (il *idleList) recount(cur *cursor) {
	if now := cur.keeps(); now != cur.counted {
		cur.counted = now
		if now {
			il.keeping++
		} else {
			il.keeping--
		}
	}
}

// freed kicks the brokers' loops if one skipped an idle cursor for want of
// IdleBufferBytes and the idle records now fit in it: a loop whose last
// round found nothing to fetch waits until kicked.
func (il *idleList) freed() {
	if !il.starved || il.bytes >= il.budget() {
		return
	}
	il.starved = false
	for _, b := range il.c.brokers {
		if b.loop != nil {
			b.loop.kick()
		}
	}
}

// trim drops the kept records of the least recently used idle cursors
// while they keep more than IdleBufferBytes, or while more than Capacity
// idle cursors that do not follow their partition's tail keep records. A
// follower keeps what arrives for the next lease, bounded by
// IdleBufferBytes only. A cursor that drops them keeps its position (and a
// follower goes on following) and fetches them again when next used.
func (il *idleList) trim() {
	budget, capacity := il.budget(), il.c.cfg.Capacity
	holding := il.keeping // counted as they change: a count of the list here made every release cost a pass over it
	for el := il.lru.Back(); el != nil && (il.bytes > budget || holding > capacity); el = el.Prev() {
		cur := el.Value.(*cursor)
		overCapacity := !cur.follower() && holding > capacity
		if cur.keptBytes == 0 || !overCapacity && il.bytes <= budget {
			continue
		}
		if cur.reviving() {
			// Its revival goroutine holds it: the position, the decoded
			// records and the leader epoch are the holder's. Only the
			// fetched batches not decoded yet are shared.
			if cur.queueBytes > 0 {
				il.keep(cur, -cur.queueBytes)
				cur.resetQueueLocked(cur.fetched)
				il.recount(cur)
			}
			continue
		}
		if overCapacity {
			il.c.counts.capEvictions.Add(1)
		}
		if !cur.follower() {
			holding--
			cur.want = cur.next
		}
		il.keep(cur, -cur.keptBytes)
		cur.dropBufferedLocked()
		il.recount(cur)
	}
	il.freed()
}
