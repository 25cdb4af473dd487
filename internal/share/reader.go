package share

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrNotStarted: Next was called before Start succeeded.
	ErrNotStarted = errors.New("share reader not started")
	// ErrClosed: the reader was closed.
	ErrClosed = errors.New("share reader closed")
	// ErrNoShareGroups: a broker does not serve share groups (too old, or
	// its cluster's share.version feature is 0). Wrapped by Start's error.
	ErrNoShareGroups = errors.New("broker has no share groups")
)

// readerState is the reader's lifecycle: created -> started -> closing ->
// closed. created -> closed when closed before a successful Start.
type readerState uint8

const (
	created readerState = iota
	started
	closing
	closed
)

// Reader reads topics as one member of a share group. See the package doc.
type Reader struct {
	cfg Config
	cnt counts

	// mu guards state, cl, pending, err and every batch's state.
	mu      sync.Mutex
	state   readerState
	cl      *kgo.Client
	pending map[*Batch]struct{} // batches of the current fetch not done
	err     error               // why the poll loop stopped, if on an error

	out      chan *Batch   // the poll loop hands batches to Next
	idle     chan struct{} // poked (buffered, 1) when a batch is done
	cancel   context.CancelFunc
	stopped  chan struct{} // closed when the poll loop returned
	closedCh chan struct{} // closed when Close finished
	closeErr error         // what Close returned; read after closedCh
	marking  sync.WaitGroup

	acks     ackTally
	unpolled unpolled // records fetched that no poll returned yet (prefetch.go)

	// replays are the batches of nacked records waiting to be handed out
	// again (Config.ReplayNacks), each at its due time (guarded by mu).
	// They are pending too.
	replays []*Batch
	// lockMillis and deliveryLimit are the group's
	// share.record.lock.duration.ms and share.delivery.count.limit, read
	// at Start (0: not known).
	lockMillis    atomic.Int64
	deliveryLimit atomic.Int32
	warned        warnLimit // rejections and archived records logged
}

// New checks cfg and returns a reader that has not joined the group yet.
func New(cfg Config) (*Reader, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Reader{
		cfg:      cfg,
		pending:  map[*Batch]struct{}{},
		out:      make(chan *Batch),
		idle:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
		closedCh: make(chan struct{}),
	}
	r.acks.parts = map[tp]*partAcks{}
	r.acks.send = r.markAcks
	r.acks.unanswered = func(k tp, marks []ackMark) { r.answered(k.topic, k.partition, marks, errNoAnswer) }
	r.unpolled.recs = map[*kgo.Record]time.Time{}
	return r, nil
}

// Start checks that the cluster serves share groups (an error wrapping
// ErrNoShareGroups names the broker that does not, its version and
// share_group), joins the group and starts the poll loop. A failed Start
// may be retried. Start after a successful one, or after Close, fails.
func (r *Reader) Start(ctx context.Context) error {
	r.mu.Lock()
	st := r.state
	r.mu.Unlock()
	switch st {
	case started:
		return fmt.Errorf("share group %s: already started", r.cfg.Group)
	case closing, closed:
		return ErrClosed
	}
	cl, err := kgo.NewClient(r.clientOpts()...)
	if err != nil {
		return fmt.Errorf("share group %s: %w", r.cfg.Group, err)
	}
	if err := checkBrokers(ctx, cl, r.cfg.Group); err != nil {
		cl.Close()
		return err
	}
	r.mu.Lock()
	if r.state != created { // closed while starting
		r.mu.Unlock()
		cl.Close()
		return ErrClosed
	}
	pctx, cancel := context.WithCancel(context.Background())
	r.cl, r.cancel, r.state = cl, cancel, started
	r.mu.Unlock()
	configs := groupConfigs(ctx, cl, r.cfg.Group, "share.auto.offset.reset", "share.record.lock.duration.ms", "share.delivery.count.limit")
	if n, err := strconv.ParseInt(configs["share.delivery.count.limit"], 10, 32); err == nil {
		r.deliveryLimit.Store(int32(n))
	}
	if ms, err := strconv.ParseInt(configs["share.record.lock.duration.ms"], 10, 64); err == nil {
		r.lockMillis.Store(ms)
	}
	reset := configs["share.auto.offset.reset"]
	if reset == "" {
		reset = "not answered by the cluster; latest unless set"
	}
	r.cfg.Logger.Infof("Reading %v as a member of share group %s (where the group has not read a partition it starts at share.auto.offset.reset: %s)", r.cfg.Topics, r.cfg.Group, reset)
	if ms, err := strconv.ParseInt(configs["share.record.lock.duration.ms"], 10, 64); err == nil && time.Duration(ms)*time.Millisecond <= r.cfg.RenewInterval {
		r.cfg.Logger.Warnf("Share group %s: the renew interval (share_renew_interval: %s) is not shorter than the group's acquisition lock (share.record.lock.duration.ms: %d ms): a batch held longer than the lock loses it before its renewal, and its records are delivered again; set the interval well below the lock (a third of it)",
			r.cfg.Group, r.cfg.RenewInterval, ms)
	}
	go r.run(pctx)
	return nil
}

