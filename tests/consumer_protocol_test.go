package tests

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The tests in this file run the handovers of handover_test.go with group_protocol: consumer
// (KIP-848): the broker's coordinator assigns the partitions (its uniform assignor) and sets the
// session's timings (group.consumer.session.timeout.ms, 45s by default), and a join or leave moves
// only the partitions that change. A revocation drains and commits as under the classic protocol,
// so graceful moves deliver nothing twice.

// consumerProtocolLine is the engine's log line of the protocol its member runs, with
// group_remote_assignor empty: the broker's default assignor, the first of its
// group.consumer.assignors (uniform,range by default), which the member read from the broker.
var consumerProtocolLine = regexp.MustCompile(`this member runs the consumer group protocol with the broker's uniform assignor \(the first of group\.consumer\.assignors=uniform,range of broker \d+, the group's coordinator\)`)

// consumerInput reads topic as a member of group with group_protocol: consumer; the session and
// heartbeat timings are the broker's, the partitions assigned by its default assignor (uniform).
func consumerInput(topic, group, stopAt string) inputConfig {
	in := handoverInput(topic, group, "", stopAt)
	delete(in, "group_balancers")
	delete(in, "session_timeout")
	delete(in, "heartbeat_interval")
	in["group_protocol"] = "consumer"
	return in
}

// requireConsumerGroup requires the broker to list group as a consumer-protocol group (KIP-848),
// not a classic one.
func requireConsumerGroup(t *testing.T, adm *kadm.Client, group string) {
	t.Helper()
	ctx, cancel := contextTimeout(10 * time.Second)
	defer cancel()
	listed, err := adm.ListGroupsByType(ctx, []string{"consumer"})
	require.NoError(t, err)
	require.Containsf(t, listed.Groups(), group, "consumer-protocol groups %v", listed.Groups())
	described, err := adm.DescribeConsumerGroups(ctx, group)
	require.NoError(t, err)
	d, ok := described[group]
	require.True(t, ok, "ConsumerGroupDescribe of %s: %v", group, described)
	require.NoError(t, d.Err, "ConsumerGroupDescribe of %s", group)
	assert.NotEmpty(t, d.Members, "ConsumerGroupDescribe of %s: no members", group)
}

// requireKafkaSeesConsumerGroup requires Kafka's own kafka-consumer-groups tool to see group as a
// consumer-protocol group (KIP-848) with nothing left to read of topic: --list --type lists it as
// Consumer; --describe --state --verbose shows assignor as its ASSIGNMENT-STRATEGY and a
// GROUP-EPOCH (which a classic group has not: "-"); --describe shows every one of topic's
// partitions with its committed offset at the log end, lag 0.
func requireKafkaSeesConsumerGroup(t *testing.T, group, topic string, partitions int32, assignor string) {
	t.Helper()
	types := map[string]string{}
	for _, r := range toolRows(kafkaConsumerGroups(t, "--list", "--type")) {
		types[r["GROUP"]] = r["TYPE"]
	}
	assert.Equalf(t, "Consumer", types[group], "the TYPE kafka-consumer-groups --list --type lists group %s with", group)

	state := toolRows(kafkaConsumerGroups(t, "--describe", "--group", group, "--state", "--verbose"))
	if assert.Lenf(t, state, 1, "kafka-consumer-groups --describe --state --verbose of group %s", group) {
		assert.Equal(t, assignor, state[0]["ASSIGNMENT-STRATEGY"], "the ASSIGNMENT-STRATEGY of group %s", group)
		_, err := strconv.Atoi(state[0]["GROUP-EPOCH"])
		assert.NoErrorf(t, err, "the GROUP-EPOCH of group %s: %v", group, state[0])
	}

	lag := map[string]string{}
	for _, r := range toolRows(kafkaConsumerGroups(t, "--describe", "--group", group)) {
		if r["TOPIC"] != topic {
			continue
		}
		lag[r["PARTITION"]] = r["LAG"]
		assert.Equalf(t, r["LOG-END-OFFSET"], r["CURRENT-OFFSET"], "group %s's offset of %s/%s: %v", group, topic, r["PARTITION"], r)
	}
	want := map[string]string{}
	for p := range partitions {
		want[strconv.Itoa(int(p))] = "0"
	}
	assert.Equalf(t, want, lag, "the LAG kafka-consumer-groups --describe shows for group %s, by partition of %s", group, topic)
}

