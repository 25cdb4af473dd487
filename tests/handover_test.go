package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
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

// handoverMember is one connect process of a handover test.
type handoverMember struct {
	name   string
	rc     *runningConnect
	out    string
	gone   bool // stopped, killed or collected by the test: an exit is expected
	killed bool
}

// log returns what the process wrote so far (Benthos logs to stdout).
func (m *handoverMember) log() string { return m.rc.stdout.String() + m.rc.stderr.String() }

// lines returns the complete output lines written so far.
func (m *handoverMember) lines() int { return completeLines(m.out) }

// records returns the complete output lines (a killed writer's last partial line is left out).
func (m *handoverMember) records(t *testing.T) []outRecord {
	t.Helper()
	return readCompleteLines(t, m.out, func(r outRecord) bool { return r.P.Valid && r.O.Valid }, "has no partition/offset")
}

// handoverGroup is the set of connect processes of one test, all with the same config.
type handoverGroup struct {
	t       *testing.T
	in      inputConfig
	dir     string
	members []*handoverMember
}

func newHandoverGroup(t *testing.T, in inputConfig) *handoverGroup {
	t.Helper()
	return &handoverGroup{t: t, in: in, dir: t.TempDir()}
}

// start starts one more member.
func (g *handoverGroup) start(name string) *handoverMember {
	g.t.Helper()
	out := filepath.Join(g.dir, name+".jsonl")
	cfg := writeRunConfig(g.t, g.dir, g.in, out, withLeanPipeline(handoverThreads, handoverSleep))
	m := &handoverMember{name: name, rc: startConnect(g.t, 4*time.Minute, nil, "run", cfg), out: out}
	g.members = append(g.members, m)
	return m
}

// lines returns the complete output lines of every member.
func (g *handoverGroup) lines() int {
	n := 0
	for _, m := range g.members {
		n += m.lines()
	}
	return n
}

