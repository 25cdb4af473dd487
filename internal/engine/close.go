package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/kbr/kafka_batched_ranges/internal/group"
	"strings"
	"time"
)

func (e *Engine) stopping() bool {
	if e.shut.IsSoftStopSignalled() {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fatal != nil
}

// Err returns the error that stopped the engine (data loss, a missing topic
// in a bounded run, a permanent error from the cluster, a failed final
// commit), or nil.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fatal
}

// fail stops the engine with err. Nothing more is planned or read, what was
// acknowledged is committed, and Next ends once the batches handed out are
// done.
func (e *Engine) fail(err error) {
	e.mu.Lock()
	e.failLocked(err)
	e.mu.Unlock()
}

// failLocked is fail with Engine.mu held. A nil err does nothing.
func (e *Engine) failLocked(err error) {
	if err == nil || e.fatal != nil {
		return
	}
	e.fatal = err
	e.log.Errorf("Input stopped: %v", err)
	if e.sched.stop != nil {
		e.sched.stop() // a refresh in progress returns at once
	}
	e.sched.signal()
	e.out.signal()
}

// The finisher's bounds, whatever the contexts of Close. One bounds the
// final commit (all its attempts). The other bounds leaving the group and
// closing the clients.
// Benthos closes an input without a deadline and kills the process once its
// shutdown_timeout (20 s by default) ends, before the member left the group
// (the group then waits a session timeout for it) and before the input's
// summary is logged. Together they end well before it. A final commit
// does not wait behind a rebalance's join (group.Member.Commit), nor does the
// leave (group.Member.Close), so they need these bounds only when the
// coordinator does not answer.
const (
	finalCommitTimeout = 10 * time.Second
	releaseTimeout     = 5 * time.Second
)

// Close stops planning and reading and waits, as long as ctx allows, for
// every goroutine the engine started, the final commit of the acknowledged
// progress, leaving the group and closing every client. That work runs on
// the finisher goroutine (started by the first Close, done within
// finishTimeout once the readers stopped). So Close returns when ctx ends
// and the work goes on. If ctx ends while readers still run, Close closes
// the consumer cache's clients so readers blocked on the network return, but
// keeps the group member and the cluster client for the final commit, which
// then commits what was acknowledged in the meantime. Calling Close again
// waits again, and returns the result. Close is safe to call concurrently
// and more than once.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if started && e.cfg.StopAtEnd && !e.shut.IsSoftStopSignalled() {
		// At the first Close of a bounded read that has not ended, what each
		// partition still waited for, so a run stopped because it did not
		// end (a scheduler's timeout, a test's) says where it stood.
		if lines := e.Waiting(); len(lines) > 0 {
			e.log.Infof("Stopping before the end; what each partition waited for:\n  %s", strings.Join(lines, "\n  "))
		}
	}
	e.shut.TriggerSoftStop()
	e.out.signal()
	if !started {
		return nil // Start now returns ErrClosed
	}
	e.finishOnce.Do(func() { go (&finisher{e: e}).run() })
	select {
	case <-e.finishDone:
		return e.finishErr
	case <-ctx.Done():
	}
	select {
	case <-e.stopped:
		return fmt.Errorf("close: final commit and leaving the group still running: %w", ctx.Err())
	default:
	}
	if err := e.kafka.cache.Close(ctx); err != nil { // ctx has ended: leased clients are closed under their readers
		return fmt.Errorf("close: readers still running, their clients closed: %w", err)
	}
	return fmt.Errorf("close: readers still running: %w", ctx.Err())
}

// run is the finisher goroutine. Once every goroutine has stopped, it makes
// the final commit, then releases the clients. e.finishDone is its stopped
// signal. finalCommitTimeout and releaseTimeout bound it once the readers
// stopped.
func (f *finisher) run() {
	e := f.e
	defer close(e.finishDone)
	<-e.stopped
	e.finishErr = f.finish()
}

// finisher is the goroutine Close starts (run). Once every other goroutine
// has stopped, it makes the final commit and releases the clients.
type finisher struct {
	e *Engine
}

// finish runs once every goroutine has stopped. It makes the final commit,
// then releases the clients.
func (f *finisher) finish() error {
	e := f.e
	var errs []error
	commitCtx, cancel := context.WithTimeout(context.Background(), finalCommitTimeout)
	err := f.finalCommit(commitCtx)
	cancel()
	if err != nil {
		err = fmt.Errorf("final commit of acknowledged offsets to group %q failed, the next run will read them again: %w", e.cfg.Group.Name, err)
		e.log.Errorf("%v", err)
		e.mu.Lock()
		if e.fatal == nil {
			e.fatal = err
		}
		e.mu.Unlock()
		errs = append(errs, err)
	}
	releaseCtx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	e.mu.Lock()
	m := e.group.member
	e.mu.Unlock()
	if err := e.kafka.release(releaseCtx, m); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// release closes the consumer cache, leaves the group (m, nil without one)
// and closes the clients. The member's revocation commits nothing new after
// the final commit. The clients are the member's, which the cache and the
// listings share with a group, and the cluster's.
func (c *clients) release(ctx context.Context, m *group.Member) error {
	var errs []error
	if err := c.cache.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close consumer cache: %w", err))
	}
	if m != nil {
		if err := m.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.cluster.close()
	return errors.Join(errs...)
}