// TestConsumerProtocolHandover runs three connect processes on one group with group_protocol:
// consumer, stop_at: end and a slow pipeline: A and B start together; C joins once 15% of the
// records are delivered and leaves (SIGTERM) as soon as it is assigned partitions; B is SIGKILLed
// once the partitions went back and 50% are delivered; A takes B's partitions over when the
// broker's session timeout (45s) expires B's session and finishes alone. Each member logs that it
// runs the consumer protocol and the broker describes the group as a consumer-protocol group; A
// and C exit 0, every offset is delivered, the duplicates within max_in_flight × max_range_records
// per handover event, and the group committed the end offsets (lag 0); Kafka's own
// kafka-consumer-groups tool sees a consumer-protocol group with the uniform assignor and lag 0.
func TestConsumerProtocolHandover(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	// More records than TestHandoverBalancers: a consumer-protocol handover takes a few of the
	// broker's heartbeat intervals (5s), and B must still hold partitions when it is killed.
	const perPartition = 600
	topic := createTopic(t, handoverPartitions)
	prod := produceSpread(t, topic, seqPartitions(handoverPartitions), perPartition, "kip848")
	total := prod.count()
	group, adm := newGroup(t)
	g := newHandoverGroup(t, consumerInput(topic, group, "end"))

	a, b := g.startPair(15, total)
	requireConsumerGroup(t, adm, group)

	c := g.start("C")
	before := g.leaveOnceAssigned(c, a, b)
	assignedA, assignedB := before[0], before[1]
	t.Logf("C left after writing %d records; %d of %d delivered", c.lines(), g.lines(), total)
	g.waitFor("A or B assigned partitions after C left, 50% delivered", 90*time.Second, func() bool {
		return (a.count(assignedLine) > assignedA || b.count(assignedLine) > assignedB) && g.lines() >= total/2
	})

	assignedA = a.count(assignedLine)
	g.kill(b)
	t.Logf("killed B at %d of %d records delivered (B wrote %d)", g.lines(), total, b.lines())
	requireConsumerGroup(t, adm, group)

	g.requireExit0(a, 3*time.Minute)
	assert.Greaterf(t, a.count(assignedLine), assignedA, "A was never assigned partitions after B was killed\n%s", g.summary())
	for _, m := range []*handoverMember{a, b, c} {
		assert.Truef(t, consumerProtocolLine.MatchString(m.log()), "%s does not log that it runs the consumer protocol\n%s", m.name, g.summary())
	}
	g.requireDeliveredWithinBound(t, prod)
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
	requireKafkaSeesConsumerGroup(t, group, topic, handoverPartitions, "uniform")
}

// TestConsumerProtocolGracefulNoDuplicates: with group_protocol: consumer, A and B start
// together, C joins once 15% of the records are delivered and leaves (SIGTERM) once it delivered
// records, and A and B finish. Every move is graceful, so each revocation drains the batches of
// its partitions in the pipeline and commits them before the broker hands them over: no offset is
// delivered twice, every offset is delivered, every member exits 0 and the group committed the end
// offsets.
func TestConsumerProtocolGracefulNoDuplicates(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	// Enough records that A and B are still reading when C, after a few of the broker's
	// heartbeat intervals (5s), is assigned partitions.
	const perPartition = 800
	topic := createTopic(t, handoverPartitions)
	prod := produceSpread(t, topic, seqPartitions(handoverPartitions), perPartition, "kip848-graceful")
	total := prod.count()
	group, adm := newGroup(t)
	g := newHandoverGroup(t, consumerInput(topic, group, "end"))
	g.sleep = gracefulSleep

	a, b := g.startPair(15, total)
	c := g.start("C")
	g.waitFor("C assigned partitions and delivering", 90*time.Second, func() bool {
		return c.count(assignedLine) > 0 && c.lines() > 0
	})
	g.terminate(c)

	g.requireExit0(a, 2*time.Minute)
	g.requireExit0(b, 2*time.Minute)
	recs := g.records(t)
	dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
	events, moved := g.handoverEvents()
	t.Logf("%d records produced, %d delivered, %d duplicates; C wrote %d; %d revocations (%d partitions)",
		total, len(recs), dups, c.lines(), events, moved)
	assert.Zerof(t, dups, "offsets delivered twice in graceful handovers\n%s", g.summary())
	assert.Truef(t, slices.ContainsFunc([]*handoverMember{a, b, c}, func(m *handoverMember) bool {
		return consumerProtocolLine.MatchString(m.log())
	}), "no member logs that it runs the consumer protocol\n%s", g.summary())
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
}

// consumerSessionTimeout is the broker's group.consumer.session.timeout.ms (its default): how
// long a consumer-protocol member may go without a heartbeat.
const consumerSessionTimeout = 45 * time.Second

