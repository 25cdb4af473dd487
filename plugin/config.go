package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/config/examples"
	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// InputName is the name the input is registered under.
const InputName = "kafka_batched_ranges"

// Field names: part of the public interface.
const (
	fieldSeedBrokers            = "seed_brokers"
	fieldTopics                 = "topics"
	fieldConsumerGroup          = "consumer_group"
	fieldStartFrom              = "start_from"
	fieldStopAt                 = "stop_at"
	fieldMaxRangeRecords        = "max_range_records"
	fieldMaxInFlight            = "max_in_flight"
	fieldPollInterval           = "poll_interval"
	fieldProgressInterval       = "progress_interval"
	fieldOrdered                = "ordered"
	fieldOrdering               = "ordering"
	fieldKeyBuckets             = "key_buckets"
	fieldAlignRanges            = "align_ranges"
	fieldConsumerCache          = "consumer_cache"
	fieldCacheCapacity          = "capacity"
	fieldCacheIdleTimeout       = "idle_timeout"
	fieldIsolationLevel         = "isolation_level"
	fieldCommitPeriod           = "commit_period"
	fieldClientID               = "client_id"
	fieldFetchMaxBytes          = "fetch_max_bytes"
	fieldFetchMaxPartitionBytes = "fetch_max_partition_bytes"
	fieldFetchMaxWait           = "fetch_max_wait"
	fieldFetchMinBytes          = "fetch_min_bytes"
	fieldFetchConnections       = "fetch_connections"
	fieldRackID                 = "rack_id"
)

// Enum values.
const (
	startEarliest  = "earliest"
	startLatest    = "latest"
	startCommitted = "committed"

	stopNever = "never"

	orderingNone      = "none"
	orderingPartition = "partition"
	orderingKey       = "key"
	stopEnd           = "end"

	readUncommitted = "read_uncommitted"
	readCommitted   = "read_committed"
)

// Defaults of the fields the lint rule (plugin/lint.go) reads, so the spec
// and the rule cannot disagree.
const (
	defaultMaxRangeRecords        = 10000
	defaultMaxInFlight            = 16
	defaultCacheCapacity          = 64
	defaultFetchMaxBytes          = 52428800
	defaultFetchMaxPartitionBytes = 1048576
	defaultFetchMinBytes          = 1
	defaultFetchConnections       = 4 // cache.DefaultFetchConnections
	maxFetchConnections           = 64
)

// Bounds of fetch_max_wait. Kafka counts fetch.max.wait.ms in whole
// milliseconds, and 0 would answer a caught-up partition's fetch at once, a
// busy poll. The upper bound caps how long a broker holds a fetch, and so
// how long a connection that died under a held fetch goes unnoticed.
var (
	minFetchMaxWait = durationBound{time.Millisecond, "1ms"}
	maxFetchMaxWait = durationBound{time.Minute, "1m"}
)

const (
	// maxRackIDBytes is the longest rack_id franz-go accepts (kgo.Rack).
	maxRackIDBytes = 512
)

// Spec returns the configuration spec of the kafka_batched_ranges input.
// It is built once per process (building it takes tens of milliseconds:
// the lint rules, the examples) and shared: Register, the lint and the
// docs read it, and none of them changes it. A caller must not either.
func Spec() *service.ConfigSpec {
	specOnce.Do(func() { specBuilt = buildSpec() })
	return specBuilt
}

var (
	specOnce  sync.Once
	specBuilt *service.ConfigSpec // Spec(), built by specOnce
)

