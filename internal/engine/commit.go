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
		if err := e.commit(ctx); err != nil {
			e.warn("commit", "Committing offsets failed, retrying in %s: %v", e.cfg.CommitPeriod, err)
		}
	}
}

// commit commits every partition whose frontier moved since its last commit,
// then frees the slots of the ranges the commit covers.
func (e *Engine) commit(ctx context.Context) error {
	if e.committer == nil {
		return nil
	}
	e.mu.Lock()
	offsets := map[ranges.Key]int64{}
	for k, p := range e.parts {
		if at, _ := e.tracker.Frontier(k); at != p.committed {
			offsets[k] = at
		}
	}
	e.mu.Unlock()
	failed, err := e.committer.Commit(ctx, offsets)
	if len(offsets) > 0 {
		e.obs.Committed(err == nil && len(failed) == 0)
	}
	if err != nil {
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
	e.mu.Lock()
	released := 0
	for k, p := range e.parts {
		if at, ok := offsets[k]; ok && failed[k] == nil {
			p.committed = at
		}
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

// finalCommit commits once more on close, retrying for a while (a broker
// may be restarting) as long as ctx allows.
func (e *Engine) finalCommit(ctx context.Context) error {
	var err error
	for attempt := range 5 {
		if err = e.commit(ctx); err == nil {
			return nil
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
