package promexport

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure" // generate and drop, for the streams of the tests
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redpandaConnectConfig is the prometheus block of Redpanda Connect's
// documentation with every field (its "Advanced" config, defaults shown,
// https://docs.redpanda.com/redpanda-connect/components/metrics/prometheus/):
// a config migrated from Redpanda Connect may hold any of it.
const redpandaConnectConfig = `
use_histogram_timing: false
histogram_buckets: []
summary_quantiles_objectives:
  - error: 0.05
    quantile: 0.5
  - error: 0.01
    quantile: 0.9
  - error: 0.001
    quantile: 0.99
add_process_metrics: false
add_go_metrics: false
push_url: ""
push_interval: ""
push_job_name: benthos_push
push_basic_auth:
  username: ""
  password: ""
file_output_path: ""
`

// parse parses yaml with the exporter's spec.
func parse(t *testing.T, yaml string) options {
	t.Helper()
	pc, err := Spec().ParseYAML(yaml, service.NewEnvironment())
	require.NoError(t, err, "parse %s", yaml)
	o, err := parseOptions(pc)
	require.NoError(t, err, "parseOptions %s", yaml)
	return o
}

func newTestExporter(t *testing.T, yaml string) *exporter {
	t.Helper()
	e, err := newExporter(parse(t, yaml), nil)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close(context.Background())) })
	return e
}

// scrape serves GET /metrics from e's handler and parses the Prometheus text
// format it returns.
func scrape(t *testing.T, e *exporter) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	e.HandlerFunc()(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, "GET /metrics status; body:\n%s", rec.Body)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/plain", "GET /metrics Content-Type")
	return parseText(t, rec.Body.Bytes())
}

// parseText parses the Prometheus text exposition format.
func parseText(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err, "parse:\n%s", b)
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

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestSpecDefaults: `prometheus: {}` and Redpanda Connect's documented
// block with every field parse to the same options, Redpanda Connect's
// defaults: summaries with quantiles 0.5, 0.9 and 0.99, histograms (when
// asked for) with DefBuckets, no collectors, no push, job benthos_push, no
// file.
func TestSpecDefaults(t *testing.T) {
	want := options{
		buckets:    prometheus.DefBuckets,
		objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		pushJob:    "benthos_push",
	}
	for name, yaml := range map[string]string{"empty": "{}", "redpanda connect's every field": redpandaConnectConfig} {
		o := parse(t, yaml)
		require.NoError(t, o.check(), name)
		assert.Equal(t, want, o, name)
	}
}