// buildSpec builds the configuration spec (Spec).
func buildSpec() *service.ConfigSpec {
	spec := service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Reads Kafka partitions as planned half-open offset ranges, in parallel, through a cache of per-partition cursors on one shared franz-go client, and commits only contiguous acknowledged progress.").
		Description(`
The input lists each partition's watermarks, plans ranges `+"`[start, end)`"+` of at most `+"`max_range_records`"+` offsets, fairly across partitions, and reads up to `+"`max_in_flight`"+` ranges at once. Each range is read through a cursor leased exclusively for its partition from a cache (the partition's read position and the records fetched past it), so the next range of a partition continues where the last one stopped, with no seek; every cursor reads through one shared client whose connections are pooled per broker.

Each range becomes one or more message batches. Delivery is at least once: a partition's offset is committed to `+"`consumer_group`"+` only up to the end of its longest contiguous run of acknowledged ranges, never past a range that is still being read, processed or retried.

With `+"`stop_at: end`"+` the input snapshots every partition's end offset when it starts, reads up to it and then ends, so the stream shuts down once everything is acknowledged: a bounded backfill.

A range completes when the partition's read position reaches its end, so ranges ending on transaction markers, aborted records or compacted offsets complete too. If offsets a range needs were deleted before they were read, the input stops with an error naming the topic, partition and missing offsets; it never skips them silently.

### Metadata

Every message carries:

- kafka_key
- kafka_topic
- kafka_partition
- kafka_offset
- kafka_timestamp_unix
- kafka_timestamp_ms
- kafka_tombstone_message
- every record header, by its key: a key that occurs once in a record gives its value as a string; a key repeated in one record gives all its values in record order as a list (`+"`"+`@tag`+"`"+` is `+"`"+`["a", "b"]`+"`"+`, `+"`"+`meta("tag")`+"`"+` its JSON text). A header named like one of the keys above does not replace the input's value; the first such header of each key is logged as a warning.

With `+"`range_metadata: true`"+` every message also carries:

- kafka_range_start (first offset of the message's range)
- kafka_range_end (end of the message's range, exclusive)

These are off by default to keep a message without headers at seven metadata entries, which Go keeps in one map group; nine need a full table (see `+"`range_metadata`"+`). A record header named like either of them is treated as above whether or not they are set.

With `+"`lag_metadata: true`"+` every message also carries:

- kafka_lag (the records behind it when it was fetched: the high watermark of the fetch that returned it, under read_committed too, minus its offset, minus 1; 0 at the tail)

It is off by default for the same reason: an eighth key pushes a record with one header key past the map group (see `+"`lag_metadata`"+`). A record header named kafka_lag is treated as above whether or not it is set.
`).
		Fields(
			// The list fields are any fields with a rule of their own
			// (checkBrokers, listRule): Benthos decodes a string where a
			// list belongs into the same empty list as `[]`, so the rules
			// could not tell "not a list" from "empty". Their default is
			// the empty list (an any field without one is written out as
			// its first example, which shifts the comments of the fields
			// after it in `connect create`).
			service.NewAnyField(fieldSeedBrokers).
				LintRule(fieldLint(fieldSeedBrokers)).
				Description("Kafka brokers to bootstrap from, as `host:port`. At least one is required (the default, the empty list, is a lint error). An entry may hold several, separated by commas. Maps to franz-go `kgo.SeedBrokers`.").
				Example([]string{"localhost:9092"}).
				Example([]string{"broker-1:9092,broker-2:9092"}).
				Default([]any{}),
			service.NewAnyField(fieldTopics).
				LintRule(fieldLint(fieldTopics)).
				Description("Topics to read. An entry is `name` (every partition, including partitions added while the input runs) or `name:0-3` / `name:0,2,5` (only those partitions; ranges and lists may be mixed, e.g. `name:0-3,7`) or `name:0:100` (partition 0 from offset 100, as `kafka_franz` reads it: the offset takes the place of `start_from` for that partition, also where the topic or partition is created after the input started; a committed offset of `consumer_group` wins over it, so a restart resumes where the group got to even once retention deleted the offset named; without a committed offset, one below the log start is data loss, one past the end an error). A name Kafka cannot give a topic (characters other than ASCII letters, digits, `.`, `_` and `-`) is an error that names the entry; a pattern such as `logs.*` needs `regexp_topics: true`. An entry may list several topics, separated by commas, as `kafka_franz` reads them: `a,b`, or `a:0,2,b:1` (a comma followed by partitions continues the topic before it; a topic listed again with partitions gets both lists). With `regexp_topics` each entry is one regular expression instead, never split at commas.").
				Example([]string{"events"}).
				Example([]string{"events:0-3", "audit:0,2,5"}).
				Example([]string{"events,audit"}).
				Example([]string{"events:0:1500", "events:1:1420"}).
				Default([]any{}), // or regexp_topics_include (topicEntries)
			regexpTopicsField(),
			service.NewStringField(fieldConsumerGroup).
				Description("Consumer group whose committed offsets the input resumes from and commits to, every `commit_period` and once more when the input closes. With every topic named whole, the process joins the group (franz-go group management): several processes with the same config split the partitions, each reads and commits only the partitions assigned to it, and commits are fenced by the group generation. With pinned partitions (`name:0-3`) the group only stores offsets, and must have no live members. A partition the group committed resumes from that offset; `start_from` applies where it has none, unless `reset_offsets` is set. Empty: nothing is committed.").
				Default(""),
			service.NewStringAnnotatedEnumField(fieldStartFrom, map[string]string{
				startEarliest:  "Each partition's log start offset (Kafka `auto.offset.reset=earliest`).",
				startLatest:    "Each partition's end offset when the input starts: only records produced later are read.",
				startTimestamp: "The first offset whose record timestamp is at or after `start_timestamp` (a time window's start).",
				startCommitted: "Only the consumer group's committed offsets (Kafka `auto.offset.reset=none`): a partition the group has no committed offset for is not read, and one warning names the partitions skipped (at start, at each group assignment, as partitions appear); with `stop_at: end` the input ends without them, so a group that never committed reads nothing and ends after the warning. For a new group that should read from the start use `earliest`: with a group, `earliest` and `latest` resume from committed offsets too and apply only where there are none. A committed offset below the log start is reported as data loss. Not allowed with `reset_offsets`.",
			}).
				LintRule(fieldLint(fieldStartFrom)).
				Description("Where reading starts in each partition.").
				Default(startEarliest),
			service.NewStringAnnotatedEnumField(fieldStopAt, map[string]string{
				stopNever:     "Keep polling for new records for ever.",
				stopTimestamp: "Snapshot, per partition, the first offset whose record timestamp is at or after `stop_timestamp` (bounded by the end offset) when the input starts, read up to it, then end the input like `end`: a time window's end.",
				stopEnd:       "Snapshot every partition's end offset (the high watermark, or the last stable offset under `read_committed`) when the input starts, read up to it, then end the input; `connect run` exits 0 once everything is acknowledged.",
			}).
				LintRule(fieldLint(fieldStopAt)).
				Description("When the input ends.").
				Default(stopNever),
			service.NewAnyField(fieldMaxRangeRecords).
				LintRule(fieldLint(fieldMaxRangeRecords)).
				Description("The most offsets one range covers, an integer. A range is read by one client and emitted as one or more batches; smaller ranges mean finer-grained commits and retries, larger ones fewer client hand-overs. With `align_ranges` it is also the block size ranges are aligned to, and each range is one batch of up to this many records, held in memory whole until it is acknowledged: it then sizes memory (up to `max_in_flight` x `max_range_records` records) and the batches, files or objects the outputs write.").
				Default(defaultMaxRangeRecords).
				Advanced(),
			service.NewAnyField(fieldMaxInFlight).
				LintRule(fieldLint(fieldMaxInFlight)).
				Description("The most ranges in flight at once, across all partitions, an integer: being read, awaiting acknowledgement, or (with `consumer_group`) acknowledged but not yet covered by a commit. Bounds memory, and what a crash re-reads, to about `max_in_flight` x `max_range_records` records: in memory each costs its value plus about 1 KiB (franz-go's decoded record, the Benthos message and its metadata map), so the process stays within about 1.5 x `max_in_flight` x `max_range_records` x (record size + 1 KiB) plus 100 MiB, the 1.5 being the garbage collector's headroom; in the worst case a slow range also keeps a whole fetch response alive (up to `fetch_max_bytes` per range in flight, see docs/backfills.md). With small records the overhead dominates: lower `max_in_flight` or `max_range_records` to bound memory tighter.").
				Default(defaultMaxInFlight).
				Advanced(),
			service.NewDurationField(fieldPollInterval).
				LintRule(fieldLint(fieldPollInterval)).
				Description("How often the topics (new partitions of whole-topic entries, deleted or recreated topics) and the partitions' watermarks are listed again, also while a backlog is read, so changes are seen within one interval. In a continuous read, a caught-up partition whose cursor follows its tail learns its end from every fetch, so its watermarks are listed only every 10 intervals. Ignored for reading itself, which never waits once data is known to exist.").
				Default("1s").
				Advanced(),
			metadataMaxAgeField(),
			service.NewDurationField(fieldProgressInterval).
				LintRule(fieldLint(fieldProgressInterval)).
				Description("With `stop_at: end`, how often the input logs one progress line: the share of the snapshot read and acknowledged, records and MB read, the current rate and the estimated time left. One summary line follows when the input ends, whatever this is. 0 turns progress lines off.").
				Default("10s").
				Advanced(),
			service.NewBoolField(fieldOrdered).
				Description("If true, at most one range per partition is in flight, so each partition's records reach the pipeline in offset order (a range starts only once the previous one of its partition is acknowledged). If false, several ranges of one partition are read in parallel and may be delivered out of order.").
				Default(false),
			service.NewStringAnnotatedEnumField(fieldOrdering, map[string]string{
				orderingNone:      "Ranges of a partition are read and handed out in parallel; batches may reach the output out of offset order. The same as `ordered: false`.",
				orderingPartition: "One range of a partition in flight, each batch acknowledged before the next: each partition's records reach the pipeline in offset order. The same as `ordered: true`.",
				orderingKey:       "Per-key order with parallelism within a partition: a partition's records are handed out in batches of one key bucket each (the key's hash modulo `key_buckets`; records without a key share one bucket, so they keep partition order among themselves). A bucket's next batch goes out only once its previous one is acknowledged, or rejected and delivered again (with `auto_replay_nacks` a rejected batch is replayed before anything later of its bucket); the buckets of a partition run in parallel, up to the pipeline's threads. Commits stay each partition's contiguous acknowledged run. `batching` may set `count` and `byte_size` (the most a bucket's batch gathers, default 500 records); not with `align_ranges`, a share group, or a `batching` `period`, `check` or `processors`.",
			}).
				Description("How records are ordered through the pipeline: `none`, `partition` or `key`. Empty (the default) follows `ordered`; set both only if they agree.").
				LintRule(fieldLint(fieldOrdering)).
				Default(""),
			service.NewIntField(fieldKeyBuckets).
				Description("With `ordering: key`, how many buckets a partition's keys hash into (plus one for records without a key): keys of one bucket wait for each other, so more buckets let more keys run in parallel, at a few bytes per bucket in use.").
				LintRule(fieldLint(fieldKeyBuckets)).
				Default(1024).
				Advanced(),
			service.NewBoolField(fieldAlignRanges).
				Description("If true, ranges lie on blocks of `max_range_records` offsets, `[k·N, (k+1)·N)`, each range is emitted as one batch holding all of its records, and `consumer_group` commits only range ends, so a re-run (after a crash, a restart or a replay) reads and emits the same ranges with the same records: an output that writes one file or object per batch, named by topic, partition and `kafka_range_start` (`range_metadata: true`), overwrites each range's file whole, and a crash leaves no record in two files (`config/examples/exactly_once_files.yaml`). A partition whose first offset lies inside a block (its log start after retention, `start_from: latest` or `timestamp`, an offset committed without this option, offsets skipped as lost) first reads to the end of that block. With `stop_at: end` or `timestamp` the last range of a partition is cut at the snapshot end, so a re-run plans it the same only over the same end: a re-run over a topic that grew reads that range again from its start, to the new end or the block's end, and replaces its file by a longer one, so name files by range start, never by end. With `stop_at: never` a block is read only once all of its offsets are written (transaction markers count), so records at the tail wait until their block is complete: choose `max_range_records` for the latency that allows. A range that holds no record (only transaction markers, aborted or compacted records) emits no batch and counts as done.").
				Default(false),
			service.NewObjectField(fieldConsumerCache,
				service.NewAnyField(fieldCacheCapacity).
					LintRule(fieldLint(fieldConsumerCache+"."+fieldCacheCapacity)).
					Description("The most idle cursors that keep their buffered records, an integer. A cursor is one partition's read position with the records already fetched past it, so a range that starts where the last one of its partition ended continues without a seek or a new fetch. Cursors beyond this many, least recently used first, drop their buffered records but keep their position, and fetch again when next used; a cursor in use is never trimmed. Every cursor reads through one shared client whose connections are pooled per broker (at most 2 per broker), so this no longer changes how many connections the input opens. 0 keeps no records buffered between ranges.").
					Default(defaultCacheCapacity),
				service.NewDurationField(fieldCacheIdleTimeout).
					LintRule(fieldLint(fieldConsumerCache+"."+fieldCacheIdleTimeout)).
					Description("An idle cursor that has not been used for this long is forgotten: its position and buffered records are dropped, and the next range of its partition starts a new one. In continuous reads a caught-up partition's cursor is not idle: it stays in its broker's fetch loop, long-polled (see `fetch_max_wait`). Connections are pooled per broker whatever this is.").
					Default("5m"),
			).
				Description("The cache of cursors: per partition, a read position and the records fetched past it, read through one shared client.").
				Advanced(),
			service.NewStringAnnotatedEnumField(fieldIsolationLevel, map[string]string{
				readUncommitted: "Read every record, including those of open and aborted transactions; ranges end at the high watermark.",
				readCommitted:   "Read only committed records; ranges end at the last stable offset and aborted records are never emitted.",
			}).
				LintRule(fieldLint(fieldIsolationLevel)).
				Description("Kafka `isolation.level` of the reads and of the end offsets ranges are planned to.").
				Default(readUncommitted),
			service.NewDurationField(fieldCommitPeriod).
				LintRule(fieldLint(fieldCommitPeriod)).
				Description("How often acknowledged progress is committed to `consumer_group` (Kafka `auto.commit.interval.ms`).").
				Default("5s").
				Advanced(),
			service.NewStringField(fieldClientID).
				Description("Client ID of every Kafka client the input opens (Kafka `client.id`, franz-go `kgo.ClientID`).").
				Default("benthos").
				Advanced(),
			service.NewStringField(fieldFetchMaxBytes).
				LintRule(fieldLint(fieldFetchMaxBytes)).
				Description("The most bytes a fetch response may hold (Kafka `fetch.max.bytes`, franz-go `kgo.FetchMaxBytes`): a number of bytes, or a size with a unit, `KB`, `MB`, `GB` (powers of 1000) or `KiB`, `MiB`, `GiB` (powers of 1024), such as `50MiB`; more than 0 and less than 2 GiB.").
				Default(strconv.Itoa(defaultFetchMaxBytes)).
				Example("50MiB").
				Advanced(),
			service.NewStringField(fieldFetchMaxPartitionBytes).
				LintRule(fieldLint(fieldFetchMaxPartitionBytes)).
				Description("The most bytes a fetch returns for one partition (Kafka `max.partition.fetch.bytes`, franz-go `kgo.FetchMaxPartitionBytes`), written as `fetch_max_bytes` is, such as `1MiB`; at most `fetch_max_bytes`. At least one record batch is always returned, even if larger. At its default value (`1MiB`, written or not), a broker's fetches ask 4 MiB among the partitions being read (one partition 4 MiB, two 2 MiB each, four or more 1 MiB each), never much past a range's end, so a backfill of one partition fetches a quarter as often; any other value is what a fetch asks of every range.").
				Default(strconv.Itoa(defaultFetchMaxPartitionBytes)).
				Example("512KiB").
				Advanced(),
			service.NewDurationField(fieldFetchMaxWait).
				LintRule(fieldLint(fieldFetchMaxWait)).
				Description("How long a broker holds a fetch of caught-up partitions until records arrive (Kafka `fetch.max.wait.ms`, franz-go `kgo.FetchMaxWait`). A new record is delivered as soon as it is written (with `fetch_min_bytes` at 1), so this bounds only how often idle partitions are polled. At least `1ms` (Kafka counts whole milliseconds; 0 would poll caught-up partitions without pause) and at most `1m` (a longer hold delays noticing a connection that died under it).").
				Default("500ms").
				Advanced(),
			service.NewStringField(fieldFetchMinBytes).
				LintRule(fieldLint(fieldFetchMinBytes)).
				Description("How many bytes a broker waits for before it answers a fetch, up to `fetch_max_wait` (Kafka `fetch.min.bytes`, franz-go `kgo.FetchMinBytes`), written as `fetch_max_bytes` is, such as `64KiB`; at least 1 and at most `fetch_max_bytes`. The default 1 answers as soon as any record is there; raising it trades latency (up to `fetch_max_wait`) for fewer, larger fetches.").
				Default(strconv.Itoa(defaultFetchMinBytes)).
				Example("64KiB").
				Advanced(),
			service.NewAnyField(fieldFetchConnections).
				LintRule(fieldLint(fieldFetchConnections)).
				Description("The most fetch connections the input opens to one broker, an integer from 1 to 64. The first carries every caught-up partition's long poll, so a caught-up reader keeps its connections whatever this is. The others, lanes, open only to a broker whose round trip (measured by the input, from the listing of its partitions on) is 2 ms or more, once a range with records known to exist, at least 2 x `fetch_max_partition_bytes` of them (before its first answer, a range of as many records of 1 KiB), is read from it: all of them together, each a client of its own with the same TLS, SASL and connection settings (their connections may open while the measure is under way and leans that way; ranges move onto them once the broker is judged distant). A range then fetches on one lane, one fetch in flight at a time, of up to 8 MiB (or `fetch_max_partition_bytes`, if larger), so the ranges of one partition in flight (`max_in_flight`) read at once over several connections, and a backfill from a distant cluster is no longer bound to two fetches of `fetch_max_partition_bytes` per round trip (docs/backfills.md). A lane closes 3 s after its last range. Memory: up to 4 fetches of 8 MiB per range in flight (one on a lane, three held), where a range on the broker's connection holds 3 of `fetch_max_partition_bytes`. 1 reads every broker over one fetch connection, as before this field existed.").
				Default(defaultFetchConnections).
				Advanced(),
			service.NewStringField(fieldRackID).
				LintRule(fieldLint(fieldRackID)).
				Description("The rack this input runs in (Kafka `client.rack`, franz-go `kgo.Rack`), at most 512 bytes. With brokers configured with `broker.rack` and `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`, fetches go to a replica in this rack instead of the leader (KIP-392, follower fetching), which can save cross-rack or cross-zone traffic; errors from that replica fall back to the leader. Empty: every fetch goes to the leader.").
				Default("").
				Advanced(),
			service.NewAutoRetryNacksToggleField(),
			rangeMetadataField(),
			lagMetadataField(),
			batchingField(),
		).
		Fields(archiveFields()...).
		Fields(regexpTopicsListFields()...).
		Fields(securityFields()...).
		Fields(groupFields()...).
		Fields(policyFields()...).
		Fields(shareFields()...).
		Fields(foreignSpecFields()...).
		LintRule(specLint())
	for _, ex := range Examples() {
		spec = spec.Example(ex.Title, ex.Summary, ex.Config)
	}
	return spec
}

