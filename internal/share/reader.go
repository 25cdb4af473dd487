package share

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
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
// closed; created -> closed when closed before a successful Start.
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
	r.acks.sent = map[tp]ackCounts{}
	r.unpolled.recs = map[*kgo.Record]time.Time{}
	return r, nil
}

// Start checks that the cluster serves share groups (an error wrapping
// ErrNoShareGroups names the broker that does not, its version and
// share_group), joins the group and starts the poll loop. A failed Start
// may be retried; Start after a successful one, or after Close, fails.
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
	configs := groupConfigs(ctx, cl, r.cfg.Group, "share.auto.offset.reset", "share.record.lock.duration.ms")
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
		// At most MaxRecords records per fetch, so what one member
		// holds is bounded and the others get the rest.
		kgo.ShareMaxRecordsStrict(),
		// Fetch only while polling: the poll loop polls only once every
		// batch of the last fetch is done (below), so records are never
		// acquired to wait in a buffer, their locks running, while the
		// pipeline is busy.
		kgo.MaxConcurrentFetches(0),
		kgo.ShareAckCallback(r.acks.callback(r)),
		// Records franz-go fetched that no poll returned yet are renewed
		// until one does (prefetch.go).
		kgo.WithHooks(&r.unpolled),
		// Never close the ShareFetch connection between two renewals: the
		// broker would end the share session and release what this member
		// holds (connIdleTimeout).
		kgo.ConnIdleTimeout(connIdleTimeout(r.cfg.RenewInterval)),
	)
	// KBR_SHARE_KGO_DEBUG=1 writes franz-go's DEBUG log of every member to stderr: the share
	// sessions' requests and answers, for diagnosing what a member is or is not handed.
	if os.Getenv("KBR_SHARE_KGO_DEBUG") != "" {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, func() string {
			return time.Now().UTC().Format("15:04:05.000 ")
		})))
	}
	if r.cfg.RegexpTopics {
		opts = append(opts, kgo.ConsumeRegex())
	}
	return opts
}

// Next returns the next batch of acquired records, waiting for one as long
// as ctx allows. After the poll loop stopped on an error it returns that
// error; after Close, ErrClosed; before Start, ErrNotStarted.
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
	return r.finishWith(b, ev, func() {
		switch ev {
		case acked:
			r.mark(kgo.AckAccept, b.Topic, b.Partition, b.Records)
		case rejected:
			r.mark(kgo.AckReject, b.Topic, b.Partition, b.Records)
		default:
			r.markNack(b.Topic, b.Partition, b.Records)
		}
	})
}

// finishWith applies ev to b and, if it did, marks b's records with mark;
// it reports whether it did.
func (r *Reader) finishWith(b *Batch, ev batchEvent, mark func()) bool {
	r.mu.Lock()
	if !r.applyLocked(b, ev) {
		r.mu.Unlock()
		r.cnt.stale.Add(1)
		return false
	}
	// Close waits for marking before it flushes and leaves: the
	// acknowledgement must reach the client first.
	r.marking.Add(1)
	r.mu.Unlock()
	mark()
	r.mu.Lock()
	delete(r.pending, b)
	empty := len(r.pending) == 0
	r.mu.Unlock()
	r.marking.Done()
	if empty {
		select {
		case r.idle <- struct{}{}:
		default:
		}
	}
	return true
}

// markNack releases recs, or rejects those delivered
// Config.MaxDeliveries times.
func (r *Reader) markNack(topic string, partition int32, recs []*kgo.Record) {
	release, reject := recs, []*kgo.Record(nil)
	if m := r.cfg.MaxDeliveries; m > 0 {
		release = nil
		for _, rec := range recs {
			if rec.DeliveryCount() >= m {
				reject = append(reject, rec)
			} else {
				release = append(release, rec)
			}
		}
	}
	r.mark(kgo.AckRelease, topic, partition, release)
	r.mark(kgo.AckReject, topic, partition, reject)
}

// mark acknowledges recs of one partition with status. They are counted
// (accepted, released, rejected, renewed, or failed) when the broker's
// answer comes (ackTally).
func (r *Reader) mark(status kgo.AckStatus, topic string, partition int32, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	r.acks.add(topic, partition, status, int64(len(recs)))
	r.cl.MarkAcks(status, recs...)
}

// Close leaves the group gracefully, as long as ctx allows: it stops the
// poll loop, releases every batch not acknowledged yet (handed out or not;
// what was acknowledged stays so), sends every acknowledgement to the
// brokers and waits for their answers, then leaves the group and closes
// the client. It returns the first error of the flush or the leave. Safe
// to call twice, and concurrently: a second call waits for the first.
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
	for b := range r.pending {
		if r.applyLocked(b, released) {
			rel = append(rel, b)
		}
		delete(r.pending, b)
	}
	r.mu.Unlock()
	for _, b := range rel {
		r.mark(kgo.AckRelease, b.Topic, b.Partition, b.Records)
	}
	r.marking.Wait() // Acks and Nacks that were under way
	var errs []error
	if err := r.cl.FlushAcks(ctx); err != nil {
		errs = append(errs, fmt.Errorf("share group %s: sending the last acknowledgements: %w", r.cfg.Group, err))
	}
	if err := r.cl.LeaveGroupContext(ctx); err != nil {
		errs = append(errs, fmt.Errorf("share group %s: leaving: %w", r.cfg.Group, err))
	}
	r.cl.Close()
	// What was marked and never answered (the flush or the leave ran out
	// of time) did not reach the broker as far as this member knows.
	for k, c := range r.acks.takeAll() {
		r.answered(k.topic, k.partition, c, errUnanswered)
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

// Queued returns how many batches of the current fetch wait for Next: a
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
