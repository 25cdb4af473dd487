package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// Share groups through the binary (issue 37): members are connect processes with a share_group
// input on the real broker; docs/share-groups.md describes what they promise.

// shareMapping writes a message's offset, delivery count and value.
const shareMapping = `root = {"p": @kafka_partition, "o": @kafka_offset, "d": @kafka_delivery_count, "v": content().string()}`

// shareOut is one line of shareMapping's output.
type shareOut struct {
	P flexInt `json:"p"`
	O flexInt `json:"o"`
	D flexInt `json:"d"`
	V string  `json:"v"`
}

// shareTopic creates a one-partition topic, sets the share group's configs (reading from the
// start, and any given) and produces n records valued 0..n-1 (bad-<i> for the indexes in bad).
func shareTopic(t *testing.T, n int, configs map[string]string, bad ...int) (topic, group string) {
	t.Helper()
	topic = createTopic(t, 1)
	group = uniqueName(t, "share")
	cl := producer(t)
	cfg := map[string]string{"share.auto.offset.reset": "earliest"}
	for k, v := range configs {
		cfg[k] = v
	}
	require.NoError(t, share.SetGroupConfigs(t.Context(), cl, group, cfg))
	isBad := map[int]bool{}
	for _, i := range bad {
		isBad[i] = true
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := strconv.Itoa(i)
		if isBad[i] {
			v = "bad-" + v
		}
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}
	}
	if n > 0 {
		require.Equal(t, n, produceAll(t, cl, recs).count())
	}
	return topic, group
}

// shareMember is one connect process in a share group, writing shareMapping lines to out.
type shareMember struct {
	*runningConnect
	out string
}

// startShareMember starts a connect process reading topic as a member of group. sleep, if set,
// is a sleep processor's duration run before the mapping.
func startShareMember(t *testing.T, topic, group string, extra inputConfig, procs ...any) *shareMember {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	in := baseInput(topic)
	in["share_group"] = group
	for k, v := range extra {
		in[k] = v
	}
	cfg := writeRunConfig(t, dir, in, out, func(conf map[string]any) {
		conf["pipeline"] = map[string]any{"threads": 1, "processors": append(procs, map[string]any{"mapping": shareMapping})}
	})
	return &shareMember{runningConnect: startConnect(t, 5*time.Minute, nil, "run", cfg), out: out}
}

// lines returns the member's complete output lines so far.
func (m *shareMember) lines(t *testing.T) []shareOut {
	t.Helper()
	return readCompleteLines(t, m.out, func(o shareOut) bool { return o.O.Valid && o.D.Valid }, "a share output line without offset or delivery count")
}

// batchSleep sleeps d before the first message of each batch.
func batchSleep(d string) map[string]any {
	return map[string]any{"sleep": map[string]any{"duration": `${! if batch_index() == 0 { "` + d + `" } else { "0s" } }`}}
}

// waitShareLines waits until the members wrote n lines in all.
func waitShareLines(t *testing.T, limit time.Duration, n int, members ...*shareMember) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		total := 0
		for _, m := range members {
			total += completeLines(m.out)
		}
		if total >= n {
			return
		}
		require.Truef(t, time.Now().Before(deadline), "the members wrote %d of %d lines within %s", total, n, limit)
		time.Sleep(100 * time.Millisecond)
	}
}

// stopMembers stops the members gracefully (SIGTERM), at once, and requires each to exit 0.
func stopMembers(t *testing.T, members ...*shareMember) []runResult {
	t.Helper()
	res := make([]runResult, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { res[i] = m.stop(syscall.SIGTERM, time.Minute) })
	}
	wg.Wait()
	for i, r := range res {
		require.Falsef(t, r.TimedOut, "member %d did not stop\n%s", i, r)
		require.Equalf(t, 0, r.ExitCode, "member %d\n%s", i, r)
	}
	return res
}