// Example is one file of config/examples, as shown in the spec's docs.
type Example struct {
	File    string // file name in config/examples
	Title   string // from the file name
	Summary string // the file's leading comment
	Config  string // the whole file, verbatim
}

// Examples returns the files of config/examples, sorted by name. They are
// embedded, so the spec shows exactly what `connect lint` and `connect test`
// check.
func Examples() []Example {
	entries, err := fs.ReadDir(examples.FS, ".")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	var out []Example
	for _, e := range entries {
		b, err := examples.FS.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		var summary []string
		for _, line := range strings.Split(string(b), "\n") {
			c, ok := strings.CutPrefix(line, "#")
			if !ok {
				break
			}
			summary = append(summary, strings.TrimSpace(c))
		}
		out = append(out, Example{
			File:    e.Name(),
			Title:   strings.TrimSuffix(e.Name(), ".yaml"),
			Summary: strings.Join(summary, " "),
			Config:  string(b),
		})
	}
	return out
}

// TopicSpec is one entry of `topics`: a topic and, if Partitions is nil,
// all of its partitions (including ones added later).
type TopicSpec struct {
	Name       string
	Partitions []int32
	Offsets    map[int32]int64 // start offsets of partitions named with one (`name:partition:offset`), in Partitions too
}

// Config is the parsed and validated input configuration.
type Config struct {
	SeedBrokers            []string
	Topics                 []TopicSpec
	RegexpTopics           bool          // each Topics name is a regular expression (plugin/patterns.go)
	ExcludeTopics          []string      // regexp_topics_exclude: patterns of topics never read
	MetadataMaxAge         time.Duration // how often patterns are matched again
	ConsumerGroup          string
	StartFrom              string
	StopAt                 string
	MaxRangeRecords        int64
	MaxInFlight            int
	PollInterval           time.Duration
	ProgressInterval       time.Duration
	Ordered                bool
	Ordering               string // none, partition or key: ordering, or else what ordered says
	KeyBuckets             int    // ordering: key: buckets a partition's keys hash into
	AlignRanges            bool   // ranges on blocks of MaxRangeRecords, one batch each, commits on range ends
	CacheCapacity          int
	CacheIdleTimeout       time.Duration
	ReadCommitted          bool
	CommitPeriod           time.Duration
	ClientID               string
	FetchMaxBytes          int32
	FetchMaxPartitionBytes int32
	FetchMaxWait           time.Duration
	FetchMinBytes          int32
	FetchConnections       int
	RackID                 string
	AutoReplayNacks        bool
	RangeMetadata          bool            // also set kafka_range_start and kafka_range_end (plugin/metadata.go)
	LagMetadata            bool            // also set kafka_lag (plugin/metadata.go)
	BareRecords            bool            // record_metadata: false, messages without metadata (plugin/archive.go)
	Archive                ArchiveConfig   // archive mode (plugin/archive.go); empty: one message per record
	Security               security.Config // TLS and SASL of every client (plugin/security.go)
	Group                  GroupConfig     // membership of consumer_group (plugin/group.go)
	Policy                 PolicyConfig    // data-loss policy and time windows (plugin/policy.go)
	Share                  ShareConfig     // share_group and its fields (plugin/share_config.go)

	// Batching is how ranges are cut into batches. Empty: as fetched
	// (plugin/batching.go).
	Batching service.BatchPolicy
}

