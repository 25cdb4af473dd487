package promexport

import (
	"context"
	"errors"
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

// Kinds of metric, as Benthos asks for them.
const (
	kindCounter = "counter"
	kindGauge   = "gauge"
	kindTimer   = "timer"
)

// exporter is a service.MetricsExporter that keeps every metric in a
// Prometheus registry of its own, serves it through HandlerFunc (Benthos'
// HTTP server mounts it at /metrics and /stats), pushes it with its pusher
// and writes it to a file on Close.
//
// Benthos asks for a metric by name each time a component is built, so one
// name is asked for many times: the first request registers a vector, later
// ones of the same kind and label names share it. A request that cannot be
// honoured (the name taken by another kind or other label names, a label
// Prometheus reserves, wrong label values) is logged once and gets a metric
// that records nothing. A metric never stops a pipeline.
type exporter struct {
	reg    *prometheus.Registry
	log    *service.Logger
	opts   options
	pusher *pusher // nil without push_url

	mu     sync.Mutex // guards vecs and warned
	vecs   map[string]vec
	warned map[string]bool

	closeOnce sync.Once
	closeErr  error // what the first Close returned
}

// vec is one registered metric vector.
type vec struct {
	kind   string
	labels []string
	c      prometheus.Collector // *prometheus.CounterVec, *prometheus.GaugeVec, *prometheus.SummaryVec or *prometheus.HistogramVec
}

// newExporter checks o (filling in its defaults) and returns an exporter
// whose pusher, if any, has started. log may be nil.
func newExporter(o options, log *service.Logger) (*exporter, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	o.buckets = slices.Clone(o.buckets)
	e := &exporter{
		reg:    prometheus.NewRegistry(),
		log:    log,
		opts:   o,
		vecs:   map[string]vec{},
		warned: map[string]bool{},
	}
	if o.processMetrics {
		if err := e.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, fmt.Errorf("register process metrics: %w", err)
		}
	}
	if o.goMetrics {
		if err := e.reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, fmt.Errorf("register go metrics: %w", err)
		}
	}
	switch {
	case o.pushURL != "":
		e.pusher = newPusher(e.reg, o, log)
	case o.pushInterval > 0 && log != nil:
		log.Warnf("%s is set but %s is not: nothing is pushed", fieldPushInterval, fieldPushURL)
	}
	return e, nil
}

// NewCounterCtor returns the constructor of the counter name. A series
// exists, at 0, from the moment the constructor is called with its label
// values (as Benthos' components do when they are built), or from now for a
// counter without labels.
func (e *exporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	full, labels := e.names(name, labelKeys)
	v, _ := e.collector(kindCounter, full, labels, func() prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: full, Help: help(kindCounter, name)}, labels)
	}).(*prometheus.CounterVec)
	if v != nil && len(labels) == 0 {
		v.WithLabelValues()
	}
	return func(values ...string) service.MetricsExporterCounter {
		if v == nil {
			return noop{}
		}
		c, err := v.GetMetricWithLabelValues(values...)
		if err != nil {
			e.warnOnce(full, "metric %s: %v; it is not recorded", full, err)
			return noop{}
		}
		return counter{c}
	}
}

// NewGaugeCtor returns the constructor of the gauge name.
func (e *exporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	full, labels := e.names(name, labelKeys)
	v, _ := e.collector(kindGauge, full, labels, func() prometheus.Collector {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: full, Help: help(kindGauge, name)}, labels)
	}).(*prometheus.GaugeVec)
	return func(values ...string) service.MetricsExporterGauge {
		if v == nil {
			return noop{}
		}
		g, err := v.GetMetricWithLabelValues(values...)
		if err != nil {
			e.warnOnce(full, "metric %s: %v; it is not recorded", full, err)
			return noop{}
		}
		return gauge{g}
	}
}

