package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/logs"
)

// StartFrom says where reading starts in a partition that has no committed
// offset to resume from. With StartCommitted it says that such a partition
// is not read.
type StartFrom int

// Where reading starts.
const (
	// StartEarliest starts at each partition's log start offset.
	StartEarliest StartFrom = iota
	// StartLatest starts at each partition's end offset when the engine
	// starts.
	StartLatest
	// StartCommitted starts at the group's committed offset. A partition the
	// group has none for (or only the deleted topic's, once its topic was
	// recreated) is not read, as with Kafka's auto.offset.reset=none. One
	// warning names the partitions skipped at once (at start, per group
	// assignment, or as partitions appear), and a bounded run ends without
	// them.
	StartCommitted
	// StartTimestamp starts at the first offset whose timestamp is at or
	// after Config.StartMillis.
	StartTimestamp
)

// TopicSpec selects a topic and, if Partitions is nil, all of its partitions
// (including partitions added while the engine runs).
type TopicSpec struct {
	Name       string
	Partitions []int32
	// Offsets are the start offsets of partitions named with one
	// (`topic:partition:offset`). Each starts there instead of where
	// StartFrom says (so where the group has no committed offset for it, or
	// without a group). Its partitions are in Partitions.
	Offsets map[int32]int64
}

// Logger is what the engine logs through, its franz-go clients included
// (kgo.WithLogger). franz-go's info lines go to Debugf, its warnings and
// errors to Warnf, and its debug lines to Tracef if the Logger is also a
// logs.Tracer. It is internal/logs' Logger, the one of every Benthos-free
// package. Benthos' *service.Logger implements it, Tracef included.
type Logger = logs.Logger

// Config is the engine's configuration. The plugin fills it from the
// validated Benthos config. New checks what the engine itself relies on.
type Config struct {
	Seeds      []string  // bootstrap brokers, host:port
	ClientOpts []kgo.Opt // options of every client (client ID, TLS, SASL), after the seeds
	Topics     []TopicSpec
	StartFrom  StartFrom
	StopAtEnd  bool // snapshot the end offsets at start, read to them, then end

	// StartMillis is the start of a time window (unix milliseconds), with
	// StartFrom StartTimestamp.
	StartMillis int64
	// StopMillis, if > 0 (with StopAtEnd), ends each partition before its
	// first offset whose timestamp is at or after it, as listed at start,
	// instead of at its end offset.
	StopMillis int64
	// SkipDataLoss goes on past offsets deleted before they were read, or a
	// topic deleted or recreated with unread data: one warning with the span,
	// the offsets counted as lost, and the commit moves past them. Without
	// it such a loss stops the engine.
	SkipDataLoss bool
	// SkipMissingTopics makes a bounded run (StopAtEnd) read the topics
	// and partitions that exist when it starts, with one warning for each
	// entry of Topics naming one that does not. Without it such an entry
	// stops the engine. A continuous run always reads the rest and reads
	// what was missing, from its first offset, once it exists.
	SkipMissingTopics bool

	// RegexpTopics makes each Topics entry's Name a regular expression,
	// matched against the cluster's topics at start and, in a continuous
	// run, every MetadataMaxAge after (Kafka metadata.max.age.ms; zero
	// means 5m). patterns.go says how topics are matched.
	RegexpTopics   bool
	MetadataMaxAge time.Duration
	// ExcludeTopics are regular expressions of topics never read, though
	// a RegexpTopics entry matches them (matched as the entries are).
	ExcludeTopics []string

	MaxRangeRecords int64         // most offsets in one range
	MaxInFlight     int           // ranges holding a slot at once
	PollInterval    time.Duration // how often topics and watermarks are listed again (followed partitions: every followedListEvery)
	Ordered         bool          // one range per partition in flight, each batch acknowledged before the next
	// AlignRanges plans ranges on blocks of MaxRangeRecords offsets
	// ([k·N, (k+1)·N); a bounded run cuts the last at its snapshot end, a
	// continuous one plans a block once it is complete), emits each range
	// as one batch, and commits only range ends, so a re-run plans and
	// emits the same ranges (ranges.NewAlignedPlanner).
	AlignRanges bool

	// ReplayNacks delivers a rejected batch again, whole, after a growing
	// delay. false counts a rejected batch as done.
	ReplayNacks bool
	// RangeEnds makes Next hand out, after the last batch of each range
	// that handed out any, an end marker (Batch.RangeEnd). Its reader is
	// done, read to the range's end or stopped (revoked, lost, stopping),
	// and no first delivery of that range follows (replays may). For a
	// caller that holds a range's batches to cut them anew (Batch.Split).
	RangeEnds bool

	// UnreachableTimeout stops a bounded run (StopAtEnd) once no broker
	// answered for that long and nothing was handed out or acknowledged
	// meanwhile (reach.go). Zero retries for ever. A continuous run retries
	// for ever.
	UnreachableTimeout time.Duration

	// Group is the consumer group the engine commits to and, with
	// Group.Membership, joins.
	Group GroupConfig
	// Fetch is how records are fetched: the consumer cache and its clients.
	Fetch FetchConfig
	// Hooks are the caller's log, metrics and callbacks.
	Hooks Hooks
}

