// Share groups (KIP-932) on the real Kafka broker through the connect binary, from review 7
// (issue 51), with tests/share_test.go's helpers (shareMapping, shareMember, byValue, lastLine,
// stopMembers, requireShareLagZero). Run against a broker started with resources/kafka.sh start:
//
//	KBR_KAFKA_BROKERS=127.0.0.1:9092 go test -p 1 -run 'TestShareReview' -v ./tests
//
// TestShareReviewBrokerRestartMidRun restarts a broker of its own (ownBroker), never the shared one.
// KBR_SHARE_KGO_DEBUG_TESTS=1 writes franz-go's DEBUG log of every member to its stderr.
package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// rv7Topic creates a topic of parts partitions, sets the share group's configs (earliest, and
// any given) and produces n records valued 0..n-1 round robin over the partitions.
func rv7Topic(t *testing.T, parts int32, n int, configs map[string]string) (topic, group string) {
	t.Helper()
	topic = createTopic(t, parts)
	group = uniqueName(t, "share7")
	cl := producer(t)
	cfg := map[string]string{"share.auto.offset.reset": "earliest"}
	for k, v := range configs {
		cfg[k] = v
	}
	require.NoError(t, share.SetGroupConfigs(t.Context(), cl, group, cfg))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % parts, Value: []byte(strconv.Itoa(i))}
	}
	require.Equal(t, n, produceAll(t, cl, recs).count())
	return topic, group
}

// rv7Member starts a connect process in share group group with the input fields extra, threads
// pipeline threads, procs before shareMapping, and conf changes (an output of its own).
func rv7Member(t *testing.T, topic, group string, extra inputConfig, threads int, procs []any, mods ...runOption) *shareMember {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	in := baseInput(topic)
	in["share_group"] = group
	for k, v := range extra {
		in[k] = v
	}
	opts := append([]runOption{func(conf map[string]any) {
		conf["pipeline"] = map[string]any{"threads": threads, "processors": append(append([]any{}, procs...), map[string]any{"mapping": shareMapping})}
	}}, mods...)
	cfg := writeRunConfig(t, dir, in, out, opts...)
	var env []string
	if os.Getenv("KBR_SHARE_KGO_DEBUG_TESTS") != "" {
		env = []string{"KBR_SHARE_KGO_DEBUG=1"}
	}
	return &shareMember{runningConnect: startConnect(t, 10*time.Minute, env, "run", cfg), out: out}
}

// sleepPerRecord sleeps d for every message.
func sleepPerRecord(d string) map[string]any {
	return map[string]any{"sleep": map[string]any{"duration": d}}
}

// rv7Tally is what the members wrote, against the ids 0..total-1 produced.
type rv7Tally struct {
	distinct int
	lost     []int
	dups     int                // lines beyond the first of an id
	dupIDs   map[string][]int64 // id -> delivery counts of its lines
	byMember []int              // lines per member
}

func (tl rv7Tally) String() string {
	keys := make([]string, 0, len(tl.dupIDs))
	for k := range tl.dupIDs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { a, _ := strconv.Atoi(keys[i]); b, _ := strconv.Atoi(keys[j]); return a < b })
	var sample []string
	for _, k := range keys[:min(12, len(keys))] {
		sample = append(sample, fmt.Sprintf("%s:%v", k, tl.dupIDs[k]))
	}
	lost := tl.lost
	if len(lost) > 20 {
		lost = lost[:20]
	}
	return fmt.Sprintf("distinct %d, lost %d %v, duplicate lines %d (ids %d; sample id:[delivery counts] %v), lines per member %v",
		tl.distinct, len(tl.lost), lost, tl.dups, len(tl.dupIDs), sample, tl.byMember)
}

func rv7Count(t *testing.T, total int, members ...*shareMember) rv7Tally {
	t.Helper()
	var outs [][]shareOut
	var tl rv7Tally
	for _, m := range members {
		ls := m.lines(t)
		tl.byMember = append(tl.byMember, len(ls))
		outs = append(outs, ls)
	}
	got := byValue(outs...)
	tl.dupIDs = map[string][]int64{}
	for v, ds := range got {
		if len(ds) > 1 {
			tl.dups += len(ds) - 1
			tl.dupIDs[v] = ds
		}
	}
	for i := range total {
		if _, ok := got[strconv.Itoa(i)]; !ok {
			tl.lost = append(tl.lost, i)
		}
	}
	tl.distinct = len(got)
	return tl
}

