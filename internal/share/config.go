package share

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Logger is what the reader logs through. Benthos' *service.Logger
// implements it.
type Logger interface {
	Debugf(format string, args ...any)
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Defaults of Config's zero values.
const (
	// DefaultMaxRecords is how many records one share fetch acquires at
	// most (franz-go's and Kafka's default, 500).
	DefaultMaxRecords = 500
	// DefaultRenewInterval is how often records still in the pipeline are
	// renewed: a third of the broker's default acquisition lock
	// (group.share.record.lock.duration.ms, 30 s), and below franz-go's
	// idle connection timeout (20 s), which would otherwise close the
	// connection the records were acquired on.
	DefaultRenewInterval = 10 * time.Second
)

// Config is the reader's configuration. New checks it and fills in the
// defaults of its zero values.
type Config struct {
	Seeds      []string  // bootstrap brokers, host:port
	ClientOpts []kgo.Opt // options of the client (client ID, TLS, SASL), after the seeds
	// Group is the share group the reader joins.
	Group string
	// Topics are the topics read: names, or with RegexpTopics regular
	// expressions matched against every topic of the cluster (franz-go's
	// ConsumeRegex: topics created later are read too).
	Topics       []string
	RegexpTopics bool
	// MaxRecords is how many records one share fetch acquires at most
	// (kgo.ShareMaxRecords, strict: the broker splits record batches to
	// honour it). It bounds what one member holds under its acquisition
	// lock, so what another member waits for and what a crash delays.
	// Zero means DefaultMaxRecords.
	MaxRecords int32
	// BatchRecords is how many records one Batch holds at most; the
	// records of one fetch are cut into batches of one partition each.
	// Zero means no limit: one batch per partition of a fetch.
	BatchRecords int
	// MaxDeliveries is how many deliveries a record gets at most: a Nack of
	// a record delivered that many times rejects it (the broker archives
	// it) instead of releasing it. Zero means a Nack always releases (the
	// broker still archives a record after group.share.delivery.count.limit
	// deliveries, 5 by default).
	MaxDeliveries int32
	// RenewInterval is the longest a batch handed out and not yet
	// acknowledged goes without its acquisition lock renewed (kgo.AckRenew,
	// Kafka 4.2+): every half RenewInterval the batches acquired or renewed
	// at least that long ago are renewed, so a young batch never is.
	// It must be shorter than the broker's group.share.record.lock.duration.ms
	// (30 s by default). Zero means DefaultRenewInterval.
	RenewInterval time.Duration
	// Observer sees the reader's counts (for metrics); nil means none.
	Observer Observer
	// Logger receives the reader's log lines; nil discards them.
	Logger Logger
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
		c.Logger = discard{}
	}
	return nil
}

type discard struct{}

func (discard) Debugf(string, ...any) {}
func (discard) Infof(string, ...any)  {}
func (discard) Warnf(string, ...any)  {}
func (discard) Errorf(string, ...any) {}
