package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// prometheusName is the name of the metrics exporter: `metrics: {prometheus: {}}`.
const prometheusName = "prometheus"

// Fields of the prometheus exporter.
const (
	promFieldProcessMetrics = "add_process_metrics"
	promFieldGoMetrics      = "add_go_metrics"
	promFieldBuckets        = "histogram_buckets"
)

// prometheusSpec is the config spec of the prometheus metrics exporter.
func prometheusSpec() *service.ConfigSpec {
	buckets := make([]any, len(prometheus.DefBuckets))
	for i, b := range prometheus.DefBuckets {
		buckets[i] = b
	}
	return service.NewConfigSpec().
		Stable().
		Summary("Serves every metric at `/metrics` (and `/stats`) on Benthos' HTTP server (`http.address`) in the Prometheus text format, for a Prometheus server to scrape.").
		Description("Metric and label names are those Benthos and the components use, with characters Prometheus does not allow in names replaced by `_`; label values are kept as they are. "+
			"Counters get the suffix `_total` when they lack it (`input_received` is exported as `input_received_total`). "+
			"Timers are histograms in seconds, named with the suffix `_seconds` instead of `_ns` (`input_latency_ns` is exported as `input_latency_seconds`). "+
			"Gauges keep their name.\n\n"+
			"The endpoint exists only while Benthos' HTTP server is enabled (`http.enabled`, the default for `connect run`).").
		Fields(
			service.NewBoolField(promFieldProcessMetrics).
				Description("Also export the process's CPU, memory and file descriptor metrics (`process_*`, from the Prometheus Go client's process collector).").
				Default(false),
			service.NewBoolField(promFieldGoMetrics).
				Description("Also export the Go runtime's metrics (`go_*`: goroutines, garbage collection, memory).").
				Default(false),
			service.NewFloatListField(promFieldBuckets).
				Description("Upper bounds, in seconds and in increasing order, of the buckets of every timer histogram. The default is the Prometheus Go client's `DefBuckets`.").
				Default(buckets).
				Advanced(),
		)
}

// registerPrometheus adds the prometheus metrics exporter to env.
func registerPrometheus(env *service.Environment) error {
	return env.RegisterMetricsExporter(prometheusName, prometheusSpec(), func(pc *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
		process, err := pc.FieldBool(promFieldProcessMetrics)
		if err != nil {
			return nil, err
		}
		goRuntime, err := pc.FieldBool(promFieldGoMetrics)
		if err != nil {
			return nil, err
		}
		buckets, err := pc.FieldFloatList(promFieldBuckets)
		if err != nil {
			return nil, err
		}
		return newPromExporter(promOptions{ProcessMetrics: process, GoMetrics: goRuntime, Buckets: buckets}, log)
	})
}

// promOptions configure newPromExporter.
type promOptions struct {
	ProcessMetrics bool      // add the process collector
	GoMetrics      bool      // add the Go runtime collector
	Buckets        []float64 // timer histogram buckets in seconds; prometheus.DefBuckets if nil
}

// promExporter is a service.MetricsExporter that keeps every metric in its
// own Prometheus registry and serves it through HandlerFunc, which Benthos'
// HTTP server mounts at /metrics and /stats.
//
// Benthos asks for a metric by name each time a component is built, so the
// same name is requested many times: the first request registers a vector,
// later ones with the same kind and label names share it. A request that
// cannot be honoured (same name, other kind or labels; an invalid name) is
// logged once and gets a metric that records nothing, since a metric must
// never stop a pipeline.
type promExporter struct {
	reg     *prometheus.Registry
	log     *service.Logger
	buckets []float64

	mu     sync.Mutex // guards vecs and warned
	vecs   map[string]promVec
	warned map[string]bool
}

// promVec is one registered metric vector.
type promVec struct {
	kind   string // "counter", "gauge" or "timer"
	labels []string
	c      prometheus.Collector // *prometheus.CounterVec, *prometheus.GaugeVec or *prometheus.HistogramVec
}

func newPromExporter(o promOptions, log *service.Logger) (*promExporter, error) {
	if o.Buckets == nil {
		o.Buckets = prometheus.DefBuckets
	}
	if len(o.Buckets) == 0 {
		return nil, fmt.Errorf("%s must hold at least one bucket", promFieldBuckets)
	}
	for i := 1; i < len(o.Buckets); i++ {
		if o.Buckets[i] <= o.Buckets[i-1] {
			return nil, fmt.Errorf("%s must be in increasing order, got %v", promFieldBuckets, o.Buckets)
		}
	}
	e := &promExporter{
		reg:     prometheus.NewRegistry(),
		log:     log,
		buckets: slices.Clone(o.Buckets),
		vecs:    map[string]promVec{},
		warned:  map[string]bool{},
	}
	if o.ProcessMetrics {
		if err := e.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, fmt.Errorf("register process metrics: %w", err)
		}
	}
	if o.GoMetrics {
		if err := e.reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, fmt.Errorf("register go metrics: %w", err)
		}
	}
	return e, nil
}

// NewCounterCtor returns the constructor of the counter name, exported as
// name_total.
func (e *promExporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	full := counterName(promMetricName(name))
	labels := promLabelNames(labelKeys)
	vec, _ := e.collector("counter", full, labels, func() prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: full, Help: help("counter", name)}, labels)
	}).(*prometheus.CounterVec)
	return func(values ...string) service.MetricsExporterCounter {
		if vec == nil {
			return promNoop{}
		}
		c, err := vec.GetMetricWithLabelValues(values...)
		if err != nil {
			e.warnOnce(full, "metric %s: %v", full, err)
			return promNoop{}
		}
		return promCounter{c}
	}
}

