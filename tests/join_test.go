package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The tests in this file check issue 50's defect 2, "commits wait behind a rebalance join":
// under the classic protocol a member that died stays in the group until its session ends (45 s
// by default); a member that joins meanwhile (the dead process restarted at once, as a
// supervisor does) starts a rebalance whose join the coordinator holds until then. franz-go
// holds every commit of the members while they join, and the input's ranges kept their
// max_in_flight slots until a commit covered them, so the survivors stopped reading; SIGTERM
// then waited for the join in the final commit and in the leave, past Benthos'
// shutdown_timeout.

// joinMapping writes partition, offset and when the pipeline saw the record (unix ns).
const joinMapping = `root = {"p": @kafka_partition, "o": @kafka_offset, "w": timestamp_unix_nano()}`

// joinLine is one line written through joinMapping.
type joinLine struct {
	P flexInt `json:"p"`
	O flexInt `json:"o"`
	W flexInt `json:"w"`
}

// joinMember is one connect process of TestCrashDuringJoinKeepsTheSurvivorReading.
type joinMember struct {
	name string
	rc   *runningConnect
	out  string
}

func (m *joinMember) log() string { return m.rc.stdout.String() + m.rc.stderr.String() }

// seen returns the times the member's pipeline saw its records, in order.
func (m *joinMember) seen(t *testing.T) []time.Time {
	t.Helper()
	lines := readCompleteLines(t, m.out, func(l joinLine) bool { return l.P.Valid && l.O.Valid && l.W.Valid }, "has no partition/offset/time")
	ts := make([]time.Time, len(lines))
	for i, l := range lines {
		ts[i] = time.Unix(0, l.W.V)
	}
	slices.SortFunc(ts, time.Time.Compare)
	return ts
}

// records returns the member's deliveries as outRecords.
func (m *joinMember) records(t *testing.T) []outRecord {
	t.Helper()
	var out []outRecord
	for _, l := range readCompleteLines(t, m.out, func(l joinLine) bool { return l.P.Valid && l.O.Valid }, "has no partition/offset") {
		out = append(out, outRecord{P: l.P, O: l.O})
	}
	return out
}

// longestGap returns the longest time in [from, to) without a record in ts (sorted), counting
// from from to the first record and from the last to to, and when it began.
func longestGap(ts []time.Time, from, to time.Time) (time.Duration, time.Time) {
	prev, longest, began := from, time.Duration(0), from
	for _, w := range append(slices.Clone(ts), to) {
		if w.Before(from) || w.After(to) {
			continue
		}
		if w.Sub(prev) > longest {
			longest, began = w.Sub(prev), prev
		}
		prev = w
	}
	return longest, began
}

// groupState returns the group's state as the coordinator describes it ("Stable",
// "PreparingRebalance", ...), "" if it cannot say.
func groupState(t *testing.T, adm *kadm.Client, group string) string {
	t.Helper()
	ctx, cancel := contextTimeout(5 * time.Second)
	defer cancel()
	d, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return ""
	}
	return d[group].State
}

var closedLine = regexp.MustCompile(`Closed: `)

