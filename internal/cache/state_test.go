package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/modelwalk"
)

// diagramLine is one transition drawn in the package doc.
var diagramLine = regexp.MustCompile(`^//\s+(\w+)\s+--(\w+)-->\s+(\w+)\s*$`)

// TestStateDiagramMatchesTheTable: the transitions drawn in doc.go are
// exactly those of the table transitionLocked applies.
func TestStateDiagramMatchesTheTable(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var drawn []string
	for _, line := range regexp.MustCompile(`\r?\n`).Split(string(doc), -1) {
		if m := diagramLine.FindStringSubmatch(line); m != nil {
			require.Contains(t, stateNames, m[1], "doc.go draws an unknown state: %q", line)
			require.Contains(t, eventNames, m[2], "doc.go draws an unknown event: %q", line)
			require.Contains(t, stateNames, m[3], "doc.go draws an unknown state: %q", line)
			drawn = append(drawn, fmt.Sprintf("%s --%s--> %s", m[1], m[2], m[3]))
		}
	}
	var table []string
	for tr, to := range transitions {
		table = append(table, fmt.Sprintf("%s --%s--> %s", tr.from, tr.ev, to))
	}
	slices.Sort(drawn)
	slices.Sort(table)
	require.NotEmpty(t, drawn, "no transition drawn in doc.go")
	assert.Equal(t, table, drawn, "the diagram in doc.go and the transitions table in state.go disagree")
}

// modelCache returns a cache without a client or janitor, for driving the
// state machine directly: revivals are recorded by onRevive instead of
// run, and broker 0 has a loop that never runs (a cursor joins it, and a
// test hands its members their fetch answers).
func modelCache(cfg Config) *Cache {
	c := emptyCache(cfg.withDefaults())
	c.ctx, c.cancel = context.WithCancel(context.Background())
	b := c.brokerLocked(0)
	b.loop = newLoop(b)
	b.loop.conn = &brokerConn{b.loop}
	return c
}

// TestForbiddenTransitionsAreRefused tries every (state, event) pair the
// table does not allow: each is refused with an error wrapping ErrInternal
// that names the partition, the state and the event, the cursor keeps its
// state, Stats.Refused counts it, and the partition's next Acquire returns
// it.
func TestForbiddenTransitionsAreRefused(t *testing.T) {
	c := modelCache(Config{})
	refused := 0
	for s := range numStates {
		for ev := range numEvents {
			if _, ok := transitions[transition{s, ev}]; ok {
				continue
			}
			refused++
			c.mu.Lock()
			cur := newCursor(topic, 7)
			cur.state = s
			err := c.transitionLocked(cur, ev, errors.New("kept"))
			c.mu.Unlock()
			require.ErrorIs(t, err, ErrInternal, "%s --%s--> was not refused", s, ev)
			assert.True(t, Permanent(err))
			for _, want := range []string{"t/7", s.String(), ev.String()} {
				assert.Contains(t, err.Error(), want)
			}
			assert.Equal(t, s, cur.state, "a refused %s changed the state", ev)
			assert.EqualValues(t, refused, c.Stats().Refused)
			_, aerr := c.Acquire(t.Context(), topic, 7, 0)
			require.ErrorIs(t, aerr, ErrInternal, "the partition's next Acquire after refusing %s --%s-->", s, ev)
			assert.Contains(t, aerr.Error(), s.String())
		}
	}
	assert.Equal(t, int(numStates)*int(numEvents)-len(transitions), refused)
	l, err := c.Acquire(t.Context(), topic, 7, 0)
	require.NoError(t, err, "a refusal is returned once")
	l.Release(nil)
}

