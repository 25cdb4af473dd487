package main

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape serves GET /metrics from e's handler and parses the Prometheus text
// format it returns.
func scrape(t *testing.T, e *promExporter) map[string]*dto.MetricFamily {
	t.Helper()
	h := e.HandlerFunc()
	require.NotNil(t, h, "HandlerFunc() = nil")
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, "GET /metrics status; body:\n%s", rec.Body)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/plain", "GET /metrics Content-Type")
	return parseText(t, rec.Body.Bytes())
}

// parseText parses the Prometheus text exposition format.
func parseText(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err, "parse /metrics:\n%s", b)
	return fams
}

// metricWith returns the metric of fam whose labels are exactly labels.
func metricWith(t *testing.T, fam *dto.MetricFamily, labels map[string]string) *dto.Metric {
	t.Helper()
	require.NotNil(t, fam, "metric family missing")
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if assert.ObjectsAreEqual(labels, got) {
			return m
		}
	}
	require.FailNow(t, "no metric with these labels", "%s has no metric with labels %v: %v", fam.GetName(), labels, fam.GetMetric())
	return nil
}

func newTestExporter(t *testing.T, o promOptions) *promExporter {
	t.Helper()
	e, err := newPromExporter(o, nil)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close(t.Context())) })
	return e
}

