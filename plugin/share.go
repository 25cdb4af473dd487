package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// Fields of share groups (KIP-932): with share_group the input is a member
// of a share group instead of a range reader (shareInput, below).
const (
	fieldShareGroup         = "share_group"
	fieldShareMaxDeliveries = "share_max_deliveries"
	fieldShareMaxRecords    = "share_max_records"
	fieldShareMembers       = "share_members"
	fieldShareRenewInterval = "share_renew_interval"
)

// shareFields are the spec of the share group fields.
func shareFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringField(fieldShareGroup).
			LintRule(fieldLint(fieldShareGroup)).
			Description("Read the topics as a member of this Kafka share group (KIP-932, \"queues for Kafka\", Kafka 4.0 or later with share groups on) instead of planning ranges: the broker hands each member acquired records of any partition under a time-limited lock, so more members than partitions share the work, and takes per-record acknowledgements. A Benthos ack accepts a batch's records; a nack releases them for redelivery (to any member, `kafka_delivery_count` one more), or rejects them (the broker archives them) after `share_max_deliveries` deliveries, or at once with `auto_replay_nacks: false`. There is no order within a partition and no bounded read; where a new group starts is the group's `share.auto.offset.reset` (latest by default). Messages carry the usual `kafka_` keys and `kafka_delivery_count`. It excludes `consumer_group`, pinned partitions and the fields of ranges and consumer groups; `docs/share-groups.md` says when to pick it. Empty: no share group.").
			Default(""),
		service.NewAnyField(fieldShareMaxDeliveries).
			LintRule(fieldLint(fieldShareMaxDeliveries)).
			Description("With `share_group`, how many deliveries a record gets at most: a nack of a record delivered this many times rejects it (the broker archives it, never delivering it again) instead of releasing it. 0 leaves it to the broker, which archives a record after `group.share.delivery.count.limit` deliveries (5 by default); a value above that limit never applies. It is a lint error with `auto_replay_nacks: false`, where a nack rejects at once.").
			Default(0),
		service.NewAnyField(fieldShareMaxRecords).
			LintRule(fieldLint(fieldShareMaxRecords)).
			Description("With `share_group`, how many records one member acquires per fetch at most (franz-go `kgo.ShareMaxRecords`, strict). A member holds one fetch's records at a time, under their acquisition lock, until every batch of them is acknowledged: it bounds what one member keeps from the others, what a crash delays by a lock's duration, and how large a batch can grow.").
			Default(share.DefaultMaxRecords).
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

// maxShareInt bounds the share group's integer fields: franz-go takes them
// as int32, and more members than this in one process is a typo.
const (
	maxShareRecords = 1 << 20
	maxShareMembers = 256
)