// rv7Closed are the counts of a member's Closed: line.
type rv7Closed struct {
	acquired, accepted, released, rejected, renewals, lockExpired, ackFailed, renewFailed int64
	line                                                                                  string
}

var rv7ClosedRe = regexp.MustCompile(`(\d+) records acquired, (\d+) accepted, (\d+) released, (\d+) rejected, (\d+) renewals, (\d+) lock expiries, (\d+) failed acknowledgements, (\d+) failed renewals`)

func rv7ClosedOf(t *testing.T, res runResult) rv7Closed {
	t.Helper()
	line := lastLine(res.Stdout+res.Stderr, "Closed: share group")
	m := rv7ClosedRe.FindStringSubmatch(line)
	require.NotNil(t, m, "no Closed: line in\n%s", tail(res.Stdout+res.Stderr, 4000))
	n := make([]int64, 8)
	for i := range n {
		n[i], _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	return rv7Closed{n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], line}
}

// ended is how many acquired records the counts say ended one way or another.
func (c rv7Closed) ended() int64 {
	return c.accepted + c.released + c.rejected + c.lockExpired + c.ackFailed
}

// TestShareReviewSlowPipelineSeveralMembers: a per-record sleep making each batch (25 x 150 ms)
// longer than a 3 s lock, three processes of share_members: 2 on a two-partition topic, renewals
// every second: every id once, no lock expiry, every acquired record ended.
func TestShareReviewSlowPipelineSeveralMembers(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 1200
	topic, group := rv7Topic(t, 2, total, map[string]string{"share.record.lock.duration.ms": "3000"})
	opts := inputConfig{"share_members": 2, "share_max_records": 50, "share_renew_interval": "1s", "batching": map[string]any{"count": 25}}
	var ms []*shareMember
	for range 3 {
		ms = append(ms, rv7Member(t, topic, group, opts, 4, []any{sleepPerRecord("150ms")}))
	}
	waitShareLines(t, 4*time.Minute, total, ms...)
	time.Sleep(5 * time.Second) // a lock expiring late would redeliver within this
	res := stopMembers(t, ms...)
	tl := rv7Count(t, total, ms...)
	t.Logf("%s", tl)
	for i, r := range res {
		c := rv7ClosedOf(t, r)
		t.Logf("member %d: %s", i, c.line)
		assert.Equal(t, c.acquired, c.ended(), "member %d: acquired records that ended nowhere", i)
		assert.Zero(t, c.lockExpired+c.ackFailed+c.renewFailed, "member %d", i)
	}
	assert.Empty(t, tl.lost)
	assert.Zero(t, tl.dups)
	requireShareLagZero(t, topic, group)
}

// TestShareReviewKillOneStopAnother: three members; one SIGKILLed and one SIGSTOPped for 10 s (a 3 s
// lock), then resumed. Nothing is lost; what is written twice is what the two held, and the
// stopped member's late acknowledgements are counted as lock expiries.
func TestShareReviewKillOneStopAnother(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 3000
	topic, group := rv7Topic(t, 2, total, map[string]string{"share.record.lock.duration.ms": "3000"})
	opts := inputConfig{"share_max_records": 100, "share_renew_interval": "1s", "batching": map[string]any{"count": 10}}
	procs := []any{sleepPerRecord("4ms")}
	a := rv7Member(t, topic, group, opts, 2, procs)
	b := rv7Member(t, topic, group, opts, 2, procs)
	c := rv7Member(t, topic, group, opts, 2, procs)
	require.True(t, a.waitFor(3*time.Minute, func() bool { return completeLines(a.out) >= 300 && completeLines(b.out) >= 300 }), "members wrote too little")
	_ = a.stop(syscall.SIGKILL, 30*time.Second)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := completeLines(b.out)
	time.Sleep(10 * time.Second)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGCONT))
	waitShareLines(t, 4*time.Minute, total, a, b, c)
	time.Sleep(8 * time.Second)
	res := stopMembers(t, b, c)
	tl := rv7Count(t, total, a, b, c)
	t.Logf("killed member wrote %d, stopped member %d when stopped; %s", completeLines(a.out), stoppedAt, tl)
	cb, cc := rv7ClosedOf(t, res[0]), rv7ClosedOf(t, res[1])
	t.Logf("stopped member: %s", cb.line)
	t.Logf("third member: %s", cc.line)
	// Which member wrote each duplicate line: the second line's writer.
	assert.Empty(t, tl.lost, "records lost")
	assert.Equal(t, cb.acquired, cb.ended(), "stopped member: acquired records that ended nowhere")
	assert.Equal(t, cc.acquired, cc.ended(), "third member: acquired records that ended nowhere")
	assert.LessOrEqual(t, tl.dups, 200, "written twice beyond what the two members held (share_max_records x 2)")
	assert.Positive(t, cb.lockExpired, "the stopped member's acknowledgements after its locks expired are counted lock_expired")
}