// FuzzCursorModel drives random sequences of cache events through the real
// transition function and the functions that call it (Acquire, the read's
// start, Release, Watch, Drop, SetTopicID, the janitor, the fetch loop's
// build and dispatch of a round (records, empty answers, leadership and
// request errors, offset out of range, an abandoned poll, answers to a
// position the cursor left), a fetch answer, a fetch error that means a
// leader change or an error of the data, a revival that ends with the
// leader learnt (its position validated), a truncation, an error or the
// cache closing, trims), on a cache without a broker (modelCache), and
// checks after each event:
//
//   - every cursor's state is one of the table's, and no refused
//     transition happened (Stats.Refused is 0);
//   - a leased cursor is held by exactly one lease: the cache's holders are
//     the model's outstanding leases, all different cursors, and the lease
//     count agrees;
//   - the idle list holds exactly the cursors in listed states, each
//     keeping exactly its queued and decoded bytes, and idleList.bytes is
//     their sum;
//   - a failed or truncated cursor keeps an error (a truncated one, a
//     *LogTruncatedError), and a partition has at most one follower;
//   - a detected truncation is never forgotten before the next lease of
//     its position sees it (only Drop, a recreated topic and Close may
//     forget it);
//   - a lease's read starts at its start, continuing only from the
//     position the last read of that cursor ended at (no offset delivered
//     twice or skipped without an error);
//   - what a cursor queues continues from its position: each answer starts
//     where the one before it ends, the first at the cursor's fetched
//     offset, and the loop fetches next where the last ends (an answer to a
//     position the cursor left is never queued);
//   - a cursor being revived queues nothing (the old leader's answers were
//     dropped), and none is in a fetch loop;
//   - cursor.validate: set only with a leader epoch to validate against,
//     and still set on every cursor without a holder that met a leadership
//     or request error after reading, until a seek or a validation clears
//     it (dropping buffered records, a trim, a revival that did not
//     validate keep it).
func FuzzCursorModel(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0})                                                              // lease, release
	f.Add([]byte{2, 0, 8, 0, 7, 0, 8, 2, 5, 0, 0, 0, 1, 0})                                // follower, leader change, truncation detected, janitor, lease there
	f.Add([]byte{2, 2, 8, 0, 6, 100, 6, 120, 6, 200, 7, 0, 8, 0, 6, 60, 0, 2, 1, 0, 5, 0}) // follower keeps answers, trim, leader change drops them, lease continues
	f.Add([]byte{2, 1, 8, 0, 0, 1, 10, 1, 1, 0, 5, 0})                                     // leased follower's fetch ahead meets an error of the data, janitor
	f.Add([]byte{2, 0, 8, 0, 7, 0, 8, 2, 3, 0, 2, 0, 8, 0, 7, 0, 8, 2, 4, 0})              // truncations forgotten by Drop and a recreated topic
	f.Add([]byte{2, 0, 2, 2, 8, 0, 8, 0, 0, 0, 11, 0, 5, 0})                               // Watch elsewhere while the follower revives
	f.Add([]byte{2, 0, 8, 0, 0, 0, 7, 128, 1, 0, 6, 10, 2, 2})                             // leased follower's stale leadership error
	f.Add([]byte{2, 0, 8, 4, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0})                                // revival fails: the lease there sees it
	f.Add([]byte{2, 0, 8, 0, 7, 0, 8, 2, 2, 0, 0, 4, 0, 0, 0, 0, 11, 0})                   // truncated: Watch there, leases elsewhere and there
	f.Add([]byte{2, 0, 8, 0, 2, 2, 8, 0, 2, 0, 5, 0, 3, 0})                                // unfollow, follow an idle cursor, janitor, Drop
	f.Add([]byte{2, 0, 8, 0, 10, 0, 3, 0})                                                 // a follower's error of the data, Drop
	f.Add([]byte{2, 0, 2, 2, 8, 2, 0, 0, 1, 0})                                            // an unfollowed revival detects a truncation
	f.Add([]byte{2, 0, 2, 2, 8, 4, 5, 0})                                                  // an unfollowed revival fails, janitor
	f.Add([]byte{2, 0, 2, 2, 5, 0, 2, 1, 2, 3, 3, 0})                                      // the janitor and Drop while revivals run
	f.Add([]byte{0, 0, 2, 2, 8, 0, 7, 0, 8, 2, 1, 0, 0, 2})                                // a released cursor stops where a truncation was detected: the lease there sees it
	f.Add([]byte{2, 0x88, 2, 0xbb, 2, 0x29, 2, 0x63, 8, 0x59, 8, 0x92, 0, 0x2b})           // followers at 0 and 10; one revival fails, one detects a truncation at 10: the lease at 10 takes the truncated one (TestCursorModelWalk's finding)
	f.Add([]byte{2, 0, 8, 0, 0, 0x18, 7, 0, 1, 0, 8, 4, 0, 1, 1, 0})                       // a leased follower's stale leadership error, its revival fails: it keeps its records and the pending validation through a trim
	f.Add([]byte{2, 0, 8, 0, 6, 100, 7, 0, 8, 0})                                          // a follower's answers, then a leadership error: it drops them as it revives
	f.Add([]byte{2, 0, 8, 0, 0, 0x20, 6, 100, 7, 0, 1, 0})                                 // a leased follower's answers, then a leadership error: released, it drops them and revives
	f.Add([]byte{2, 0, 8, 0, 12, 0, 2, 2, 0, 4, 13, 0, 1, 0})                              // a round in flight for the follower; it unfollows, a lease elsewhere seeks it: the answer is dropped
	f.Add([]byte{2, 0, 8, 0, 12, 0, 2, 2, 13, 3, 8, 0})                                    // a round in flight for the follower; it unfollows, and the answer is a leadership error: idle, it revives
	f.Add([]byte{2, 0, 8, 0, 12, 0, 2, 2, 13, 4, 0, 0})                                    // the same with offset out of range: idle, it fails, the lease there sees it
	f.Add([]byte{2, 0, 8, 0, 12, 0, 13, 4, 12, 0, 13, 2, 8, 0, 14, 0, 5, 0})               // answers queued, a leadership error drops them; the revival ends as the cache closes
	f.Fuzz(func(t *testing.T, ops []byte) {
		runCursorModel(t, ops)
		runLaneModel(t, ops)
	})
}