// shareFieldRules are the value rules of the share group fields.
func shareFieldRules() []fieldRule {
	return []fieldRule{
		{fieldShareGroup, trimmed},
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

// shareExcluded are the fields a share group has no use for, and why: each
// is refused when written with share_group. The why names the share
// group's own setting where there is one.
var shareExcluded = []struct{ name, why string }{
	{fieldConsumerGroup, "a share group is a group of its own kind: the broker keeps what its members acknowledged, there are no offsets to commit"},
	{fieldStartFrom, "where a share group starts in a partition it has not read is the group's config share.auto.offset.reset (latest by default; earliest; or by_duration:<ISO 8601 duration>): kafka-configs.sh --bootstrap-server <broker> --alter --entity-type groups --entity-name <share_group> --add-config share.auto.offset.reset=earliest"},
	{fieldStopAt, "a share group has no end to stop at: the broker hands out records until the input stops, so there is no bounded read"},
	{fieldStartTimestamp, "a share group starts where share.auto.offset.reset says (by_duration:<ISO 8601 duration> starts at a time ago)"},
	{fieldStopTimestamp, "a share group has no end to stop at"},
	{fieldAlignRanges, "the broker decides which records each member acquires: there are no ranges to align"},
	{fieldOrdered, "the broker hands one partition's records to several members at once and delivers released ones again later: there is no order within a partition"},
	{fieldMaxRangeRecords, "there are no ranges: share_max_records bounds what a member acquires per fetch"},
	{fieldMaxInFlight, "there are no ranges: each of share_members members holds one fetch's records at a time"},
	{fieldPollInterval, "there are no watermarks to list: the broker hands out records as they come"},
	{fieldProgressInterval, "there is no bounded read to report on"},
	{fieldConsumerCache, "a share group has no per-partition read positions to cache"},
	{fieldIsolationLevel, "it is the group's config share.isolation.level (read_uncommitted by default), set with kafka-configs.sh --entity-type groups"},
	{fieldCommitPeriod, "acknowledgements go to the broker as batches are acknowledged: there is nothing to commit"},
	{fieldFetchMaxPartitionBytes, "a share fetch has no per-partition limit: share_max_records bounds it"},
	{fieldRangeMetadata, "there are no ranges"},
	{fieldLagMetadata, "a share fetch carries no high watermark"},
	{fieldRegexpTopicsExclude, "a share group reads what its patterns match: write patterns that leave those topics out"},
	{fieldOnDataLoss, "the broker moves a share group past deleted records: there is no data loss to detect"},
	{fieldOnMissingTopic, "a share group reads the topics that exist, and topics created later"},
	{fieldStartTimeout, "it bounds the start of a bounded read, and a share group has none"},
	{fieldUnreachable, "it bounds an outage of a bounded read, and a share group has none"},
	{fieldResetOffsets, "a share group's start is its config share.auto.offset.reset; kafka-share-groups.sh --reset-offsets moves it"},
	{fieldGroupProtocol, "a share group has its own protocol (KIP-932)"},
	{fieldGroupBalancers, "the broker assigns a share group's partitions"},
	{fieldRemoteAssignor, "the broker assigns a share group's partitions"},
	{fieldSessionTimeout, "it is the broker's group.share.session.timeout.ms"},
	{fieldHeartbeatInterval, "it is the broker's group.share.heartbeat.interval.ms"},
	{fieldRebalanceTimeout, "a share group does not rebalance: records are acquired, not partitions"},
	{fieldRevokeDrain, "a share group does not revoke partitions: a leaving member releases what it holds"},
	{fieldInstanceID, "a share group has no static membership"},
}

// shareOnly are the fields used only with share_group.
var shareOnly = []string{fieldShareMaxDeliveries, fieldShareMaxRecords, fieldShareMembers, fieldShareRenewInterval}

// Messages of the share group rules.
const (
	msgShareExcluded = "%s cannot be used with %s (%s): %s"
	msgSharePinned   = "%s[%d]: %s names partitions, but a share group reads whole topics (the broker hands records of every partition to its members)"
	msgShareOnly     = "%s is set but only used with %s"
	// msgShareDeliveriesNoReplay takes share_max_deliveries and its
	// value, auto_replay_nacks, share_max_deliveries, auto_replay_nacks
	// and the value again.
	msgShareDeliveriesNoReplay = "%s (%d) cannot be used with %s: false: a nack then rejects a record at once (the broker archives it), so no record is delivered again; remove %s, or set %s: true to release a failed record until it was delivered %d times"
)

// shareRules checks the share group fields against the others. written
// reports whether a top-level field was written. Benthos hands the lint
// and ParseConfig the config with its defaults filled in, so a field counts
// as written when it differs from its default (differsFromDefault): a
// default written out, such as start_from: earliest, cannot be told apart,
// which is why the member logs the group's share.auto.offset.reset when it
// starts.
func shareRules(pc *service.ParsedConfig, written func(name string) bool) []error {
	group := text(pc, fieldShareGroup)
	var errs []error
	if group == "" {
		for _, name := range shareOnly {
			if written(name) {
				errs = append(errs, fmt.Errorf(msgShareOnly, name, fieldShareGroup))
			}
		}
		return errs
	}
	for _, f := range shareExcluded {
		if written(f.name) {
			errs = append(errs, fmt.Errorf(msgShareExcluded, f.name, fieldShareGroup, group, f.why))
		}
	}
	if replay, err := pc.FieldBool(service.AutoRetryNacksToggleFieldName); err == nil && !replay && written(fieldShareMaxDeliveries) {
		if v, err := pc.FieldAny(fieldShareMaxDeliveries); err == nil {
			if n, err := parseInteger(fieldShareMaxDeliveries, v); err == nil && n > 0 {
				errs = append(errs, fmt.Errorf(msgShareDeliveriesNoReplay, fieldShareMaxDeliveries, n, service.AutoRetryNacksToggleFieldName, fieldShareMaxDeliveries, service.AutoRetryNacksToggleFieldName, n))
			}
		}
	}
	if patterns, _ := pc.FieldBool(fieldRegexpTopics); !patterns {
		for i, e := range entriesOf(pc, fieldTopics) {
			if strings.Contains(e, ":") {
				errs = append(errs, fmt.Errorf(msgSharePinned, fieldTopics, i, strconv.Quote(e)))
			}
		}
	}
	return errs
}

var (
	defaultsOnce sync.Once
	defaultsPC   *service.ParsedConfig // a config of only the required fields: every other field at its default
)

// differsFromDefault returns the written test of shareRules: a field is
// written when its value is not its default.
func differsFromDefault(pc *service.ParsedConfig) func(string) bool {
	defaultsOnce.Do(func() {
		var err error
		defaultsPC, err = lintSpec().ParseYAML("seed_brokers: [\"localhost:9092\"]\ntopics: [\"t\"]\n", nil)
		if err != nil {
			panic(err) // the spec's own defaults: cannot fail
		}
	})
	return func(name string) bool {
		if !pc.Contains(name) {
			return false
		}
		v, err := pc.FieldAny(name)
		if err != nil || v == nil {
			return false
		}
		d, err := defaultsPC.FieldAny(name)
		if err != nil {
			return true // no default: set
		}
		return !reflect.DeepEqual(v, d) && fmt.Sprint(v) != fmt.Sprint(d)
	}
}

// shareInput is the input with share_group: share_members members of the
// share group (share.Members, which merges their batches), whose batches
// ReadBatch turns into message batches, cut by the batching policy if there
// is one (share_batching.go).
type shareInput struct {
	conf    Config
	log     *service.Logger
	opts    Options
	msgs    messages
	members *share.Members

	mu       sync.Mutex // guards startErr
	startErr error      // why Connect stopped the input (a cluster without share groups)

	batcher *service.Batcher // nil without a batching policy
	tail    *sharePart       // what the last cut left of a batch, first in the next message batch

	closeOnce sync.Once
	closeErr  error
}

// sharePart is a share batch and its messages, built once.
type sharePart struct {
	b    *share.Batch
	msgs service.MessageBatch
	ack  partAck
}

// partAck is how an acknowledgement finds a share batch's records among
// the messages the pipeline failed: idx indexes the messages of the batch
// as read (a batch error names the failed ones by it, through processors
// that filter or reorder), and the batch's records are those from offset
// on, since a batching policy may have split it.
type partAck struct {
	b      *share.Batch
	idx    *service.Indexer
	offset int
}

func newShareInput(conf Config, res *service.Resources, opts Options) (*shareInput, error) {
	log := res.Logger()
	warnInsecure(log, conf.Security)
	in := &shareInput{
		conf: conf,
		log:  log,
		opts: opts,
		msgs: conf.messages(newHeaderCollisions(log)),
	}
	if !conf.Batching.IsNoop() {
		b, err := conf.Batching.NewBatcher(res)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fieldBatching, err)
		}
		in.batcher = b
	}
	topics := make([]string, len(conf.Topics))
	for i, t := range conf.Topics {
		topics[i] = t.Name
	}
	s := conf.Share
	members, err := share.NewMembers(share.Config{
		Seeds:         conf.SeedBrokers,
		ClientOpts:    conf.shareClientOpts(),
		Group:         s.Group,
		Topics:        topics,
		RegexpTopics:  conf.RegexpTopics,
		MaxRecords:    s.MaxRecords,
		MaxDeliveries: s.MaxDeliveries,
		RenewInterval: s.RenewInterval,
		Observer:      newShareObserver(res.Metrics(), conf.Topics),
		Logger:        log,
	}, s.Members)
	if err != nil {
		return nil, err
	}
	in.members = members
	return in, nil
}