// waitFor polls cond every 100ms until it holds. It fails the test, with every member's relevant
// log lines, when timeout passes first or a member exits that was not stopped by the test.
func (g *handoverGroup) waitFor(what string, timeout time.Duration, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, m := range g.members {
			if !m.gone && m.rc.exited() {
				require.Failf(g.t, "a member exited", "member %s exited (%v) while waiting for %s\n%s", m.name, m.rc.err, what, g.summary())
			}
		}
		if time.Now().After(deadline) {
			require.Failf(g.t, "timed out", "%s: not within %s\n%s", what, timeout, g.summary())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// handoverLogLine matches the log lines worth showing when a handover test fails: errors and
// warnings, the stopping error, assignment changes, panics.
var handoverLogLine = regexp.MustCompile(`level=(error|warn|warning|fatal)\b|Input stopped|partitions (to|of) this member|^panic|fatal error`)

// summary describes every member: its state, its output lines and the last relevant log lines.
func (g *handoverGroup) summary() string {
	var b strings.Builder
	for _, m := range g.members {
		state := "running"
		switch {
		case m.killed:
			state = "killed"
		case m.rc.exited():
			state = fmt.Sprintf("exited: %v", m.rc.err)
			if m.rc.err == nil {
				state = "exited 0"
			}
		}
		lines := matchingLines(m.log(), handoverLogLine)
		for i, l := range lines {
			if len(l) > 500 {
				lines[i] = l[:500] + " [...]"
			}
		}
		if len(lines) > 25 {
			lines = append([]string{fmt.Sprintf("[... %d lines cut ...]", len(lines)-25)}, lines[len(lines)-25:]...)
		}
		fmt.Fprintf(&b, "--- member %s (%s), %d output lines; relevant log lines:\n  %s\n", m.name, state, m.lines(), strings.Join(lines, "\n  "))
	}
	return b.String()
}

// requireExit0 waits up to timeout for the member to exit on its own (stop_at: end) and requires
// exit status 0.
func (g *handoverGroup) requireExit0(m *handoverMember, timeout time.Duration) {
	g.t.Helper()
	res, exited := waitExit(m.rc, timeout)
	m.gone = true
	require.Truef(g.t, exited, "member %s did not end within %s\n%s", m.name, timeout, g.summary())
	require.Equalf(g.t, 0, res.ExitCode, "member %s exit status\n%s", m.name, g.summary())
}

// terminate sends SIGTERM to the member (it leaves the group) and requires exit status 0.
func (g *handoverGroup) terminate(m *handoverMember) {
	g.t.Helper()
	m.gone = true
	res := m.rc.stop(syscall.SIGTERM, 40*time.Second)
	require.Falsef(g.t, res.TimedOut, "member %s did not exit within 40s of SIGTERM\n%s", m.name, g.summary())
	require.Equalf(g.t, 0, res.ExitCode, "member %s exit status after SIGTERM\n%s", m.name, g.summary())
}

// kill SIGKILLs the member and waits until it is gone.
func (g *handoverGroup) kill(m *handoverMember) {
	g.t.Helper()
	m.gone, m.killed = true, true
	require.NoError(g.t, m.rc.cmd.Process.Signal(syscall.SIGKILL))
	res := m.rc.stop(syscall.SIGKILL, 10*time.Second)
	require.Equalf(g.t, -1, res.ExitCode, "member %s must have been killed, not have exited\n%s", m.name, g.summary())
}

// records returns every member's complete output lines.
func (g *handoverGroup) records(t *testing.T) []outRecord {
	t.Helper()
	var recs []outRecord
	for _, m := range g.members {
		recs = append(recs, m.records(t)...)
	}
	return recs
}

// handoverEvents counts the times a member gave partitions up, from every member's log (each
// "revoked N" or "lost N" line is one event), plus kills.
//
// The bound on duplicates follows from max_in_flight: a member holds at most max_in_flight
// ranges at once (being read, awaiting acknowledgement, or awaiting the commit that covers them;
// see the README's max_in_flight), and a record is delivered again only if its range belonged to
// an ownership that ended before a commit covered it. So each event re-delivers at most
// max_in_flight × max_range_records offsets, whatever number of partitions it moved. (The README's
// per-partition bound, max_in_flight × max_range_records per partition handed over, is looser:
// an eager rebalance hands over every partition of every member.)
func (g *handoverGroup) handoverEvents() (events, partitions int) {
	for _, m := range g.members {
		for _, sm := range revokedLine.FindAllStringSubmatch(m.log(), -1) {
			var k int
			fmt.Sscan(sm[2], &k)
			events++
			partitions += k
		}
		if m.killed {
			events++
		}
	}
	return events, partitions
}

// count returns how many lines the member logged that match re (log lines carry whole seconds
// only, so the tests compare counts, not times).
func (m *handoverMember) count(re *regexp.Regexp) int {
	return len(matchingLines(m.log(), re))
}

// lostLine matches the log line of a member that lost its session.
var lostLine = regexp.MustCompile(`lost \d+ partitions of this member`)

// requireDeliveredWithinBound requires every produced offset delivered at least once by some
// member and the duplicates within the bound of handoverEvents.
func (g *handoverGroup) requireDeliveredWithinBound(t *testing.T, prod produced) {
	t.Helper()
	recs := g.records(t)
	dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
	events, moved := g.handoverEvents()
	bound := events * handoverInFlight * handoverRangeRecords
	t.Logf("%d records produced, %d delivered, %d twice; %d handover events (%d partitions given up) allow %d duplicates (README's per-partition bound: %d)",
		prod.count(), len(recs), dups, events, moved, bound, moved*handoverInFlight*handoverRangeRecords)
	assert.LessOrEqualf(t, dups, bound, "%d offsets delivered twice, more than %d handover events × max_in_flight %d × max_range_records %d allow\n%s",
		dups, events, handoverInFlight, handoverRangeRecords, g.summary())
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

			a, b := g.start("A"), g.start("B")
			g.waitFor("A and B assigned partitions and 15% delivered", 90*time.Second, func() bool {
				return a.count(assignedLine) > 0 && b.count(assignedLine) > 0 && g.lines() >= total*15/100
			})

			c := g.start("C")
			g.waitFor("C assigned partitions", 90*time.Second, func() bool { return c.count(assignedLine) > 0 })
			g.terminate(c)
			assignedA, assignedB := a.count(assignedLine), b.count(assignedLine)
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
// event, and the paused member delivered records produced after it rejoined.
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

			all := produceSpread(t, topic, seqPartitions(handoverPartitions), 50, "stall-2")
			mergeProduced(all, prod)
			ends := endOffsets(t, topic)
			want := offsetsOf(all)
			g.waitFor("every offset delivered and committed", 2*time.Minute, func() bool {
				got := countOffsets(g.records(t))
				for p, offs := range want {
					for _, o := range offs {
						if got[p][o] == 0 {
							return false
						}
					}
				}
				ctx, cancel := contextTimeout(5 * time.Second)
				defer cancel()
				committed, err := fetchCommitted(ctx, adm, group, topic)
				return err == nil && equalOffsets(committed, ends)
			})

			g.terminate(a)
			g.terminate(b)
			g.requireDeliveredWithinBound(t, all)
			requireCommitted(t, adm, group, topic, ends)
			after := 0
			for _, r := range b.records(t) {
				if r.O.V >= firstEnds[int32(r.P.V)] {
					after++
				}
			}
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
