package share

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kbr/kafka_batched_ranges/internal/logs"
)

// Members is several members of one share group in one process, each a
// Reader with its own client, whose batches Next merges. A member holds one
// fetch's records at a time, so more members keep more batches in the
// pipeline at once, as more processes would. One goroutine per member (a
// pump, started by Start, stopped and waited for by Close) takes the
// member's batches from its Next and hands them to Members.Next.
//
// A member that stops on an error (one retrying cannot fix, see Reader)
// stops the whole. Next returns its error from then on, and Close stops
// the others. Stats sums the members' counts. The Observer of the Config
// sees every member's (and Delivered once per batch Next returns). With
// more than one member, each member's log lines start with "Member i of
// n: ".
type Members struct {
	readers []*Reader
	obs     Observer

	startMu sync.Mutex // serializes Start; guards started
	started []bool     // by member: its Start succeeded

	out      chan *Batch   // the pumps hand batches to Next
	waiting  atomic.Int64  // batches a pump took from its member and Next has not returned yet
	failed   chan struct{} // closed once a member stopped on an error
	failOnce sync.Once
	stopping chan struct{} // closed when Close begins
	pumps    sync.WaitGroup

	// mu guards err, cancel and state.
	mu       sync.Mutex
	err      error              // what stopped a member, the first
	cancel   context.CancelFunc // stops the pumps; nil until Start succeeded
	state    readerState        // created, started, closing, closed (as a Reader's)
	closedCh chan struct{}      // closed when Close finished
	closeErr error              // what Close returned; read after closedCh
}

// NewMembers checks cfg and returns n members of its share group, not
// started yet. n must be at least 1.
func NewMembers(cfg Config, n int) (*Members, error) {
	if n < 1 {
		return nil, fmt.Errorf("share group %s: members must be at least 1, got %d", cfg.Group, n)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m := &Members{
		obs:      cfg.Observer,
		started:  make([]bool, n),
		out:      make(chan *Batch),
		failed:   make(chan struct{}),
		stopping: make(chan struct{}),
		closedCh: make(chan struct{}),
	}
	for i := range n {
		mc := cfg
		// Members.Next counts what it hands out, not each member.
		mc.Observer = memberObserver{cfg.Observer}
		if n > 1 {
			mc.Logger = logs.WithPrefix(cfg.Logger, fmt.Sprintf("Member %d of %d: ", i+1, n))
		}
		r, err := New(mc)
		if err != nil {
			return nil, err
		}
		m.readers = append(m.readers, r)
	}
	return m, nil
}

// memberObserver is a member's Observer: the Members' own, without
// Delivered, which Members.Next reports.
type memberObserver struct{ Observer }

func (memberObserver) Delivered(string, int64, int64) {}

// Start starts the members not started yet, one after another, as long as
// ctx allows, and once every one is started, the pumps. It returns the
// first member's error (as Reader.Start returns it: wrapping
// ErrNoShareGroups when the cluster has none). A later Start retries the
// members not started. Start after a successful Start does nothing. After
// Close it returns ErrClosed.
func (m *Members) Start(ctx context.Context) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	switch st {
	case started:
		return nil
	case closing, closed:
		return ErrClosed
	}
	for i, r := range m.readers {
		if m.started[i] {
			continue
		}
		if err := r.Start(ctx); err != nil {
			return err
		}
		m.started[i] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != created { // closed while starting: Close closes the members
		return ErrClosed
	}
	pctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.state = cancel, started
	for _, r := range m.readers {
		m.pumps.Go(func() { m.pump(pctx, r) })
	}
	return nil
}

// pump hands r's batches to Next until ctx ends or r stops. A batch it took
// and could not hand over is released by r's Close.
func (m *Members) pump(ctx context.Context, r *Reader) {
	for {
		b, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
				m.fail(err)
			}
			return
		}
		m.waiting.Add(1)
		select {
		case m.out <- b:
		case <-ctx.Done():
			m.waiting.Add(-1)
			return
		}
	}
}

// fail keeps the first error that stopped a member and ends Next.
func (m *Members) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	m.failOnce.Do(func() { close(m.failed) })
}

// Next returns the next batch of any member, waiting for one as long as
// ctx allows. Once a member stopped on an error it returns that error
// (Err), whatever the other members hold. Before Start succeeded,
// ErrNotStarted. Once Close began, ErrClosed.
func (m *Members) Next(ctx context.Context) (*Batch, error) {
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	switch st {
	case created:
		return nil, ErrNotStarted
	case closing, closed:
		return nil, ErrClosed
	}
	select {
	case <-m.failed: // before any batch another member still hands over
		return nil, m.Err()
	default:
	}
	select {
	case b := <-m.out:
		m.waiting.Add(-1)
		m.obs.Delivered(b.Topic, int64(len(b.Records)), valueBytes(b))
		return b, nil
	case <-m.failed:
		return nil, m.Err()
	case <-m.stopping:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Queued returns how many batches are on their way to Next: taken from a
// member and not returned by Next yet, or waiting in a member's fetch
// (Reader.Queued). A caller that holds batches back (a batching policy)
// must finish them instead of waiting for more when it is 0, since each
// member fetches again only once every batch of its last fetch is done.
func (m *Members) Queued() int {
	n := int(m.waiting.Load())
	for _, r := range m.readers {
		n += r.Queued()
	}
	return n
}

// Err returns the error that stopped a member, or nil.
func (m *Members) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Stats returns the members' counts, summed.
func (m *Members) Stats() Stats {
	var st Stats
	for _, r := range m.readers {
		st = st.Add(r.Stats())
	}
	return st
}

// Close stops the pumps and closes every member at once (Reader.Close:
// each releases the batches it has not had acknowledged, handed out or
// not, sends its last acknowledgements and leaves the group), as long as
// ctx allows, and waits for the pumps. It returns the members' errors,
// joined. Safe to call twice, and concurrently. A second call waits for
// the first.
func (m *Members) Close(ctx context.Context) error {
	m.mu.Lock()
	switch m.state {
	case closing, closed:
		m.mu.Unlock()
		select {
		case <-m.closedCh:
			return m.closeErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.state = closing
	cancel := m.cancel
	m.mu.Unlock()
	defer close(m.closedCh)
	close(m.stopping)
	if cancel != nil {
		cancel()
	}
	errs := make([]error, len(m.readers))
	var wg sync.WaitGroup
	for i, r := range m.readers {
		wg.Go(func() { errs[i] = r.Close(ctx) })
	}
	wg.Wait()
	m.pumps.Wait()
	m.mu.Lock()
	m.state = closed
	m.mu.Unlock()
	m.closeErr = errors.Join(errs...)
	return m.closeErr
}

// valueBytes is the size of b's record values.
func valueBytes(b *Batch) int64 {
	var n int64
	for _, r := range b.Records {
		n += int64(len(r.Value))
	}
	return n
}
