// Package promexport is a Benthos metrics exporter named prometheus that
// takes the config of Redpanda Connect's (and Bento's) prometheus exporter and
// exports Benthos' metrics under the same names and types, so that a config,
// a dashboard or an alert made for Redpanda Connect keeps working with a
// binary built on Benthos alone, which has no prometheus exporter of its own.
// It follows the exporter as Redpanda Connect v4.93.0 documents it (its
// fields, their defaults, the names and types it exports: the component's
// reference page at docs.redpanda.com, the latest version on 2026-12-06). No
// code of Redpanda Connect is used, its licence is not open source.
//
// What a scraper sees, with the defaults:
//
//   - A counter keeps its name (input_received, not input_received_total)
//     and is a Prometheus counter. A counter's series exists from the moment
//     a component asks for it with its label values, at 0, so rate() and
//     absent() work before the first increment.
//   - A gauge keeps its name and is a Prometheus gauge.
//   - A timer keeps its name (input_latency_ns) and is a summary of
//     nanoseconds with the quantiles of summary_quantiles_objectives. With
//     use_histogram_timing: true it is a histogram of seconds, still under
//     the same name, with the buckets of histogram_buckets.
//
// Characters Prometheus does not allow in a name are replaced by '_'.
//
// The exporter serves the text format at /metrics and /stats on Benthos' HTTP
// server. With push_url it also pushes to a Prometheus Push Gateway, every
// push_interval and once on Close. With file_output_path it writes the text
// format to that file on Close.
//
// A program that embeds Benthos registers it in Benthos' global environment
// before running the CLI, which makes prometheus the default of `metrics`
// (as it is in Redpanda Connect):
//
//	if err := promexport.Register(service.GlobalEnvironment()); err != nil { ... }
//	os.Exit(plugin.RunCLI(ctx, nil))
package promexport

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Name is the name of the exporter: `metrics: {prometheus: {}}`.
const Name = "prometheus"

// Fields of the exporter, named as in Redpanda Connect's prometheus exporter.
const (
	fieldHistogramTiming   = "use_histogram_timing"
	fieldHistogramBuckets  = "histogram_buckets"
	fieldObjectives        = "summary_quantiles_objectives"
	fieldObjectiveQuantile = "quantile"
	fieldObjectiveError    = "error"
	fieldProcessMetrics    = "add_process_metrics"
	fieldGoMetrics         = "add_go_metrics"
	fieldPushURL           = "push_url"
	fieldPushInterval      = "push_interval"
	fieldPushJobName       = "push_job_name"
	fieldPushBasicAuth     = "push_basic_auth"
	fieldPushUsername      = "username"
	fieldPushPassword      = "password"
	fieldFileOutputPath    = "file_output_path"
)

// defaultPushJobName is push_job_name's default, Redpanda Connect's.
const defaultPushJobName = "benthos_push"

// pushTimeout bounds each push to the Push Gateway, the last one on Close
// included (Benthos closes its exporter without a deadline).
const pushTimeout = 10 * time.Second

// defaultObjectives are summary_quantiles_objectives' default: quantile to
// its permitted error.
var defaultObjectives = map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}

