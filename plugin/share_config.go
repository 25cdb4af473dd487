package plugin

import (
	"errors"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// Fields of share groups (KIP-932). With share_group the input is a member
// of a share group instead of a range reader (shareInput, below).
const (
	fieldShareGroup         = "share_group"
	fieldShareAcquireMode   = "share_acquire_mode"
	fieldShareMaxDeliveries = "share_max_deliveries"
	fieldShareMaxRecords    = "share_max_records"
	fieldShareMembers       = "share_members"
	fieldShareRenewInterval = "share_renew_interval"
)

// The values of share_acquire_mode (Kafka's share.acquire.mode, KIP-1206).
const (
	acquireRecordLimit    = "record_limit"
	acquireBatchOptimized = "batch_optimized"
)

// shareFields are the spec of the share group fields.
func shareFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringField(fieldShareGroup).
			LintRule(fieldLint(fieldShareGroup)).
			Description("Read the topics as a member of this Kafka share group (KIP-932, \"queues for Kafka\", Kafka 4.0 or later with share groups on) instead of planning ranges: the broker hands each member acquired records of any partition under a time-limited lock, so more members than partitions share the work, and takes per-record acknowledgements. A Benthos ack accepts a batch's records; a nack replays them in the member after a backoff, their locks renewed meanwhile (`kafka_delivery_count` one more), until the pipeline takes them, or rejects them (the broker archives them) after `share_max_deliveries` deliveries, or at once with `auto_replay_nacks: false`; records waiting for a replay when the member stops are released to the others. There is no order within a partition and no bounded read; where a new group starts is the group's `share.auto.offset.reset` (latest by default). Messages carry the usual `kafka_` keys and `kafka_delivery_count`. It excludes `consumer_group`, pinned partitions and the fields of ranges and consumer groups; `docs/share-groups.md` says when to pick it. Empty: no share group.").
			Default(""),
		service.NewAnyField(fieldShareMaxDeliveries).
			LintRule(fieldLint(fieldShareMaxDeliveries)).
			Description("With `share_group`, how many deliveries a record gets at most (the broker's delivery count plus the member's replays): a nack of a record delivered this many times rejects it (the broker archives it, never delivering it again, and the member logs it at WARN) instead of replaying it. 0: a failed record is replayed until the pipeline takes it (a poison record then holds its member up: set this when a record can fail for good). It is a lint error with `auto_replay_nacks: false`, where a nack rejects at once.").
			Default(0),
		service.NewAnyField(fieldShareMaxRecords).
			LintRule(fieldLint(fieldShareMaxRecords)).
			Description("With `share_group`, how many records one member acquires per fetch (franz-go `kgo.ShareMaxRecords`): at most, or with `share_acquire_mode: batch_optimized` at least, completing the last record batch. A member holds one fetch's records at a time, under their acquisition lock, until every batch of them is acknowledged: it bounds what one member keeps from the others, what a crash delays by a lock's duration, and how large a batch can grow.").
			Default(share.DefaultMaxRecords).
			Advanced(),
		service.NewStringAnnotatedEnumField(fieldShareAcquireMode, map[string]string{
			acquireRecordLimit:    "A fetch acquires at most `share_max_records` records: the broker splits a record batch to honour it and sends the whole batch, whose records past the limit the member decodes and drops. What a member holds is bounded exactly, at a cost on large record batches: on one partition of 1 KiB records in batches of about 1,000 (`docs/benchmarks.md`), one member read about 0.4x what it reads with `batch_optimized`, and the broker spent about 3 times the CPU a record.",
			acquireBatchOptimized: "A fetch acquires whole record batches, `share_max_records` records or more when the partition has them: a member holds at most `share_max_records` plus the rest of the fetch's last record batch (as many records as the producers put in a batch: with small records and large batches, far more than `share_max_records`). Kafka's default, and the Java share consumer's.",
		}).
			LintRule(fieldLint(fieldShareAcquireMode)).
			Description("With `share_group`, how a fetch counts `share_max_records` (Kafka `share.acquire.mode`, KIP-1206; franz-go `kgo.ShareMaxRecordsStrict` for `record_limit`).").
			Default(acquireRecordLimit).
			Advanced(),
		service.NewAnyField(fieldShareMembers).
			LintRule(fieldLint(fieldShareMembers)).
			Description("With `share_group`, how many members of the group this input runs, each its own client: a member holds one fetch's records at a time, so more members keep more batches in the pipeline at once (as more processes would).").
			Default(1).
			Advanced(),
		service.NewDurationField(fieldShareRenewInterval).
			LintRule(fieldLint(fieldShareRenewInterval)).
			Description("With `share_group`, the longest records still in the pipeline go without their acquisition lock renewed (Kafka 4.2 or later; every half interval, the records held at least that long are renewed, records just acquired never are; renewals are sent without holding up the batches), so a pipeline slower than the lock (the group's `share.record.lock.duration.ms`, 30s by default) keeps its records instead of seeing them delivered again. It must be shorter than the lock: a member warns at start when it is not, and a third of the lock is a good value. From 1s to 50s: no broker's lock is longer than its `group.share.max.record.lock.duration.ms`, 60s by default, and a renewal needs time to arrive. A member keeps its connection to the broker open between renewals (franz-go's idle timeout, 30s, is raised to twice the interval above 15s): a closed connection would end its share session and release what it holds.").
			Default(share.DefaultRenewInterval.String()).
			Advanced(),
	}
}

