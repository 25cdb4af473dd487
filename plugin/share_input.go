package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
	"github.com/kbr/kafka_batched_ranges/internal/share"
)

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
		AcquireMode:   s.AcquireMode,
		MaxDeliveries: s.MaxDeliveries,
		ReplayNacks:   conf.AutoReplayNacks,
		RenewInterval: s.RenewInterval,
		Observer:      newShareObserver(res.Metrics(), conf.Topics, conf.RegexpTopics),
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
	msgs := in.msgs.shareBatch(b)
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

// ackFunc acknowledges parts: accepts them. Or nacks them. Or, when the
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

// nack gives b back: replayed in the member (rejected after
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
// as ctx allows (share.Members.Close). It reports a failure through
// Options.OnFailure.
func (in *shareInput) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		in.closeErr = in.members.Close(ctx)
		if in.batcher != nil {
			_ = in.batcher.Close(ctx)
		}
		st := in.members.Stats()
		in.log.Infof("Closed: share group %s: %d records acquired, %d accepted, %d released, %d rejected, %d renewals, %d lock expiries, %d failed acknowledgements, %d failed renewals; %d replays in this member, %d of the released archived at the group's delivery count limit",
			in.conf.Share.Group, st.Acquired, st.Accepted, st.Released, st.Rejected, st.Renewed, st.LockExpired, st.AckFailed, st.RenewFailed, st.Replayed, st.Archived)
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

// shareBatch builds the messages of a share batch's records: the default
// keys and kafka_delivery_count (the broker's delivery count plus this
// member's replays of the record, share.Batch.DeliveryCount).
func (ms messages) shareBatch(b *share.Batch) service.MessageBatch {
	recs := b.Records
	if len(recs) == 0 {
		return nil
	}
	batch := ms.batch(recs, ranges.Range{Topic: b.Topic, Partition: b.Partition, Start: recs[0].Offset, End: recs[len(recs)-1].Offset + 1}, 0)
	for i, m := range batch {
		m.MetaSetMut(metaDeliveryCount, int64(b.DeliveryCount(i)))
	}
	return batch
}