// TestShareReviewBrokerRestartMidRun: the single broker, one of the test's own (ownBroker: the
// shared one is never restarted), restarted (SIGTERM, start) while two processes (one of
// share_members: 2) read: nothing lost, the members survive, every acquired record ends somewhere
// in the counts, and the warnings say the connection closed (no refusal by the broker).
func TestShareReviewBrokerRestartMidRun(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	ob := newOwnBroker(t)
	ob.start(t)
	const total = 4000
	cl := ob.client(t, producerOpts()...)
	topic := uniqueName(t, "kbr")
	resp, err := kadm.NewClient(cl).CreateTopics(t.Context(), 2, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	group := uniqueName(t, "share7")
	require.NoError(t, share.SetGroupConfigs(t.Context(), cl, group, map[string]string{"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "5000"}))
	recs := make([]*kgo.Record, total)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % 2, Value: []byte(strconv.Itoa(i))}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	seeds := inputConfig{"seed_brokers": []string{ob.addr()}}
	opts := inputConfig{"share_max_records": 100, "share_renew_interval": "2s", "batching": map[string]any{"count": 10}}
	for k, v := range seeds {
		opts[k] = v
	}
	procs := []any{sleepPerRecord("3ms")}
	a := rv7Member(t, topic, group, opts, 2, procs)
	opts2 := inputConfig{"share_members": 2}
	for k, v := range opts {
		opts2[k] = v
	}
	b := rv7Member(t, topic, group, opts2, 4, procs)
	require.True(t, a.waitFor(3*time.Minute, func() bool { return completeLines(a.out)+completeLines(b.out) >= 1000 }), "members wrote too little")
	before := completeLines(a.out) + completeLines(b.out)
	ob.stop(t)
	ob.start(t)
	waitShareLines(t, 5*time.Minute, total, a, b)
	time.Sleep(8 * time.Second)
	res := stopMembers(t, a, b)
	tl := rv7Count(t, total, a, b)
	t.Logf("written before the restart %d; %s", before, tl)
	for i, r := range res {
		c := rv7ClosedOf(t, r)
		t.Logf("member %d: %s", i, c.line)
		log := r.Stdout + r.Stderr
		t.Logf("member %d: %d warnings, %d errors; last warning: %s", i, strings.Count(log, "level=warn"), strings.Count(log, "level=error"), lastLine(log, "level=warn"))
		assert.Equal(t, c.acquired, c.ended(), "member %d: acquired records that ended nowhere", i)
		// A refusal names the broker's error; a closed connection (EOF) is no refusal.
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "the broker refused the acknowledgement of") {
				assert.Regexp(t, `\): [A-Z][A-Z_]+: `, l, "member %d: a refusal without the broker's error (a closed connection is no refusal)", i)
				assert.NotContains(t, l, "EOF", "member %d: a closed connection is no refusal", i)
			}
		}
	}
	assert.Empty(t, tl.lost, "records lost")
}

// TestShareReviewPoisonRecordsLogTheirRejection: records the pipeline always fails end rejected
// (archived) after share_max_deliveries: 3, each delivered exactly 3 times. The broker never
// delivers them again: the data is dropped, so the member should say so at WARN or above, naming
// the records, not only at DEBUG.
func TestShareReviewPoisonRecordsLogTheirRejection(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 300
	topic, group := rv7Topic(t, 1, total, nil)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	in := baseInput(topic)
	in["share_group"] = group
	in["share_max_deliveries"] = 3
	in["share_max_records"] = 50
	cfg := writeRunConfig(t, dir, in, out, func(conf map[string]any) {
		conf["pipeline"] = map[string]any{"threads": 2, "processors": []any{
			map[string]any{"mapping": shareMapping},
			map[string]any{"log": map[string]any{"level": "INFO", "message": `delivered ${! this.v } ${! this.d }`}},
			map[string]any{"mapping": `root = if ["13", "150", "299"].contains(this.v) { throw("poison " + this.v) } else { this }`},
		}}
		conf["output"] = map[string]any{"reject_errored": map[string]any{"file": map[string]any{"path": out, "codec": "lines"}}}
	})
	m := &shareMember{runningConnect: startConnect(t, 5*time.Minute, nil, "run", cfg), out: out}
	waitShareLines(t, 2*time.Minute, total-3, m)
	requireShareLagZero(t, topic, group)
	res := stopMembers(t, m)[0]
	log := res.Stdout + res.Stderr
	for _, v := range []string{"13", "150", "299"} {
		for d := 1; d <= 3; d++ {
			assert.Equal(t, 1, strings.Count(log, fmt.Sprintf(`msg="delivered %s %d"`, v, d)), "delivery %d of %s", d, v)
		}
		assert.NotContains(t, log, fmt.Sprintf(`msg="delivered %s 4"`, v))
	}
	c := rv7ClosedOf(t, res)
	t.Logf("%s", c.line)
	tl := rv7Count(t, total, m)
	t.Logf("%s", tl)
	assert.Equal(t, int64(3), c.rejected)
	var loud []string
	for _, l := range strings.Split(log, "\n") {
		if (strings.Contains(l, "level=warn") || strings.Contains(l, "level=error")) && strings.Contains(strings.ToLower(l), "reject") {
			loud = append(loud, l)
		}
	}
	t.Logf("WARN/ERROR lines about the rejection: %d %v", len(loud), loud)
	assert.NotEmpty(t, loud, "3 records were archived (dropped for good) and no WARN or ERROR line says so; errors logged: %v",
		lastLine(log, "level=error"))
}

// TestShareReviewOutputDownForAWhile (issue 51): the output refuses every message for a while
// after the first one (a switch to reject), then works; default share_max_deliveries (0) and
// auto_replay_nacks. Releasing each nacked record at once would get it straight back, 5
// deliveries within seconds, and the broker archives it at group.share.delivery.count.limit (5):
// lost for good. The member replays nacked batches itself, renewing their locks, so nothing is
// lost, whether the output is down 15 s or 60 s (four renew intervals, two of the group's 30 s
// locks), with one member or three; the counts add up, and nothing is released or archived.
func TestShareReviewOutputDownForAWhile(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, tc := range []struct {
		name    string
		down    time.Duration
		members int
	}{
		{"15s, 1 member", 15 * time.Second, 1},
		{"60s, 1 member", 60 * time.Second, 1},
		{"15s, 3 members", 15 * time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const total = 300
			topic, group := rv7Topic(t, 1, total, nil)
			dir := t.TempDir()
			out := filepath.Join(dir, "out.jsonl")
			in := baseInput(topic)
			in["share_group"] = group
			in["share_max_records"] = 50
			in["share_members"] = tc.members
			until := time.Now().Add(7*time.Second + tc.down).Unix() // the first record comes ~5 s after start
			cfg := writeRunConfig(t, dir, in, out, func(conf map[string]any) {
				conf["pipeline"] = map[string]any{"threads": 2, "processors": []any{map[string]any{"mapping": shareMapping}}}
				conf["output"] = map[string]any{"switch": map[string]any{"cases": []any{
					map[string]any{"check": fmt.Sprintf("timestamp_unix() < %d", until), "output": map[string]any{"reject": "output down"}},
					map[string]any{"output": map[string]any{"file": map[string]any{"path": out, "codec": "lines"}}},
				}}}
			})
			m := &shareMember{runningConnect: startConnect(t, 5*time.Minute, nil, "run", cfg), out: out}
			require.True(t, m.waitFor(3*time.Minute, func() bool { return time.Now().Unix() > until+10 }))
			waitShareLines(t, time.Minute, total, m)
			time.Sleep(3 * time.Second)
			res := stopMembers(t, m)[0]
			c := rv7ClosedOf(t, res)
			tl := rv7Count(t, total, m)
			log := res.Stdout + res.Stderr
			t.Logf("%s", c.line)
			t.Logf("%s", tl)
			t.Logf("errors logged: %d (last: %s); warnings: %d (last: %s)", strings.Count(log, "level=error"), lastLine(log, "level=error"), strings.Count(log, "level=warn"), lastLine(log, "level=warn"))
			assert.Empty(t, tl.lost, "records archived by the broker during a %s output outage, never written", tc.down)
			assert.Zero(t, tl.dups, "records written twice")
			assert.Equal(t, c.acquired, c.ended(), "acquired records that ended nowhere")
			assert.Equal(t, int64(total), c.accepted)
			assert.Zero(t, c.released+c.rejected+c.lockExpired+c.ackFailed+c.renewFailed, "%s", c.line)
			requireShareLagZero(t, topic, group)
		})
	}
}

