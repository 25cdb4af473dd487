package share

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/logs"
)

// Defaults of Config's zero values.
const (
	// DefaultMaxRecords is how many records one share fetch acquires at
	// most (franz-go's and Kafka's default, 500).
	DefaultMaxRecords = 500
	// DefaultRenewInterval is the longest records still in the pipeline
	// go without a renewal: a third of the broker's default acquisition
	// lock (group.share.record.lock.duration.ms, 30 s).
	DefaultRenewInterval = 10 * time.Second
	// MaxRenewInterval bounds RenewInterval. The reader keeps its client's
	// connections open for twice the interval (connIdleTimeout), and
	// franz-go allows at most 15 minutes. A broker's lock is at most
	// group.share.max.record.lock.duration.ms (60 s by default), so a
	// useful interval is far shorter.
	MaxRenewInterval = 7*time.Minute + 30*time.Second
	// defaultConnIdleTimeout is franz-go's kgo.ConnIdleTimeout default.
	defaultConnIdleTimeout = 30 * time.Second
)

// connIdleTimeout is the kgo.ConnIdleTimeout of a reader's client. It says
// how long a connection may sit idle before franz-go closes it. The broker
// ties a member's share session to its ShareFetch connection and, when that
// connection closes, ends the session and releases every record the member
// holds, to the other members, while its pipeline still processes them.
// A member holding records sends nothing on that connection but its
// renewals and acknowledgements, up to RenewInterval apart, so the timeout
// is franz-go's default (30 s) or, for a longer interval, twice the
// interval. The connection is never idle long enough to be closed.
func connIdleTimeout(renew time.Duration) time.Duration {
	return max(defaultConnIdleTimeout, 2*renew)
}

// Config is the reader's configuration. New checks it and fills in the
// defaults of its zero values.
type Config struct {
	Seeds []string // bootstrap brokers, host:port
	// ClientOpts are options of the client (client ID, TLS, SASL), after
	// the seeds. The reader sets kgo.ConnIdleTimeout after them
	// (connIdleTimeout). A shorter one would end the member's share session
	// while it holds records.
	ClientOpts []kgo.Opt
	// Group is the share group the reader joins.
	Group string
	// Topics are the topics read: names, or with RegexpTopics regular
	// expressions matched against every topic of the cluster (franz-go's
	// ConsumeRegex: topics created later are read too).
	Topics       []string
	RegexpTopics bool
	// MaxRecords is how many records one share fetch acquires
	// (kgo.ShareMaxRecords). It is at most that many with AcquireMode
	// RecordLimit (the broker splits record batches to honour it). It is at
	// least that many with BatchOptimized, which completes the last record
	// batch. It bounds what one member holds under its acquisition lock, so
	// what another member waits for and what a crash delays. Zero means
	// DefaultMaxRecords.
	MaxRecords int32
	// AcquireMode is how the broker counts MaxRecords (Kafka's
	// share.acquire.mode, KIP-1206): RecordLimit (the zero value) or
	// BatchOptimized.
	AcquireMode AcquireMode
	// BatchRecords is how many records one Batch holds at most. The
	// records of one fetch are cut into batches of one partition each.
	// Zero means no limit: one batch per partition of a fetch.
	BatchRecords int
	// MaxDeliveries is how many deliveries a record gets at most: a Nack of
	// a record delivered that many times rejects it (the broker archives
	// it) instead of releasing it. Zero means a Nack always releases (the
	// broker still archives a record after group.share.delivery.count.limit
	// deliveries, 5 by default).
	MaxDeliveries int32
	// ReplayNacks makes a Nack replay the records in this member, after a
	// backoff and under renewals of their locks, instead of releasing them
	// (Benthos' auto_replay_nacks): an output down for a while then loses
	// nothing, where releases would hand the records straight back until
	// the broker archives them at its delivery count limit. With
	// MaxDeliveries a record is rejected on its MaxDeliveries-th delivery
	// (the broker's delivery count plus this member's replays). Without,
	// it is replayed until the pipeline takes it. Close releases records
	// waiting for a replay.
	ReplayNacks bool
	// RenewInterval is the longest a batch handed out and not yet
	// acknowledged goes without its acquisition lock renewed (kgo.AckRenew,
	// Kafka 4.2+): every half RenewInterval the batches acquired or renewed
	// at least that long ago are renewed, so a young batch never is.
	// It must be shorter than the group's acquisition lock,
	// share.record.lock.duration.ms (30 s by default; Start warns when it
	// is not), and at most MaxRenewInterval. Zero means
	// DefaultRenewInterval.
	RenewInterval time.Duration
	// Observer sees the reader's counts (for metrics). nil means none.
	Observer Observer
	// Logger receives the reader's log lines (internal/logs' Logger, as
	// the engine's; Benthos' *service.Logger is one). nil discards them.
	Logger logs.Logger
}