// shareClientOpts are the client options of a share group member: the
// client's own (ID, TLS, SASL) and the fetch settings a share fetch uses.
func (c Config) shareClientOpts() []kgo.Opt {
	opts := append(c.ClientOpts(),
		kgo.FetchMaxBytes(c.FetchMaxBytes),
		kgo.FetchMaxWait(c.FetchMaxWait),
		kgo.FetchMinBytes(c.FetchMinBytes),
	)
	if c.RackID != "" {
		opts = append(opts, kgo.Rack(c.RackID))
	}
	return opts
}

// Connect starts the members not started yet. A cluster without share
// groups stops the input (retrying cannot fix it): Close reports the error,
// which names the broker, its version and share_group. Other failures are
// retried by Benthos.
func (in *shareInput) Connect(ctx context.Context) error {
	if in.failure() != nil {
		return service.ErrEndOfInput
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	err := in.members.Start(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, share.ErrClosed):
		return service.ErrEndOfInput
	case errors.Is(err, share.ErrNoShareGroups):
		in.mu.Lock()
		in.startErr = err
		in.mu.Unlock()
		in.log.Errorf("Input stopped: %v", err)
		return service.ErrEndOfInput
	}
	return fmt.Errorf("%s %s: %w", fieldShareGroup, in.conf.Share.Group, err)
}