// TestCursorModelWalk runs FuzzCursorModel's model on random event
// sequences for KBR_MODEL_TIME (a duration; 2s unless set: `make model` runs
// it for 30 minutes, `make mutate` 20s per injected bug), the failing
// sequence logged with its seed. It
// complements go test -fuzz, whose coordinator stalls on this machine's Go
// 1.26 after about a minute (0 execs/s, on the ranges package's fuzz tests
// too).
func TestCursorModelWalk(t *testing.T) {
	laneReach = laneModelReach{}
	modelwalk.Run(t, 300, func(ops []byte) {
		runCursorModel(t, ops)
		runLaneModel(t, ops)
	})
	t.Logf("the lanes' model reached: %+v", laneReach)
	r := laneReach
	for what, n := range map[string]int{"a distant verdict": r.distant, "a lane opened": r.opened, "a lane's round answered": r.laneRounds,
		"a range read to its end": r.delivered, "a read failed and read again": r.failed, "a cursor back from a lane": r.backToLoop} {
		assert.Positive(t, n, "the lanes' model never reached %s", what)
	}
}

// modelLease is one lease the model holds.
type modelLease struct {
	l     *Lease
	start int64
	err   error // what its read's start returned
}

// truncations are the truncations revivals detected, by the cursor that
// detected each, with its position: the next lease there must see it.
type truncations map[*cursor]int64