func TestPromExporterCounterGaugeTimer(t *testing.T) {
	e := newTestExporter(t, promOptions{Buckets: []float64{0.001, 0.01, 0.1}})

	received := e.NewCounterCtor("input_received", "label", "path")
	received("", "root.input").Incr(3)
	received("", "root.input").Incr(2) // a second With of the same labels adds up
	received("kbr", "root.input.broker.inputs.0").Incr(7)
	received("", "root.input").Incr(-4) // ignored: counters only go up
	// The same name asked for again (another component) shares the vector.
	e.NewCounterCtor("input_received", "label", "path")("other", "root.output").Incr(1)
	e.NewCounterCtor("records_total", "topic")("orders").Incr(4)

	lag := e.NewGaugeCtor("kafka_batched_ranges_lag", "topic", "partition")
	lag("orders", "0").Set(42)
	lag("orders", "1").Set(-3)
	if g, ok := lag("orders", "2").(interface{ SetFloat64(float64) }); assert.True(t, ok, "gauge has SetFloat64") {
		g.SetFloat64(1.5)
	}

	latency := e.NewTimerCtor("input_latency_ns", "label", "path")
	latency("", "root.input").Timing((5 * time.Millisecond).Nanoseconds())
	latency("", "root.input").Timing((50 * time.Millisecond).Nanoseconds())
	latency("", "root.input").Timing((2 * time.Second).Nanoseconds())
	e.NewTimerCtor("range_read")().Timing(int64(time.Second)) // no _ns: _seconds appended

	fams := scrape(t, e)

	// Counters: _total appended once, values and labels as given.
	require.NotContains(t, fams, "input_received", "counter exported without _total")
	fam := fams["input_received_total"]
	require.NotNil(t, fam, "input_received_total missing; got %v", keys(fams))
	assert.Equal(t, dto.MetricType_COUNTER, fam.GetType())
	assert.Equal(t, 5.0, metricWith(t, fam, map[string]string{"label": "", "path": "root.input"}).GetCounter().GetValue())
	assert.Equal(t, 7.0, metricWith(t, fam, map[string]string{"label": "kbr", "path": "root.input.broker.inputs.0"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, metricWith(t, fam, map[string]string{"label": "other", "path": "root.output"}).GetCounter().GetValue())
	require.NotContains(t, fams, "records_total_total")
	assert.Equal(t, 4.0, metricWith(t, fams["records_total"], map[string]string{"topic": "orders"}).GetCounter().GetValue())

	// Gauges keep their name and can go negative.
	fam = fams["kafka_batched_ranges_lag"]
	require.NotNil(t, fam, "kafka_batched_ranges_lag missing; got %v", keys(fams))
	assert.Equal(t, dto.MetricType_GAUGE, fam.GetType())
	assert.Equal(t, 42.0, metricWith(t, fam, map[string]string{"topic": "orders", "partition": "0"}).GetGauge().GetValue())
	assert.Equal(t, -3.0, metricWith(t, fam, map[string]string{"topic": "orders", "partition": "1"}).GetGauge().GetValue())
	assert.Equal(t, 1.5, metricWith(t, fam, map[string]string{"topic": "orders", "partition": "2"}).GetGauge().GetValue())

	// Timers: histograms in seconds, _ns replaced by _seconds.
	require.NotContains(t, fams, "input_latency_ns")
	fam = fams["input_latency_seconds"]
	require.NotNil(t, fam, "input_latency_seconds missing; got %v", keys(fams))
	assert.Equal(t, dto.MetricType_HISTOGRAM, fam.GetType())
	h := metricWith(t, fam, map[string]string{"label": "", "path": "root.input"}).GetHistogram()
	assert.Equal(t, uint64(3), h.GetSampleCount())
	assert.InDelta(t, 2.055, h.GetSampleSum(), 1e-9)
	var (
		bounds []float64
		cum    []uint64
	)
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		cum = append(cum, b.GetCumulativeCount())
	}
	assert.Equal(t, []float64{0.001, 0.01, 0.1, math.Inf(1)}, bounds, "bucket upper bounds")
	assert.Equal(t, []uint64{0, 1, 2, 3}, cum, "cumulative counts of buckets 0.001, 0.01, 0.1, +Inf")
	assert.Equal(t, uint64(1), metricWith(t, fams["range_read_seconds"], map[string]string{}).GetHistogram().GetSampleCount())
}

func TestPromExporterConflictsRecordNothing(t *testing.T) {
	e := newTestExporter(t, promOptions{})
	e.NewCounterCtor("dup", "a")("x").Incr(1)
	// Same name, other labels, other kind, wrong label count: no panic, not recorded.
	e.NewCounterCtor("dup", "b")("y").Incr(10)
	e.NewGaugeCtor("dup_total", "a")("x").Set(5)
	e.NewCounterCtor("dup", "a")("x", "extra").Incr(100)

	fams := scrape(t, e)
	fam := fams["dup_total"]
	require.NotNil(t, fam)
	assert.Equal(t, dto.MetricType_COUNTER, fam.GetType())
	require.Len(t, fam.GetMetric(), 1, "dup_total: %v", fam.GetMetric())
	assert.Equal(t, 1.0, metricWith(t, fam, map[string]string{"a": "x"}).GetCounter().GetValue())
}

func TestPromExporterSanitisesNames(t *testing.T) {
	e := newTestExporter(t, promOptions{})
	e.NewGaugeCtor("my.app-metric", "label.key", "0th")("v.1", "v-2").Set(1)
	fams := scrape(t, e)
	fam := fams["my_app_metric"]
	require.NotNil(t, fam, "my_app_metric missing; got %v", keys(fams))
	// Label values are kept as given; only names are sanitised.
	assert.Equal(t, 1.0, metricWith(t, fam, map[string]string{"label_key": "v.1", "_th": "v-2"}).GetGauge().GetValue())
}

func TestPromExporterOptionalCollectors(t *testing.T) {
	fams := scrape(t, newTestExporter(t, promOptions{}))
	assert.Empty(t, fams, "a new exporter without collectors exports nothing")

	fams = scrape(t, newTestExporter(t, promOptions{GoMetrics: true, ProcessMetrics: true}))
	assert.Contains(t, fams, "go_goroutines")
	assert.Contains(t, fams, "process_cpu_seconds_total")
}

func TestNewPromExporterInvalidBuckets(t *testing.T) {
	for _, b := range [][]float64{{}, {1, 0.5}, {0.1, 0.1}} {
		_, err := newPromExporter(promOptions{Buckets: b}, nil)
		require.Error(t, err, "newPromExporter(buckets %v) = nil error", b)
		assert.Contains(t, err.Error(), "histogram_buckets", "newPromExporter(buckets %v)", b)
	}
}

func TestPromNames(t *testing.T) {
	tests := []struct {
		name, counter, timer string
	}{
		{"input_received", "input_received_total", "input_received_seconds"},
		{"requests_total", "requests_total", "requests_total_seconds"},
		{"input_latency_ns", "input_latency_ns_total", "input_latency_seconds"},
		{"read_seconds", "read_seconds_total", "read_seconds"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.counter, counterName(tc.name), "counterName(%q)", tc.name)
		assert.Equal(t, tc.timer, timerName(tc.name), "timerName(%q)", tc.name)
	}
	for in, want := range map[string]string{"a.b-c": "a_b_c", "9lives": "_lives", "ns:sub": "ns:sub", "": "_", "é": "__"} {
		assert.Equal(t, want, promMetricName(in), "promMetricName(%q)", in)
	}
	assert.Equal(t, []string{"a_b", "_"}, promLabelNames([]string{"a:b", ""}))
}

// TestPrometheusThroughStream runs a stream with `metrics: {prometheus: {}}`
// in an environment where registerPrometheus added the exporter, and checks
// that Benthos mounts the exporter's handler at /metrics and that the
// stream's own metrics reach it.
func TestPrometheusThroughStream(t *testing.T) {
	env := service.NewEnvironment()
	require.NoError(t, registerPrometheus(env))

	sb := env.NewStreamBuilder()
	mux := http.NewServeMux()
	sb.SetHTTPMux(mux)
	require.NoError(t, sb.SetYAML(`
input:
  generate: {count: 4, interval: "", mapping: 'root = "x"'}
output: {drop: {}}
metrics:
  prometheus: {histogram_buckets: [0.5, 1]}
`))
	require.NoError(t, sb.SetLoggerYAML("level: none"))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, stream.Run(ctx), "stream.Run")

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, "GET /metrics; body:\n%s", rec.Body)
	fams := parseText(t, rec.Body.Bytes())
	assert.Equal(t, 4.0, metricWith(t, fams["input_received_total"], map[string]string{"label": "", "path": "root.input"}).GetCounter().GetValue())
	assert.Equal(t, 4.0, metricWith(t, fams["output_sent_total"], map[string]string{"label": "", "path": "root.output"}).GetCounter().GetValue())
	h := metricWith(t, fams["input_latency_seconds"], map[string]string{"label": "", "path": "root.input"}).GetHistogram()
	var bounds []float64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	assert.Equal(t, []float64{0.5, 1, math.Inf(1)}, bounds, "bucket upper bounds: histogram_buckets from the config")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