// TestNamesAndTypes: what a scraper sees of each kind of Benthos metric,
// with the defaults and with use_histogram_timing. Names are kept (no
// _total, no _seconds); timers are summaries of nanoseconds or histograms of
// seconds.
func TestNamesAndTypes(t *testing.T) {
	const ms5 = int64(5 * time.Millisecond)
	tests := []struct {
		config  string
		kind    string // counter, gauge or timer
		name    string // as Benthos asks for it
		record  int64  // Incr, Set or Timing
		want    string // exported name
		typ     dto.MetricType
		check   func(t *testing.T, m *dto.Metric)
		absent  []string // names that must not be exported
		comment string
	}{
		{config: "{}", kind: kindCounter, name: "input_received", record: 3, want: "input_received", typ: dto.MetricType_COUNTER,
			check:  func(t *testing.T, m *dto.Metric) { assert.Equal(t, 3.0, m.GetCounter().GetValue()) },
			absent: []string{"input_received_total"}, comment: "a counter keeps its name"},
		{config: "{}", kind: kindCounter, name: "kafka_batched_ranges_records_total", record: 4, want: "kafka_batched_ranges_records_total", typ: dto.MetricType_COUNTER,
			check:  func(t *testing.T, m *dto.Metric) { assert.Equal(t, 4.0, m.GetCounter().GetValue()) },
			absent: []string{"kafka_batched_ranges_records_total_total"}, comment: "a counter named _total keeps it once"},
		{config: "{}", kind: kindGauge, name: "input_connection_up", record: -2, want: "input_connection_up", typ: dto.MetricType_GAUGE,
			check: func(t *testing.T, m *dto.Metric) { assert.Equal(t, -2.0, m.GetGauge().GetValue()) }, comment: "a gauge keeps its name and can go below 0"},
		{config: "{}", kind: kindTimer, name: "input_latency_ns", record: ms5, want: "input_latency_ns", typ: dto.MetricType_SUMMARY,
			check: func(t *testing.T, m *dto.Metric) {
				s := m.GetSummary()
				assert.Equal(t, uint64(1), s.GetSampleCount())
				assert.Equal(t, float64(ms5), s.GetSampleSum(), "a summary of nanoseconds")
				var qs []float64
				for _, q := range s.GetQuantile() {
					qs = append(qs, q.GetQuantile())
					assert.Equal(t, float64(ms5), q.GetValue(), "quantile %v of one observation", q.GetQuantile())
				}
				assert.Equal(t, []float64{0.5, 0.9, 0.99}, qs, "summary_quantiles_objectives' default")
			},
			absent: []string{"input_latency_seconds"}, comment: "a timer is a summary of nanoseconds by default"},
		{config: "summary_quantiles_objectives: [{quantile: 0.75, error: 0.01}]", kind: kindTimer, name: "processor_latency_ns", record: ms5, want: "processor_latency_ns", typ: dto.MetricType_SUMMARY,
			check: func(t *testing.T, m *dto.Metric) {
				require.Len(t, m.GetSummary().GetQuantile(), 1)
				assert.Equal(t, 0.75, m.GetSummary().GetQuantile()[0].GetQuantile())
			}, comment: "summary_quantiles_objectives replaces the quantiles"},
		{config: "use_histogram_timing: true", kind: kindTimer, name: "input_latency_ns", record: ms5, want: "input_latency_ns", typ: dto.MetricType_HISTOGRAM,
			check: func(t *testing.T, m *dto.Metric) {
				h := m.GetHistogram()
				assert.Equal(t, uint64(1), h.GetSampleCount())
				assert.InDelta(t, 0.005, h.GetSampleSum(), 1e-12, "a histogram of seconds")
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				assert.Equal(t, append(slices.Clone(prometheus.DefBuckets), math.Inf(1)), bounds, "histogram_buckets' default")
			},
			absent: []string{"input_latency_seconds"}, comment: "use_histogram_timing: a histogram of seconds, same name"},
		{config: "{use_histogram_timing: true, histogram_buckets: [0.001, 0.01]}", kind: kindTimer, name: "output_latency_ns", record: ms5, want: "output_latency_ns", typ: dto.MetricType_HISTOGRAM,
			check: func(t *testing.T, m *dto.Metric) {
				var cum []uint64
				for _, b := range m.GetHistogram().GetBucket() {
					cum = append(cum, b.GetCumulativeCount())
				}
				assert.Equal(t, []uint64{0, 1, 1}, cum, "5ms in buckets 0.001, 0.01 (seconds) and +Inf")
			}, comment: "histogram_buckets in seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.comment, func(t *testing.T) {
			e := newTestExporter(t, tc.config)
			labels := map[string]string{"label": "", "path": "root.input"}
			switch tc.kind {
			case kindCounter:
				e.NewCounterCtor(tc.name, "label", "path")("", "root.input").Incr(tc.record)
			case kindGauge:
				e.NewGaugeCtor(tc.name, "label", "path")("", "root.input").Set(tc.record)
			case kindTimer:
				e.NewTimerCtor(tc.name, "label", "path")("", "root.input").Timing(tc.record)
			}
			fams := scrape(t, e)
			fam := fams[tc.want]
			require.NotNil(t, fam, "%s missing; got %v", tc.want, keys(fams))
			assert.Equal(t, tc.typ, fam.GetType(), "type of %s", tc.want)
			tc.check(t, metricWith(t, fam, labels))
			for _, n := range tc.absent {
				assert.NotContains(t, fams, n)
			}
		})
	}
}