// TestConsumerProtocolSessionLost pauses one of two continuous consumer-protocol members
// (SIGSTOP) past the broker's session timeout while its batches are in the pipeline: the other
// member takes its partitions over; on SIGCONT the paused member finds its session lost (franz-go
// is answered UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH), drops what it still had in flight,
// rejoins and goes on. Once every offset, also of records produced after it rejoined, is delivered
// and committed, both exit 0 on SIGTERM, the duplicates are within the bound, and the paused
// member delivered records produced after it rejoined.
func TestConsumerProtocolSessionLost(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, handoverPartitions)
	prod := produceSpread(t, topic, seqPartitions(handoverPartitions), 300, "kip848-stall-1")
	firstEnds := endOffsets(t, topic)
	group, adm := newGroup(t)
	g := newHandoverGroup(t, consumerInput(topic, group, "never"))

	a, b := g.start("A"), g.start("B")
	t.Cleanup(func() { _ = b.rc.cmd.Process.Signal(syscall.SIGCONT) }) // never leave it stopped
	g.waitFor("A and B assigned partitions, B delivering, 20% delivered", 90*time.Second, func() bool {
		return a.count(assignedLine) > 0 && b.count(assignedLine) > 0 && b.lines() >= 150 && g.lines() >= prod.count()/5
	})

	assignedA := a.count(assignedLine)
	require.NoError(t, b.rc.cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := time.Now()
	g.waitFor("A assigned B's partitions after B's session expired", 2*time.Minute, func() bool {
		return a.count(assignedLine) > assignedA && time.Since(stoppedAt) > consumerSessionTimeout+2*time.Second
	})
	assignedB, lostB := b.count(assignedLine), b.count(lostLine)
	require.NoError(t, b.rc.cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("B stopped for %s, %d of %d records delivered", time.Since(stoppedAt).Round(time.Millisecond), g.lines(), prod.count())
	g.waitFor("B lost its session and was assigned partitions again", 90*time.Second, func() bool {
		return b.count(lostLine) > lostB && b.count(assignedLine) > assignedB
	})
	// B noticed its pause once and held new batches until it knew its session was gone (issue
	// 50, defect 4: 115 holds per SIGSTOP before).
	holds := strings.Count(b.log(), "holding new batches until the group confirms this member")
	t.Logf("B's holds for one SIGSTOP: %d", holds)
	assert.Equalf(t, 1, holds, "holds in B's log for one SIGSTOP\n%s", g.summary())
	// The pause limit is a third of the broker's session timeout (the group's config, which the
	// broker answers with its group.consumer.session.timeout.ms), not of franz-go's option.
	assert.Containsf(t, b.log(), "the session timeout is 45s: the cluster's group.consumer.session.timeout.ms; the group sets none", "B's hold line\n%s", g.summary())
	assert.Regexpf(t, `handing out batches again after .*: (this member lost its session since|the group lists this member)`, b.log(), "B's log after SIGCONT\n%s", g.summary())

	all := produceSpread(t, topic, seqPartitions(handoverPartitions), 50, "kip848-stall-2")
	mergeProduced(all, prod)
	ends := endOffsets(t, topic)
	g.waitDeliveredAndCommitted(adm, group, topic, all, ends)

	g.terminate(a)
	g.terminate(b)
	g.requireDeliveredWithinBound(t, all)
	requireCommitted(t, adm, group, topic, ends)
	after := b.deliveredFrom(t, firstEnds)
	assert.Positivef(t, after, "B delivered none of the records produced after it rejoined\n%s", g.summary())
}

// groupType returns the type the broker lists group with ("classic" or "consumer"), "" if it
// does not list it.
func groupType(t *testing.T, adm *kadm.Client, group string) string {
	t.Helper()
	ctx, cancel := contextTimeout(10 * time.Second)
	defer cancel()
	listed, err := adm.ListGroups(ctx)
	require.NoError(t, err)
	return listed[group].GroupType
}

// TestConsumerProtocolRollingUpgrade moves a running classic group (cooperative_sticky) to
// group_protocol: consumer one process at a time, as a rolling deployment does: classic A and B
// read; consumer A2 joins, and the broker converts the group into a consumer group online
// (group.consumer.migration.policy, bidirectional by default), the classic members going on
// inside it; A leaves (SIGTERM); consumer B2 joins and B leaves; A2 and B2 finish. Every move is
// graceful, so no offset is delivered twice, every offset is delivered, every member exits 0, the
// group committed the end offsets, and it is a consumer-protocol group at the end.
func TestConsumerProtocolRollingUpgrade(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const perPartition = 800
	topic := createTopic(t, handoverPartitions)
	prod := produceSpread(t, topic, seqPartitions(handoverPartitions), perPartition, "kip848-upgrade")
	total := prod.count()
	group, adm := newGroup(t)
	g := newHandoverGroup(t, handoverInput(topic, group, "cooperative_sticky", "end"))
	g.sleep = gracefulSleep

	a, b := g.startPair(10, total)
	assert.Equal(t, "classic", groupType(t, adm, group), "the group before a consumer member joined")

	g.in = consumerInput(topic, group, "end")
	a2 := g.start("A2")
	g.waitFor("A2 assigned partitions and delivering", 90*time.Second, func() bool { return a2.count(assignedLine) > 0 && a2.lines() > 0 })
	assert.Equal(t, "consumer", groupType(t, adm, group), "the group once a consumer member joined")
	g.terminate(a)
	t.Logf("A (classic) left at %d of %d delivered", g.lines(), total)

	b2 := g.start("B2")
	g.waitFor("B2 assigned partitions and delivering", 90*time.Second, func() bool { return b2.count(assignedLine) > 0 && b2.lines() > 0 })
	g.terminate(b)
	t.Logf("B (classic) left at %d of %d delivered", g.lines(), total)

	g.requireExit0(a2, 2*time.Minute)
	g.requireExit0(b2, 2*time.Minute)
	recs := g.records(t)
	dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
	events, moved := g.handoverEvents()
	t.Logf("%d records produced, %d delivered, %d duplicates; %d revocations (%d partitions)", total, len(recs), dups, events, moved)
	assert.Zerof(t, dups, "offsets delivered twice in the graceful moves of a rolling upgrade\n%s", g.summary())
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
}

// TestConsumerProtocolRollingDowngrade is the way back of TestConsumerProtocolRollingUpgrade: a
// running consumer-protocol group moves to group_protocol: classic (cooperative_sticky) one
// process at a time. Consumer A and B read; classic A2 joins, and the group stays a consumer
// group, A2 a classic member inside it (group.consumer.migration.policy, bidirectional by
// default); A leaves (SIGTERM); classic B2 joins; B, the last consumer-protocol member, leaves,
// and the broker converts the group back into a classic group online, A2 and B2 going on in it
// (the conversion is a classic rebalance: cooperative_sticky keeps their partitions). A2 and B2
// finish. Every move is graceful, so no offset is delivered twice, every offset is delivered,
// every member exits 0 and the group committed the end offsets.
func TestConsumerProtocolRollingDowngrade(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const perPartition = 800
	topic := createTopic(t, handoverPartitions)
	prod := produceSpread(t, topic, seqPartitions(handoverPartitions), perPartition, "kip848-downgrade")
	total := prod.count()
	group, adm := newGroup(t)
	g := newHandoverGroup(t, consumerInput(topic, group, "end"))
	g.sleep = gracefulSleep

	a, b := g.startPair(10, total)
	assert.Equal(t, "consumer", groupType(t, adm, group), "the group before a classic member joined")

	g.in = handoverInput(topic, group, "cooperative_sticky", "end")
	a2 := g.start("A2")
	g.waitFor("A2 assigned partitions and delivering", 90*time.Second, func() bool { return a2.count(assignedLine) > 0 && a2.lines() > 0 })
	assert.Equal(t, "consumer", groupType(t, adm, group), "the group once a classic member joined, with consumer members in it")
	g.terminate(a)
	t.Logf("A (consumer) left at %d of %d delivered", g.lines(), total)

	b2 := g.start("B2")
	g.waitFor("B2 assigned partitions and delivering", 90*time.Second, func() bool { return b2.count(assignedLine) > 0 && b2.lines() > 0 })
	assert.Equal(t, "consumer", groupType(t, adm, group), "the group while B, a consumer member, is in it")
	g.terminate(b)
	leftB := time.Now()
	t.Logf("B (consumer) left at %d of %d delivered", g.lines(), total)
	g.waitFor("the group converted to classic once its last consumer member left", 30*time.Second, func() bool {
		return groupType(t, adm, group) == "classic"
	})
	t.Logf("the group is classic %s after B exited", time.Since(leftB).Round(time.Millisecond))

	g.requireExit0(a2, 2*time.Minute)
	g.requireExit0(b2, 2*time.Minute)
	recs := g.records(t)
	dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
	events, moved := g.handoverEvents()
	t.Logf("%d records produced, %d delivered, %d duplicates; %d revocations (%d partitions)", total, len(recs), dups, events, moved)
	assert.Zerof(t, dups, "offsets delivered twice in the graceful moves of a rolling downgrade\n%s", g.summary())
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
}