// GroupConfig configures the consumer group: the group whose committed
// offsets the engine starts from and commits to, and with Membership its
// member. It is read where offsets are read and reset (prepare.go), where
// they are committed (commit.go, close.go), where the member joins
// (engine.go's newMember and joinGroup) and where it hands partitions over
// (drain.go, membership.go). And by New, which checks it.
type GroupConfig struct {
	Name string // consumer group offsets are read from and committed to; "" for none

	// Membership joins the group (Name) through franz-go's group
	// management and reads only the partitions assigned to this member,
	// committing with the member's generation. It needs every topic named
	// whole. Without it, a group only stores offsets (of pinned
	// partitions) and must have no live members.
	Membership bool
	// Opts are the member's group options (balancers, session,
	// heartbeat and rebalance timeouts, instance ID).
	Opts []kgo.Opt
	// RevokeDrainTimeout is how long a revocation (a rebalance, under an
	// eager balancer every one) waits for the batches of the revoked
	// partitions handed out by Next to be done before it commits their
	// acknowledged progress and hands them over, so the next owner reads
	// nothing twice (drain.go). The rebalance waits for it: keep it below
	// the group's rebalance timeout. Zero waits for nothing.
	RevokeDrainTimeout time.Duration
	// Settle, with Membership, holds this member's first batches until
	// its assignment has not changed for Settle and the group's
	// coordinator reports the group stable (drain.go: members started
	// together then hand partitions over before any of them is handed
	// out, so those handovers deliver nothing twice however slow the
	// pipeline), at most settleMax. The ranges are read meanwhile. Zero
	// holds nothing.
	Settle time.Duration
	// ResetOffsets starts every partition at Config.StartFrom even where
	// the group has a committed offset. Without it a group's committed
	// offset wins and StartFrom applies only where there is none.
	ResetOffsets bool
	CommitPeriod time.Duration // how often acknowledged progress is committed

	// wrapCommitter, set by tests only, wraps the committer the engine
	// commits through.
	wrapCommitter func(committer) committer
}

// FetchConfig configures how records are fetched: the consumer cache
// (cache.Config) and the clients it fetches through, built by
// newCursorCache. ReadCommitted is also the isolation level the listings
// (cluster.go) and the start (start.go, refresh.go) read ends with.
type FetchConfig struct {
	CacheCapacity    int           // soft limit on open cached clients
	CacheIdleTimeout time.Duration // idle cached clients are closed after this
	ReadCommitted    bool          // read_committed isolation
	// MaxBytes bounds a fetch response and MaxPartitionBytes each
	// partition's part of it (Kafka fetch.max.bytes and
	// max.partition.fetch.bytes). Zero means 50 MiB and 1 MiB
	// (cache.Config).
	MaxBytes          int32
	MaxPartitionBytes int32
	// RoundBytes is what a fetch round asks of the ranges it reads in all,
	// at the least (cache.Config.RoundBytes). Zero asks MaxPartitionBytes
	// of each.
	RoundBytes int32
	// MaxWait is how long a broker may hold a fetch of caught-up
	// partitions until records arrive (Kafka fetch.max.wait.ms). Zero
	// means 500ms. MinBytes is how many bytes it waits for (Kafka
	// fetch.min.bytes). Zero means 1.
	MaxWait  time.Duration
	MinBytes int32
	// Connections is the most fetch connections to one broker: one on
	// the shared client, plus backlog lanes for ranges with records known to
	// exist, to a distant broker (cache.Config.FetchConnections). Zero
	// means cache.DefaultFetchConnections, 1 opens no lane.
	Connections int
	// RackID is the client's rack (Kafka client.rack): brokers with a
	// rack-aware replica selector then point fetches at a replica in the
	// same rack (KIP-392). Empty fetches from leaders only.
	RackID string
}

