package tests

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file check handovers through the compiled binary, under each of franz-go's
// group balancers: partitions revoked and handed back (every rebalance of an eager balancer revokes
// everything and hands the kept partitions back), moved away from a member that joined, left or
// died, and a member whose session was lost, all while batches of those partitions are still in
// the pipeline. Late acknowledgements of a partition's earlier ownership must be dropped, never
// applied to its new state: every process that was not killed exits 0, every offset is delivered,
// and duplicates stay within what max_in_flight bounds.

const (
	handoverPartitions   = 12
	handoverRangeRecords = 50
	handoverInFlight     = 4
	handoverThreads      = 4
	// handoverSessionTimeout is the broker's minimum (group.min.session.timeout.ms).
	handoverSessionTimeout = 6 * time.Second
)

// handoverSleep holds each batch 40ms per record (one sleep before its first message): a range of
// 50 records keeps a pipeline thread for 2s, so a member with 4 threads delivers about 100
// records/s and has batches of most of its partitions in the pipeline whenever a rebalance starts,
// and still has them when a partition it gave up comes back a second later.
const handoverSleep = `${! if batch_index() == 0 { "%vms".format(batch_size() * 40) } else { "0s" } }`

// handoverBalancers are the values of group_balancers: one incremental, three eager.
var handoverBalancers = []string{"cooperative_sticky", "sticky", "range", "roundrobin"}

// handoverInput reads topic as a member of group with one balancer and short group timings.
func handoverInput(topic, group, balancer, stopAt string) inputConfig {
	in := baseInput(topic)
	in["consumer_group"] = group
	in["group_balancers"] = []string{balancer}
	in["stop_at"] = stopAt
	in["max_range_records"] = handoverRangeRecords
	in["max_in_flight"] = handoverInFlight
	in["commit_period"] = "200ms"
	in["poll_interval"] = "200ms"
	in["session_timeout"] = handoverSessionTimeout.String()
	in["heartbeat_interval"] = "500ms"
	in["rebalance_timeout"] = "10s"
	return in
}

// TestHandoverBalancers runs three connect processes on one group with stop_at: end and a slow
// pipeline, under each balancer: members A and B start together; C joins once 15% of the records
// are delivered and leaves (SIGTERM) as soon as it is assigned partitions, so the partitions it
// took go back to A and B while A's and B's batches of them may still be in the pipeline; B is
// SIGKILLed once the partitions went back and 50% are delivered; A finishes alone. Under an eager
// balancer every rebalance also revokes and hands back the partitions a member keeps. A and C must
// exit 0, A must take over B's partitions after the kill, every offset must be delivered, the
// duplicates within max_in_flight × max_range_records per handover event, and the group must have
// committed the end offsets.
func TestHandoverBalancers(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, balancer := range handoverBalancers {
		t.Run(balancer, func(t *testing.T) {
			t.Parallel()
			const perPartition = 250
			topic := createTopic(t, handoverPartitions)
			prod := produceSpread(t, topic, seqPartitions(handoverPartitions), perPartition, "handover")
			total := prod.count()
			group, adm := newGroup(t)
			g := newHandoverGroup(t, handoverInput(topic, group, balancer, "end"))

			a, b := g.startPair(15, total)

			c := g.start("C")
			before := g.leaveOnceAssigned(c, a, b)
			assignedA, assignedB := before[0], before[1]
			t.Logf("%s: C left after writing %d records; %d of %d delivered", balancer, c.lines(), g.lines(), total)
			g.waitFor("A or B assigned partitions after C left, 50% delivered", 90*time.Second, func() bool {
				return (a.count(assignedLine) > assignedA || b.count(assignedLine) > assignedB) && g.lines() >= total/2
			})

			assignedA = a.count(assignedLine)
			delivered := g.lines()
			g.kill(b)
			t.Logf("%s: killed B at %d of %d records delivered (B wrote %d)", balancer, delivered, total, b.lines())

			g.requireExit0(a, 2*time.Minute)
			assert.Greaterf(t, a.count(assignedLine), assignedA, "A was never assigned partitions after B was killed\n%s", g.summary())
			g.requireDeliveredWithinBound(t, prod)
			requireCommitted(t, adm, group, topic, endOffsets(t, topic))
		})
	}
}