// AcquireMode is how a share fetch counts Config.MaxRecords: Kafka's
// share.acquire.mode (KIP-1206), which franz-go sends in ShareFetch v2
// (kgo.ShareMaxRecordsStrict for RecordLimit).
type AcquireMode uint8

const (
	// RecordLimit acquires at most MaxRecords records a fetch: the broker
	// splits a record batch to honour it, and sends the whole batch, whose
	// records past the limit the client decodes and drops. It bounds what
	// a member holds exactly, at a cost: on one partition of 1 KiB records
	// in batches of about 1,000, one member read 60-75k records/s with
	// it against 98-120k without, and the broker spent 3 times the CPU a
	// record (docs/benchmarks.md, issue 51).
	RecordLimit AcquireMode = iota
	// BatchOptimized acquires whole record batches, at least MaxRecords
	// records when the partition has them. A fetch holds MaxRecords plus
	// the rest of its last record batch at most (Kafka's default, and the
	// Java share consumer's).
	BatchOptimized
)

func (m AcquireMode) String() string {
	switch m {
	case RecordLimit:
		return "record_limit"
	case BatchOptimized:
		return "batch_optimized"
	}
	return fmt.Sprintf("AcquireMode(%d)", uint8(m))
}

// check validates c and fills in the defaults.
func (c *Config) check() error {
	if len(c.Seeds) == 0 {
		return errors.New("share: no seed brokers")
	}
	if c.Group == "" {
		return errors.New("share: no share group")
	}
	if len(c.Topics) == 0 {
		return fmt.Errorf("share group %s: no topics", c.Group)
	}
	for _, t := range c.Topics {
		if t == "" {
			return fmt.Errorf("share group %s: empty topic", c.Group)
		}
	}
	switch {
	case c.MaxRecords < 0:
		return fmt.Errorf("share group %s: max records must be > 0, got %d", c.Group, c.MaxRecords)
	case c.BatchRecords < 0:
		return fmt.Errorf("share group %s: batch records must be >= 0, got %d", c.Group, c.BatchRecords)
	case c.MaxDeliveries < 0:
		return fmt.Errorf("share group %s: max deliveries must be >= 0, got %d", c.Group, c.MaxDeliveries)
	case c.RenewInterval < 0:
		return fmt.Errorf("share group %s: renew interval must be > 0, got %s", c.Group, c.RenewInterval)
	case c.AcquireMode > BatchOptimized:
		return fmt.Errorf("share group %s: acquire mode must be record_limit or batch_optimized, got %s", c.Group, c.AcquireMode)
	case c.RenewInterval > MaxRenewInterval:
		return fmt.Errorf("share group %s: renew interval must be at most %s, got %s", c.Group, MaxRenewInterval, c.RenewInterval)
	}
	if c.MaxRecords == 0 {
		c.MaxRecords = DefaultMaxRecords
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.Logger == nil {
		c.Logger = logs.Discard{}
	}
	return nil
}