// ParseConfig validates a parsed Benthos config with the rules of the lint
// (checkRules, plugin/lint.go) and reads it into a Config.
func ParseConfig(pc *service.ParsedConfig) (Config, error) {
	if err := checkRules(pc); err != nil {
		return Config{}, err
	}
	var (
		c    Config
		errs []error
	)
	str := func(name string) string {
		v, err := pc.FieldString(name)
		errs = append(errs, err)
		return v
	}
	integer := func(path ...string) int {
		v, err := pc.FieldAny(path...)
		if err == nil {
			var n int
			n, err = parseInteger(strings.Join(path, "."), v)
			errs = append(errs, err)
			return n
		}
		errs = append(errs, err)
		return 0
	}
	duration := func(path ...string) time.Duration {
		s, err := pc.FieldString(path...)
		if err == nil {
			var d time.Duration
			d, err = parseDuration(strings.Join(path, "."), s)
			errs = append(errs, err)
			return d
		}
		errs = append(errs, err)
		return 0
	}
	size := func(name string) int32 {
		s, err := pc.FieldString(name)
		if err == nil {
			var n int32
			n, err = parseByteSize(name, s)
			errs = append(errs, err)
			return n
		}
		errs = append(errs, err)
		return 0
	}

	brokers := entriesOf(pc, fieldSeedBrokers)
	var err error
	c.ConsumerGroup = str(fieldConsumerGroup)
	c.StartFrom = str(fieldStartFrom)
	c.StopAt = str(fieldStopAt)
	maxRange := integer(fieldMaxRangeRecords)
	c.MaxInFlight = integer(fieldMaxInFlight)
	c.PollInterval = duration(fieldPollInterval)
	c.MetadataMaxAge = duration(fieldMetadataMaxAge)
	if s, err := pc.FieldString(fieldProgressInterval); err != nil {
		errs = append(errs, err)
	} else {
		c.ProgressInterval, err = parseOptionalDuration(fieldProgressInterval, s)
		errs = append(errs, err)
	}
	c.Ordered, err = pc.FieldBool(fieldOrdered)
	errs = append(errs, err)
	c.Ordering = str(fieldOrdering)
	switch c.Ordering {
	case "":
		c.Ordering = orderingNone
		if c.Ordered {
			c.Ordering = orderingPartition
		}
	case orderingPartition:
		c.Ordered = true
	}
	c.KeyBuckets = integer(fieldKeyBuckets)
	c.AlignRanges, err = pc.FieldBool(fieldAlignRanges)
	errs = append(errs, err)
	c.CacheCapacity = integer(fieldConsumerCache, fieldCacheCapacity)
	c.CacheIdleTimeout = duration(fieldConsumerCache, fieldCacheIdleTimeout)
	iso := str(fieldIsolationLevel)
	c.CommitPeriod = duration(fieldCommitPeriod)
	c.ClientID = str(fieldClientID)
	c.FetchMaxBytes = size(fieldFetchMaxBytes)
	c.FetchMaxPartitionBytes = size(fieldFetchMaxPartitionBytes)
	c.FetchMaxWait = duration(fieldFetchMaxWait)
	c.FetchMinBytes = size(fieldFetchMinBytes)
	c.FetchConnections = integer(fieldFetchConnections)
	c.RackID = str(fieldRackID)
	c.AutoReplayNacks, err = pc.FieldBool(service.AutoRetryNacksToggleFieldName)
	errs = append(errs, err)
	c.RangeMetadata, err = pc.FieldBool(fieldRangeMetadata)
	errs = append(errs, err)
	c.LagMetadata, err = pc.FieldBool(fieldLagMetadata)
	errs = append(errs, err)
	recordMeta, err := pc.FieldBool(fieldRecordMetadata)
	errs = append(errs, err)
	c.BareRecords = !recordMeta
	c.Archive, err = parseArchive(pc)
	errs = append(errs, err)
	c.Batching, err = pc.FieldBatchPolicy(fieldBatching)
	errs = append(errs, err)
	c.Security, err = parseSecurity(pc)
	errs = append(errs, err)
	c.Group, err = parseGroup(pc)
	errs = append(errs, err)
	c.Policy, err = parsePolicy(pc)
	errs = append(errs, err)
	c.Share, err = parseShare(pc)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}

	c.MaxRangeRecords = int64(maxRange)
	c.ReadCommitted = iso == readCommitted
	c.SeedBrokers, _ = splitBrokers(brokers)
	c.Topics, c.RegexpTopics, c.ExcludeTopics, err = parseTopicFields(pc)
	if err != nil {
		return Config{}, err // checkRules reported it already; kept as a guard
	}
	return c, nil
}