// TestCountersAtZero: a counter's series is exported at 0 as soon as a
// component asks for it with its label values (before any increment), and a
// counter without labels as soon as it is asked for; a gauge or timer with
// labels only once it has label values.
func TestCountersAtZero(t *testing.T) {
	e := newTestExporter(t, "{}")
	e.NewCounterCtor("output_error", "label", "path")("", "root.output")
	e.NewCounterCtor("kafka_batched_ranges_stale_acks_total")
	e.NewCounterCtor("never_asked_with_values", "label")
	fams := scrape(t, e)
	assert.Equal(t, 0.0, metricWith(t, fams["output_error"], map[string]string{"label": "", "path": "root.output"}).GetCounter().GetValue())
	assert.Equal(t, 0.0, metricWith(t, fams["kafka_batched_ranges_stale_acks_total"], map[string]string{}).GetCounter().GetValue())
	assert.NotContains(t, fams, "never_asked_with_values", "no label values, no series")
	assert.Equal(t, dto.MetricType_COUNTER, fams["output_error"].GetType())
}

// TestCounterGaugeDetails: increments add up across constructors of the
// same name, a decrement of a counter is ignored, SetFloat64 and
// IncrFloat64 work.
func TestCounterGaugeDetails(t *testing.T) {
	e := newTestExporter(t, "{}")
	received := e.NewCounterCtor("input_received", "label", "path")
	received("", "root.input").Incr(3)
	received("", "root.input").Incr(2)
	received("", "root.input").Incr(-4) // ignored: counters only go up
	e.NewCounterCtor("input_received", "label", "path")("", "root.input").Incr(1)
	if c, ok := received("kbr", "root.input").(interface{ IncrFloat64(float64) }); assert.True(t, ok, "counter has IncrFloat64") {
		c.IncrFloat64(0.5)
	}
	lag := e.NewGaugeCtor("kafka_batched_ranges_lag", "topic", "partition")
	if g, ok := lag("orders", "2").(interface{ SetFloat64(float64) }); assert.True(t, ok, "gauge has SetFloat64") {
		g.SetFloat64(1.5)
	}
	fams := scrape(t, e)
	assert.Equal(t, 6.0, metricWith(t, fams["input_received"], map[string]string{"label": "", "path": "root.input"}).GetCounter().GetValue())
	assert.Equal(t, 0.5, metricWith(t, fams["input_received"], map[string]string{"label": "kbr", "path": "root.input"}).GetCounter().GetValue())
	assert.Equal(t, 1.5, metricWith(t, fams["kafka_batched_ranges_lag"], map[string]string{"topic": "orders", "partition": "2"}).GetGauge().GetValue())
}

// TestConflictsRecordNothing: a name asked for again with other labels or
// as another kind, wrong label values and reserved labels neither panic nor
// record.
func TestConflictsRecordNothing(t *testing.T) {
	for _, config := range []string{"{}", "use_histogram_timing: true"} {
		e := newTestExporter(t, config)
		e.NewCounterCtor("dup", "a")("x").Incr(1)
		e.NewCounterCtor("dup", "b")("y").Incr(10)
		e.NewGaugeCtor("dup", "a")("x").Set(5)
		e.NewTimerCtor("dup", "a")("x").Timing(5)
		e.NewCounterCtor("dup", "a")("x", "extra").Incr(100)
		e.NewTimerCtor("t1", "quantile")("x").Timing(1)
		e.NewTimerCtor("t2", "le")("x").Timing(1)

		fams := scrape(t, e)
		fam := fams["dup"]
		require.NotNil(t, fam, config)
		assert.Equal(t, dto.MetricType_COUNTER, fam.GetType(), config)
		require.Len(t, fam.GetMetric(), 1, "%s: %v", config, fam.GetMetric())
		assert.Equal(t, 1.0, metricWith(t, fam, map[string]string{"a": "x"}).GetCounter().GetValue(), config)
	}
}

// TestSanitisesNames: characters Prometheus does not allow in a name become
// '_'; label values are kept.
func TestSanitisesNames(t *testing.T) {
	e := newTestExporter(t, "{}")
	e.NewGaugeCtor("my.app-metric", "label.key", "0th")("v.1", "v-2").Set(1)
	fams := scrape(t, e)
	fam := fams["my_app_metric"]
	require.NotNil(t, fam, "my_app_metric missing; got %v", keys(fams))
	assert.Equal(t, 1.0, metricWith(t, fam, map[string]string{"label_key": "v.1", "_th": "v-2"}).GetGauge().GetValue())
	for in, want := range map[string]string{"a.b-c": "a_b_c", "9lives": "_lives", "ns:sub": "ns:sub", "": "_", "é": "__", "input_received": "input_received"} {
		assert.Equal(t, want, sanitize(in, true), "sanitize(%q, true)", in)
	}
	assert.Equal(t, "a_b", sanitize("a:b", false))
}