// Spec is the config spec of the exporter.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Summary("Serves every metric at `/metrics` and `/stats` on Benthos' HTTP server in the Prometheus text format, and can push them to a Prometheus Push Gateway or write them to a file on shutdown. It takes the fields of Redpanda Connect's `prometheus` exporter and exports the same names and types.").
		Description("Counters and gauges keep the names Benthos and the components give them (`input_received`, not `input_received_total`). "+
			"Timers keep theirs too (`input_latency_ns`): by default they are summaries of nanoseconds with the quantiles of `"+fieldObjectives+"`; "+
			"with `"+fieldHistogramTiming+": true` they are histograms of seconds, still under the same name. "+
			"Characters Prometheus does not allow in a metric or label name are replaced by `_`; label values are kept as they are. "+
			"A counter's series is exported from the moment a component asks for it, at 0.\n\n"+
			"The endpoint exists while Benthos' HTTP server is enabled (`http.enabled`, the default for `connect run`).\n\n"+
			"## Push Gateway\n\n"+
			"With `"+fieldPushURL+"`, the metrics are pushed to a [Prometheus Push Gateway](https://prometheus.io/docs/instrumenting/pushing/) when Benthos shuts down, "+
			"and every `"+fieldPushInterval+"` if it is set. Each push replaces what the job pushed before (HTTP PUT) and gives up after 10 seconds; "+
			"a failing periodic push is logged when it starts failing and when it works again.").
		Fields(
			service.NewBoolField(fieldHistogramTiming).
				Description("Whether timers are exported as histograms of seconds, with the buckets of `"+fieldHistogramBuckets+"`, instead of summaries of nanoseconds with the quantiles of `"+fieldObjectives+"`. A timer keeps its name either way. See https://prometheus.io/docs/practices/histograms/ for how the two differ.").
				Advanced().
				Default(false),
			service.NewFloatListField(fieldHistogramBuckets).
				Description("The upper bounds, in seconds and in increasing order, of the buckets of every timer histogram, when `"+fieldHistogramTiming+"` is true. Empty (the default) means the Prometheus Go client's `DefBuckets` (0.005 to 10 seconds).").
				Advanced().
				Default([]any{}),
			service.NewObjectListField(fieldObjectives,
				service.NewFloatField(fieldObjectiveQuantile).
					Description("The quantile, from 0 to 1 (0.99 is the 99th percentile).").
					Default(0.0),
				service.NewFloatField(fieldObjectiveError).
					Description("The error the quantile may have, in quantile (0.01 with quantile 0.9: the value given lies between the 89th and the 91st percentile). Smaller errors cost more memory and CPU.").
					Default(0.0),
			).
				Description("The quantiles every timer summary reports, with their permitted errors, when `"+fieldHistogramTiming+"` is false. Empty means the default.").
				Advanced().
				Default([]any{
					map[string]any{fieldObjectiveQuantile: 0.5, fieldObjectiveError: 0.05},
					map[string]any{fieldObjectiveQuantile: 0.9, fieldObjectiveError: 0.01},
					map[string]any{fieldObjectiveQuantile: 0.99, fieldObjectiveError: 0.001},
				}),
			service.NewBoolField(fieldProcessMetrics).
				Description("Whether to also export the process's CPU, memory and file descriptor metrics (`process_*`, from the Prometheus Go client's process collector).").
				Advanced().
				Default(false),
			service.NewBoolField(fieldGoMetrics).
				Description("Whether to also export the Go runtime's metrics (`go_*`: goroutines, garbage collection, memory).").
				Advanced().
				Default(false),
			service.NewURLField(fieldPushURL).
				Description("The URL of a Prometheus Push Gateway to push the metrics to, such as `http://pushgateway:9091`, without the `/metrics/job/...` path (`http://` is assumed when the scheme is missing). Unset or empty: nothing is pushed.").
				Advanced().
				Optional(),
			service.NewDurationField(fieldPushInterval).
				Description("The period between two pushes to `"+fieldPushURL+"`, such as `30s`. Unset or empty: the metrics are pushed only once, on shutdown.").
				Advanced().
				Optional(),
			service.NewStringField(fieldPushJobName).
				Description("The job the pushed metrics are grouped under on the Push Gateway (its `job` label).").
				Advanced().
				Default(defaultPushJobName),
			service.NewObjectField(fieldPushBasicAuth,
				service.NewStringField(fieldPushUsername).
					Description("The user name sent with each push. Empty, with an empty password: no credentials are sent.").
					Default(""),
				service.NewStringField(fieldPushPassword).
					Description("The password sent with each push.").
					Secret().
					Default(""),
			).
				Description("HTTP Basic Authentication credentials for the Push Gateway.").
				Advanced(),
			service.NewStringField(fieldFileOutputPath).
				Description("A file to write every metric to, in the Prometheus text format, when Benthos shuts down (written to a temporary file and renamed, so a reader never sees half of it). Empty: no file.").
				Advanced().
				Default(""),
		).
		LintRule(lintRule)
}

// lintRule reports at lint time what options.check refuses at start, with
// the same words: buckets out of order, a quantile or an error outside
// [0, 1], a push_interval that is not a duration or is negative.
const lintRule = `
let buckets = this.` + fieldHistogramBuckets + `.or([])
let unordered = $buckets.length() > 1 && range(1, $buckets.length()).any(i -> $buckets.index(i) <= $buckets.index(i - 1))
let interval = this.` + fieldPushInterval + `.or("").string()
let objectives = this.` + fieldObjectives + `.or([]).map_each(o -> if o.` + fieldObjectiveQuantile + `.or(0) < 0 || o.` + fieldObjectiveQuantile + `.or(0) > 1 {
  "` + fieldObjectives + `: ` + fieldObjectiveQuantile + ` must be from 0 to 1, got %v".format(o.` + fieldObjectiveQuantile + `)
} else if o.` + fieldObjectiveError + `.or(0) < 0 || o.` + fieldObjectiveError + `.or(0) > 1 {
  "` + fieldObjectives + `: ` + fieldObjectiveError + ` must be from 0 to 1, got %v (quantile %v)".format(o.` + fieldObjectiveError + `, o.` + fieldObjectiveQuantile + `)
} else { null })
root = [
  if $unordered { "` + fieldHistogramBuckets + ` must be in increasing order, got %s".format($buckets.format_json(no_indent: true).string()) } else { null },
  if $interval != "" && $interval.parse_duration().catch(null) == null {
    "` + fieldPushInterval + ` must be a duration such as 30s, got %q".format($interval)
  } else if $interval != "" && $interval.parse_duration().catch(0) < 0 {
    "` + fieldPushInterval + ` must be > 0, got %q".format($interval)
  } else { null },
].concat($objectives).filter(m -> m != null)
`

