package tests

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestNormalStopAndRebalanceLogNoWarnings runs two continuous members of one group through the
// binary: the first reads a topic, the second joins (a rebalance moves partitions to it), then
// both stop on SIGTERM (Ctrl-C). Everything in it is normal, so neither logs anything at WARN or
// above: no "Committing offsets failed … context canceled" on the stop, no franz-go "were we
// kicked from the group?" on the rebalance.
func TestNormalStopAndRebalanceLogNoWarnings(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 6
	topic := createTopic(t, partitions)
	produceSpread(t, topic, seqPartitions(partitions), 2000, "clean")
	group, _ := newGroup(t)
	in := groupInput(topic, group)
	in["stop_at"] = "never"
	in["commit_period"] = "100ms" // commits all the time, so the stop lands on one

	opts := []runOption{withJSONLogs(), withLeanPipeline(2, "")}
	first := startMembers(t, 1, in, opts...)[0]
	require.Truef(t, first.rc.waitFor(time.Minute, func() bool { return completeLines(first.out) >= partitions*2000 }),
		"the first member did not read the topic\n%s", first.rc.stdout.String())
	second := startMembers(t, 1, in, opts...)[0]
	moved := func() bool {
		return assignedLine.MatchString(second.rc.stdout.String()) && revokedLine.MatchString(first.rc.stdout.String())
	}
	require.Truef(t, first.rc.waitFor(time.Minute, moved), "no rebalance moved partitions to the second member\n%s\n%s",
		first.rc.stdout.String(), second.rc.stdout.String())
	// Records keep arriving, so both members read and commit while they are stopped.
	cl := producer(t)
	stopProducing := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_ = cl.ProduceSync(t.Context(), &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte("tail")}).FirstErr()
		}
	}()
	time.Sleep(2 * time.Second)
	results := []runResult{second.rc.stop(syscall.SIGTERM, 30*time.Second), first.rc.stop(syscall.SIGTERM, 30*time.Second)}
	close(stopProducing)
	<-produced
	for i, res := range results {
		require.Falsef(t, res.TimedOut, "member %d did not stop on SIGTERM\n%s", i, res)
		requireExitZero(t, res)
		var loud []string
		for _, l := range logLines(res.Stdout + res.Stderr) {
			switch strings.ToLower(l.Level) {
			case "warn", "warning", "error", "fatal":
				loud = append(loud, l.Level+": "+l.Msg)
			}
		}
		require.Emptyf(t, loud, "member %d logged at WARN or above on a normal run, rebalance and stop", i)
	}
}
