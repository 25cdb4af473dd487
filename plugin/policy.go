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
	fieldStartTimestamp = "start_timestamp"
	fieldStopTimestamp  = "stop_timestamp"

	onLossFail = "fail"
	onLossSkip = "skip"

	startTimestamp = "timestamp"
	stopTimestamp  = "timestamp"
)

// PolicyConfig is the data-loss policy and time window part of Config.
type PolicyConfig struct {
	SkipDataLoss bool
	StartMillis  int64 // with start_from: timestamp
	StopMillis   int64 // with stop_at: timestamp
}

// policyFields are the spec fields of the data-loss policy and the time
// windows.
func policyFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringAnnotatedEnumField(fieldOnDataLoss, map[string]string{
			onLossFail: "Stop the input with an error naming topic, partition and the exact lost span; `connect` exits non-zero. Nothing past the loss is committed, so the next run reports it again.",
			onLossSkip: "Log one warning per lost span (`Data loss on <topic>/<partition>: offsets [a, b) ...`), count the offsets (the summary line, `kafka_batched_ranges_lost_offsets_total`), go on from the new log start (a recreated topic: from its first offset) and commit past the span.",
		}).
			Description("What to do when offsets are lost before they were read: deleted by retention or `DeleteRecords` (out of range, or a log start above where a range or the group's offset starts), or a topic deleted or recreated with offsets not yet read. Gaps that are not loss (compaction, transaction markers, aborted records under `read_committed`) are never errors and never counted. A log truncated below offsets already read (unclean leader election) always stops the input.").
			Default(onLossFail),
		service.NewAnyField(fieldStartTimestamp).
			Description("With `start_from: timestamp`: each partition starts at its first offset whose record timestamp is at or after this time (Kafka ListOffsets by timestamp). RFC 3339 (`2026-11-30T10:00:00Z`) or unix milliseconds (`1796032800000`). With `consumer_group`, committed offsets still win unless `reset_offsets` is set.").
			Example("2026-11-30T10:00:00Z").
			Example(1796032800000).
			Optional(),
		service.NewAnyField(fieldStopTimestamp).
			Description("With `stop_at: timestamp`: each partition is read up to (not including) its first offset whose record timestamp is at or after this time, as listed when the input starts, then the input ends like `stop_at: end`. RFC 3339 or unix milliseconds. A partition with nothing in the window is empty.").
			Example("2026-11-30T11:00:00Z").
			Optional(),
	}
}

// parsePolicy reads the policy fields; startFrom and stopAt are the parsed
// values of start_from and stop_at.
func parsePolicy(pc *service.ParsedConfig, startFrom, stopAt string) (PolicyConfig, error) {
	var (
		p    PolicyConfig
		errs []error
	)
	onLoss, err := pc.FieldString(fieldOnDataLoss)
	errs = append(errs, err)
	if err == nil {
		errs = append(errs, oneOf(fieldOnDataLoss, onLoss, onLossFail, onLossSkip))
		p.SkipDataLoss = onLoss == onLossSkip
	}
	millis := func(name string, needed bool, by string) int64 {
		if !pc.Contains(name) {
			if needed {
				errs = append(errs, fmt.Errorf("%s is required with %s", name, by))
			}
			return 0
		}
		v, err := pc.FieldAny(name)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		ms, err := parseTimestamp(name, v)
		errs = append(errs, err)
		if err == nil && !needed {
			errs = append(errs, fmt.Errorf("%s is set but only used with %s", name, by))
		}
		return ms
	}
	p.StartMillis = millis(fieldStartTimestamp, startFrom == startTimestamp, "start_from: timestamp")
	p.StopMillis = millis(fieldStopTimestamp, stopAt == stopTimestamp, "stop_at: timestamp")
	if p.StartMillis > 0 && p.StopMillis > 0 && p.StopMillis <= p.StartMillis {
		errs = append(errs, fmt.Errorf("%s (%s) must be after %s (%s)", fieldStopTimestamp, formatMillis(p.StopMillis), fieldStartTimestamp, formatMillis(p.StartMillis)))
	}
	return p, errors.Join(errs...)
}

// parseTimestamp reads an RFC 3339 time or unix milliseconds (a number or a
// string of digits).
func parseTimestamp(name string, v any) (int64, error) {
	bad := func() (int64, error) {
		return 0, fmt.Errorf("%s must be an RFC 3339 time such as 2026-11-30T10:00:00Z or unix milliseconds, got %q", name, fmt.Sprint(v))
	}
	switch t := v.(type) {
	case time.Time: // YAML reads an unquoted RFC 3339 time as a timestamp
		if t.UnixMilli() > 0 {
			return t.UnixMilli(), nil
		}
	case int:
		if t > 0 {
			return int64(t), nil
		}
	case int64:
		if t > 0 {
			return t, nil
		}
	case float64:
		if t > 0 && t == float64(int64(t)) {
			return int64(t), nil
		}
	case string:
		s := strings.TrimSpace(t)
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > 0 {
			return ms, nil
		}
		if ts, err := time.Parse(time.RFC3339Nano, s); err == nil && ts.UnixMilli() > 0 {
			return ts.UnixMilli(), nil
		}
	}
	return bad()
}

func formatMillis(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