func runCursorModel(t *testing.T, ops []byte) {
	const idleTimeout = time.Hour
	c := modelCache(Config{Capacity: 1, IdleBufferBytes: 300, IdleTimeout: idleTimeout})
	var revivals []*cursor // cursors whose revival the model runs
	c.onRevive = func(cur *cursor) { revivals = append(revivals, cur) }
	var leases []*modelLease
	var rounds [][]sent             // fetch rounds in flight, built by loop 0
	validates := map[*cursor]bool{} // cursors that must validate their position before fetching
	truncated := truncations{}
	ends := map[*cursor]int64{} // where each cursor's last read ended
	topicID := byte(1)
	c.SetTopicID(topic, [16]byte{topicID})

	offsets := []int64{0, 10, 20, 30}
	arg := func(i int) byte {
		if i < len(ops) {
			return ops[i]
		}
		return 0
	}
	pick := func(b byte, n int) int { return int(b) % n }
	// members returns the cursors in broker 0's loop that it would fetch,
	// in a deterministic order.
	members := func() []*cursor {
		var out []*cursor
		for p := range int32(2) {
			for _, cur := range c.byKey[key{topic, p}] {
				if cur.loop == c.brokers[0].loop && cur.fetchable() {
					out = append(out, cur)
				}
			}
		}
		return out
	}
	release := func(i int) {
		ml := leases[i]
		leases = slices.Delete(leases, i, i+1)
		ml.l.Release(ml.err)
	}

	for i := 0; i < len(ops); i += 2 {
		op, a := ops[i]%15, arg(i+1)
		p := int32(a % 2)
		at := offsets[pick(a>>1, len(offsets))]
		switch op {
		case 0: // lease at (or where the partition's follower waits), and start its read of [at, at+10)
			if a&0x20 != 0 {
				c.mu.Lock()
				if f := c.followerLocked(key{topic, p}); f != nil {
					at = f.next
				}
				c.mu.Unlock()
			}
			l, err := c.Acquire(t.Context(), topic, p, at)
			require.NoError(t, err)
			cur := l.cur
			for _, o := range leases {
				require.NotSame(t, o.l.cur, cur, "a cursor leased twice")
			}
			c.mu.Lock()
			continues := cur.next == at
			end, read := ends[cur]
			held := c.startReadLocked(cur, at, at+10)
			expected := false
			for tc, pos := range truncated {
				expected = expected || tc.partition == p && pos == at
			}
			if expected {
				_, ok := truncated[cur]
				require.True(t, ok, "the lease at %d did not take a cursor that detected a truncation there", at)
				require.ErrorIs(t, held, ErrLogTruncated, "the lease at %d did not see the truncation detected there", at)
				delete(truncated, cur)
			}
			require.Equal(t, at, cur.next, "a read of [%d, %d) starts at %d", at, at+10, cur.next)
			if continues && read {
				require.Equal(t, end, at, "a continuation from a position no read ended at")
			}
			if !continues {
				delete(validates, cur) // a seek
			}
			ml := &modelLease{l: l, start: at, err: held}
			if held == nil {
				// The read delivers [at, at+10) (Read: the position reaches
				// end) and keeps the records it decoded past it.
				tail := int64(a>>3) & 3
				cur.buf = nil
				for o := at + 10; o < at+10+tail; o++ {
					cur.buf = append(cur.buf, &kgo.Record{Topic: topic, Partition: p, Offset: o, Value: make([]byte, 20)})
				}
				cur.next, cur.fetched = at+10, at+10+tail
				cur.lastEpoch = 0
				cur.resetQueueLocked(cur.fetched)
				ends[cur] = at + 10
			} else {
				delete(ends, cur)
			}
			c.mu.Unlock()
			leases = append(leases, ml)
		case 1: // release a lease (with its read's error, if any)
			if len(leases) > 0 {
				release(pick(a, len(leases)))
			}
		case 2: // Watch
			c.Watch(topic, p, at)
		case 3: // Drop (revocation): may forget a detected truncation
			c.Drop(topic, p)
			maps.DeleteFunc(truncated, func(cur *cursor, _ int64) bool { return cur.partition == p })
		case 4: // the topic was recreated: may forget a detected truncation
			topicID++
			c.SetTopicID(topic, [16]byte{topicID})
			clear(truncated)
		case 5: // the janitor, after IdleTimeout
			c.evictIdle(time.Now().Add(2 * idleTimeout))
		case 6: // a fetch answer of a bytes for a cursor in the loop
			c.mu.Lock()
			if ms := members(); len(ms) > 0 {
				cur := ms[pick(a, len(ms))]
				raw := &rawFetch{part: kmsg.FetchResponseTopicPartition{RecordBatches: modelBatch(cur.fetchAt, 5)}, at: cur.fetchAt, gen: cur.gen, bytes: int64(a)}
				c.queueLocked(cur, raw, cur.fetchAt+5)
				if c.idle.bytes > max(c.cfg.IdleBufferBytes, 0) {
					c.idle.trim()
				}
			}
			c.mu.Unlock()
		case 7: // a leader change (or a dropped connection) under a fetch
			c.mu.Lock()
			if ms := members(); len(ms) > 0 {
				cur := ms[pick(a, len(ms))]
				var part *kmsg.FetchResponseTopicPartition
				why := error(errors.New("connection closed"))
				if a&0x80 != 0 {
					part = &kmsg.FetchResponseTopicPartition{Partition: cur.partition, ErrorCode: kerr.NotLeaderForPartition.Code}
					why = kerr.NotLeaderForPartition
				}
				cur.lastEpoch = 0 // it read something: the revival validates
				validates[cur] = true
				c.fetchFailedLocked(cur, &fetchError{topic: cur.topic, partition: cur.partition, offset: cur.fetchAt, part: part, err: why})
			}
			c.mu.Unlock()
		case 8: // a revival ends: the leader learnt, a truncation, or an error
			if len(revivals) == 0 {
				break
			}
			j := pick(a, len(revivals))
			cur := revivals[j]
			revivals = slices.Delete(revivals, j, j+1)
			c.mu.Lock()
			switch (a >> 1) % 3 {
			case 0:
				cur.leader = 0
				cur.validate = false // locate validated the position
				delete(validates, cur)
				c.revivalEndedLocked(cur, nil, true)
			case 1:
				if !cur.gone() {
					c.revivalEndedLocked(cur, &LogTruncatedError{Topic: topic, Partition: cur.partition, EndOffset: cur.next - 5, Fetched: cur.fetched}, true)
					truncated[cur] = cur.next
				}
			case 2:
				c.revivalEndedLocked(cur, fmt.Errorf("metadata for %s/%d: %w", topic, cur.partition, ErrUnknownPartition), true)
			}
			c.mu.Unlock()
		case 9: // a leader change of a follower with no known leader (Watch's)
			c.mu.Lock()
			for _, cur := range c.byKey[key{topic, p}] {
				if cur.state == stateFollowing && cur.loop != nil {
					c.fetchFailedLocked(cur, &fetchError{topic: topic, partition: p, err: errors.New("connection closed")})
					break
				}
			}
			c.mu.Unlock()
		case 10: // an error of the data (offset out of range) for a cursor in the loop
			c.mu.Lock()
			if ms := members(); len(ms) > 0 {
				cur := ms[pick(a, len(ms))]
				part := &kmsg.FetchResponseTopicPartition{Partition: cur.partition, ErrorCode: kerr.OffsetOutOfRange.Code}
				c.fetchFailedLocked(cur, &fetchError{topic: topic, partition: cur.partition, offset: cur.fetchAt, part: part, err: kerr.OffsetOutOfRange})
			}
			c.mu.Unlock()
		case 11: // a release of every lease, then trims
			for len(leases) > 0 {
				release(0)
			}
		case 12: // the loop builds a round (at most maxRounds in flight)
			if len(rounds) < maxRounds {
				if req, parts, _ := c.brokers[0].loop.build(false, time.Now()); req != nil {
					c.mu.Lock()
					c.brokers[0].loop.flying++ // as run does
					c.mu.Unlock()
					rounds = append(rounds, parts)
				}
			}
		case 13: // a round's answer: per partition records, nothing, a leadership error or offset out of range; or the request failed, or the poll was abandoned
			if len(rounds) == 0 {
				break
			}
			j := pick(a, len(rounds))
			parts := rounds[j]
			rounds = slices.Delete(rounds, j, j+1)
			resp, err, abandoned := modelAnswer(parts, a)
			c.mu.Lock()
			for _, s := range parts {
				// A leadership or request error after reading: the cursor
				// validates its position (now, or when its lease ends).
				if s.cur.gen == s.gen && !s.cur.gone() && !abandoned && s.cur.lastEpoch >= 0 {
					if err != nil || isLeaderErr(kerr.ErrorForCode(findPart(resp, s.cur).ErrorCode)) {
						validates[s.cur] = true
					}
				}
			}
			c.mu.Unlock()
			c.brokers[0].loop.dispatch(parts, false, abandoned, resp, err)
		case 14: // a revival ends as the cache closes: back, the leader not learnt, nothing validated
			if len(revivals) == 0 {
				break
			}
			j := pick(a, len(revivals))
			cur := revivals[j]
			revivals = slices.Delete(revivals, j, j+1)
			c.mu.Lock()
			c.revivalEndedLocked(cur, nil, false)
			c.mu.Unlock()
		}
		checkCursorModel(t, c, leases, truncated, validates)
	}
	for len(leases) > 0 {
		release(0)
	}
	checkCursorModel(t, c, leases, truncated, validates)
	require.NoError(t, c.Close(t.Context()))
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Empty(t, c.byKey, "cursors left after Close")
	assert.Zero(t, c.open)
	assert.Zero(t, c.idle.bytes)
	assert.Zero(t, c.idle.lru.Len())
}