// TestCrashDuringJoinKeepsTheSurvivorReading: members A and B read a topic that a producer writes
// to all along, with the input's default group timings (session_timeout 45 s, heartbeat 3 s,
// commit_period 5 s, max_in_flight 16); B is SIGKILLed and started again at once (B2), so the
// coordinator holds the rebalance's join until B's session ends. Meanwhile A keeps reading the
// partitions it owns: its longest gap between records in the join is within 1 s of its longest
// gap before the kill. SIGTERM to A while the join is still held ends A within 15 s with its
// `Closed:` line (Benthos kills it at shutdown_timeout, 20 s by default, before it leaves the
// group); so does SIGTERM to C, a third process that joined after B2 and owns nothing yet. B2
// then reads every partition; every produced offset is delivered, the duplicates
// within max_in_flight × max_range_records for the kill, and the group commits the end.
func TestCrashDuringJoinKeepsTheSurvivorReading(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 6
	topic := createTopic(t, partitions)
	group, adm := newGroup(t)
	in := baseInput(topic)
	in["consumer_group"] = group
	in["max_range_records"] = 1000 // the duplicates' bound below; the other fields keep their defaults
	prod := steadyProducerOn(t, producer(t), topic, partitions, 10*time.Millisecond)

	dir := t.TempDir()
	var members []*joinMember
	start := func(name string) *joinMember {
		out := filepath.Join(dir, name+".jsonl")
		cfg := writeRunConfig(t, dir, in, out, withMappingPipeline(4, "", joinMapping), withShutdownTimeout("20s"))
		m := &joinMember{name: name, rc: startConnect(t, 5*time.Minute, nil, "run", cfg), out: out}
		members = append(members, m)
		return m
	}
	summary := func() string {
		s := ""
		for _, m := range members {
			s += fmt.Sprintf("--- %s: %d records, log tail:\n%s\n", m.name, len(m.records(t)), tail(m.log(), 6<<10))
		}
		return s
	}
	a, b := start("A"), start("B")
	require.True(t, a.rc.waitFor(90*time.Second, func() bool {
		return assignedLine.MatchString(a.log()) && assignedLine.MatchString(b.log()) &&
			groupState(t, adm, group) == "Stable" && len(a.seen(t)) > 0 && len(b.seen(t)) > 0
	}), "A and B reading in a stable group\n%s", summary())
	settled := time.Now()
	time.Sleep(20 * time.Second) // A's own pace

	killed := time.Now()
	require.NoError(t, b.rc.cmd.Process.Signal(syscall.SIGKILL))
	res := b.rc.stop(syscall.SIGKILL, 10*time.Second)
	require.Equal(t, -1, res.ExitCode, "B killed")
	b2 := start("B2")
	c := start("C") // one more process that joins; SIGTERMed during the join, before it owned anything
	require.True(t, a.rc.waitFor(30*time.Second, func() bool { return groupState(t, adm, group) == "PreparingRebalance" }),
		"B2's join never started a rebalance\n%s", summary())
	time.Sleep(time.Until(killed.Add(25 * time.Second)))
	state := groupState(t, adm, group)
	require.Equal(t, "PreparingRebalance", state, "the join waits for B's session (45 s) still\n%s", summary())

	cTermed := time.Now()
	res = c.rc.stop(syscall.SIGTERM, 30*time.Second)
	cTook := time.Since(cTermed)
	assert.Less(t, cTook, 15*time.Second, "C's exit after SIGTERM during the join\n%s", summary())
	assert.Equal(t, 0, res.ExitCode, "C's exit code\n%s", summary())
	assert.Regexp(t, closedLine, c.log(), "C's summary line")
	assert.NotRegexp(t, assignedLine, c.log(), "C was assigned partitions: the join was not held\n%s", summary())
	require.Equal(t, "PreparingRebalance", groupState(t, adm, group), "the join waits for B's session (45 s) still\n%s", summary())

	termed := time.Now()
	res = a.rc.stop(syscall.SIGTERM, 30*time.Second)
	took := time.Since(termed)
	seen := a.seen(t)
	pace, _ := longestGap(seen, settled.Add(5*time.Second), killed)
	during, began := longestGap(seen, killed, termed)
	t.Logf("A's longest gap between records: %s in the 15 s before B was killed, %s in the %s from the kill to SIGTERM (the join held all along; the gap began %s after the kill); A exited %s after SIGTERM, C (which owned nothing) %s after its own",
		pace.Round(time.Millisecond), during.Round(time.Millisecond), termed.Sub(killed).Round(time.Second), began.Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond), cTook.Round(time.Millisecond))
	assert.LessOrEqual(t, during, pace+time.Second, "A stopped reading while the join waited for B's session\n%s", summary())
	assert.Less(t, took, 15*time.Second, "A's exit after SIGTERM during the join\n%s", summary())
	assert.Equal(t, 0, res.ExitCode, "A's exit code\n%s", summary())
	assert.Regexp(t, closedLine, a.log(), "A's summary line")

	// B2 takes every partition once B's session ended, and reads what is left.
	all := prod.stop(t)
	ends := endsOf(all)
	require.True(t, b2.rc.waitFor(2*time.Minute, func() bool {
		ctx, cancel := contextTimeout(5 * time.Second)
		defer cancel()
		committed, err := fetchCommitted(ctx, adm, group, topic)
		return err == nil && equalOffsets(committed, ends)
	}), "the group never committed the end offsets\n%s", summary())
	res = b2.rc.stop(syscall.SIGTERM, 30*time.Second)
	assert.Equal(t, 0, res.ExitCode, "B2's exit code\n%s", summary())
	var recs []outRecord
	for _, m := range members {
		recs = append(recs, m.records(t)...)
	}
	dups := requireAtLeastOnce(t, offsetsOf(all), recs)
	bound := 16 * 1000 // one kill: max_in_flight × max_range_records
	t.Logf("%d records produced, %d delivered, %d twice (bound %d)", all.count(), len(recs), dups, bound)
	assert.LessOrEqual(t, dups, bound, "duplicates of one kill\n%s", summary())
}