// failure returns what stopped the input: the start, or a member.
func (in *shareInput) failure() error {
	in.mu.Lock()
	err := in.startErr
	in.mu.Unlock()
	if err != nil {
		return err
	}
	return in.members.Err()
}

// receive returns the next batch of a member, waiting as long as ctx
// allows: service.ErrNotConnected before Connect succeeded, ctx's error,
// and service.ErrEndOfInput once a member stopped on an error (Close
// reports it) or the input closed.
func (in *shareInput) receive(ctx context.Context) (*share.Batch, error) {
	b, err := in.members.Next(ctx)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, share.ErrNotStarted):
		return nil, service.ErrNotConnected
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	}
	return nil, service.ErrEndOfInput
}

// part builds the messages of b.
func (in *shareInput) part(b *share.Batch) *sharePart {
	msgs := in.msgs.shareBatch(b.Topic, b.Partition, b.Records)
	return &sharePart{b: b, msgs: msgs, ack: partAck{b: b, idx: msgs.Index()}}
}

// ReadBatch returns the next message batch: one share batch's records, or
// with a batching policy records of several, cut where the policy says.
// A batch never waits for records of a later fetch: a member fetches again
// only once every batch of its last fetch is acknowledged.
func (in *shareInput) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if in.batcher == nil {
		b, err := in.receive(ctx)
		if err != nil {
			return nil, nil, err
		}
		p := in.part(b)
		return p.msgs, in.ackFunc([]partAck{p.ack}), nil
	}
	return in.readBatched(ctx)
}

// ackFunc acknowledges parts: accepts them; or nacks them; or, when the
// pipeline failed some messages only (a batch error naming them, such as
// reject_errored's), nacks their records and accepts the others.
func (in *shareInput) ackFunc(parts []partAck) service.AckFunc {
	var once sync.Once
	return func(_ context.Context, err error) error {
		once.Do(func() {
			var be *service.BatchError
			granular := errors.As(err, &be) && be.IndexedErrors() > 0
			for _, p := range parts {
				switch {
				case err == nil:
					p.b.Ack()
				case granular:
					failed := map[int]bool{}
					n := len(p.b.Records)
					be.WalkMessagesIndexedBy(p.idx, func(i int, _ *service.Message, merr error) bool {
						if j := i - p.offset; merr != nil && j >= 0 && j < n {
							failed[j] = true
						}
						return true
					})
					p.b.Settle(func(i int) bool { return failed[i] }, err, !in.conf.AutoReplayNacks)
				default:
					in.nack(p.b, err)
				}
			}
		})
		return nil
	}
}

// nack gives b back: released for redelivery (rejected after
// share_max_deliveries), or rejected at once with auto_replay_nacks: false.
func (in *shareInput) nack(b *share.Batch, err error) {
	if in.conf.AutoReplayNacks {
		b.Nack(err)
	} else {
		b.Reject(err)
	}
}

// Close releases every batch not acknowledged, sends the last
// acknowledgements and leaves the group, member by member at once, as long
// as ctx allows (share.Members.Close); it reports a failure through
// Options.OnFailure.
func (in *shareInput) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		in.closeErr = in.members.Close(ctx)
		if in.batcher != nil {
			_ = in.batcher.Close(ctx)
		}
		st := in.members.Stats()
		in.log.Infof("Closed: share group %s: %d records acquired, %d accepted, %d released, %d rejected, %d renewals, %d lock expiries, %d failed acknowledgements, %d failed renewals",
			in.conf.Share.Group, st.Acquired, st.Accepted, st.Released, st.Rejected, st.Renewed, st.LockExpired, st.AckFailed, st.RenewFailed)
		failure := in.failure()
		if failure == nil && in.closeErr != nil {
			failure = fmt.Errorf("input did not close cleanly, acknowledgements may not have reached the broker (their records are delivered again): %w", in.closeErr)
		}
		if failure != nil && in.opts.OnFailure != nil {
			in.opts.OnFailure(failure)
		}
	})
	return in.closeErr
}

// metaDeliveryCount is the metadata key of a share group record's delivery
// count: 1 on its first delivery, one more on each redelivery.
const metaDeliveryCount = "kafka_delivery_count"

// shareBatch builds the messages of records of one partition acquired in a
// share group: the default keys and kafka_delivery_count.
func (ms messages) shareBatch(topic string, partition int32, recs []*kgo.Record) service.MessageBatch {
	if len(recs) == 0 {
		return nil
	}
	batch := ms.batch(recs, ranges.Range{Topic: topic, Partition: partition, Start: recs[0].Offset, End: recs[len(recs)-1].Offset + 1}, 0)
	for i, m := range batch {
		m.MetaSetMut(metaDeliveryCount, int64(recs[i].DeliveryCount()))
	}
	return batch
}