// Hooks are what the engine calls its caller back through: where it logs,
// where its metrics go, its progress reports and the work it does on each
// batch for the caller. New reads Logger and Observer (nil: discarded),
// the reporter (observe.go's report) ProgressInterval and OnProgress, and
// the readers (emit.go) Prepare.
type Hooks struct {
	// Logger receives the engine's log lines. nil discards them.
	Logger Logger
	// Observer receives metrics events. nil discards them.
	Observer Observer
	// ProgressInterval is how often a bounded read logs its progress (and
	// calls OnProgress); 0 turns progress off.
	ProgressInterval time.Duration
	// OnProgress, if set, receives each progress report.
	OnProgress func(Progress)

	// Prepare, if set, is called by reader goroutines on each batch just
	// before it is handed to Next, at most GOMAXPROCS at a time, so that
	// costly per-batch work (building messages) runs in parallel. Its result
	// goes in Batch.Prepared for the first delivery.
	Prepare func(b *Batch) any
	// PrepareEarly runs Prepare on each batch as soon as its reader read it,
	// also while it waits for its range's turn (any number at a time), and
	// lets Prepare release the records' keys, values and headers (set them
	// to nil). What the engine counts of them is taken before. For a
	// Prepare that makes the batch smaller than its records (archives), so
	// a range read ahead holds that instead of its fetches' buffers.
	PrepareEarly bool
}

func (c *Config) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Seeds) == 0 {
		add("no seed brokers")
	}
	if len(c.Topics) == 0 {
		add("no topics")
	}
	errs = append(errs, c.validatePatterns()...)
	if c.MaxRangeRecords <= 0 {
		add("max range records must be > 0, got %d", c.MaxRangeRecords)
	}
	if c.MaxInFlight <= 0 {
		add("max in flight must be > 0, got %d", c.MaxInFlight)
	}
	if c.PollInterval <= 0 {
		add("poll interval must be > 0, got %s", c.PollInterval)
	}
	if c.Group.Name != "" && c.Group.CommitPeriod <= 0 {
		add("commit period must be > 0, got %s", c.Group.CommitPeriod)
	}
	if c.StartFrom == StartCommitted && c.Group.Name == "" {
		add("start from committed needs a group")
	}
	if c.StopMillis < 0 || (c.StopMillis > 0 && !c.StopAtEnd) {
		add("stop millis must be > 0 and bounded, got %d", c.StopMillis)
	}
	if c.Group.ResetOffsets && c.StartFrom == StartCommitted {
		add("reset offsets needs start from earliest or latest")
	}
	if c.Fetch.MaxWait < 0 {
		add("fetch max wait must be >= 0 (0 means 500ms), got %s", c.Fetch.MaxWait)
	}
	if c.Fetch.MinBytes < 0 {
		add("fetch min bytes must be >= 0 (0 means 1), got %d", c.Fetch.MinBytes)
	}
	if c.Fetch.MaxBytes > 0 && c.Fetch.MinBytes > c.Fetch.MaxBytes {
		add("fetch min bytes (%d) must not exceed fetch max bytes (%d)", c.Fetch.MinBytes, c.Fetch.MaxBytes)
	}
	if c.UnreachableTimeout < 0 {
		add("unreachable timeout must be >= 0, got %s", c.UnreachableTimeout)
	}
	if c.Group.RevokeDrainTimeout < 0 {
		add("revoke drain timeout must be >= 0, got %s", c.Group.RevokeDrainTimeout)
	}
	if c.Group.Settle < 0 {
		add("group settle must be >= 0, got %s", c.Group.Settle)
	}
	if c.Group.Membership {
		if c.Group.Name == "" {
			add("membership needs a group")
		}
		for _, t := range c.Topics {
			if t.Partitions != nil {
				add("membership needs whole topics, got partitions of %q", t.Name)
			}
		}
	}
	if c.Hooks.Logger == nil {
		c.Hooks.Logger = discard{}
	}
	return errors.Join(errs...)
}

// discard is the Logger of a nil Config.Hooks.Logger.
type discard = logs.Discard
