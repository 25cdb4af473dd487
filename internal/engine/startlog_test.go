package engine

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// wideTopics starts a kfake cluster with topics orders (200 partitions) and
// payments (100), and group g's committed offsets:
//   - orders/0-99: 3 records, committed at 2 (1 offset to read each)
//   - orders/100-119: 3 records, committed at 3 (nothing to read)
//   - orders/120-199: 3 records, no offset (3 to read each)
//   - payments/0-49: 3 records, no offset (3 to read each)
//   - payments/50-99: empty, no offset (nothing to read)
//
// So 120 partitions start at committed offsets and 180 at earliest, 70 have
// nothing to read, and 100 + 80*3 + 50*3 = 490 offsets are to read.
func wideTopics(t *testing.T) *kfake.Cluster {
	t.Helper()
	c := kfakeCluster(t, kfake.NumBrokers(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopic(t.Context(), 200, 1, nil, "orders")
	require.NoError(t, err)
	_, err = adm.CreateTopic(t.Context(), 100, 1, nil, "payments")
	require.NoError(t, err)

	var recs []*kgo.Record
	add := func(topic string, from, to int32) {
		for p := from; p <= to; p++ {
			for i := range 3 {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", topic, p, i)})
			}
		}
	}
	add("orders", 0, 199)
	add("payments", 0, 49)
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())

	offs := kadm.Offsets{}
	for p := range int32(120) {
		at := int64(2)
		if p >= 100 {
			at = 3
		}
		offs.Add(kadm.Offset{Topic: "orders", Partition: p, At: at, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(t.Context(), "g", offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	return c
}

// wideSummary is what the summary of wideTopics says after the partitions.
const wideSummary = "120 from committed offsets, 180 from earliest; 70 with nothing to read now; 490 offsets to read now"

// partitionName matches a partition named one by one, such as orders/17.
var partitionName = regexp.MustCompile(`\b(orders|payments)/[0-9]+\b`)

// checkPerPartitionDebug checks that a DEBUG line names every partition of
// wideTopics with where it starts and why.
func checkPerPartitionDebug(t *testing.T, log *testLogger) {
	t.Helper()
	debug := strings.Join(levelLines(log, "DEBUG"), "\n")
	var missing []string
	for _, tp := range []struct {
		topic string
		n     int
	}{{"orders", 200}, {"payments", 100}} {
		for p := range tp.n {
			if !strings.Contains(debug, fmt.Sprintf("Reading partition %s/%d from offset ", tp.topic, p)) {
				missing = append(missing, fmt.Sprintf("%s/%d", tp.topic, p))
			}
		}
	}
	assert.Empty(t, missing, "partitions no DEBUG line names")
	assert.Contains(t, debug, "Reading partition orders/7 from offset 2 (the group's committed offset), end 3: 1 offsets to read now")
	assert.Contains(t, debug, "Reading partition orders/150 from offset 0 (start_from earliest), end 3: 3 offsets to read now")
	assert.Contains(t, debug, "Reading partition payments/60 from offset 0 (start_from earliest), end 0: 0 offsets to read now")
}

// infoButTheRoundTrip returns log's INFO lines but the cache's one line
// about the broker's round trip, which comes when its first measure ends
// (started as the partitions are listed, or as a member joins), before or
// after the others. It checks that there is at most one such line.
func infoButTheRoundTrip(t *testing.T, log *testLogger) []string {
	t.Helper()
	var info []string
	verdicts := 0
	for _, l := range levelLines(log, "INFO") {
		if strings.HasPrefix(l, "Broker ") && strings.Contains(l, "round trip") {
			verdicts++
			continue
		}
		info = append(info, l)
	}
	assert.LessOrEqual(t, verdicts, 1, "INFO lines about the broker's round trip")
	return info
}

// TestWideStartLogsOneSummary: a start of 300 partitions logs one INFO line
// with partitions per topic and start positions by kind, and names each
// partition only at DEBUG.
func TestWideStartLogsOneSummary(t *testing.T) {
	c := wideTopics(t)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "orders"}, {Name: "payments"}}
		cfg.Group.Name = "g"
	})
	// Let the scheduler read and refresh a few times: nothing it does at
	// INFO may name partitions one by one either.
	ctx := t.Context()
	for range 5 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		b.Ack()
	}
	time.Sleep(5 * e.cfg.PollInterval)

	info := infoButTheRoundTrip(t, log)
	require.NotEmpty(t, info)
	assert.Equal(t, fmt.Sprintf("Reading 300 partitions (orders: 200, payments: 100) from %s (start_from earliest, stop_at never): %s",
		strings.Join(c.ListenAddrs(), ","), wideSummary), info[0])
	assert.LessOrEqual(t, len(info), 2, "INFO lines of a wide start:\n%s", strings.Join(info, "\n"))
	for _, l := range info {
		assert.NotRegexp(t, partitionName, l, "an INFO line names partitions one by one")
	}
	checkPerPartitionDebug(t, log)
}