// ShareConfig is the share group part of Config.
type ShareConfig struct {
	Group         string
	AcquireMode   share.AcquireMode
	MaxDeliveries int32
	MaxRecords    int32
	Members       int
	RenewInterval time.Duration
}

// parseShare reads the share group fields of a config that passed checkRules.
func parseShare(pc *service.ParsedConfig) (ShareConfig, error) {
	var (
		s    ShareConfig
		errs []error
	)
	integer := func(name string) int {
		v, err := pc.FieldAny(name)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		n, err := parseInteger(name, v)
		errs = append(errs, err)
		return n
	}
	var err error
	s.Group, err = pc.FieldString(fieldShareGroup)
	errs = append(errs, err)
	if mode, err := pc.FieldString(fieldShareAcquireMode); err != nil {
		errs = append(errs, err)
	} else if mode == acquireBatchOptimized {
		s.AcquireMode = share.BatchOptimized
	}
	s.MaxDeliveries = int32(integer(fieldShareMaxDeliveries))
	s.MaxRecords = int32(integer(fieldShareMaxRecords))
	s.Members = integer(fieldShareMembers)
	if d, err := pc.FieldString(fieldShareRenewInterval); err != nil {
		errs = append(errs, err)
	} else {
		s.RenewInterval, err = parseDuration(fieldShareRenewInterval, d)
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

// maxShareInt bounds the share group's integer fields. franz-go takes them
// as int32, and more members than this in one process is a typo.
const (
	maxShareRecords = 1 << 20
	maxShareMembers = 256
)

// shareFieldRules are the value rules of the share group fields.
func shareFieldRules() []fieldRule {
	return []fieldRule{
		{fieldShareGroup, trimmed},
		{fieldShareAcquireMode, enum(acquireRecordLimit, acquireBatchOptimized)},
		{fieldShareMaxDeliveries, bounded(0, 1<<15)},
		{fieldShareMaxRecords, bounded(1, maxShareRecords)},
		{fieldShareMembers, bounded(1, maxShareMembers)},
		{fieldShareRenewInterval, duration(func(name, s string, d time.Duration) error {
			return checkDurationRange(name, s, d, minShareRenewInterval, maxShareRenewInterval)
		})},
	}
}

// The bounds of share_renew_interval. Below 1 s a member renews more often
// than any lock needs (a broker's shortest lock is
// group.share.min.record.lock.duration.ms, 15 s by default) and spends its
// requests on renewals. A renewal must reach the broker before the lock
// ends, and no group's lock is longer than the broker's
// group.share.max.record.lock.duration.ms, 60 s by default: 50 s leaves a
// renewal 10 s under the longest lock a broker allows by default.
var (
	minShareRenewInterval = durationBound{time.Second, "1s"}
	maxShareRenewInterval = durationBound{50 * time.Second, "50s"}
)

// bounded is the rule of an integer field within [lo, hi].
func bounded(lo, hi int) func(string, any) []error {
	return func(name string, v any) []error {
		n, err := parseInteger(name, v)
		switch {
		case err != nil:
			return one(err)
		case n < lo || n > hi:
			return one(fmt.Errorf("%s must be at least %d and at most %d, got %d", name, lo, hi, n))
		}
		return nil
	}
}