// TestShareReviewEightMembersTwoPartitions: 8 members (4 processes of share_members: 2) on a
// two-partition topic: every id once, every process delivers some, lag 0.
func TestShareReviewEightMembersTwoPartitions(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 4000
	topic, group := rv7Topic(t, 2, total, nil)
	opts := inputConfig{"share_members": 2, "share_max_records": 100, "batching": map[string]any{"count": 10}}
	var ms []*shareMember
	for range 4 {
		ms = append(ms, rv7Member(t, topic, group, opts, 4, []any{sleepPerRecord("2ms")}))
	}
	waitShareLines(t, 4*time.Minute, total, ms...)
	time.Sleep(3 * time.Second)
	res := stopMembers(t, ms...)
	tl := rv7Count(t, total, ms...)
	t.Logf("%s", tl)
	for i, r := range res {
		c := rv7ClosedOf(t, r)
		t.Logf("process %d: %s", i, c.line)
		assert.Equal(t, c.acquired, c.ended())
	}
	assert.Empty(t, tl.lost)
	assert.Zero(t, tl.dups)
	for i, n := range tl.byMember {
		assert.Positive(t, n, "process %d delivered nothing", i)
	}
}

// TestShareReviewAckAfterLockExpired: a member whose batch (5 s) outlasts a 3 s lock and whose renew
// interval (the default 10 s) does not beat it (it warns at start), a second member beside it.
// The first member's accepts come after the lock expired: the broker refuses them, the other
// member writes those records again (delivery count 2), and the first member counts them
// lock_expired, not accepted.
func TestShareReviewAckAfterLockExpired(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const total = 40
	topic, group := rv7Topic(t, 1, total, map[string]string{"share.record.lock.duration.ms": "3000"})
	slow := rv7Member(t, topic, group, inputConfig{"share_max_records": 10}, 1, []any{batchSleep("5s")})
	require.True(t, slow.waitFor(time.Minute, func() bool {
		return strings.Contains(slow.stdout.String()+slow.stderr.String(), "not shorter than the group's acquisition lock")
	}), "no warning at start")
	time.Sleep(6 * time.Second)
	fast := rv7Member(t, topic, group, inputConfig{"share_max_records": 10}, 1, nil)
	waitShareLines(t, 3*time.Minute, total, fast, slow)
	time.Sleep(12 * time.Second)
	res := stopMembers(t, slow, fast)
	tl := rv7Count(t, total, slow, fast)
	cs, cf := rv7ClosedOf(t, res[0]), rv7ClosedOf(t, res[1])
	t.Logf("%s", tl)
	t.Logf("slow: %s", cs.line)
	for _, l := range strings.Split(res[0].Stdout+res[0].Stderr, "\n") {
		if strings.Contains(l, "was made after") || strings.Contains(l, "piggyback") || strings.Contains(l, "sending share acknowledge") || strings.Contains(l, "share ack") {
			t.Logf("slow log: %s", l)
		}
	}
	t.Logf("fast: %s", cf.line)
	assert.Empty(t, tl.lost)
	assert.Equal(t, int64(tl.dups), cs.lockExpired+cs.ackFailed, "every record written twice is one the slow member's acknowledgement failed for")
	assert.Equal(t, cs.acquired, cs.ended())
}