func TestOptionalCollectors(t *testing.T) {
	assert.Empty(t, scrape(t, newTestExporter(t, "{}")), "a new exporter without collectors exports nothing")
	fams := scrape(t, newTestExporter(t, "{add_go_metrics: true, add_process_metrics: true}"))
	assert.Contains(t, fams, "go_goroutines")
	assert.Contains(t, fams, "process_cpu_seconds_total")
}

// TestInvalidOptions: values newExporter refuses, with the field named.
func TestInvalidOptions(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"histogram_buckets: [1, 0.5]", "histogram_buckets must be in increasing order, got [1 0.5]"},
		{"histogram_buckets: [0.1, 0.1]", "histogram_buckets must be in increasing order"},
		{"summary_quantiles_objectives: [{quantile: 1.5, error: 0.01}]", "summary_quantiles_objectives: quantile must be from 0 to 1, got 1.5"},
		{"summary_quantiles_objectives: [{quantile: 0.5, error: -1}]", "summary_quantiles_objectives: error must be from 0 to 1, got -1 (quantile 0.5)"},
		{"push_url: 'http://'", `push_url must be a URL such as http://pushgateway:9091, got "http://"`},
		{"{push_url: 'http://127.0.0.1:1', push_job_name: ''}", "push_job_name must not be empty with push_url"},
		{"{push_url: 'http://127.0.0.1:1', push_interval: -1s}", "push_interval must be > 0, got -1s"},
	}
	for _, tc := range tests {
		_, err := newExporter(parse(t, tc.yaml), nil)
		require.Error(t, err, tc.yaml)
		assert.Contains(t, err.Error(), tc.want, tc.yaml)
	}
	pc, err := Spec().ParseYAML("push_interval: soon", service.NewEnvironment())
	require.NoError(t, err)
	_, err = parseOptions(pc)
	require.EqualError(t, err, `push_interval must be a duration such as 30s, got "soon"`)
}

// TestFileOutput: with file_output_path, Close writes every metric to the
// file in the text format; a second Close changes nothing.
func TestFileOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.prom")
	e, err := newExporter(parse(t, "file_output_path: "+path), nil)
	require.NoError(t, err)
	e.NewCounterCtor("input_received", "label", "path")("", "root.input").Incr(7)
	e.NewTimerCtor("input_latency_ns", "label", "path")("", "root.input").Timing(100)
	_, err = os.Stat(path)
	require.True(t, os.IsNotExist(err), "file written before Close: %v", err)

	require.NoError(t, e.Close(t.Context()))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	fams := parseText(t, b)
	assert.Equal(t, 7.0, metricWith(t, fams["input_received"], map[string]string{"label": "", "path": "root.input"}).GetCounter().GetValue())
	assert.Equal(t, dto.MetricType_SUMMARY, fams["input_latency_ns"].GetType())
	require.NoError(t, e.Close(t.Context()), "second Close")

	e, err = newExporter(parse(t, "file_output_path: "+filepath.Join(t.TempDir(), "missing", "metrics.prom")), nil)
	require.NoError(t, err)
	err = e.Close(t.Context())
	require.Error(t, err, "a file that cannot be written")
	assert.Contains(t, err.Error(), "write metrics to ")
}

