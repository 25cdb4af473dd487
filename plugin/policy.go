package plugin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Field names and values of the data-loss policy and the time windows.
const (
	fieldOnDataLoss     = "on_data_loss"
	fieldOnMissingTopic = "on_missing_topic"
	fieldStartTimestamp = "start_timestamp"
	fieldStopTimestamp  = "stop_timestamp"
	fieldStartTimeout   = "start_timeout"
	fieldUnreachable    = "unreachable_timeout"

	onLossFail = "fail"
	onLossSkip = "skip"

	onMissingFail = "fail"
	onMissingSkip = "skip"

	startTimestamp = "timestamp"
	stopTimestamp  = "timestamp"
)

// PolicyConfig is the data-loss policy and time window part of Config.
type PolicyConfig struct {
	SkipDataLoss bool
	// SkipMissingTopics: a bounded run reads the topics and partitions
	// that exist, without the ones missing (on_missing_topic: skip).
	SkipMissingTopics bool
	StartMillis       int64 // with start_from: timestamp
	StopMillis        int64 // with stop_at: timestamp
	// StartTimeout is how long a bounded run retries to start before it
	// fails; 0: for ever.
	StartTimeout time.Duration
	// UnreachableTimeout is how long a bounded run that started goes on
	// with no broker answering and no progress before it fails; 0: for
	// ever.
	UnreachableTimeout time.Duration
}

// policyFields are the spec fields of the data-loss policy and the time
// windows.
func policyFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringAnnotatedEnumField(fieldOnDataLoss, map[string]string{
			onLossFail: "Stop the input with an error naming topic, partition and the exact lost span; `connect` exits non-zero. Nothing past the loss is committed, so the next run reports it again.",
			onLossSkip: "Log one warning per lost span (`Data loss on <topic>/<partition>: offsets [a, b) ...`), count the offsets (the summary line, `kafka_batched_ranges_lost_offsets_total`), go on from the new log start (a recreated topic: from its first offset) and commit past the span.",
		}).
			LintRule(fieldLint(fieldOnDataLoss)).
			Description("What to do when offsets are lost before they were read: deleted by retention or `DeleteRecords` (out of range, or a log start above where a range or the group's offset starts), or a topic deleted or recreated with offsets not yet read. Gaps that are not loss (compaction, transaction markers, aborted records under `read_committed`) are never errors and never counted. A log truncated below offsets already read (unclean leader election) always stops the input.").
			Default(onLossFail),
		service.NewStringAnnotatedEnumField(fieldOnMissingTopic, map[string]string{
			onMissingFail: "Stop the run with an error naming the topic (or the partitions) that does not exist, such as `topics: topic \"orders\" does not exist`; `connect` exits 1.",
			onMissingSkip: "Log one warning naming it and read the other topics and partitions, then end as usual.",
		}).
			LintRule(fieldLint(fieldOnMissingTopic)).
			Description("With `stop_at: end` or `timestamp`: what to do when a `topics` entry names a topic that does not exist when the input starts, or partitions the topic does not have (`orders:0-7` on a topic of 4). A continuous run (`stop_at: never`) never stops for it, whatever this says: it reads the other topics, warns once naming what is missing, and reads it from its first offset once it is created (topics are listed every `poll_interval`; with `consumer_group`, once the group assigns its partitions). Default `fail`: a bounded job with a mistyped topic fails instead of ending with part of the data.").
			Default(onMissingFail).
			Advanced(),
		service.NewStringField(fieldStartTimestamp).
			LintRule(fieldLint(fieldStartTimestamp)).
			Description("With `start_from: timestamp`: each partition starts at its first offset whose record timestamp is at or after this time (Kafka ListOffsets by timestamp). RFC 3339 (`2026-11-30T10:00:00Z`) or unix milliseconds (`1796032800000`). With `consumer_group`, committed offsets still win unless `reset_offsets` is set. Empty (the default): unset, as it must be unless `start_from` is `timestamp`.").
			Example("2026-11-30T10:00:00Z").
			Example(1796032800000).
			Default(""),
		service.NewStringField(fieldStopTimestamp).
			LintRule(fieldLint(fieldStopTimestamp)).
			Description("With `stop_at: timestamp`: each partition is read up to (not including) its first offset whose record timestamp is at or after this time, as listed when the input starts, then the input ends like `stop_at: end`. RFC 3339 or unix milliseconds; after `start_timestamp` if both are set. A partition with nothing in the window is empty. Empty (the default): unset, as it must be unless `stop_at` is `timestamp`.").
			Example("2026-11-30T11:00:00Z").
			Default(""),
		service.NewDurationField(fieldStartTimeout).
			LintRule(fieldLint(fieldStartTimeout)).
			Description("With `stop_at: end` or `timestamp`: how long the input keeps trying to start (reach the brokers, list the topics and watermarks, join `consumer_group`), counted from its first attempt, while it fails on errors that may go away (a broker that cannot be reached or is restarting, a coordinator moving); then the run stops with the last error and `connect` exits 1. Authentication, authorisation and TLS failures stop a bounded run at once (at its second attempt, a second later), whatever this is. 0 retries for ever. Continuous runs (`stop_at: never`) retry for ever, as Benthos inputs do, and say so in the log for errors that retrying cannot fix; the lint refuses this field with them (set to anything but its default).").
			Default("1m").
			Advanced(),
		service.NewDurationField(fieldUnreachable).
			LintRule(fieldLint(fieldUnreachable)).
			Description("With `stop_at: end` or `timestamp`: how long a run that started goes on while no broker answers (every connection and request fails, for example the cluster is down or the network to it is cut) and nothing is handed to the pipeline or acknowledged; then the run stops with an error naming the brokers and the last failure, and `connect` exits 1, so a scheduled backfill ends instead of hanging. The outage counts from the first failure after the last answer, and is noticed after 5 s, so a value below 5 s acts as 5 s. 0 retries for ever. Whatever this says, while no broker has answered for 5 s the input reports itself not connected, so Benthos' `/ready` answers 503, from the one warning that says so (`reported not ready`) until the line that says a broker answers again; meanwhile it hands nothing to the pipeline, not even batches read before the outage. Continuous runs (`stop_at: never`) retry for ever, reporting not ready meanwhile, and the lint refuses this field with them (set to anything but its default).").
			Default("1m").
			Advanced(),
	}
}