// Register adds the exporter to env under Name. A program that wants it to
// be the default of `metrics` registers it in service.GlobalEnvironment()
// before building the environment it runs.
func Register(env *service.Environment) error {
	return env.RegisterMetricsExporter(Name, Spec(), func(pc *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
		o, err := parseOptions(pc)
		if err != nil {
			return nil, err
		}
		return newExporter(o, log)
	})
}

// options is the parsed config of the exporter.
type options struct {
	histogramTiming bool
	buckets         []float64           // seconds; DefBuckets when empty
	objectives      map[float64]float64 // quantile to error; defaultObjectives when empty
	processMetrics  bool
	goMetrics       bool
	pushURL         string        // "" for no push
	pushInterval    time.Duration // 0 for a push on Close only
	pushJob         string
	pushUsername    string
	pushPassword    string
	fileOutputPath  string // "" for no file
}

// parseOptions reads the exporter's config. The checks of values are
// newExporter's, so options built in Go get them too.
func parseOptions(pc *service.ParsedConfig) (options, error) {
	var (
		o   options
		err error
	)
	if o.histogramTiming, err = pc.FieldBool(fieldHistogramTiming); err != nil {
		return o, err
	}
	if o.buckets, err = pc.FieldFloatList(fieldHistogramBuckets); err != nil {
		return o, err
	}
	objectives, err := pc.FieldObjectList(fieldObjectives)
	if err != nil {
		return o, err
	}
	if len(objectives) > 0 {
		o.objectives = make(map[float64]float64, len(objectives))
	}
	for _, obj := range objectives {
		q, err := obj.FieldFloat(fieldObjectiveQuantile)
		if err != nil {
			return o, err
		}
		e, err := obj.FieldFloat(fieldObjectiveError)
		if err != nil {
			return o, err
		}
		o.objectives[q] = e
	}
	if o.processMetrics, err = pc.FieldBool(fieldProcessMetrics); err != nil {
		return o, err
	}
	if o.goMetrics, err = pc.FieldBool(fieldGoMetrics); err != nil {
		return o, err
	}
	// push_url and push_interval are read as strings. A config copied from
	// Redpanda Connect's documentation sets them to "", which means unset.
	if pc.Contains(fieldPushURL) {
		if o.pushURL, err = pc.FieldString(fieldPushURL); err != nil {
			return o, err
		}
	}
	if pc.Contains(fieldPushInterval) {
		s, err := pc.FieldString(fieldPushInterval)
		if err != nil {
			return o, err
		}
		if s != "" {
			if o.pushInterval, err = time.ParseDuration(s); err != nil {
				return o, fmt.Errorf("%s must be a duration such as 30s, got %q", fieldPushInterval, s)
			}
		}
	}
	if o.pushJob, err = pc.FieldString(fieldPushJobName); err != nil {
		return o, err
	}
	if o.pushUsername, err = pc.FieldString(fieldPushBasicAuth, fieldPushUsername); err != nil {
		return o, err
	}
	if o.pushPassword, err = pc.FieldString(fieldPushBasicAuth, fieldPushPassword); err != nil {
		return o, err
	}
	if o.fileOutputPath, err = pc.FieldString(fieldFileOutputPath); err != nil {
		return o, err
	}
	return o, nil
}

// check fills in the defaults of o and returns an error naming the field
// and the value of the first value it refuses.
func (o *options) check() error {
	if len(o.buckets) == 0 {
		o.buckets = prometheus.DefBuckets
	}
	for i := 1; i < len(o.buckets); i++ {
		if o.buckets[i] <= o.buckets[i-1] {
			return fmt.Errorf("%s must be in increasing order, got %v", fieldHistogramBuckets, o.buckets)
		}
	}
	if len(o.objectives) == 0 {
		o.objectives = defaultObjectives
	}
	for q, e := range o.objectives {
		if q < 0 || q > 1 {
			return fmt.Errorf("%s: %s must be from 0 to 1, got %v", fieldObjectives, fieldObjectiveQuantile, q)
		}
		if e < 0 || e > 1 {
			return fmt.Errorf("%s: %s must be from 0 to 1, got %v (quantile %v)", fieldObjectives, fieldObjectiveError, e, q)
		}
	}
	if o.pushInterval < 0 {
		return fmt.Errorf("%s must be > 0, got %v", fieldPushInterval, o.pushInterval)
	}
	if o.pushURL == "" {
		return nil
	}
	u := o.pushURL
	if !strings.Contains(u, "://") {
		u = "http://" + u // as push.New does
	}
	if p, err := url.Parse(u); err != nil || p.Host == "" {
		return fmt.Errorf("%s must be a URL such as http://pushgateway:9091, got %q", fieldPushURL, o.pushURL)
	}
	if o.pushJob == "" {
		return fmt.Errorf("%s must not be empty with %s", fieldPushJobName, fieldPushURL)
	}
	return nil
}
