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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tests in this file check scale-out across processes through Kafka's consumer groups: several
// connect processes with one config share a topic's partitions, hand them over when one joins,
// leaves or dies, commit only what they own (fenced by the group generation), and resume from the
// group's offsets by default.

const (
	groupRangeRecords = 100
	groupInFlight     = 4
)

// groupInput is a bounded read of topic as a member of group.
func groupInput(topic, group string) inputConfig {
	in := baseInput(topic)
	in["consumer_group"] = group
	in["stop_at"] = "end"
	in["max_range_records"] = groupRangeRecords
	in["max_in_flight"] = groupInFlight
	in["commit_period"] = "500ms"
	in["poll_interval"] = "200ms"
	in["session_timeout"] = "10s"
	in["heartbeat_interval"] = "500ms"
	in["rebalance_timeout"] = "20s"
	return in
}

// member is one connect process of a group test.
type member struct {
	rc  *runningConnect
	out string
}

func startMembers(t *testing.T, n int, in inputConfig, opts ...runOption) []member {
	t.Helper()
	dir := t.TempDir()
	var ms []member
	for i := range n {
		out := filepath.Join(dir, fmt.Sprintf("out-%d.jsonl", i))
		cfg := writeRunConfig(t, dir, in, out, opts...)
		ms = append(ms, member{rc: startConnect(t, 4*time.Minute, nil, "run", cfg), out: out})
	}
	return ms
}

var (
	assignedLine = regexp.MustCompile(`assigned (\d+) partitions to this member`)
	revokedLine  = regexp.MustCompile(`(revoked|lost) (\d+) partitions of this member`)
)

// handovers counts the partitions taken from members (revoked or lost) in the logs.
func handovers(logs ...string) int {
	n := 0
	for _, l := range logs {
		for _, m := range revokedLine.FindAllStringSubmatch(l, -1) {
			var k int
			fmt.Sscan(m[2], &k)
			n += k
		}
	}
	return n
}

// TestGroupMembersSharePartitions runs three connect processes with one config on a 12-partition
// topic: together they deliver every offset; an offset is delivered twice only around a handover,
// at most max_in_flight x max_range_records per partition handed over; each process owned
// partitions; all end with exit 0 once the group committed everything.
func TestGroupMembersSharePartitions(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 12
	topic := createTopic(t, partitions)
	prod := produceSpread(t, topic, seqPartitions(partitions), 800, "share")
	group, adm := newGroup(t)

	ms := startMembers(t, 3, groupInput(topic, group), withLeanPipeline(2, `${! if batch_index() == 0 { "50ms" } else { "0s" } }`))
	var recs []outRecord
	var logs []string
	for i, m := range ms {
		res, exited := waitExit(m.rc, 3*time.Minute)
		require.Truef(t, exited, "member %d did not end\n%s", i, res)
		requireExitZero(t, res)
		logs = append(logs, res.Stdout+res.Stderr)
		assert.Regexpf(t, assignedLine, res.Stdout, "member %d was never assigned a partition", i)
		mine := readOutput(t, m.out)
		assert.NotEmptyf(t, mine, "member %d delivered nothing", i)
		recs = append(recs, mine...)
	}
	dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
	moved := handovers(logs...)
	bound := moved * groupInFlight * groupRangeRecords
	assert.LessOrEqualf(t, dups, bound, "%d offsets delivered twice, more than %d partitions handed over allow", dups, moved)
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
	t.Logf("%d records by 3 members, %d delivered twice, %d partitions handed over (bound %d)", len(recs), dups, moved, bound)
}