// TestHandoverSessionLost pauses one of two continuous members (SIGSTOP) past session_timeout
// while its batches are in the pipeline, under an incremental and an eager balancer: the other
// member takes its partitions over; on SIGCONT the paused member finds its session lost, drops
// what it still had in flight, rejoins and goes on. Records produced after it rejoined are read
// by both members; once every offset is delivered and committed, both exit 0 on SIGTERM, every
// offset was delivered, the duplicates within max_in_flight × max_range_records per handover
// event, and the paused member delivered records produced after it rejoined. On SIGCONT the
// paused member notices the gap and holds new batches until the group confirms it or its
// partitions are lost (its log says both).
func TestHandoverSessionLost(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, balancer := range []string{"cooperative_sticky", "range"} {
		t.Run(balancer, func(t *testing.T) {
			t.Parallel()
			topic := createTopic(t, handoverPartitions)
			prod := produceSpread(t, topic, seqPartitions(handoverPartitions), 200, "stall-1")
			firstEnds := endOffsets(t, topic)
			group, adm := newGroup(t)
			g := newHandoverGroup(t, handoverInput(topic, group, balancer, "never"))

			a, b := g.start("A"), g.start("B")
			t.Cleanup(func() { _ = b.rc.cmd.Process.Signal(syscall.SIGCONT) }) // never leave it stopped
			g.waitFor("A and B assigned partitions, B delivering, 20% delivered", 90*time.Second, func() bool {
				return assignedLine.MatchString(a.log()) && assignedLine.MatchString(b.log()) &&
					b.lines() >= 150 && g.lines() >= prod.count()/5
			})

			// The stall lasts until A took B's partitions over (the coordinator expired
			// B's session) and at least session_timeout + 2s.
			assignedA := a.count(assignedLine)
			require.NoError(t, b.rc.cmd.Process.Signal(syscall.SIGSTOP))
			stoppedAt := time.Now()
			g.waitFor("A assigned B's partitions after B's session expired", 60*time.Second, func() bool {
				return a.count(assignedLine) > assignedA && time.Since(stoppedAt) > handoverSessionTimeout+2*time.Second
			})
			assignedB, lostB := b.count(assignedLine), b.count(lostLine)
			require.NoError(t, b.rc.cmd.Process.Signal(syscall.SIGCONT))
			t.Logf("%s: B stopped for %s, %d of %d records delivered", balancer, time.Since(stoppedAt).Round(time.Millisecond), g.lines(), prod.count())

			g.waitFor("B lost its session and was assigned partitions again", 60*time.Second, func() bool {
				return b.count(lostLine) > lostB && b.count(assignedLine) > assignedB
			})
			// B noticed its pause and handed out no new batch until it knew its session
			// was gone (issue 43, defect 6).
			assert.Regexpf(t, `did not run for \d+(\.\d+)?s .*holding new batches until the group confirms this member`, b.log(), "B's log after SIGCONT\n%s", g.summary())
			assert.Regexpf(t, `handing out batches again after .*: (this member lost its session since|the group lists this member)`, b.log(), "B's log after SIGCONT\n%s", g.summary())
			// One pause, one hold (issue 50, defect 4: 2-4 holds per SIGSTOP before).
			holds := strings.Count(b.log(), "holding new batches until the group confirms this member")
			t.Logf("%s: B's holds for one SIGSTOP: %d", balancer, holds)
			assert.Equalf(t, 1, holds, "holds in B's log for one SIGSTOP\n%s", g.summary())

			all := produceSpread(t, topic, seqPartitions(handoverPartitions), 50, "stall-2")
			mergeProduced(all, prod)
			ends := endOffsets(t, topic)
			g.waitDeliveredAndCommitted(adm, group, topic, all, ends)

			g.terminate(a)
			g.terminate(b)
			g.requireDeliveredWithinBound(t, all)
			requireCommitted(t, adm, group, topic, ends)
			after := b.deliveredFrom(t, firstEnds)
			assert.Positivef(t, after, "B delivered none of the records produced after it rejoined\n%s", g.summary())
		})
	}
}

// equalOffsets reports whether two offset maps hold the same partitions and offsets.
func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range a {
		if bo, ok := b[p]; !ok || bo != o {
			return false
		}
	}
	return true
}

// gracefulSleep holds each batch 20ms per record (one sleep before its first message): a range of
// 50 records keeps a pipeline thread for 1s, so at every rebalance each member has batches in its
// pipeline, which the revocation waits for (revoke_drain_timeout, half of rebalance_timeout: 5s).
const gracefulSleep = `${! if batch_index() == 0 { "%vms".format(batch_size() * 20) } else { "0s" } }`

// TestGracefulHandoverNoDuplicates runs three connect processes on one group with stop_at: end and
// a slow pipeline, under each balancer, with and without a batching policy: A and B start
// together, C joins once 15% of the records are delivered and leaves (SIGTERM) once it delivered
// records, and A and B finish. Every handover is graceful (a join, a leave; under an eager
// balancer each rebalance revokes every partition of every member), so each revocation waits for
// the batches of its partitions in the pipeline and commits them before handing them over: no
// offset is delivered twice, every offset is delivered, every member exits 0 and the group
// committed the end offsets. Before the drain, the batches in the pipeline at each revocation
// were delivered again by the next owner.
func TestGracefulHandoverNoDuplicates(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, balancer := range handoverBalancers {
		for _, batching := range []bool{false, true} {
			name := balancer + "/batching=" + map[bool]string{false: "off", true: "on"}[batching]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				const perPartition = 200
				topic := createTopic(t, handoverPartitions)
				prod := produceSpread(t, topic, seqPartitions(handoverPartitions), perPartition, "graceful")
				total := prod.count()
				group, adm := newGroup(t)
				in := handoverInput(topic, group, balancer, "end")
				if batching {
					// Cuts each 50-record range into batches of 20, 20 and 10: the last of
					// each range waits in the batcher for its range's end.
					in["batching"] = map[string]any{"count": 20, "period": "500ms"}
				}
				g := newHandoverGroup(t, in)
				g.sleep = gracefulSleep

				a, b := g.startPair(15, total)
				c := g.start("C")
				g.waitFor("C assigned partitions and delivering", 90*time.Second, func() bool {
					return c.count(assignedLine) > 0 && c.lines() > 0
				})
				atLeave := g.lines()
				g.terminate(c)

				g.requireExit0(a, 2*time.Minute)
				g.requireExit0(b, 2*time.Minute)
				recs := g.records(t)
				dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
				events, moved := g.handoverEvents()
				t.Logf("%s: %d records produced, %d delivered, %d duplicates; C wrote %d and left at %d delivered; %d revocations (%d partitions)",
					name, total, len(recs), dups, c.lines(), atLeave, events, moved)
				assert.Zerof(t, dups, "offsets delivered twice in graceful handovers\n%s", g.summary())
				requireCommitted(t, adm, group, topic, endOffsets(t, topic))
			})
		}
	}
}
