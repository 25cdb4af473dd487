package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freeLoopbackAddr returns a loopback address with a port that was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// withPrometheus enables Benthos' HTTP server on addr, the prometheus exporter, and a shutdown
// delay that keeps the server up after the input ended, so the final values can be scraped.
func withPrometheus(addr string) runOption {
	return func(conf map[string]any) {
		conf["http"] = map[string]any{"enabled": true, "address": addr}
		conf["metrics"] = map[string]any{"prometheus": map[string]any{}}
		conf["shutdown_delay"] = "3s"
	}
}

// scrapeMetrics gets http://addr/metrics and parses the Prometheus text format. It returns nil
// if the server does not answer (not started yet, or gone).
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equalf(t, http.StatusOK, resp.StatusCode, "GET /metrics: %s", b)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain", "GET /metrics Content-Type")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	require.NoErrorf(t, err, "parse /metrics:\n%s", b)
	return fams
}

// counterValue returns the value of the counter name with label path=path, and whether it exists.
func counterValue(fams map[string]*dto.MetricFamily, name, path string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "path" && lp.GetValue() == path {
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestPrometheusMetricsOfABoundedRun runs the binary on a bounded read of the real broker with
// `metrics: {prometheus: {}}`, scrapes /metrics on the configured http.address while it runs and
// during its shutdown delay, and checks that Benthos' counter input_received (under that name, as
// Redpanda Connect exports it) grows during the run and ends at the number of records produced,
// and output_sent at the number written.
func TestPrometheusMetricsOfABoundedRun(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 3)
	want := produceSpread(t, topic, []int32{0, 1, 2}, 200, "metrics").count()

	in := baseInput(topic)
	in["stop_at"] = "end"
	in["max_range_records"] = 50
	in["progress_interval"] = "500ms"
	addr := freeLoopbackAddr(t)
	dir := t.TempDir()
	cfg := writeRunConfig(t, dir, in, dir+"/out.jsonl",
		withLeanPipeline(1, `${! if batch_index() == 0 { "150ms" } else { "0s" } }`), withPrometheus(addr))

	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	var (
		last     map[string]*dto.MetricFamily
		seen     []float64 // input_received of each scrape
		finished bool
	)
	exited := rc.waitFor(90*time.Second, func() bool {
		select {
		case <-rc.done:
			return true
		default:
		}
		if fams := scrapeMetrics(t, addr); fams != nil {
			last = fams
			if v, ok := counterValue(fams, "input_received", "root.input"); ok {
				seen = append(seen, v)
				finished = v == float64(want)
			}
		}
		return false
	})
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.True(t, exited, "connect did not exit within 90s of a bounded read")
	requireExitZero(t, res)
	t.Logf("input_received over %d scrapes: %v", len(seen), seen)

	require.NotNil(t, last, "/metrics on %s never answered", addr)
	require.Truef(t, finished, "input_received never reached %d: scrapes saw %v", want, seen)
	// 12 ranges of 50 records, each held 150ms by the one pipeline thread: the counter is
	// scraped while it grows, not only once the input ended.
	assert.Lessf(t, seen[0], float64(want), "the first scrape already saw every record: %v", seen)
	got, ok := counterValue(last, "input_received", "root.input")
	require.True(t, ok, "input_received{path=\"root.input\"} missing from the last scrape")
	assert.Equal(t, float64(want), got, "input_received at the end of the run")
	sent, ok := counterValue(last, "output_sent", "root.output")
	require.True(t, ok, "output_sent{path=\"root.output\"} missing from the last scrape")
	assert.Equal(t, float64(want), sent, "output_sent at the end of the run")
	assert.NotContains(t, last, "input_received_total", "Redpanda Connect's counters have no _total suffix")
	require.Contains(t, last, "input_latency_ns", "the input's latency timer")
	assert.Equal(t, dto.MetricType_SUMMARY, last["input_latency_ns"].GetType(), "input_latency_ns: a summary of nanoseconds, as in Redpanda Connect")
	assert.Equal(t, want, len(readOutput(t, dir+"/out.jsonl")), "records written")

	// The input's own metrics.
	for p := range 3 {
		lag, ok := metricValue(last, "kafka_batched_ranges_lag", map[string]string{"topic": topic, "partition": fmt.Sprint(p)})
		require.Truef(t, ok, "kafka_batched_ranges_lag of partition %d missing", p)
		assert.Zerof(t, lag, "lag of partition %d at the end of a bounded read", p)
	}
	records, ok := metricValue(last, "kafka_batched_ranges_records_total", map[string]string{"topic": topic})
	require.True(t, ok, "kafka_batched_ranges_records_total missing")
	assert.Equal(t, float64(want), records, "kafka_batched_ranges_records_total")
	acked, ok := metricValue(last, "kafka_batched_ranges_ranges_total", map[string]string{"state": "acked"})
	require.True(t, ok, "kafka_batched_ranges_ranges_total{state=acked} missing")
	assert.Equal(t, float64(want/50), acked, "ranges acknowledged")
	for _, name := range []string{"kafka_batched_ranges_bytes_total", "kafka_batched_ranges_ranges_in_flight",
		"kafka_batched_ranges_range_read_ns", "kafka_batched_ranges_cache_total", "kafka_batched_ranges_cache_cursors",
		"kafka_batched_ranges_owned_partitions"} {
		assert.Contains(t, last, name)
	}
	// Counters that did not move are there at 0 (issue 44), and the lag is there under the
	// names of Redpanda Connect's inputs too, for their dashboards.
	for p := range 3 {
		labels := map[string]string{"topic": topic, "partition": fmt.Sprint(p)}
		for _, name := range []string{"kafka_batched_ranges_lost_offsets_total", "redpanda_lag", "kafka_lag"} {
			v, ok := metricValue(last, name, labels)
			assert.Truef(t, ok, "%s%v missing", name, labels)
			assert.Zerof(t, v, "%s%v", name, labels)
		}
	}
	for name, labels := range map[string]map[string]string{
		"kafka_batched_ranges_stale_acks_total":      nil,
		"kafka_batched_ranges_dropped_records_total": {"topic": topic},
	} {
		v, ok := metricValue(last, name, labels)
		assert.Truef(t, ok, "%s%v missing", name, labels)
		assert.Zerof(t, v, "%s%v", name, labels)
	}

	// Progress lines while it ran, and the summary's counts.
	out := res.Stdout + res.Stderr
	assert.Regexp(t, `Progress: acknowledged \d+\.\d% of 600 offsets; delivered \d+ records, [\d.]+ [kMG]?B in [\d.]+ s; [\d.]+[kMG]? offsets acknowledged/s(; about [\dms.]+( s)? left)?("|\n)`, out)
	assert.NotContains(t, out, "unknown left")
	assert.Regexp(t, `Closed: 600 records acknowledged of 600 handed out \([\d.]+ [kMG]?B of values\) in 12 ranges`, out)
	// The broker's measured round trip, at most once (a saturated machine may end the run before
	// a measure judges it), with the verdict its measure allows (issue 54).
	require.LessOrEqual(t, strings.Count(out, "round trip"), 1, "lines naming a broker's round trip")
	if strings.Contains(out, "round trip") {
		requireVerdictOfItsRoundTrip(t, out)
	}
}

// requireVerdictOfItsRoundTrip checks the line naming the broker's measured round trip in out
// against the rule docs/backfills.md states: near when its least answer took under 2 ms, distant
// only when none did. A broker on loopback answers a quiet machine in tens of µs, so a build that
// judged it distant anyway fails here. But a broker shared by a loaded CI machine's tests may
// answer every probe and fetch in 12 ms (seen), and the input cannot tell that from a distance:
// then distant is its verdict, and lanes the cost.
func requireVerdictOfItsRoundTrip(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`Broker \d+ at 127\.0\.0\.1:\d+: round trip ([\d.]+[µm]?s) measured, (?:(near) \(under 2ms\): reads use its one fetch connection|(distant) \(2ms or more\): reads with a backlog use up to \d+ more fetch connections to it \(lanes\))`).FindStringSubmatch(out)
	require.NotNil(t, m, "the round trip line is not one the input writes")
	least, err := time.ParseDuration(m[1])
	require.NoError(t, err, "the least round trip %q", m[1])
	if m[2] == "near" {
		assert.Less(t, least, 2*time.Millisecond, "judged near with no answer under 2ms")
		return
	}
	if assert.GreaterOrEqual(t, least, 2*time.Millisecond, "judged distant with an answer under 2ms") {
		t.Logf("a broker on loopback judged distant: its least answer took %s (a loaded machine)", least)
	}
}