// requireShareLagZero waits until the broker counts every record of the group's partition 0
// acknowledged.
func requireShareLagZero(t *testing.T, topic, group string) {
	t.Helper()
	adm := newAdmin(t)
	require.Eventually(t, func() bool {
		offs, err := adm.DescribeShareGroupOffsets(t.Context(), group)
		if err != nil {
			return false
		}
		o, ok := offs[group].Offsets[topic][0]
		return ok && o.Err == nil && o.Lag == 0
	}, time.Minute, 200*time.Millisecond, "share-partition lag of %s/0 in %s: want 0", topic, group)
}

// byValue counts deliveries by record value, with their delivery counts.
func byValue(outs ...[]shareOut) map[string][]int64 {
	m := map[string][]int64{}
	for _, o := range outs {
		for _, r := range o {
			m[r.V] = append(m[r.V], r.D.V)
		}
	}
	return m
}

// TestShareGroupThreeMembersOnePartition: three connect processes in one share group read a
// one-partition topic: each delivers some records, and on a graceful run every record is
// delivered once, on its first delivery, and acknowledged.
func TestShareGroupThreeMembersOnePartition(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 3000
	topic, group := shareTopic(t, total, nil)
	var members []*shareMember
	for range 3 {
		members = append(members, startShareMember(t, topic, group, inputConfig{"share_max_records": 50}, batchSleep("100ms")))
	}
	waitShareLines(t, 3*time.Minute, total, members...)
	res := stopMembers(t, members...)
	var outs [][]shareOut
	for i, m := range members {
		o := m.lines(t)
		t.Logf("member %d delivered %d records", i, len(o))
		assert.NotEmpty(t, o, "member %d delivered nothing", i)
		assert.Contains(t, res[i].Stdout+res[i].Stderr, "as a member of share group "+group, "member %d", i)
		outs = append(outs, o)
	}
	got := byValue(outs...)
	require.Len(t, got, total)
	for v, ds := range got {
		require.Equal(t, []int64{1}, ds, "record %s", v)
	}
	requireShareLagZero(t, topic, group)
}

// TestShareGroupKilledMemberIsRedelivered: a member SIGKILLed with records acquired (in its
// pipeline) loses nothing: once their lock expires (3 s here) another member gets them, with
// kafka_delivery_count 2, and what is delivered twice is at most what the killed member held.
func TestShareGroupKilledMemberIsRedelivered(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 500
	topic, group := shareTopic(t, total, map[string]string{"share.record.lock.duration.ms": "3000"})
	slow := startShareMember(t, topic, group, inputConfig{"share_max_records": 40},
		map[string]any{"log": map[string]any{"level": "INFO", "message": `held ${! @kafka_offset }`}},
		batchSleep("10m"))
	var held []int64
	require.True(t, slow.waitFor(time.Minute, func() bool {
		held = heldOffsets(slow.stdout.String() + slow.stderr.String())
		return len(held) > 0
	}), "the slow member logged no held record")
	time.Sleep(500 * time.Millisecond) // the batch's other records are logged
	res := slow.stop(syscall.SIGKILL, 30*time.Second)
	held = heldOffsets(res.Stdout + res.Stderr)
	require.NotEmpty(t, held)
	t.Logf("the killed member held %d records: %v", len(held), compressOffsets(held, 10))
	require.Zero(t, completeLines(slow.out), "the killed member wrote output")

	fast := startShareMember(t, topic, group, nil)
	waitShareLines(t, 2*time.Minute, total, fast)
	stopMembers(t, fast)
	got := byValue(fast.lines(t))
	require.Len(t, got, total, "records lost")
	wasHeld := map[string]bool{}
	for _, o := range held {
		wasHeld[strconv.FormatInt(o, 10)] = true
	}
	for v, ds := range got {
		want := int64(1)
		if wasHeld[v] {
			want = 2
		}
		require.Equal(t, []int64{want}, ds, "record %s (held by the killed member: %v)", v, wasHeld[v])
	}
	requireShareLagZero(t, topic, group)
}

