package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/backoff"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// commitLoop is the committer goroutine: every commit period, and at once
// when every slot waits for a commit, it commits each partition's
// acknowledged progress.
func (e *Engine) commitLoop() {
	defer e.wg.Done()
	ctx, cancel := e.shut.SoftStopCtx(context.Background())
	defer cancel()
	t := time.NewTicker(e.cfg.CommitPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.commitNow:
		}
		err := e.commit(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // stopping: the commit was cut short, the final commit makes it
		case permanent(err):
			return // the stopping error, logged by fail; the final commit tries once more
		default:
			e.warn("commit", "Committing offsets failed, retrying in %s: %v", e.cfg.CommitPeriod, err)
		}
	}
}

// commit commits every partition whose frontier moved since its last commit,
// then frees the slots of the ranges the commit covers. Commits are
// serialised (commitLock, shared with Revoked and the final commit), so an
// older frontier never lands after a newer one: a partition's frontier only
// grows within its incarnation, so its commits never go backwards. A commit's
// result is applied only to the incarnation it was taken from. A commit
// refused for good (permanent) stops the engine.
func (e *Engine) commit(ctx context.Context) error {
	if e.committer == nil {
		return nil
	}
	if err := e.lockCommits(ctx); err != nil {
		return err
	}
	defer e.unlockCommits()
	e.mu.Lock()
	offsets := map[ranges.Key]int64{}
	owner := map[ranges.Key]*partition{} // the ownership each offset belongs to
	for k, p := range e.readingLocked() {
		if at, _ := e.tracker.Frontier(k); at != p.committed || p.cutUnsent {
			offsets[k], owner[k] = at, p
			p.cutUnsent = false // sent now (cuts.go); again if this commit fails
		}
	}
	e.mu.Unlock()
	failed, err := e.committer.Commit(ctx, offsets)
	defer e.cutsUnsent(owner, failed, err)
	if len(offsets) > 0 {
		e.obs.Committed(err == nil && len(failed) == 0)
	}
	if err != nil {
		if permanent(err) {
			e.fail(e.refusedErr(sortedKeys(offsets), err))
		}
		return err
	}
	if !e.cfg.Membership {
		for _, k := range sortedKeys(failed) {
			if fenced(failed[k]) {
				// A group with live members rejects commits from outside
				// it: nothing this input acknowledges could be stored.
				e.fail(fmt.Errorf("%w: consumer_group %q now has live members, which reject the commits of pinned partitions (name:partitions) from outside the group; name the topics whole to join the group, or use another group", failed[k], e.cfg.Group))
				return failed[k]
			}
		}
	}
	if err := e.failRefused(failed); err != nil {
		return err
	}
	e.mu.Lock()
	released := 0
	for k, at := range offsets {
		if p := owner[k]; failed[k] == nil && e.partLocked(k) == p {
			p.committed = at
		}
	}
	for _, p := range e.readingLocked() {
		kept := p.held[:0]
		for _, end := range p.held { // in completion order, not offset order
			if end <= p.committed {
				released++
			} else {
				kept = append(kept, end)
			}
		}
		p.held = kept
	}
	e.inflight -= released
	e.mu.Unlock()
	if released > 0 {
		e.signal()
	}
	return joinKeyErrs(failed)
}

// lockCommits takes the commit lock, waiting at most as long as ctx: a
// commit in flight (a revocation's, retried for up to 30 s) does not hold up
// the final commit past its limit.
func (e *Engine) lockCommits(ctx context.Context) error {
	select {
	case e.commitLock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the commit in flight: %w", ctx.Err())
	}
}

func (e *Engine) unlockCommits() { <-e.commitLock }

// failRefused stops the engine if the coordinator refused the commit of
// some partitions for good (permanent: authorisation, for one), and returns
// that error; retriable refusals (the coordinator moving or loading, a
// rebalance) return nil and are retried by the next commit.
func (e *Engine) failRefused(failed map[ranges.Key]error) error {
	var keys []ranges.Key
	var errs []error
	for _, k := range sortedKeys(failed) {
		if permanent(failed[k]) {
			keys = append(keys, k)
			errs = append(errs, failed[k])
		}
	}
	if len(keys) == 0 {
		return nil
	}
	err := e.refusedErr(keys, errors.Join(errs...))
	e.fail(err)
	return err
}

// refusedErr names the group and the partitions of a commit refused for
// good.
func (e *Engine) refusedErr(keys []ranges.Key, err error) error {
	return fmt.Errorf("group %q refused the commit of %d partitions (%s), retrying cannot fix it: %w", e.cfg.Group, len(keys), keyList(keys), err)
}

// finalCommit commits once more on close, retrying for a while (a broker
// may be restarting) as long as ctx allows.
func (e *Engine) finalCommit(ctx context.Context) error {
	var err error
	for attempt := range 5 {
		if err = e.commit(ctx); err == nil || permanent(err) {
			return err
		}
		e.log.Warnf("Final commit failed (attempt %d of 5): %v", attempt+1, err)
		if backoff.Wait(ctx, time.Duration(attempt+1)*time.Second) != nil {
			break
		}
	}
	return err
}

// fenced reports a commit the group coordinator rejected because the
// committer is not (or no longer) a member of the group's current generation.
func fenced(err error) bool {
	return errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.FencedInstanceID)
}