// ParseTopic parses one topic of a `topics` entry: `name`, `name:0-3`,
// `name:0,2,5`, a mix such as `name:0-3,7`, or one partition with its start
// offset, `name:0:100` (an entry of several topics, `a,b`, is split first).
// Partitions are returned sorted and deduplicated.
func ParseTopic(entry string) (TopicSpec, error) {
	ts, why := parseTopic(entry)
	if why != "" {
		return TopicSpec{}, fmt.Errorf("%s: invalid entry %q: %s", fieldTopics, entry, why)
	}
	return ts, nil
}

// parseTopic parses a `topics` entry as ParseTopic does, and returns why it
// is invalid, or "" (the map topic_error of the lint rule gives the same
// reasons).
func parseTopic(entry string) (TopicSpec, string) {
	name, parts, hasParts := strings.Cut(strings.TrimSpace(entry), ":")
	if name == "" {
		return TopicSpec{}, whyEmptyName
	}
	if why := topicNameWhy(name); why != "" {
		return TopicSpec{}, why
	}
	ts := TopicSpec{Name: name}
	if !hasParts {
		return ts, ""
	}
	if part, offset, hasOffset := strings.Cut(parts, ":"); hasOffset {
		// name:partition:offset, an explicit start offset, as kafka_franz
		// reads it: one partition, from that offset.
		p, why := parsePartition(part)
		if why != "" {
			return TopicSpec{}, why
		}
		t := strings.TrimSpace(offset)
		o, err := strconv.ParseInt(t, 10, 64)
		if !partitionRE.MatchString(t) || err != nil {
			return TopicSpec{}, fmt.Sprintf(whyNotOffset, strconv.Quote(offset))
		}
		ts.Partitions, ts.Offsets = []int32{p}, map[int32]int64{p: o}
		return ts, ""
	}
	seen := map[int32]bool{}
	for _, item := range strings.Split(parts, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return TopicSpec{}, whyEmptyPart
		}
		lo, hi, isRange := strings.Cut(item, "-")
		from, why := parsePartition(lo)
		if why != "" {
			return TopicSpec{}, why
		}
		to := from
		if isRange {
			if to, why = parsePartition(hi); why != "" {
				return TopicSpec{}, why
			}
			if to < from {
				return TopicSpec{}, fmt.Sprintf(whyBackwards, item)
			}
		}
		for p := int64(from); p <= int64(to); p++ {
			if !seen[int32(p)] {
				seen[int32(p)] = true
				ts.Partitions = append(ts.Partitions, int32(p))
			}
		}
	}
	slices.Sort(ts.Partitions)
	return ts, ""
}

// topicNameWhy returns why Kafka cannot have a topic of that name, or "".
// A name with a regular expression's characters gets the hint to
// regexp_topics (Bento's docs show `things.*` as a topics entry).
func topicNameWhy(name string) string {
	switch {
	case len(name) > 249:
		return fmt.Sprintf(whyNameLength, len(name))
	case name == "." || name == "..":
		return whyNameDots
	case topicNameRE.MatchString(name):
		return ""
	case strings.ContainsAny(name, `*+?[](){}|^$\`):
		return whyNamePattern
	}
	return whyNameChars
}

// maxPartition bounds partition numbers in topic entries, far above any real
// topic, so a typo cannot make a list of billions of partitions.
const maxPartition = 1 << 20

// parsePartition parses a partition number of a topic entry, and returns why
// it is invalid, or "".
func parsePartition(s string) (int32, string) {
	t := strings.TrimSpace(s)
	if !partitionRE.MatchString(t) {
		return 0, fmt.Sprintf(whyNotPartition, strconv.Quote(s))
	}
	n, err := strconv.ParseInt(t, 10, 32)
	if err != nil || n >= maxPartition {
		return 0, fmt.Sprintf(whyPartitionSize, t, maxPartition-1)
	}
	return int32(n), ""
}