// clientOpts are the options of the reader's client.
func (r *Reader) clientOpts() []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(r.cfg.Seeds...)}, r.cfg.ClientOpts...)
	opts = append(opts,
		kgo.ShareGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics...),
		kgo.ShareMaxRecords(r.cfg.MaxRecords),
		// Fetch only while polling: the poll loop polls only once every
		// batch of the last fetch is done (below), so records are never
		// acquired to wait in a buffer, their locks running, while the
		// pipeline is busy.
		kgo.MaxConcurrentFetches(0),
		kgo.ShareAckCallback(r.acks.callback(r)),
		// Records franz-go fetched that no poll returned yet are renewed
		// until one does (prefetch.go).
		kgo.WithHooks(&r.unpolled),
		// Never close the ShareFetch connection between two renewals. The
		// broker would end the share session and release what this member
		// holds (connIdleTimeout).
		kgo.ConnIdleTimeout(connIdleTimeout(r.cfg.RenewInterval)),
	)
	// KBR_SHARE_KGO_DEBUG=1 writes franz-go's DEBUG log of every member to
	// stderr. It shows the share sessions' requests and answers, for
	// diagnosing what a member is or is not handed.
	if os.Getenv("KBR_SHARE_KGO_DEBUG") != "" {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, func() string {
			return time.Now().UTC().Format("15:04:05.000 ")
		})))
	}
	if r.cfg.RegexpTopics {
		opts = append(opts, kgo.ConsumeRegex())
	}
	if r.cfg.AcquireMode == RecordLimit {
		// At most MaxRecords records per fetch, so what one member
		// holds is bounded exactly and the others get the rest.
		opts = append(opts, kgo.ShareMaxRecordsStrict())
	}
	return opts
}

