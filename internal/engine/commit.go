package engine

import (
	"context"
	"time"

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
	if e.offsets == nil {
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
	failed, err := e.offsets.Commit(ctx, offsets)
	if err != nil {
		return err
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
		if sleep(ctx, time.Duration(attempt+1)*time.Second) != nil {
			break
		}
	}
	return err
}