// heldOffsets returns the offsets of the "held <offset>" log lines.
func heldOffsets(log string) []int64 {
	seen := map[int64]bool{}
	var offs []int64
	for _, line := range strings.Split(log, "\n") {
		_, after, ok := strings.Cut(line, `msg="held `)
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(after, `"`)
		n, err := strconv.ParseInt(num, 10, 64)
		if err == nil && !seen[n] {
			seen[n] = true
			offs = append(offs, n)
		}
	}
	return offs
}

// TestShareGroupNackRedeliversThenRejects: a record the pipeline fails (reject_errored nacks
// it alone) is replayed in the member (auto_replay_nacks) with kafka_delivery_count 2, then
// rejected (archived by the broker, never delivered again) after share_max_deliveries: 2; the
// other records of its batches are accepted and written once.
func TestShareGroupNackRedeliversThenRejects(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 200
	bad := []int{7, 120}
	topic, group := shareTopic(t, total, nil, bad...)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	in := baseInput(topic)
	in["share_group"] = group
	in["share_max_deliveries"] = 2
	in["share_max_records"] = 20
	cfg := writeRunConfig(t, dir, in, out, func(conf map[string]any) {
		conf["pipeline"] = map[string]any{"threads": 1, "processors": []any{
			map[string]any{"mapping": shareMapping},
			map[string]any{"log": map[string]any{"level": "INFO", "message": `delivered ${! this.v } ${! this.d }`}},
			map[string]any{"mapping": `root = if this.v.has_prefix("bad") { throw("bad record " + this.v) } else { this }`},
		}}
		conf["output"] = map[string]any{"reject_errored": map[string]any{"file": map[string]any{"path": out, "codec": "lines"}}}
	})
	m := &shareMember{runningConnect: startConnect(t, 5*time.Minute, nil, "run", cfg), out: out}
	waitShareLines(t, 2*time.Minute, total-len(bad), m)
	// Each bad record is delivered twice, then rejected: the broker then counts every record
	// acknowledged.
	requireShareLagZero(t, topic, group)
	res := stopMembers(t, m)[0]
	log := res.Stdout + res.Stderr
	for _, i := range bad {
		v := "bad-" + strconv.Itoa(i)
		require.Equal(t, 1, strings.Count(log, `msg="delivered `+v+` 1"`), "first deliveries of %s", v)
		require.Equal(t, 1, strings.Count(log, `msg="delivered `+v+` 2"`), "second deliveries of %s", v)
		require.NotContains(t, log, `msg="delivered `+v+` 3"`)
	}
	written := byValue(m.lines(t))
	require.Len(t, written, total-len(bad))
	for v, ds := range written {
		require.Equal(t, []int64{1}, ds, "record %s", v)
	}
	require.Contains(t, lastLine(log, "Closed: share group"), fmt.Sprintf("%d records acquired, %d accepted, 0 released, %d rejected", total, total-len(bad), len(bad)))
}

// TestShareGroupMembersJoinAndLeaveUnderLoad: while records are produced, a second and a third
// member join and the second leaves (SIGTERM): every record is delivered and written once, each
// member delivers some, and what the leaving member held is released to the others.
func TestShareGroupMembersJoinAndLeaveUnderLoad(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic, group := shareTopic(t, 0, nil)
	cl := producer(t)
	const total = 3000
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range total / 100 {
			recs := make([]*kgo.Record, 100)
			for j := range recs {
				recs[j] = &kgo.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i*100 + j))}
			}
			if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	})
	opts := inputConfig{"share_max_records": 50}
	a := startShareMember(t, topic, group, opts, batchSleep("50ms"))
	time.Sleep(2 * time.Second)
	b := startShareMember(t, topic, group, opts, batchSleep("50ms"))
	time.Sleep(2 * time.Second)
	c := startShareMember(t, topic, group, opts, batchSleep("50ms"))
	require.True(t, b.waitFor(time.Minute, func() bool { return completeLines(b.out) > 0 }), "the second member delivered nothing")
	time.Sleep(2 * time.Second)
	resB := stopMembers(t, b)[0]
	t.Logf("the second member left after %d records: %s", completeLines(b.out), lastLine(resB.Stdout+resB.Stderr, "Closed: share group"))
	wg.Wait()
	waitShareLines(t, 2*time.Minute, total, a, b, c)
	stopMembers(t, a, c)
	var outs [][]shareOut
	for i, m := range []*shareMember{a, b, c} {
		o := m.lines(t)
		t.Logf("member %d delivered %d records", i, len(o))
		assert.NotEmpty(t, o, "member %d delivered nothing", i)
		outs = append(outs, o)
	}
	got := byValue(outs...)
	require.Len(t, got, total)
	for v, ds := range got {
		require.Len(t, ds, 1, "record %s written %d times: delivery counts %v", v, len(ds), ds)
	}
	requireShareLagZero(t, topic, group)
}