// NewTimerCtor returns the constructor of the timer name: a summary of
// nanoseconds, or with use_histogram_timing a histogram of seconds, under
// the same name.
func (e *exporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	full, labels := e.names(name, labelKeys)
	reserved := "quantile" // a summary's own label
	if e.opts.histogramTiming {
		reserved = "le" // a histogram's
	}
	if slices.Contains(labels, reserved) {
		e.warnOnce(full, "metric %s: a timer cannot have a label named %q; it is not recorded", full, reserved)
		return func(...string) service.MetricsExporterTimer { return noop{} }
	}
	var c prometheus.Collector
	if e.opts.histogramTiming {
		c = e.collector(kindTimer, full, labels, func() prometheus.Collector {
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: full, Help: help(kindTimer, name), Buckets: e.opts.buckets}, labels)
		})
	} else {
		c = e.collector(kindTimer, full, labels, func() prometheus.Collector {
			return prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: full, Help: help(kindTimer, name), Objectives: e.opts.objectives}, labels)
		})
	}
	v, _ := c.(interface {
		GetMetricWithLabelValues(...string) (prometheus.Observer, error)
	})
	seconds := e.opts.histogramTiming
	return func(values ...string) service.MetricsExporterTimer {
		if v == nil {
			return noop{}
		}
		o, err := v.GetMetricWithLabelValues(values...)
		if err != nil {
			e.warnOnce(full, "metric %s: %v; it is not recorded", full, err)
			return noop{}
		}
		return timer{o: o, seconds: seconds}
	}
}

// HandlerFunc serves every metric in the Prometheus text format. Benthos'
// HTTP server mounts it at /metrics and /stats (an optional interface of
// service.MetricsExporter).
func (e *exporter) HandlerFunc() http.HandlerFunc {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorLog:      promLog{e.log},
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP
}

// Close stops the periodic pushes, pushes once more and writes
// file_output_path, each if configured, and returns what failed. It is safe
// to call twice. The second call returns what the first did.
func (e *exporter) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		var errs []error
		if e.pusher != nil {
			errs = append(errs, e.pusher.close(ctx))
		}
		if e.opts.fileOutputPath != "" {
			if err := prometheus.WriteToTextfile(e.opts.fileOutputPath, e.reg); err != nil {
				errs = append(errs, fmt.Errorf("write metrics to %s: %w", e.opts.fileOutputPath, err))
			}
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// names returns the Prometheus names of a metric and its labels, logging
// once when one had to change.
func (e *exporter) names(name string, labelKeys []string) (string, []string) {
	full := sanitize(name, true)
	if full != name {
		e.warnOnce("rename "+name, "metric %q is exported as %s: Prometheus does not allow its characters", name, full)
	}
	labels := make([]string, len(labelKeys))
	for i, k := range labelKeys {
		labels[i] = sanitize(k, false)
	}
	return full, labels
}

// collector returns the vector registered under name, registering the one
// build makes if there is none. It returns nil, after logging once, if name
// is taken by another kind or other label names or cannot be registered.
func (e *exporter) collector(kind, name string, labels []string, build func() prometheus.Collector) prometheus.Collector {
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
	e.vecs[name] = vec{kind: kind, labels: labels, c: c}
	return c
}

func (e *exporter) warnOnce(key, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.warnOnceLocked(key, format, args...)
}

func (e *exporter) warnOnceLocked(key, format string, args ...any) {
	if e.warned[key] || e.log == nil {
		return
	}
	e.warned[key] = true
	e.log.Warnf(format, args...)
}

func help(kind, name string) string {
	return fmt.Sprintf("Benthos %s %s.", kind, name)
}

// sanitize replaces the characters Prometheus does not allow in a metric
// name ([a-zA-Z_:][a-zA-Z0-9_:]*, colon true) or a label name
// ([a-zA-Z_][a-zA-Z0-9_]*) by underscores.
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

// counter records a Benthos counter. Prometheus counters only go up, so an
// increment below zero is ignored.
type counter struct{ c prometheus.Counter }

func (p counter) Incr(n int64) {
	if n > 0 {
		p.c.Add(float64(n))
	}
}

func (p counter) IncrFloat64(n float64) {
	if n > 0 {
		p.c.Add(n)
	}
}

// gauge records a Benthos gauge.
type gauge struct{ g prometheus.Gauge }

func (p gauge) Set(v int64)          { p.g.Set(float64(v)) }
func (p gauge) SetFloat64(v float64) { p.g.Set(v) }

// timer records a Benthos timing, given in nanoseconds: as it is into a
// summary, in seconds into a histogram.
type timer struct {
	o       prometheus.Observer
	seconds bool
}

func (p timer) Timing(ns int64) {
	if p.seconds {
		p.o.Observe(float64(ns) / 1e9)
		return
	}
	p.o.Observe(float64(ns))
}

// noop records nothing: the metric of a request that could not be honoured.
type noop struct{}

func (noop) Incr(int64)   {}
func (noop) Set(int64)    {}
func (noop) Timing(int64) {}

// promLog passes promhttp's errors to Benthos' logger.
type promLog struct{ log *service.Logger }

func (l promLog) Println(v ...any) {
	if l.log != nil {
		l.log.Warn(strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}