// metricValue returns the value of the counter, gauge, or summary or histogram count of name
// whose labels include every label in want, and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Summary != nil:
			return float64(m.GetSummary().GetSampleCount()), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestVersionFlag checks `connect --version` names this project's version and the Benthos
// version the binary is built on (an ldflags stamp is covered by cmd/connect's TestVersionString).
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	res := runConnect(t, 30*time.Second, nil, "--version")
	requireExitZero(t, res)
	re := regexp.MustCompile(`(?m)^Version: \S+ \(kafka_batched_ranges v\d+\.\d+\.\d+\S*, benthos v4\.\d+\.\d+\S*\)$`)
	assert.Regexp(t, re, res.Stdout, "connect --version")
}

// TestPrometheusByDefault runs the binary on a config without a metrics block (and `connect
// create`'s config): /metrics answers in the Prometheus text format on Benthos' HTTP server, as
// Redpanda Connect serves it by default, and `connect create` writes `prometheus: {}`, not
// `none`.
func TestPrometheusByDefault(t *testing.T) {
	t.Parallel()
	addr := freeLoopbackAddr(t)
	dir := t.TempDir()
	in := inputConfig{"seed_brokers": []string{closedAddr(t)}, "topics": []string{"kbr-metrics-default"}}
	cfg := writeRunConfig(t, dir, in, filepath.Join(dir, "out.jsonl"), func(conf map[string]any) {
		conf["http"] = map[string]any{"enabled": true, "address": addr}
	})
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	var fams map[string]*dto.MetricFamily
	// Benthos exports input_connection_failed from the input's first failed connection
	// on: a loaded machine's first scrape can come before it (seen in CI).
	rc.waitFor(time.Minute, func() bool {
		if f := scrapeMetrics(t, addr); f != nil {
			fams = f
		}
		return fams != nil && fams["input_connection_failed"] != nil
	})
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.NotNilf(t, fams, "/metrics on %s did not answer without a metrics block\n%s", addr, res)
	require.Contains(t, fams, "input_connection_failed", "Benthos' metrics of the input")
	v, ok := metricValue(fams, "kafka_batched_ranges_stale_acks_total", nil)
	require.True(t, ok, "kafka_batched_ranges_stale_acks_total before the input connected (issue 44)")
	require.Zero(t, v)

	res = runConnect(t, time.Minute, nil, "create", "kafka_batched_ranges//drop")
	requireExitZero(t, res)
	require.Regexp(t, `(?m)^metrics:\n(  .*\n)*  prometheus:`, res.Stdout, "connect create's metrics block")
	require.NotRegexp(t, `(?m)^metrics:\n(  .*\n)*  none:`, res.Stdout, "connect create's metrics block")
}