// lastLine returns the last line of log that contains s.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// TestShareGroupSlowPipelineRenewsItsLocks: a pipeline slower than the acquisition lock (3 s
// here; each batch takes 5 s) keeps its records by renewing their locks every second: every
// record is delivered once, on its first delivery, and no lock expires.
func TestShareGroupSlowPipelineRenewsItsLocks(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 30
	topic, group := shareTopic(t, total, map[string]string{"share.record.lock.duration.ms": "3000"})
	m := startShareMember(t, topic, group, inputConfig{"share_max_records": 10, "share_renew_interval": "1s"}, batchSleep("5s"))
	waitShareLines(t, 2*time.Minute, total, m)
	res := stopMembers(t, m)[0]
	got := byValue(m.lines(t))
	require.Len(t, got, total)
	for v, ds := range got {
		require.Equal(t, []int64{1}, ds, "record %s", v)
	}
	closed := lastLine(res.Stdout+res.Stderr, "Closed: share group")
	require.Regexp(t, `[1-9]\d* renewals, 0 lock expiries`, closed)
	requireShareLagZero(t, topic, group)
}

// TestShareGroupGracefulStopReleasesWhatItHolds: a member stopped (SIGTERM) with a batch in its
// pipeline and more of its fetch waiting finishes the batch, releases the rest before it
// leaves, and exits 0; another member then gets the released records (delivery count 2) and
// nothing is written twice or lost.
func TestShareGroupGracefulStopReleasesWhatItHolds(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 300
	topic, group := shareTopic(t, total, nil)
	first := startShareMember(t, topic, group, inputConfig{"share_max_records": 50, "batching": map[string]any{"count": 10}},
		map[string]any{"log": map[string]any{"level": "INFO", "message": `held ${! @kafka_offset }`}},
		batchSleep("2s"))
	require.True(t, first.waitFor(time.Minute, func() bool {
		return len(heldOffsets(first.stdout.String()+first.stderr.String())) > 0
	}), "the first member logged no held record")
	res := stopMembers(t, first)[0]
	closed := lastLine(res.Stdout+res.Stderr, "Closed: share group")
	t.Logf("first member: %s", closed)
	require.Regexp(t, `50 records acquired, (10|20) accepted, (40|30) released`, closed, "a fetch of 50 in batches of 10: the one or two in the pipeline finish, the rest are released")

	second := startShareMember(t, topic, group, nil)
	waitShareLines(t, 2*time.Minute, total, first, second)
	stopMembers(t, second)
	written := map[string][]int64{}
	for v, ds := range byValue(first.lines(t), second.lines(t)) {
		written[v] = ds
	}
	require.Len(t, written, total)
	redelivered := 0
	for v, ds := range written {
		require.Len(t, ds, 1, "record %s written %d times", v, len(ds))
		if ds[0] == 2 {
			redelivered++
		}
	}
	require.Equal(t, 50-completeLines(first.out), redelivered, "the released records come again with delivery count 2")
	requireShareLagZero(t, topic, group)
}