// readBatched is ReadBatch with a batching policy.
func (in *shareInput) readBatched(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	var parts []partAck
	for {
		p := in.tail
		in.tail = nil
		if p == nil {
			if len(parts) > 0 && in.members.Queued() == 0 {
				break // the next fetch waits for these
			}
			wctx, cancel := ctx, context.CancelFunc(func() {})
			if d, ok := in.batcher.UntilNext(); ok && len(parts) > 0 {
				wctx, cancel = context.WithTimeout(ctx, max(d, 0))
			}
			b, err := in.receive(wctx)
			cancel()
			if err != nil {
				if len(parts) > 0 && ctx.Err() == nil {
					break // flush what is held; the error comes next time
				}
				return nil, nil, err
			}
			p = in.part(b)
		}
		full := false
		for i, m := range p.msgs {
			if !in.batcher.Add(m) {
				continue
			}
			full = true
			if i < len(p.msgs)-1 {
				head, tail, ok := p.b.Split(i + 1)
				if !ok { // Close released it on the way
					return nil, nil, service.ErrEndOfInput
				}
				parts = append(parts, partAck{b: head, idx: p.ack.idx, offset: p.ack.offset})
				in.tail = &sharePart{b: tail, msgs: p.msgs[i+1:], ack: partAck{b: tail, idx: p.ack.idx, offset: p.ack.offset + i + 1}}
				p = nil
			}
			break
		}
		if p != nil {
			parts = append(parts, p.ack)
		}
		if full {
			break
		}
	}
	msgs, err := in.batcher.Flush(ctx)
	if err != nil {
		for _, p := range parts {
			in.nack(p.b, err)
		}
		return nil, nil, err
	}
	if len(msgs) == 0 { // the policy's processors dropped every message
		for _, p := range parts {
			p.b.Ack()
		}
		return in.readBatched(ctx)
	}
	return msgs, in.ackFunc(parts), nil
}

// Metrics of share groups.
const (
	// metricShareRecords counts share group records by what happened to
	// them, acknowledgements when the broker answered them: acquired,
	// accepted, released, rejected, renewed (a record renewed twice counts
	// twice), lock_expired (an acknowledgement the broker refused because
	// the record's lock had expired), ack_failed (an acknowledgement
	// refused for another reason, or lost: the share session had ended,
	// the leader moved), renew_failed (a renewal refused or lost).
	metricShareRecords = "kafka_batched_ranges_share_records_total" // counter {topic, event}
)

// shareEvents are the event label values of metricShareRecords.
var shareEvents = []string{"acquired", "accepted", "released", "rejected", "renewed", "lock_expired", "ack_failed", "renew_failed"}

// shareObserver implements share.Observer with Benthos metrics: the share
// events under metricShareRecords, and the records and bytes handed to the
// pipeline (Delivered) under the input's usual names, as observer does for
// ranges.
type shareObserver struct {
	records    *service.MetricCounter
	recordsOut *service.MetricCounter
	bytesOut   *service.MetricCounter
}

func newShareObserver(m *service.Metrics, topics []TopicSpec) *shareObserver {
	o := &shareObserver{
		records:    m.NewCounter(metricShareRecords, "topic", "event"),
		recordsOut: m.NewCounter(metricRecords, "topic"),
		bytesOut:   m.NewCounter(metricBytes, "topic"),
	}
	// Named topics have their series from the start, at 0, so an alert on
	// increase(...{event=~"lock_expired|ack_failed"}) has a series to watch.
	for _, t := range topics {
		for _, e := range shareEvents {
			o.records.Incr(0, t.Name, e)
		}
	}
	return o
}

func (o *shareObserver) Acquired(topic string, n int64) { o.records.Incr(n, topic, "acquired") }
func (o *shareObserver) Accepted(topic string, n int64) { o.records.Incr(n, topic, "accepted") }
func (o *shareObserver) Released(topic string, n int64) { o.records.Incr(n, topic, "released") }
func (o *shareObserver) Rejected(topic string, n int64) { o.records.Incr(n, topic, "rejected") }
func (o *shareObserver) Renewed(topic string, n int64)  { o.records.Incr(n, topic, "renewed") }
func (o *shareObserver) LockExpired(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "lock_expired")
}
func (o *shareObserver) AckFailed(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "ack_failed")
}
func (o *shareObserver) RenewFailed(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "renew_failed")
}
func (o *shareObserver) Delivered(topic string, records, bytes int64) {
	o.recordsOut.Incr(records, topic)
	o.bytesOut.Incr(bytes, topic)
}
