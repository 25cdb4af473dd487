package tests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestBoundedAlignedRunRestartsAfterTwoKills (issue 34, finding 5) runs a bounded aligned group
// run (stop_at: end, align_ranges) three times on one group: the first process is SIGKILLed
// while it reads its partitions, the second while its JoinGroup waits for the first one to
// rejoin (the group is preparing a rebalance), and the third must read every partition and exit
// 0 once the dead members' sessions are over: it is assigned part of the partitions when the
// first member's session ends, the rest when the second's ends. Together the three deliver every
// offset, and the group commits every partition to its end. (With kfake the third waited for
// ever in about half the runs: kfake never ended the session of the second member, whose
// connection had closed while its JoinGroup was held. Kafka's coordinator does, so the input
// never forces a rebalance to get past it: the kfake test works around kfake instead.)
func TestBoundedAlignedRunRestartsAfterTwoKills(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions, perPart = 4, 5000
	topic := createTopic(t, partitions)
	group, adm := newGroup(t)
	prod := produceSpread(t, topic, seqPartitions(partitions), perPart, "restart")
	ends := endOffsets(t, topic)
	dir := t.TempDir()

	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["align_ranges"] = true
	in["range_metadata"] = true // crashMapping writes kafka_range_start
	in["max_range_records"] = 1000
	in["max_in_flight"] = 4
	in["commit_period"] = "100ms"
	in["session_timeout"] = "6s" // the broker's minimum: the dead members' sessions end in seconds
	in["heartbeat_interval"] = "500ms"
	in["rebalance_timeout"] = "10s"
	// One pipeline thread sleeping 400us a record: about 2,500 records/s, so the killed runs
	// read a small part of the 20,000 records.
	pipeline := withCrashPipeline(1, "400us")
	start := func(name string) (*runningConnect, string) {
		out := filepath.Join(dir, name+".jsonl")
		return startConnect(t, 3*time.Minute, nil, "run", writeRunConfig(t, dir, in, out, pipeline)), out
	}

	// The first run reads, and is killed.
	a, outA := start("a")
	if !a.waitFor(60*time.Second, func() bool { return completeLines(outA) >= 1000 }) {
		t.Fatalf("the first run wrote %d records in 60s\n%s", completeLines(outA), a.stop(syscall.SIGTERM, 30*time.Second))
	}
	a.stop(syscall.SIGKILL, 30*time.Second)
	killedA := time.Now()

	// The second run joins; its JoinGroup waits for the first member, and it is killed.
	b, outB := start("b")
	state := ""
	preparing := b.waitFor(30*time.Second, func() bool {
		ctx, cancel := contextTimeout(5 * time.Second)
		defer cancel()
		d, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			state = d[group].State
		}
		return state == "PreparingRebalance"
	})
	if !preparing {
		t.Fatalf("the group did not prepare a rebalance for the second run's join (state %q)\n%s", state, b.stop(syscall.SIGTERM, 30*time.Second))
	}
	time.Sleep(500 * time.Millisecond) // the JoinGroup is held
	b.stop(syscall.SIGKILL, 30*time.Second)

	// The third run must end on its own with every partition read. What the group looks like
	// meanwhile is logged at each change: which members hold which partitions.
	c, outC := start("c")
	watched := watchGroup(t, adm, group, killedA)
	res, exited := waitExit(c, 2*time.Minute)
	watched()
	require.Truef(t, exited, "the third run did not end within 2 minutes of its start\n%s", res)
	require.Equalf(t, 0, res.ExitCode, "the third run failed\n%s", res)
	t.Logf("the third run ended in %s", res.Duration.Round(time.Millisecond))
	for _, line := range strings.Split(res.Stdout+res.Stderr, "\n") {
		if strings.Contains(line, "assigned") || strings.Contains(line, "waiting for other members") {
			t.Logf("third run: %s", line)
		}
	}
	requireCommitted(t, adm, group, topic, ends)

	// Together the three runs delivered every offset.
	seen := map[int32]map[int64]bool{}
	for _, out := range []string{outA, outB, outC} {
		for _, l := range readDelivered(t, out) {
			p := int32(l.P.V)
			if seen[p] == nil {
				seen[p] = map[int64]bool{}
			}
			seen[p][l.O.V] = true
		}
	}
	var missing []string
	for p, offs := range offsetsOf(prod) {
		n := 0
		for _, o := range offs {
			if !seen[p][o] {
				n++
			}
		}
		if n > 0 {
			missing = append(missing, fmt.Sprintf("%d offsets of partition %d", n, p))
		}
	}
	assert.Empty(t, missing, "offsets no run delivered")
}

// watchGroup logs group's state and each member's partitions whenever they change (times since
// since), until the returned function is called.
func watchGroup(t *testing.T, adm *kadm.Client, group string, since time.Time) (stop func()) {
	t.Helper()
	done, stopped := make(chan struct{}), make(chan struct{})
	var lines []string
	go func() { // the test's; stopped by stop
		defer close(stopped)
		last := ""
		for {
			ctx, cancel := contextTimeout(5 * time.Second)
			d, err := adm.DescribeGroups(ctx, group)
			cancel()
			if err == nil {
				g := d[group]
				var members []string
				for _, m := range g.Members {
					var parts []int32
					if c, ok := m.Assigned.AsConsumer(); ok {
						for _, tp := range c.Topics {
							parts = append(parts, tp.Partitions...)
						}
					}
					slices.Sort(parts)
					members = append(members, fmt.Sprintf("%s…%v", m.MemberID[len(m.MemberID)-6:], parts))
				}
				slices.Sort(members)
				now := fmt.Sprintf("%s, %d members %v", g.State, len(g.Members), members)
				if now != last {
					lines = append(lines, fmt.Sprintf("%6.1fs after the first kill: %s", time.Since(since).Seconds(), now))
					last = now
				}
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		for _, l := range lines {
			t.Logf("group: %s", l)
		}
	}
}