// TestShareGroupTakesOverFromAConsumerGroup is docs/share-groups.md's migration: a consumer
// group read and committed the first 600 records; its committed offsets are exported with
// kafka-consumer-groups.sh and imported into a new share group with kafka-share-groups.sh,
// whose member then reads exactly the 400 records after them (the share group's own start,
// share.auto.offset.reset, is left at its default, latest).
func TestShareGroupTakesOverFromAConsumerGroup(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 1)
	cl := producer(t)
	batch := func(from, to int) []*kgo.Record {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))})
		}
		return recs
	}
	require.Equal(t, 600, produceAll(t, cl, batch(0, 600)).count())
	consumer := uniqueName(t, "group")
	in := baseInput(topic)
	in["consumer_group"] = consumer
	in["stop_at"] = "end"
	require.Len(t, runInput(t, in, 2*time.Minute), 600)
	require.Equal(t, 400, produceAll(t, cl, batch(600, 1000)).count())

	csv := kafkaConsumerGroups(t, "--group", consumer, "--reset-offsets", "--to-current", "--topic", topic, "--export", "--dry-run")
	require.Contains(t, csv, strconv.Quote(topic)+",0,600")
	file := filepath.Join(t.TempDir(), "offsets.csv")
	require.NoError(t, os.WriteFile(file, []byte(csv), 0o644))
	group := uniqueName(t, "share")
	kafkaShareGroups(t, "--group", group, "--reset-offsets", "--from-file", file, "--execute")

	m := startShareMember(t, topic, group, nil)
	waitShareLines(t, 2*time.Minute, 400, m)
	time.Sleep(time.Second) // a record read twice or from before 600 would come within this
	stopMembers(t, m)
	got := byValue(m.lines(t))
	require.Len(t, got, 400)
	for i := 600; i < 1000; i++ {
		require.Equal(t, []int64{1}, got[strconv.Itoa(i)], "record %d", i)
	}
}

// TestShareGroupRenewIntervalAboveTheIdleTimeout (issue 44): a member whose pipeline holds a
// batch 55 s, renewing it every 50 s at most under a 60 s lock, keeps its records: franz-go
// closes a connection idle for 30 s, and the broker ends a share session whose connection
// closed and releases what the member held, so the member keeps its connection open between
// renewals. A second member, started while the first holds the batch, gets nothing; every
// record is written once, with delivery count 1, and every acknowledgement and renewal is
// taken. Before, the records were released and written twice (SHARE_SESSION_NOT_FOUND).
func TestShareGroupRenewIntervalAboveTheIdleTimeout(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 10
	topic, group := shareTopic(t, total, map[string]string{"share.record.lock.duration.ms": "60000"})
	slow := startShareMember(t, topic, group, inputConfig{"share_max_records": total, "share_renew_interval": "50s"},
		map[string]any{"log": map[string]any{"level": "INFO", "message": `held ${! @kafka_offset }`}},
		batchSleep("55s"))
	require.True(t, slow.waitFor(time.Minute, func() bool {
		return len(heldOffsets(slow.stdout.String()+slow.stderr.String())) > 0
	}), "the slow member logged no held record")
	other := startShareMember(t, topic, group, nil)
	waitShareLines(t, 3*time.Minute, total, slow)
	res := stopMembers(t, slow, other)
	require.Zero(t, completeLines(other.out), "the second member got records the first still held: %v", other.lines(t))
	got := byValue(slow.lines(t))
	require.Len(t, got, total)
	for v, ds := range got {
		require.Equal(t, []int64{1}, ds, "record %s", v)
	}
	closed := lastLine(res[0].Stdout+res[0].Stderr, "Closed: share group")
	t.Logf("slow member: %s", closed)
	require.Regexp(t, fmt.Sprintf(`%d records acquired, %d accepted, 0 released, 0 rejected, [1-9]\d* renewals, 0 lock expiries, 0 failed acknowledgements, 0 failed renewals`, total, total), closed)
	requireShareLagZero(t, topic, group)
}
