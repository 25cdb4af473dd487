package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deliveries counts how often each offset of each partition was delivered,
// across the members of a group.
type deliveries struct {
	mu sync.Mutex // guards n
	n  map[int32]map[int64]int
}

func (d *deliveries) add(b *Batch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[int32]map[int64]int{}
	}
	m := d.n[b.Range.Partition]
	if m == nil {
		m = map[int64]int{}
		d.n[b.Range.Partition] = m
	}
	for _, r := range b.Records {
		m[r.Offset]++
	}
}

// count returns the distinct offsets delivered and the deliveries past the
// first of each.
func (d *deliveries) count() (distinct, dups int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.n {
		for _, n := range m {
			distinct++
			dups += n - 1
		}
	}
	return distinct, dups
}

// missing lists the offsets below n of partitions [0, parts) never delivered.
func (d *deliveries) missing(parts int32, n int64) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for p := range parts {
		for o := range n {
			if d.n[p][o] == 0 {
				out = append(out, fmt.Sprintf("%d@%d", p, o))
			}
		}
	}
	return out
}

// pipeline takes batches from an engine as Benthos' input loop does: up to
// depth batches in flight, each acknowledged delay after it was taken (in
// parts, if split). stop stops taking batches and waits for the
// acknowledgement of every batch taken, as Benthos does before it closes an
// input.
type pipeline struct {
	cancel context.CancelFunc
	taking sync.WaitGroup
	acks   sync.WaitGroup
	taken  int
	mu     sync.Mutex // guards taken
}

func runPipeline(ctx context.Context, e *Engine, seen *deliveries, depth int, delay time.Duration, split bool) *pipeline {
	ctx, cancel := context.WithCancel(ctx)
	pl := &pipeline{cancel: cancel}
	slots := make(chan struct{}, depth)
	pl.taking.Add(1)
	go func() {
		defer pl.taking.Done()
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			b, err := e.Next(ctx)
			if err != nil {
				<-slots
				return
			}
			seen.add(b)
			pl.mu.Lock()
			pl.taken++
			pl.mu.Unlock()
			parts := []*Batch{b}
			if split && len(b.Records) > 1 {
				parts = append(parts, b.Split(len(b.Records)/2))
			}
			pl.acks.Add(1)
			go func() {
				defer pl.acks.Done()
				time.Sleep(delay)
				for _, p := range parts {
					p.Ack()
				}
				<-slots
			}()
		}
	}()
	return pl
}

func (pl *pipeline) took() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.taken
}

func (pl *pipeline) stop() {
	pl.cancel()
	pl.taking.Wait()
	pl.acks.Wait()
}

// TestGracefulHandoverDeliversNothingTwice: a member reads a group's
// partitions through a pipeline that holds batches for a while; a second
// member joins mid-run and later leaves gracefully (it stops taking
// batches, its pipeline acknowledges what it holds, it closes). Under every
// balancer (eager ones revoke every partition at each rebalance, the
// cooperative one the moved ones) the batches held at each revocation are
// acknowledged and committed before the partitions are handed over, so no
// offset is delivered twice and every offset is delivered. Before the drain,
// the batches in the pipeline at a revocation were delivered but not
// committed, and read again by the next owner.
func TestGracefulHandoverDeliversNothingTwice(t *testing.T) {
	const parts, records = 4, 2000
	for _, bal := range balancers {
		for _, split := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/split=%v", bal.name, split), func(t *testing.T) {
				c := newKafka(t, parts, records, "t")
				member := func(cfg *Config) {
					memberConfig(bal.b())(cfg)
					cfg.MaxRangeRecords = 50
					cfg.MaxInFlight = 8
					cfg.RevokeDrainTimeout = 10 * time.Second
					cfg.GroupOpts = append(cfg.GroupOpts, kgo.RebalanceTimeout(20*time.Second))
				}
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				seen := &deliveries{}
				const depth, delay = 4, 20 * time.Millisecond

				a, logA := newEngine(t, c, member)
				pa := runPipeline(ctx, a, seen, depth, delay, split)
				defer pa.stop()
				require.Eventually(t, func() bool { d, _ := seen.count(); return d >= parts*records/10 }, 20*time.Second, 5*time.Millisecond,
					"the first member read nothing\n%s", logA)

				b, logB := newEngine(t, c, member)
				pb := runPipeline(ctx, b, seen, depth, delay, split)
				require.Eventually(t, func() bool { return pb.took() >= 5 }, 20*time.Second, 5*time.Millisecond,
					"the joining member read nothing\n%s", logB)
				pb.stop()
				closeCtx, closeCancel := context.WithTimeout(ctx, 10*time.Second)
				require.NoError(t, b.Close(closeCtx))
				closeCancel()
				d, _ := seen.count()
				require.Less(t, d, parts*records, "everything was read before the second member left: the leave moved nothing")

				require.Eventually(t, func() bool {
					for p := range int32(parts) {
						if committedOf(t, c, "g", p) != records {
							return false
						}
					}
					return true
				}, 30*time.Second, 20*time.Millisecond, "the group did not commit every partition to its end\n%s", logA)
				pa.stop()
				require.NoError(t, a.Err())
				require.NoError(t, b.Err())

				distinct, dups := seen.count()
				t.Logf("%s, split %v: %d offsets delivered, %d duplicate deliveries; the joining member took %d batches",
					bal.name, split, distinct, dups, pb.took())
				assert.Empty(t, seen.missing(parts, records), "offsets never delivered")
				assert.Zero(t, dups, "offsets delivered twice in graceful handovers\nfirst member:\n%s\nsecond member:\n%s", logA, logB)
			})
		}
	}
}