// TestWideAssignmentLogsOneSummary: a group assignment of 300 partitions
// logs the assignment and one summary of where its partitions start at INFO,
// counted per topic, and names each partition only at DEBUG.
func TestWideAssignmentLogsOneSummary(t *testing.T) {
	c := wideTopics(t)
	e, log := newEngine(t, c, func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.Topics = []TopicSpec{{Name: "orders"}, {Name: "payments"}}
	})
	const reading = `Reading 300 partitions (orders: 200, payments: 100) assigned by group "g": ` + wideSummary
	require.Eventually(t, func() bool { return strings.Contains(log.String(), reading) }, 20*time.Second, 20*time.Millisecond,
		"no summary of the assignment\n%s", log)
	ctx := t.Context()
	for range 5 {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		b.Ack()
	}
	time.Sleep(5 * e.cfg.PollInterval)

	info := infoButTheRoundTrip(t, log)
	assert.Equal(t, []string{
		fmt.Sprintf(`Joining group "g" for orders,payments from %s (start_from earliest, stop_at never); partitions are read as the group assigns them`, strings.Join(c.ListenAddrs(), ",")),
		`Group "g": this member runs the classic group protocol`,
		`Group "g" assigned 300 partitions to this member (orders: 200, payments: 100); it owns 300 now`,
		reading,
	}, info, "INFO lines of a wide assignment")
	for _, l := range info {
		assert.NotRegexp(t, partitionName, l, "an INFO line names partitions one by one")
	}
	checkPerPartitionDebug(t, log)
	assert.Contains(t, strings.Join(levelLines(log, "DEBUG"), "\n"), `Group "g" assigned orders/0, orders/1, `)
}

// TestSmallAssignmentNamesPartitions: an assignment of a few partitions
// still names them at INFO.
func TestSmallAssignmentNamesPartitions(t *testing.T) {
	c := newKafka(t, 3, 10, "t")
	_, log := newEngine(t, c, memberConfig(kgo.CooperativeStickyBalancer()))
	require.Eventually(t, func() bool {
		return strings.Contains(log.String(), `INFO Reading 3 partitions (t: 3) assigned by group "g": 3 from earliest; 30 offsets to read now`)
	}, 20*time.Second, 20*time.Millisecond, "no summary of the assignment\n%s", log)
	assert.Contains(t, log.String(), `INFO Group "g" assigned 3 partitions to this member (t/0, t/1, t/2); it owns 3 now`)
}

func TestStartSummaryLine(t *testing.T) {
	tests := []struct {
		s         startSummary
		wantParts string
		want      string
	}{
		{
			s:         startSummary{n: 1, byTopic: map[string]int{"t": 1}, byKind: [numStartKinds]int{startLatest: 1}, atEnd: 1},
			wantParts: "1 partition (t: 1)",
			want:      "1 from latest; 1 with nothing to read now; 0 offsets to read now",
		},
		{
			s:         startSummary{n: 4, byTopic: map[string]int{"b": 1, "a": 3}, byKind: [numStartKinds]int{startCommitted: 1, startStamp: 1, startFirst: 1, startRecreated: 1}, pending: 7, unlisted: 2},
			wantParts: "4 partitions (a: 3, b: 1)",
			want:      "1 from committed offsets, 1 from start_timestamp, 1 from their first offset (created after the start), 1 from their first offset (topic recreated); 2 partitions not readable yet (retried); 7 offsets to read now",
		},
		{
			s:         startSummary{unlisted: 1},
			wantParts: "0 partitions",
			want:      "1 partition not readable yet (retried); 0 offsets to read now",
		},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.wantParts, tc.s.partitions(), "partitions(%+v)", tc.s)
		assert.Equal(t, tc.want, tc.s.detail(), "detail(%+v)", tc.s)
	}
}

func TestKeySummary(t *testing.T) {
	keys := func(n int) []ranges.Key {
		var out []ranges.Key
		for p := range n {
			out = append(out, ranges.Key{Topic: []string{"a", "b"}[p%2], Partition: int32(p)})
		}
		return out
	}
	got, named := keySummary(keys(3))
	assert.Equal(t, "a/0, b/1, a/2", got)
	assert.True(t, named)
	got, named = keySummary(keys(manyKeys))
	assert.True(t, named, "keySummary(%d keys) = %q", manyKeys, got)
	got, named = keySummary(keys(manyKeys + 1))
	assert.Equal(t, "a: 9, b: 8", got)
	assert.False(t, named)
}