// modelBatch is the header of a record batch (magic 2, leader epoch 0) of n
// offsets from base: what batchesEnd and noteEpoch read.
func modelBatch(base int64, n int) []byte {
	b := make([]byte, 61)
	binary.BigEndian.PutUint64(b, uint64(base))
	binary.BigEndian.PutUint32(b[batchLengthAt:], uint32(len(b)-12))
	b[batchMagicAt] = 2
	binary.BigEndian.PutUint32(b[batchLastDeltaAt:], uint32(n-1))
	return b
}

// modelAnswer is the broker's answer to a round, chosen by a: per
// partition a batch of records, nothing, NOT_LEADER_FOR_PARTITION or
// OFFSET_OUT_OF_RANGE; or the request failed; or the loop abandoned its
// long poll.
func modelAnswer(parts []sent, a byte) (resp *kmsg.FetchResponse, err error, abandoned bool) {
	switch a >> 5 {
	case 6:
		return nil, errors.New("connection closed"), false
	case 7:
		return nil, context.Canceled, true
	}
	resp = kmsg.NewPtrFetchResponse()
	rt := kmsg.NewFetchResponseTopic()
	rt.Topic = topic
	for i, s := range parts {
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition = s.cur.partition
		rp.HighWatermark = s.at + 20
		switch (int(a) + i) % 5 {
		case 0, 1:
			rp.RecordBatches = modelBatch(s.at, 1+int(a>>2)%4)
		case 2:
		case 3:
			rp.ErrorCode = kerr.NotLeaderForPartition.Code
		case 4:
			rp.ErrorCode = kerr.OffsetOutOfRange.Code
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	resp.Topics = append(resp.Topics, rt)
	return resp, nil, false
}

// checkCursorModel checks FuzzCursorModel's invariants.
func checkCursorModel(t *testing.T, c *Cache, leases []*modelLease, truncated truncations, validates map[*cursor]bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Zero(t, c.counts.refusals.Load(), "a transition was refused: %v", c.refused)

	known := map[cursorState]bool{}
	for tr, to := range transitions {
		known[tr.from], known[to] = true, true
	}
	held := map[*cursor]bool{}
	for _, ml := range leases {
		require.False(t, held[ml.l.cur], "one cursor held by two leases")
		held[ml.l.cur] = true
	}
	require.Equal(t, len(held), c.leased, "the lease count")
	require.Equal(t, len(held), len(c.holders), "the holders")

	open, listed := 0, 0
	sum := int64(0)
	for k, all := range c.byKey {
		followers := 0
		for _, cur := range all {
			open++
			require.True(t, known[cur.state], "%s/%d: state %s is not the table's", k.topic, k.partition, cur.state)
			require.NotEqual(t, stateGone, cur.state, "a forgotten cursor is still in the cache")
			require.NotEqual(t, stateNew, cur.state, "a new cursor was left new")
			_, holder := c.holders[cur]
			require.Equal(t, cur.leased(), holder, "state %s and the holders disagree", cur.state)
			require.Equal(t, cur.leased(), held[cur], "state %s and the model's leases disagree", cur.state)
			require.Equal(t, cur.listed(), cur.elem != nil, "state %s and the idle list disagree", cur.state)
			if cur.listed() {
				listed++
				sum += cur.keptBytes
				require.Equal(t, cur.kept(), cur.keptBytes, "state %s: kept bytes", cur.state)
			}
			if cur.holdsErr() {
				require.Error(t, cur.err, "a %s cursor keeps no error", cur.state)
			}
			if cur.state == stateTruncated {
				require.ErrorIs(t, cur.err, ErrLogTruncated)
			}
			if cur.follower() {
				followers++
			}
			// What it queues continues from its position.
			pos := cur.fetched
			for _, raw := range cur.queue {
				require.Equal(t, pos, raw.at, "%s/%d (%s): an answer to offset %d queued at position %d", k.topic, k.partition, cur.state, raw.at, pos)
				pos = batchesEnd(raw.part.RecordBatches, raw.at)
			}
			require.Equal(t, pos, cur.fetchAt, "%s/%d (%s): the loop fetches next at %d, its queue ends at %d", k.topic, k.partition, cur.state, cur.fetchAt, pos)
			if cur.reviving() {
				require.Empty(t, cur.queue, "%s/%d: a cursor being revived queues the old leader's answers", k.topic, k.partition)
				require.Zero(t, cur.queueBytes, "%s/%d: a cursor being revived counts queued bytes", k.topic, k.partition)
				require.Nil(t, cur.loop, "%s/%d: a cursor being revived is in a fetch loop", k.topic, k.partition)
			}
			// cursor.validate
			if cur.validate {
				require.GreaterOrEqual(t, cur.lastEpoch, int32(0), "%s/%d: validates without a leader epoch", k.topic, k.partition)
			}
			if cur.validate && !cur.leased() {
				require.Empty(t, cur.queue, "%s/%d (%s): queues answers fetched before the leader change it must validate", k.topic, k.partition, cur.state)
				require.Nil(t, cur.loop, "%s/%d (%s): fetches before validating its position", k.topic, k.partition, cur.state)
			}
			if validates[cur] && !cur.leased() {
				require.True(t, cur.validate, "%s/%d (%s): met a leadership error after reading and no longer validates its position", k.topic, k.partition, cur.state)
			}
		}
		require.LessOrEqual(t, followers, 1, "%s/%d has %d followers", k.topic, k.partition, followers)
	}
	require.Equal(t, open, c.open, "open cursors")
	require.Equal(t, listed, c.idle.lru.Len(), "the idle list")
	require.Equal(t, sum, c.idle.bytes, "idleList.bytes is not the sum of what idle cursors keep")
	checkShares(t, c, true)
	for cur, pos := range truncated {
		require.Contains(t, c.byKey[key{topic, cur.partition}], cur, "%s/%d: the cursor that detected a truncation at %d was forgotten", topic, cur.partition, pos)
		require.Equal(t, stateTruncated, cur.state, "%s/%d: the cursor that detected a truncation at %d", topic, cur.partition, pos)
		require.Equal(t, pos, cur.next)
	}
}
