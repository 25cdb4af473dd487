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

	"github.com/kbr/kafka_batched_ranges/plugin"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Helpers of the handover tests (handover_test.go): a set of connect processes on one consumer
// group, started, stopped, killed and paused one by one, with waits on their output and logs that
// fail with every member's relevant log lines.

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

// count returns how many lines the member logged that match re (log lines carry whole seconds
// only, so the tests compare counts, not times).
func (m *handoverMember) count(re *regexp.Regexp) int {
	return len(matchingLines(m.log(), re))
}

// lostLine matches the log line of a member that lost its session.
var lostLine = regexp.MustCompile(`lost \d+ partitions of this member`)

// handoverGroup is the set of connect processes of one test, all with the same config.
type handoverGroup struct {
	t       *testing.T
	in      inputConfig
	dir     string
	sleep   string // the pipeline's sleep per batch; handoverSleep unless set
	members []*handoverMember
}

func newHandoverGroup(t *testing.T, in inputConfig) *handoverGroup {
	t.Helper()
	return &handoverGroup{t: t, in: in, dir: t.TempDir(), sleep: handoverSleep}
}

// start starts one more member.
func (g *handoverGroup) start(name string) *handoverMember {
	g.t.Helper()
	out := filepath.Join(g.dir, name+".jsonl")
	cfg := writeRunConfig(g.t, g.dir, g.in, out, withLeanPipeline(handoverThreads, g.sleep))
	m := &handoverMember{name: name, rc: startConnect(g.t, 4*time.Minute, nil, "run", cfg), out: out}
	g.members = append(g.members, m)
	return m
}

// startPair starts members A and B and waits until both are assigned partitions and they
// delivered percent% of total records between them.
func (g *handoverGroup) startPair(percent, total int) (a, b *handoverMember) {
	g.t.Helper()
	a, b = g.start("A"), g.start("B")
	g.waitFor(fmt.Sprintf("A and B assigned partitions and %d%% delivered", percent), 90*time.Second, func() bool {
		return a.count(assignedLine) > 0 && b.count(assignedLine) > 0 && g.lines() >= total*percent/100
	})
	return a, b
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
	for {
		// Exits are checked before the condition too: a member that ended on its own while the
		// condition came true is still a member the test did not stop.
		for _, m := range g.members {
			if !m.gone && m.rc.exited() {
				require.Failf(g.t, "a member exited", "member %s exited (%v) while waiting for %s\n%s", m.name, m.rc.err, what, g.summary())
			}
		}
		if cond() {
			return
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

// terminate sends SIGTERM to the member (it leaves the group) and requires exit status 0 of a
// continuous member, and ExitStoppedBeforeEnd (3) of a bounded one: it left before the run's end.
func (g *handoverGroup) terminate(m *handoverMember) {
	g.t.Helper()
	m.gone = true
	res := m.rc.stop(syscall.SIGTERM, 40*time.Second)
	require.Falsef(g.t, res.TimedOut, "member %s did not exit within 40s of SIGTERM\n%s", m.name, g.summary())
	want := 0
	if stop, _ := g.in["stop_at"].(string); stop == "end" || stop == "timestamp" {
		want = plugin.ExitStoppedBeforeEnd
	}
	require.Equalf(g.t, want, res.ExitCode, "member %s exit status after SIGTERM\n%s", m.name, g.summary())
}

// leaveOnceAssigned waits until joiner was assigned partitions, then SIGTERMs it (terminate) and
// returns how many assignments each of stay had logged before it left: the partitions joiner took go
// back to them, which a later assignment line shows. The counts are taken before the SIGTERM, a
// second after joiner's assignment (the members of the same generation log theirs by then): taken
// after joiner exited, they would already hold the assignments that handed its partitions back, and
// a wait for one more would last until the run ended.
func (g *handoverGroup) leaveOnceAssigned(joiner *handoverMember, stay ...*handoverMember) []int {
	g.t.Helper()
	g.waitFor(joiner.name+" assigned partitions", 90*time.Second, func() bool { return joiner.count(assignedLine) > 0 })
	time.Sleep(time.Second)
	counts := make([]int, len(stay))
	for i, m := range stay {
		counts[i] = m.count(assignedLine)
	}
	g.terminate(joiner)
	return counts
}

// kill SIGKILLs the member and waits until it is gone.
func (g *handoverGroup) kill(m *handoverMember) {
	g.t.Helper()
	if m.rc.exited() {
		res := m.rc.stop(syscall.SIGKILL, time.Second)
		require.Failf(g.t, "member exited before the kill", "member %s exited (status %d) before the test killed it\n%s", m.name, res.ExitCode, g.summary())
	}
	m.gone, m.killed = true, true
	require.NoError(g.t, m.rc.cmd.Process.Signal(syscall.SIGKILL))
	res := m.rc.stop(syscall.SIGKILL, 10*time.Second)
	require.Equalf(g.t, -1, res.ExitCode, "member %s must have been killed, not have exited\n%s", m.name, g.summary())
	// A stopping error before the kill is a failure the kill would hide.
	require.NotRegexpf(g.t, inputStopped, res.Stdout+res.Stderr, "member %s had stopped with an error before it was killed\n%s", m.name, g.summary())
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
// see docs/several-instances.md, and max_in_flight in docs/kafka_batched_ranges.md), and a record is delivered again only if its range belonged to
// an ownership that ended before a commit covered it. So each event re-delivers at most
// max_in_flight × max_range_records offsets, whatever number of partitions it moved. (docs/several-instances.md's
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

// waitDeliveredAndCommitted waits until every offset of all was delivered by
// some member and the group committed ends.
func (g *handoverGroup) waitDeliveredAndCommitted(adm *kadm.Client, group, topic string, all produced, ends map[int32]int64) {
	g.t.Helper()
	want := offsetsOf(all)
	g.waitFor("every offset delivered and committed", 2*time.Minute, func() bool {
		got := countOffsets(g.records(g.t))
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
}

// deliveredFrom counts the records m delivered at or past from's offset of
// their partition (those produced after from was listed).
func (m *handoverMember) deliveredFrom(t *testing.T, from map[int32]int64) int {
	n := 0
	for _, r := range m.records(t) {
		if r.O.V >= from[int32(r.P.V)] {
			n++
		}
	}
	return n
}
