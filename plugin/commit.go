package plugin

import (
	"context"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// commitLoop is the committer goroutine: every commit_period, and at once
// when every max_in_flight slot waits for a commit, it commits each
// partition's acknowledged progress.
func (in *input) commitLoop() {
	defer in.wg.Done()
	ctx, cancel := in.shut.SoftStopCtx(context.Background())
	defer cancel()
	t := time.NewTicker(in.conf.CommitPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-in.commitNow:
		}
		if err := in.commit(ctx); err != nil {
			in.warn("commit", "Committing offsets failed, retrying in %s: %v", in.conf.CommitPeriod, err)
		}
	}
}

// progressLocked returns the offset up to which partition k is acknowledged:
// the tracker's frontier (the end of the contiguous run of complete ranges),
// moved on by the acknowledged batches of the range that starts there.
func (in *input) progressLocked(k ranges.Key, p *partition) int64 {
	f, _ := in.tracker.Frontier(k)
	if st := p.open[f]; st != nil {
		return max(f, st.prefix())
	}
	return f
}

// commit commits every partition whose progress moved since its last
// commit, then frees the slots of the ranges the commit covers.
func (in *input) commit(ctx context.Context) error {
	if in.conf.ConsumerGroup == "" {
		return nil
	}
	in.mu.Lock()
	offsets := map[ranges.Key]int64{}
	for k, p := range in.parts {
		if at := in.progressLocked(k, p); at != p.committed {
			offsets[k] = at
		}
	}
	in.mu.Unlock()
	if err := in.cluster.commit(ctx, offsets); err != nil {
		return err
	}
	in.mu.Lock()
	released := 0
	for k, p := range in.parts {
		if at, ok := offsets[k]; ok {
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
	in.inflight -= released
	in.mu.Unlock()
	if released > 0 {
		in.signal()
	}
	return nil
}

// finalCommit commits once more on close, retrying for a while (a broker
// may be restarting) as long as ctx allows.
func (in *input) finalCommit(ctx context.Context) error {
	var err error
	for attempt := range 5 {
		if err = in.commit(ctx); err == nil {
			return nil
		}
		in.log.Warnf("Final commit failed (attempt %d of 5): %v", attempt+1, err)
		if sleep(ctx, time.Duration(attempt+1)*time.Second) != nil {
			break
		}
	}
	return err
}