// TestThroughStream runs a stream with a metrics block in an environment
// where Register added the exporter: Benthos mounts the handler at /metrics,
// the stream's own metrics reach it under Benthos' names, and the stream's
// end closes the exporter, which writes file_output_path.
func TestThroughStream(t *testing.T) {
	env := service.NewEnvironment()
	require.NoError(t, Register(env))
	path := filepath.Join(t.TempDir(), "metrics.prom")

	sb := env.NewStreamBuilder()
	mux := http.NewServeMux()
	sb.SetHTTPMux(mux)
	require.NoError(t, sb.SetYAML(`
input:
  generate: {count: 4, interval: "", mapping: 'root = "x"'}
output: {drop: {}}
metrics:
  prometheus: {file_output_path: "`+path+`"}
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
	for name, fams := range map[string]map[string]*dto.MetricFamily{"/metrics": parseText(t, rec.Body.Bytes()), "file_output_path": parseText(t, mustRead(t, path))} {
		assert.Equal(t, 4.0, metricWith(t, fams["input_received"], map[string]string{"label": "", "path": "root.input"}).GetCounter().GetValue(), name)
		assert.Equal(t, 4.0, metricWith(t, fams["output_sent"], map[string]string{"label": "", "path": "root.output"}).GetCounter().GetValue(), name)
		assert.Equal(t, dto.MetricType_SUMMARY, fams["input_latency_ns"].GetType(), name)
		assert.Equal(t, 0.0, metricWith(t, fams["output_error"], map[string]string{"label": "", "path": "root.output"}).GetCounter().GetValue(), "%s: a counter never incremented", name)
	}
}

// TestRedpandaConnectConfigBuilds: a stream whose metrics block is Redpanda
// Connect's documented block with every field lints and builds, and so does
// one that sets every field.
func TestRedpandaConnectConfigBuilds(t *testing.T) {
	env := service.NewEnvironment()
	require.NoError(t, Register(env))
	indent := func(s string) string {
		var b bytes.Buffer
		for _, l := range bytes.Split([]byte(s), []byte("\n")) {
			if len(l) > 0 {
				b.WriteString("    ")
				b.Write(l)
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	set := `
use_histogram_timing: true
histogram_buckets: [0.01, 0.1, 1]
summary_quantiles_objectives: [{quantile: 0.5, error: 0.05}]
add_process_metrics: true
add_go_metrics: true
push_url: "http://127.0.0.1:1"
push_interval: 1h
push_job_name: kbr
push_basic_auth: {username: u, password: p}
file_output_path: ""
`
	for name, block := range map[string]string{"documented defaults": redpandaConnectConfig, "every field set": set} {
		sb := env.NewStreamBuilder()
		require.NoError(t, sb.SetYAML("input: {generate: {count: 1, interval: \"\", mapping: 'root = 1'}}\noutput: {drop: {}}\nmetrics:\n  prometheus:\n"+indent(block)), name)
		require.NoError(t, sb.SetLoggerYAML("level: none"))
		_, err := sb.Build()
		require.NoError(t, err, name)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestLintRefusesWhatTheExporterRefuses: `connect lint` reports, naming the
// field and the value, what the exporter refuses when it starts: buckets
// out of order, a quantile or an error outside [0, 1], a push_interval that
// is not a positive duration; it passes the defaults and a push_interval
// set to "" (unset, as Redpanda Connect's documentation writes it).
func TestLintRefusesWhatTheExporterRefuses(t *testing.T) {
	env := service.NewEnvironment()
	require.NoError(t, Register(env))
	linter := env.FullConfigSchema("", "").NewStreamConfigLinter()
	lint := func(metrics string) []string {
		t.Helper()
		lints, err := linter.LintYAML([]byte("input:\n  generate: {mapping: 'root = 1', count: 1}\noutput:\n  drop: {}\nmetrics:\n  " + Name + ": " + metrics + "\n"))
		require.NoError(t, err)
		var got []string
		for _, l := range lints {
			got = append(got, l.What)
		}
		return got
	}
	for _, ok := range []string{"{}", `{push_interval: ""}`, `{push_interval: 30s, histogram_buckets: [0.1, 0.5, 2]}`,
		`{summary_quantiles_objectives: [{quantile: 0.5, error: 0.05}]}`} {
		assert.Empty(t, lint(ok), "lint of %s", ok)
	}
	for conf, want := range map[string]string{
		`{histogram_buckets: [0.5, 0.1]}`:                                "histogram_buckets must be in increasing order, got [0.5,0.1]",
		`{summary_quantiles_objectives: [{quantile: 1.5, error: 0.01}]}`: "summary_quantiles_objectives: quantile must be from 0 to 1, got 1.5",
		`{summary_quantiles_objectives: [{quantile: 0.9, error: 2}]}`:    "summary_quantiles_objectives: error must be from 0 to 1, got 2 (quantile 0.9)",
		`{push_interval: soon}`:                                          `push_interval must be a duration such as 30s, got "soon"`,
		`{push_interval: -5s}`:                                           `push_interval must be > 0, got "-5s"`,
	} {
		got := lint(conf)
		assert.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }), "lint of %s = %q, want %q", conf, got, want)
	}
}
