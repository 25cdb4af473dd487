package plugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/plugin/promexport"
)

// TestMetricsThroughPromexport runs a bounded read through a stream whose
// metrics block is plugin/promexport's prometheus exporter, writing
// file_output_path on shutdown, and checks the input's own metrics there:
// the counters' values, the timer kafka_batched_ranges_range_read_ns as a
// summary of nanoseconds, and the series of the fixed label values that
// never happened (a failed commit, a replayed range) at 0.
func TestMetricsThroughPromexport(t *testing.T) {
	const n = 40
	addr := newKafka(t, "orders", 2)
	produceRecords(t, addr, "orders", 2, 0, n)
	path := filepath.Join(t.TempDir(), "metrics.prom")

	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{}))
	require.NoError(t, promexport.Register(env))
	sb := env.NewStreamBuilder()
	require.NoError(t, sb.SetLoggerYAML("level: none"))
	require.NoError(t, sb.AddInputYAML(`
kafka_batched_ranges:
  seed_brokers: [ "`+addr+`" ]
  topics: [ orders ]
  consumer_group: metrics
  stop_at: end
  max_range_records: 10
`))
	require.NoError(t, sb.AddBatchConsumerFunc(func(context.Context, service.MessageBatch) error { return nil }))
	require.NoError(t, sb.SetMetricsYAML("prometheus: {file_output_path: \""+path+"\"}"))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	require.NoError(t, stream.Run(ctx))

	b, err := os.ReadFile(path)
	require.NoError(t, err, "file_output_path written when the stream ended")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err, "parse:\n%s", b)

	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		fam := fams[name]
		require.NotNil(t, fam, "%s missing:\n%s", name, b)
	metrics:
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return float64(m.GetSummary().GetSampleCount())
		}
		require.FailNow(t, "series missing", "%s%v missing:\n%s", name, labels, b)
		return 0
	}
	assert.Equal(t, float64(n), value(metricRecords, map[string]string{"topic": "orders"}))
	assert.Equal(t, 4.0, value(metricRanges, map[string]string{"state": "acked"}), "ranges of 10 records acknowledged")
	assert.Equal(t, 0.0, value(metricRanges, map[string]string{"state": "replayed"}), "a state that never happened")
	assert.Equal(t, 0.0, value(metricCommits, map[string]string{"result": "failed"}), "a result that never happened")
	assert.Positive(t, value(metricCommits, map[string]string{"result": "ok"}))
	assert.Equal(t, 0.0, value(metricCache, map[string]string{"event": "refused"}), "a cursor state change the cache refused (a bug) never happened, and its series is there to alert on")
	// Distant reading (issue 54, item 4): kfake is near, so no lane opens,
	// and the series are there at 0.
	assert.Equal(t, 0.0, value(metricCache, map[string]string{"event": "lane_opened"}), "no lane opened")
	assert.Equal(t, 0.0, value(metricCache, map[string]string{"event": "lane_fetch"}), "no fetch on a lane")
	assert.Equal(t, dto.MetricType_GAUGE, fams[metricCacheLanes].GetType(), "lanes open now")
	assert.Equal(t, 0.0, value(metricCacheLanes, nil), "no lane open")
	// Every counter is exported from the start, at 0 until its first increment (issue 44):
	// the acknowledgements of incarnations that were over, rejected records dropped, and the
	// offsets lost of each partition read.
	assert.Equal(t, 0.0, value(metricStaleAcks, nil), "no stale acknowledgement")
	assert.Equal(t, 0.0, value(metricDropped, map[string]string{"topic": "orders"}), "no record dropped")
	for _, p := range []string{"0", "1"} {
		assert.Equal(t, 0.0, value(metricLostOffsets, map[string]string{"topic": "orders", "partition": p}), "no offset lost of partition %s", p)
		// The lag under the names of Redpanda Connect's inputs too (redpanda: redpanda_lag;
		// kafka_franz: kafka_lag), so their dashboards' lag panels show it.
		for _, name := range []string{metricLag, metricRedpandaLag, metricKafkaLag} {
			assert.Equal(t, dto.MetricType_GAUGE, fams[name].GetType(), "%s", name)
			assert.Equal(t, 0.0, value(name, map[string]string{"topic": "orders", "partition": p}), "%s of partition %s at the end of a bounded read", name, p)
		}
	}
	assert.Equal(t, dto.MetricType_SUMMARY, fams[metricRangeRead].GetType(), "the range read timer")
	assert.Equal(t, 4.0, value(metricRangeRead, nil), "ranges read")
	assert.Greater(t, fams[metricRangeRead].GetMetric()[0].GetSummary().GetSampleSum(), 1000.0, "nanoseconds")
}

// TestLaneCounts: the lanes' counts reach the metrics as the events since
// the last sample, and the closing summary as totals.
func TestLaneCounts(t *testing.T) {
	prev := cache.Stats{LanesOpened: 2, LaneFetches: 40, Lanes: 2}
	cur := cache.Stats{LanesOpened: 6, LaneFetches: 130, Lanes: 3}
	assert.Equal(t, map[string]int64{"lane_opened": 4, "lane_fetch": 90}, laneEvents(prev, cur))
	assert.Equal(t, "; 6 backlog lanes opened, 130 fetches on them", lanesNote(cur))
}