// Next returns the next batch of acquired records, waiting for one as long
// as ctx allows. After the poll loop stopped on an error it returns that
// error. After Close, ErrClosed. Before Start, ErrNotStarted.
func (r *Reader) Next(ctx context.Context) (*Batch, error) {
	r.mu.Lock()
	st := r.state
	r.mu.Unlock()
	switch st {
	case created:
		return nil, ErrNotStarted
	case closing, closed:
		return nil, ErrClosed
	}
	select {
	case b := <-r.out:
		r.mu.Lock()
		ok := r.applyLocked(b, handOut)
		r.mu.Unlock()
		if !ok { // Close released it on the way
			return nil, ErrClosed
		}
		r.cfg.Observer.Delivered(b.Topic, int64(len(b.Records)), valueBytes(b))
		return b, nil
	case <-r.stopped:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.err != nil {
			return nil, r.err
		}
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// applyLocked moves b by ev if the transitions table allows it, and
// reports whether it did. A batch that gets done leaves pending.
func (r *Reader) applyLocked(b *Batch, ev batchEvent) bool {
	to, ok := transition(b.state, ev)
	if !ok {
		return false
	}
	b.state = to
	return true
}

// finish applies an Ack, a Nack or a Reject to b, and reports whether it
// did (false: b was done already, a stale call, counted).
func (r *Reader) finish(b *Batch, ev batchEvent) bool {
	return r.finishWith(b, ev, func(late bool) {
		switch ev {
		case acked:
			r.markBatch(b, kgo.AckAccept, b.Records, late, "")
		case rejected:
			r.markBatch(b, kgo.AckReject, b.Records, late, whyRejected)
		default:
			r.markNack(b, b.Records, late)
		}
	})
}

// whyRejected is why a Reject rejects, for its warning.
const whyRejected = "the pipeline failed them and nacks are not replayed (auto_replay_nacks: false)"

// finishWith applies ev to b and, if it did, marks b's records with mark
// (told whether b's lock deadline has passed). It reports whether it did.
func (r *Reader) finishWith(b *Batch, ev batchEvent, mark func(late bool)) bool {
	r.mu.Lock()
	if !r.applyLocked(b, ev) {
		r.mu.Unlock()
		r.cnt.stale.Add(1)
		return false
	}
	late := !b.deadline.IsZero() && time.Now().After(b.deadline)
	// Close waits for marking before it flushes and leaves. The
	// acknowledgement must reach the client first.
	r.marking.Add(1)
	r.mu.Unlock()
	r.acks.dropRenewals(tp{b.Topic, b.Partition}, b)
	mark(late)
	r.mu.Lock()
	delete(r.pending, b)
	empty := len(r.pending) == 0
	r.mu.Unlock()
	r.marking.Done()
	if empty {
		r.poke()
	}
	return true
}

// poke wakes the poll loop (a batch is done, an answer came).
func (r *Reader) poke() {
	select {
	case r.idle <- struct{}{}:
	default:
	}
}

// markNack gives back recs, records of b: with Config.ReplayNacks replays
// them in a new batch (replay), otherwise releases them. Either way rejects
// those delivered Config.MaxDeliveries times.
func (r *Reader) markNack(b *Batch, recs []*kgo.Record, late bool) {
	var again, reject []*kgo.Record
	m := r.cfg.MaxDeliveries
	for _, rec := range recs {
		if m > 0 && rec.DeliveryCount()+b.replays >= m {
			reject = append(reject, rec)
		} else {
			again = append(again, rec)
		}
	}
	if len(reject) > 0 {
		r.markBatch(b, kgo.AckReject, reject, late, fmt.Sprintf("the pipeline failed them on each of their %d deliveries (share_max_deliveries: %d)", m, m))
	}
	if r.cfg.ReplayNacks && !late {
		r.replay(b, again)
		return
	}
	r.markBatch(b, kgo.AckRelease, again, late, "")
}

// replay starts recs, records of b, over in a new batch, queued in pending
// and due after a backoff (replayBackoff). The poll loop hands it out
// again when it is due, renewing its locks meanwhile. A record replayed
// replayWarnAt times (and every replayWarnAt times more) is logged at WARN.
// With MaxDeliveries 0 nothing ends its replays but the pipeline taking it.
func (r *Reader) replay(b *Batch, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	nb := b.part(recs, queued)
	nb.replays++
	nb.due = time.Now().Add(replayBackoff(nb.replays))
	r.mu.Lock()
	r.pending[nb] = struct{}{}
	r.replays = append(r.replays, nb)
	r.mu.Unlock()
	r.poke() // the poll loop times the replay
	n := int64(len(recs))
	r.cnt.replayed.Add(n)
	r.cfg.Observer.Replayed(b.Topic, n)
	if nb.replays%replayWarnAt == 0 {
		r.cfg.Logger.Warnf("Share group %s: %s/%d: %d records (offsets %s) failed %d times in a row in this member; they are replayed here, their locks renewed, until the pipeline takes them (share_max_deliveries: %d; set it to give up after that many deliveries)",
			r.cfg.Group, b.Topic, b.Partition, n, offsetRanges(offsetsOfRecs(recs)), nb.replays, r.cfg.MaxDeliveries)
	}
}

// replayWarnAt is how many replays of a batch's records in a row warn.
const replayWarnAt = 30

// Bounds of the backoff of a replay: from replayBackoffMin, doubled on
// each replay of the records, up to replayBackoffMax (Benthos'
// auto_replay_nacks backs off from 1 ms to 1 s).
const (
	replayBackoffMin = 10 * time.Millisecond
	replayBackoffMax = time.Second
)

// replayBackoff is how long the n-th replay of records waits.
func replayBackoff(n int32) time.Duration {
	d := replayBackoffMin
	for i := int32(1); i < n && d < replayBackoffMax; i++ {
		d *= 2
	}
	return min(d, replayBackoffMax)
}

func offsetsOfRecs(recs []*kgo.Record) []int64 {
	offs := make([]int64, len(recs))
	for i, rec := range recs {
		offs[i] = rec.Offset
	}
	return offs
}

// markBatch acknowledges recs, records of b, with status. late says they
// are past their lock deadline. They are counted when the broker's answer
// comes (ackTally).
func (r *Reader) markBatch(b *Batch, status kgo.AckStatus, recs []*kgo.Record, late bool, why string) {
	r.acks.queue(tp{b.Topic, b.Partition}, ackMark{status: status, recs: recs, late: late, why: why, replays: b.replays})
}

// mark acknowledges (or renews) recs of one partition with status. They
// are counted when the broker's answer comes (ackTally).
func (r *Reader) mark(status kgo.AckStatus, topic string, partition int32, recs []*kgo.Record) {
	r.acks.queue(tp{topic, partition}, ackMark{status: status, recs: recs})
}

// markAcks hands acknowledgements to the client (the tally's send).
func (r *Reader) markAcks(status kgo.AckStatus, recs []*kgo.Record) {
	r.cl.MarkAcks(status, recs...)
}

// Close leaves the group gracefully, as long as ctx allows. It stops the
// poll loop, releases every batch not acknowledged yet (handed out or not;
// what was acknowledged stays so), sends every acknowledgement to the
// brokers and waits for their answers, then leaves the group and closes
// the client. It returns the first error of the flush or the leave. Safe
// to call twice, and concurrently. A second call waits for the first.
func (r *Reader) Close(ctx context.Context) error {
	r.mu.Lock()
	switch r.state {
	case closing, closed:
		r.mu.Unlock()
		select {
		case <-r.closedCh:
			return r.closeErr
		case <-ctx.Done():
			return ctx.Err()
		}
	case created:
		r.state = closed
		r.mu.Unlock()
		close(r.closedCh)
		return nil
	}
	r.state = closing
	r.mu.Unlock()
	defer close(r.closedCh)

	r.cancel()
	<-r.stopped // the poll loop returns once its poll or send sees the cancellation

	r.mu.Lock()
	var rel []*Batch
	var lateRel []bool
	now := time.Now()
	for b := range r.pending {
		if r.applyLocked(b, released) {
			rel = append(rel, b)
			lateRel = append(lateRel, !b.deadline.IsZero() && now.After(b.deadline))
		}
		delete(r.pending, b)
	}
	r.replays = nil
	r.mu.Unlock()
	for i, b := range rel {
		r.acks.dropRenewals(tp{b.Topic, b.Partition}, b)
		r.markBatch(b, kgo.AckRelease, b.Records, lateRel[i], "")
	}
	r.marking.Wait() // Acks and Nacks that were under way
	var errs []error
	// Hand the acknowledgements over, and wait for every answer. Each
	// answer hands its partition's next set over (ackTally).
	r.acks.flush()
	err := r.cl.FlushAcks(ctx)
	// Whatever is still queued (the context ended first) goes with the
	// leave's last request.
	r.acks.flushAll()
	if err != nil {
		errs = append(errs, fmt.Errorf("share group %s: sending the last acknowledgements: %w", r.cfg.Group, err))
	}
	if err := r.cl.LeaveGroupContext(ctx); err != nil {
		errs = append(errs, fmt.Errorf("share group %s: leaving: %w", r.cfg.Group, err))
	}
	r.cl.Close()
	// What was marked and never answered (the flush or the leave ran out
	// of time) did not reach the broker as far as this member knows.
	for k, marks := range r.acks.takeAll() {
		r.answered(k.topic, k.partition, marks, errUnanswered)
	}
	r.mu.Lock()
	r.state = closed
	r.mu.Unlock()
	r.closeErr = errors.Join(errs...)
	if len(rel) > 0 {
		r.cfg.Logger.Infof("Share group %s: released %d batches still in the pipeline on close", r.cfg.Group, len(rel))
	}
	return r.closeErr
}

// Queued returns how many batches of the current fetch wait for Next
// (replays included, due or not): a
// caller that holds batches back (a batching policy) must finish them
// instead of waiting for more when it is 0, since the next fetch waits for
// every batch of this one.
func (r *Reader) Queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for b := range r.pending {
		if b.state == queued {
			n++
		}
	}
	return n
}

// Stats returns the reader's counts.
func (r *Reader) Stats() Stats { return r.cnt.stats() }
