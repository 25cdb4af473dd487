package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Whether the cluster can be reached. Every client of the engine (the
// listings' and cursors', the group member's) reports each connection it
// opens and each response it reads through kgo hooks (reach). A response
// read from any broker means the cluster is reachable, a connection or a
// request that fails while none succeeds after it starts an outage. The
// engine says it is unreachable once an outage lasted unreachableAfter
// (Reachable). The plugin then reports the input not connected (Benthos'
// /ready answers 503) until a broker answers again, and a bounded run that
// makes no progress for Config.UnreachableTimeout of an outage stops with
// an error naming the brokers (checkReach).
//
// What the engine says is one state, reach.said, changed only by
// Engine.Reachable, which logs each change as it makes it. It logs
// "reported not ready" when the outage is said, and "answers again" when it
// is over. Next follows that state and nothing else. While it is said, Next
// hands out nothing, not even batches read before the outage (they wait for a broker),
// so the input is reported not ready from the line that says so until the
// line that says a broker answers again. Whoever looks first makes the change
// (Next, the plugin's Connect, or the reporter every reportEvery, which also
// wakes a Next that waits).

// unreachableAfter is how long an outage lasts before the engine says the
// cluster is unreachable. A broker of several that is down fails its
// connections while the others answer within a fetch wait, and a single
// broker restarting answers within seconds.
const unreachableAfter = 5 * time.Second

// ErrUnreachable is returned by Next while no broker of the cluster can be
// reached (Reachable) and there is nothing to hand out. Next may be called
// again. It wraps the last failure, naming the broker.
var ErrUnreachable = errors.New("no broker reachable")

// reach tracks whether any broker answers. It implements the kgo hooks
// below. Their calls come from the clients' goroutines.
type reach struct {
	lastOK atomic.Int64 // unix nanoseconds of the last response read from any broker

	mu       sync.Mutex // guards down, lastErr, lastAddr
	down     time.Time  // when the outage began: the first failure after the last response; zero if none
	lastErr  error      // the outage's last failure
	lastAddr string     // the broker it came from (host:port)

	sayMu sync.Mutex // guards said; taken before mu, never under it; held while Reachable logs a change, so the lines come in order
	said  bool       // the engine says the cluster is unreachable (Reachable): the input is reported not ready
}

var (
	_ kgo.HookBrokerConnect = (*reach)(nil)
	_ kgo.HookBrokerRead    = (*reach)(nil)
	_ kgo.HookBrokerWrite   = (*reach)(nil)
)

// OnBrokerConnect implements kgo.HookBrokerConnect. A failed dial is a
// failure of that broker.
func (r *reach) OnBrokerConnect(m kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		r.failed(m, err)
	}
}

// OnBrokerRead implements kgo.HookBrokerRead. A response read is the
// cluster answering. A read that fails is a failure of that broker.
func (r *reach) OnBrokerRead(m kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		r.failed(m, err)
		return
	}
	r.answered()
}

// OnBrokerWrite implements kgo.HookBrokerWrite. A request that cannot be
// written is a failure of that broker.
func (r *reach) OnBrokerWrite(m kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		r.failed(m, err)
	}
}

// answered records a response. Any outage is over.
func (r *reach) answered() {
	now := time.Now().UnixNano()
	r.lastOK.Store(now)
	r.mu.Lock()
	if !r.down.IsZero() {
		r.down, r.lastErr, r.lastAddr = time.Time{}, nil, ""
	}
	r.mu.Unlock()
}

// failed records a failure of broker m. An outage begins unless one runs.
// A failure of a client being closed or a request given up is not one.
func (r *reach) failed(m kgo.BrokerMetadata, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down.IsZero() {
		r.down = now
	}
	r.lastErr = err
	r.lastAddr = net.JoinHostPort(m.Host, fmt.Sprint(m.Port))
}

// outage returns how long the running outage has lasted (0 if none) and
// the error that says so, naming the broker of its last failure.
func (r *reach) outage(seeds []string) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down.IsZero() {
		return 0, nil
	}
	d := time.Since(r.down)
	return d, fmt.Errorf("%w: no broker of %s answered for %s (last failure: broker %s: %v)",
		ErrUnreachable, strings.Join(seeds, ","), d.Round(time.Second), r.lastAddr, r.lastErr)
}

// opts returns the options every client of the engine named client gets.
// Those are its logger (limitedLog.kafkaOpt) and the reachability hooks.
func (c *clients) opts(log limitedLog, client string) []kgo.Opt {
	return append(log.kafkaOpt(client), kgo.WithHooks(&c.reach))
}

// Reachable reports whether the engine says the cluster can be reached. It
// returns nil, or, once no broker answered for unreachableAfter since a connection
// or request failed, an error wrapping ErrUnreachable that names the seed
// brokers, how long and the last failure with its broker. It is the one
// place that changes what the engine says (reach.said), and it logs each
// change as it makes it, so the log and the input's readiness (Next, the
// plugin's Connect) agree. It logs "reported not ready" once, then "answers
// again" once a broker answers.
func (e *Engine) Reachable() error {
	r := &e.kafka.reach
	r.sayMu.Lock()
	defer r.sayMu.Unlock()
	d, err := r.outage(e.cfg.Seeds)
	down := d >= unreachableAfter
	switch {
	case down && !r.said:
		r.said = true
		e.log.Warnf("%v; retrying (reported not ready meanwhile; batches read already wait for a broker)", err)
		e.out.signal() // a Next that waits looks again, and says so
	case !down && r.said:
		r.said = false
		e.log.Infof("A broker of %s answers again; reported ready", strings.Join(e.cfg.Seeds, ","))
	}
	if !down {
		return nil
	}
	return err
}

// reachState is what the reporter goroutine (checkReach) remembers between
// its checks. The progress counts it last saw with the time they last
// changed.
type reachState struct {
	progress int64
	moved    time.Time
}

// checkReach is the reporter's look at reachability, every reportEvery. It
// asks Reachable, which says when the cluster becomes unreachable (and wakes
// Next, so the plugin reports the input not connected) and when a broker
// answers again, even while nothing else asks. And it stops a bounded run
// (StopAtEnd) that made no progress (no record handed out or acknowledged)
// for Config.UnreachableTimeout of an outage.
func (rp *reporter) checkReach(s *reachState, now time.Time) {
	e := rp.e
	if p := e.stats.records.Load() + e.stats.acked.Load() + e.stats.dropped.Load(); p != s.progress || s.moved.IsZero() {
		s.progress, s.moved = p, now
	}
	err := e.Reachable()
	limit := e.cfg.UnreachableTimeout
	if err == nil || !e.cfg.StopAtEnd || limit <= 0 {
		return
	}
	d, _ := e.kafka.reach.outage(e.cfg.Seeds)
	if d >= limit && now.Sub(s.moved) >= limit {
		e.fail(fmt.Errorf("%w; a bounded run stops once no broker answered and nothing progressed for unreachable_timeout (%s)", err, limit))
	}
}