// TestGroupMemberKilledPartitionsMove kills one of three members with SIGKILL mid-run: its
// partitions move to the others within session_timeout, and every offset is delivered.
func TestGroupMemberKilledPartitionsMove(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 12
	topic := createTopic(t, partitions)
	prod := produceSpread(t, topic, seqPartitions(partitions), 600, "kill")
	group, adm := newGroup(t)

	ms := startMembers(t, 3, groupInput(topic, group), withLeanPipeline(2, `${! if batch_index() == 0 { "40ms" } else { "0s" } }`))
	// Once every member owns partitions and the victim wrote something, kill it.
	victim := ms[2]
	ok := victim.rc.waitFor(90*time.Second, func() bool {
		for _, m := range ms {
			if !assignedLine.MatchString(m.rc.stdout.String()) {
				return false
			}
		}
		return completeLines(victim.out) > 50
	})
	require.Truef(t, ok, "the members did not all start reading within 90s\n%s", victim.rc.stdout.String())
	require.NoError(t, victim.rc.cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now()
	res, _ := waitExit(victim.rc, 10*time.Second)
	t.Logf("killed member %d after %d lines", 2, completeLines(victim.out))

	var recs []outRecord
	var takeover time.Duration
	for i, m := range ms[:2] {
		res, exited := waitExit(m.rc, 3*time.Minute)
		require.Truef(t, exited, "member %d did not end\n%s", i, res)
		requireExitZero(t, res)
		recs = append(recs, readOutput(t, m.out)...)
		for _, line := range strings.Split(res.Stdout, "\n") {
			if ts, ok := lineTime(line); ok && ts.After(killedAt) && assignedLine.MatchString(line) {
				if d := ts.Sub(killedAt); takeover == 0 || d < takeover {
					takeover = d
				}
			}
		}
	}
	recs = append(recs, readOutput(t, victim.out)...)
	requireAtLeastOnce(t, offsetsOf(prod), recs)
	require.Positive(t, takeover, "no surviving member was assigned partitions after the kill\n%s", res)
	assert.Less(t, takeover, 10*time.Second+10*time.Second, "partitions moved %s after the kill; session_timeout is 10s", takeover)
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
	t.Logf("the killed member's partitions were reassigned %s after SIGKILL", takeover.Round(time.Millisecond))
}

// TestGroupResumesFromCommittedOffsets: a group that already has offsets resumes from them with
// the default settings, whatever start_from says; reset_offsets replays from start_from.
func TestGroupResumesFromCommittedOffsets(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 2)
	prod := produceSpread(t, topic, []int32{0, 1}, 100, "resume")
	group, adm := newGroup(t)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 40, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: topic, Partition: 1, At: 70, LeaderEpoch: -1})
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	resp, err := adm.CommitOffsets(ctx, group, offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	in := groupInput(topic, group)
	in["start_from"] = "earliest"
	recs := runInput(t, in, 2*time.Minute)
	got := countOffsets(recs)
	require.Len(t, recs, 60+30, "records delivered when resuming from offsets 40 and 70")
	for o := range got[0] {
		assert.GreaterOrEqual(t, o, int64(40))
	}
	for o := range got[1] {
		assert.GreaterOrEqual(t, o, int64(70))
	}
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))

	in["reset_offsets"] = true
	recs, res := runInputResult(t, in, 2*time.Minute)
	requireExactlyOnce(t, offsetsOf(prod), recs)
	// The group had no live members: the replay starts by deleting its
	// offsets of the topic, once.
	assert.Contains(t, res.Stdout, "reset_offsets: deleted group")
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
}

// TestPinnedPartitionsWithGroup: pinned partitions (name:0-1) with a group read and commit the
// group's offsets without joining it, and a restart resumes; with a live member in the group the
// run fails at once with an error that says why.
func TestPinnedPartitionsWithGroup(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 3)
	first := produceSpread(t, topic, []int32{0, 1, 2}, 50, "pinned-1")
	group, adm := newGroup(t)

	in := baseInput(topic + ":0-1")
	in["consumer_group"] = group
	in["stop_at"] = "end"
	recs := runInput(t, in, time.Minute)
	requireExactlyOnce(t, offsetsOf(only(first, 0, 1)), recs)
	committed := committedOffsets(t, adm, group, topic)
	ends := endOffsets(t, topic)
	assert.Equal(t, map[int32]int64{0: ends[0], 1: ends[1]}, committed, "committed offsets of the pinned partitions")

	second := produceSpread(t, topic, []int32{0, 1, 2}, 30, "pinned-2")
	recs = runInput(t, in, time.Minute)
	requireExactlyOnce(t, offsetsOf(only(second, 0, 1)), recs)

	// A live member (a plain franz-go group consumer) joins the group.
	cl := newClient(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit())
	require.Eventually(t, func() bool {
		ctx, cancel := contextTimeout(5 * time.Second)
		defer cancel()
		cl.PollFetches(ctx)
		d, err := adm.DescribeGroups(ctx, group)
		return err == nil && len(d[group].Members) > 0
	}, 30*time.Second, 100*time.Millisecond, "the live member did not join")
	dir := t.TempDir()
	res := runConnect(t, time.Minute, nil, "run", writeRunConfig(t, dir, in, filepath.Join(dir, "out.jsonl")))
	require.NotEqualf(t, 0, res.ExitCode, "a run with pinned partitions of a group with live members must fail\n%s", res)
	assert.Less(t, res.Duration, 30*time.Second, "the failure took %s", res.Duration)
	assert.Contains(t, res.Stdout+res.Stderr, "has 1 live members")
	assert.Contains(t, res.Stdout+res.Stderr, group)
}

func seqPartitions(n int32) []int32 {
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps
}