// NewGaugeCtor returns the constructor of the gauge name.
func (e *promExporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	full := promMetricName(name)
	labels := promLabelNames(labelKeys)
	vec, _ := e.collector("gauge", full, labels, func() prometheus.Collector {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: full, Help: help("gauge", name)}, labels)
	}).(*prometheus.GaugeVec)
	return func(values ...string) service.MetricsExporterGauge {
		if vec == nil {
			return promNoop{}
		}
		g, err := vec.GetMetricWithLabelValues(values...)
		if err != nil {
			e.warnOnce(full, "metric %s: %v", full, err)
			return promNoop{}
		}
		return promGauge{g}
	}
}

// NewTimerCtor returns the constructor of the timer name, exported as a
// histogram in seconds named name_seconds (a trailing _ns is dropped).
func (e *promExporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	full := timerName(promMetricName(name))
	labels := promLabelNames(labelKeys)
	vec, _ := e.collector("timer", full, labels, func() prometheus.Collector {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: full, Help: help("timer", name), Buckets: e.buckets}, labels)
	}).(*prometheus.HistogramVec)
	return func(values ...string) service.MetricsExporterTimer {
		if vec == nil {
			return promNoop{}
		}
		o, err := vec.GetMetricWithLabelValues(values...)
		if err != nil {
			e.warnOnce(full, "metric %s: %v", full, err)
			return promNoop{}
		}
		return promTimer{o}
	}
}

// HandlerFunc serves every metric in the Prometheus text format. Benthos'
// HTTP server mounts it at /metrics and /stats (an optional interface of
// service.MetricsExporter).
func (e *promExporter) HandlerFunc() http.HandlerFunc {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorLog:      promLog{e.log},
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP
}

// Close does nothing: the registry lives as long as the exporter.
func (e *promExporter) Close(context.Context) error { return nil }

// collector returns the vector registered under name, registering the one
// build makes if there is none. It returns nil, after logging once, if name
// is taken by another kind or other labels or cannot be registered.
func (e *promExporter) collector(kind, name string, labels []string, build func() prometheus.Collector) prometheus.Collector {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.vecs[name]; ok {
		if v.kind != kind || !slices.Equal(v.labels, labels) {
			e.warnOnceLocked(name, "metric %s: already a %s with labels %v, cannot also be a %s with labels %v; it is not recorded", name, v.kind, v.labels, kind, labels)
			return nil
		}
		return v.c
	}
	c := build()
	if err := e.reg.Register(c); err != nil {
		e.warnOnceLocked(name, "metric %s: %v; it is not recorded", name, err)
		return nil
	}
	e.vecs[name] = promVec{kind: kind, labels: labels, c: c}
	return c
}

func (e *promExporter) warnOnce(name, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.warnOnceLocked(name, format, args...)
}

func (e *promExporter) warnOnceLocked(name, format string, args ...any) {
	if e.warned[name] || e.log == nil {
		return
	}
	e.warned[name] = true
	e.log.Warnf(format, args...)
}

func help(kind, name string) string {
	return fmt.Sprintf("Benthos %s %s.", kind, name)
}

// counterName appends _total to a counter name that lacks it, as Prometheus
// expects of counters.
func counterName(name string) string {
	if strings.HasSuffix(name, "_total") {
		return name
	}
	return name + "_total"
}

// timerName names a timer exported in seconds: a trailing _ns (Benthos'
// timers are in nanoseconds) is replaced by _seconds, which is appended when
// missing.
func timerName(name string) string {
	name = strings.TrimSuffix(name, "_ns")
	if strings.HasSuffix(name, "_seconds") {
		return name
	}
	return name + "_seconds"
}

// promMetricName replaces the characters Prometheus does not allow in a
// metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) by underscores.
func promMetricName(name string) string {
	return sanitize(name, true)
}

// promLabelNames replaces the characters Prometheus does not allow in a
// label name ([a-zA-Z_][a-zA-Z0-9_]*) by underscores.
func promLabelNames(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = sanitize(k, false)
	}
	return out
}

func sanitize(s string, colon bool) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (i > 0 && c >= '0' && c <= '9') || (colon && c == ':')
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

// promCounter records a Benthos counter. Prometheus counters only go up, so
// a negative increment is ignored.
type promCounter struct{ c prometheus.Counter }

func (p promCounter) Incr(n int64) {
	if n > 0 {
		p.c.Add(float64(n))
	}
}

func (p promCounter) IncrFloat64(n float64) {
	if n > 0 {
		p.c.Add(n)
	}
}

// promGauge records a Benthos gauge.
type promGauge struct{ g prometheus.Gauge }

func (p promGauge) Set(v int64)          { p.g.Set(float64(v)) }
func (p promGauge) SetFloat64(v float64) { p.g.Set(v) }

// promTimer records a Benthos timing (nanoseconds) in seconds.
type promTimer struct{ o prometheus.Observer }

func (p promTimer) Timing(ns int64) { p.o.Observe(float64(ns) / 1e9) }

// promNoop records nothing: the metric of a request that could not be
// honoured.
type promNoop struct{}

func (promNoop) Incr(int64)   {}
func (promNoop) Set(int64)    {}
func (promNoop) Timing(int64) {}

// promLog passes promhttp's errors to Benthos' logger.
type promLog struct{ log *service.Logger }

func (l promLog) Println(v ...any) {
	if l.log != nil {
		l.log.Warn(strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}