// parsePolicy reads the policy fields of a config that passed checkRules.
func parsePolicy(pc *service.ParsedConfig) (PolicyConfig, error) {
	var (
		p    PolicyConfig
		errs []error
	)
	onLoss, err := pc.FieldString(fieldOnDataLoss)
	errs = append(errs, err)
	p.SkipDataLoss = onLoss == onLossSkip
	onMissing, err := pc.FieldString(fieldOnMissingTopic)
	errs = append(errs, err)
	p.SkipMissingTopics = onMissing == onMissingSkip
	millis := func(name string) int64 {
		s, err := pc.FieldString(name)
		if err != nil || s == "" {
			errs = append(errs, err)
			return 0
		}
		ms, err := parseTimestamp(name, s)
		errs = append(errs, err)
		return ms
	}
	p.StartMillis = millis(fieldStartTimestamp)
	p.StopMillis = millis(fieldStopTimestamp)
	if s, err := pc.FieldString(fieldStartTimeout); err != nil {
		errs = append(errs, err)
	} else {
		p.StartTimeout, err = parseOptionalDuration(fieldStartTimeout, s)
		errs = append(errs, err)
	}
	if s, err := pc.FieldString(fieldUnreachable); err != nil {
		errs = append(errs, err)
	} else {
		p.UnreachableTimeout, err = parseOptionalDuration(fieldUnreachable, s)
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}

// boundedOnlyFields are the fields only a bounded run (stop_at: end or
// timestamp) reads, and what a continuous run does instead.
var boundedOnlyFields = []struct{ name, instead string }{
	{fieldStartTimeout, "retries its start for ever, as Benthos retries inputs"},
	{fieldUnreachable, "retries for ever while no broker answers, reporting not ready meanwhile"},
}

// boundedOnly: a field only a bounded run reads is refused, naming it and
// its value, when written in a continuous run (stop_at: never), which would
// ignore it. Written is as shareRules has it: a value other than the
// default (the default written out cannot be told apart). A share group
// has no stop_at. shareRules refuses these fields there.
func boundedOnly(pc *service.ParsedConfig, written func(name string) bool) []error {
	if text(pc, fieldStopAt) != stopNever || text(pc, fieldShareGroup) != "" {
		return nil
	}
	var errs []error
	for _, f := range boundedOnlyFields {
		if written(f.name) {
			errs = append(errs, fmt.Errorf(msgBoundedOnly, f.name, strconv.Quote(text(pc, f.name)), fieldStopAt, stopEnd, stopTimestamp, fieldStopAt, stopNever, f.instead, f.name))
		}
	}
	return errs
}

// parseTimestamp reads an RFC 3339 time or unix milliseconds, after 1970.
func parseTimestamp(name, s string) (int64, error) {
	t := strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(t, 10, 64); err == nil && ms > 0 {
		return ms, nil
	}
	if ts, err := time.Parse(time.RFC3339Nano, t); err == nil && ts.UnixMilli() > 0 {
		return ts.UnixMilli(), nil
	}
	return 0, fmt.Errorf("%s must be an RFC 3339 time such as 2026-11-30T10:00:00Z or unix milliseconds, got %q", name, s)
}

func formatMillis(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// timestamp is the rule of start_timestamp and stop_timestamp: empty (unset),
// an RFC 3339 time or unix milliseconds.
func timestamp(name string, v any) []error {
	s, ok := scalarText(v)
	if !ok || s == "" {
		return nil
	}
	_, err := parseTimestamp(name, s)
	return one(err)
}

// timeWindow: a timestamp is set exactly when its start_from or stop_at
// mode uses it, and the window's stop is after its start.
func timeWindow(pc *service.ParsedConfig) []error {
	var errs []error
	millis := func(name string, used bool, by string) int64 {
		s := text(pc, name)
		switch {
		case s == "" && used:
			errs = append(errs, fmt.Errorf(msgTimestampNeeded, name, by))
		case s != "" && !used:
			errs = append(errs, fmt.Errorf(msgTimestampUnused, name, by))
		case s != "":
			ms, _ := parseTimestamp(name, s)
			return ms
		}
		return 0
	}
	start := millis(fieldStartTimestamp, text(pc, fieldStartFrom) == startTimestamp, fieldStartFrom+": "+startTimestamp)
	stop := millis(fieldStopTimestamp, text(pc, fieldStopAt) == stopTimestamp, fieldStopAt+": "+stopTimestamp)
	if start > 0 && stop > 0 && stop <= start {
		errs = append(errs, fmt.Errorf(msgWindowOrder, fieldStopTimestamp, formatMillis(stop), fieldStartTimestamp, formatMillis(start)))
	}
	return errs
}
