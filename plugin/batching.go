package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// fieldBatching is Benthos' standard batching policy field.
const fieldBatching = "batching"

func batchingField() *service.ConfigField {
	return service.NewBatchPolicyField(fieldBatching).
		LintRule(fieldLint(fieldBatching)).
		Description("Cuts each range's records into batches by a Benthos batching policy (`count`, `byte_size`, `period`, `check`, `processors`, as `kafka_franz` has it), within one range: a batch never holds records of two ranges (so never of two partitions), a range's last batch may be smaller, and acknowledging a batch acknowledges exactly its offsets (with `auto_replay_nacks` a rejected batch is delivered again alone). `period` cuts a range's batch that has not filled within that time while the range is still being read; whatever is left when a range is read is cut at once, so a range that never fills is never held. `processors` run on each batch as it is cut; a batch they delete entirely is acknowledged. With `ordered: true` a batch never spans two fetches (a partition's next records are read only once its previous ones are acknowledged) and a partition's batches are delivered one at a time. Empty (the default): no policy, as before: each range is delivered in the batches its fetches return (up to `fetch_max_partition_bytes` of a partition each, thousands of records for small ones).").
		Advanced()
}

// batching cuts the engine's batches into the batches of a Benthos batch
// policy, within one range:
//
//   - A range's records go, in offset order, into the range's own Benthos
//     batcher; where the policy triggers, the engine batch holding the
//     last record is split after it (engine.Batch.Split). So every batch
//     handed out is made of whole engine batches of one range:
//     acknowledging it acknowledges exactly its offsets, and a rejected one
//     is replayed alone.
//   - What is left once the range's reader is done (the engine's end
//     marker, engine.Config.RangeEnds) is cut as the range's last batch; a
//     period cuts it earlier, so a range is never held for ever.
//   - Processors run on each batch as it is cut, on the ReadBatch goroutine.
//   - A replay (a rejected engine batch delivered again) is a batch of its
//     own, no larger than the batch it was cut from: only the processors
//     run on it.
//   - With ordered, every engine batch is cut whole at once (the engine reads
//     a partition on only once one of its batches is acknowledged: waiting
//     for more would wait for ever), and a partition's batches are handed
//     out one at a time, each once the engine batches of the previous are
//     done (acknowledged, or rejected and then replayed and acknowledged).
//
// A mode that hands out each range as one batch (align_ranges) is one whose
// add never cuts. The range is cut at its end marker only.
//
// Benthos calls ReadBatch from one goroutine, and Close once the last
// ReadBatch returned. Acknowledgements come from any goroutine and touch
// only the fields under mu.
type batching struct {
	policy  service.BatchPolicy
	res     *service.Resources
	msgs    messages
	ordered bool

	// The ReadBatch goroutine's own.
	open   map[rangeID]*openRange // ranges with records not cut into a batch yet
	free   []*service.Batcher     // empty batchers, for the next ranges
	replay *service.Batcher       // runs the processors on replays; nil until the first

	mu    sync.Mutex  // guards ready, busy, interrupt
	ready []*cutBatch // cut batches to hand out, oldest first
	// busy is ordered mode's gate: per partition (of every incarnation),
	// the engine batches this input handed to Benthos (taken from ready)
	// that are not done. It is not the engine's count of a partition's
	// batches in the pipeline (what Next handed to this input and is not
	// done: the engine's ordered gate), which also counts the batches this
	// input still holds, in open and in ready. A partition idle by the
	// engine's count would never let go of the batch the gate holds back.
	busy      map[ranges.Key]map[*engine.Batch]struct{}
	interrupt context.CancelFunc // ends ReadBatch's wait in Next (ordered: a partition's previous batch is done)
}

// rangeID is one range of one incarnation of its partition.
type rangeID struct {
	r   ranges.Range
	inc uint64
}

// openRange is a range whose records are in its batcher, not cut yet.
type openRange struct {
	batcher *service.Batcher
	parts   []*engine.Batch // the engine batches whose records the batcher holds, in offset order
}

// cutBatch is a batch to hand out: the processed messages and the engine
// batches (whole, of one range) whose acknowledgement they carry.
type cutBatch struct {
	gate   ranges.Key // its partition: ordered mode's unit, across incarnations
	msgs   service.MessageBatch
	parts  []*engine.Batch
	replay bool // a rejected batch delivered again: the one its partition waits for
}

// staleCheck is how often ReadBatch looks again, in ordered mode, at a
// partition waiting for a rejected batch that the engine may have dropped
// (its partition was revoked, or the engine stops) instead of replaying it.
const staleCheck = 100 * time.Millisecond

// newBatching returns the batching of policy, or nil for an empty policy.
// It builds one batcher at once, so a policy that cannot be built (a bad
// period, check or processor) fails the input's construction.
func newBatching(policy service.BatchPolicy, res *service.Resources, msgs messages, ordered bool) (*batching, error) {
	if policy.IsNoop() {
		return nil, nil
	}
	b, err := policy.NewBatcher(res)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fieldBatching, err)
	}
	return &batching{
		policy: policy, res: res, msgs: msgs, ordered: ordered,
		open: map[rangeID]*openRange{},
		free: []*service.Batcher{b},
		busy: map[ranges.Key]map[*engine.Batch]struct{}{},
	}, nil
}

// read returns the next cut batch, taking engine batches from eng until
// one is cut. Its errors are Next's. While the engine says no broker
// answers, batches cut already wait too, as Next's do.
func (bt *batching) read(ctx context.Context, eng *engine.Engine) (service.MessageBatch, service.AckFunc, error) {
	for {
		if err := eng.Reachable(); err != nil && !eng.Ended() {
			return nil, nil, err
		}
		wait := bt.cutDue(ctx)
		bt.mu.Lock()
		c := bt.takeLocked()
		if c != nil {
			bt.mu.Unlock()
			return c.msgs, bt.ackFunc(c), nil
		}
		if len(bt.ready) > 0 && (wait == 0 || wait > staleCheck) {
			wait = staleCheck // a partition waits: look again soon
		}
		var wctx context.Context
		var cancel context.CancelFunc
		if wait > 0 {
			wctx, cancel = context.WithTimeout(ctx, wait)
		} else {
			wctx, cancel = context.WithCancel(ctx)
		}
		bt.interrupt = cancel
		bt.mu.Unlock()

		b, err := eng.Next(wctx)
		bt.mu.Lock()
		bt.interrupt = nil
		bt.mu.Unlock()
		cancel()
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				continue // a period is due, or a partition may go on
			}
			return nil, nil, err
		}
		if err := bt.add(ctx, b); err != nil {
			return nil, nil, err
		}
	}
}

// add takes one engine batch. An end marker cuts what is left of its
// range, a replay is cut on its own, and a first delivery goes into its
// range's batcher, cut where the policy says.
func (bt *batching) add(ctx context.Context, b *engine.Batch) error {
	id := rangeID{r: b.Range, inc: b.Incarnation()}
	if b.RangeEnd {
		if o := bt.open[id]; o != nil {
			delete(bt.open, id)
			bt.cut(ctx, id, o)
			bt.free = append(bt.free, o.batcher)
		}
		return nil
	}
	msgs, ok := b.Prepared.(service.MessageBatch)
	b.Prepared = nil // processors may mutate it; a replay rebuilds from the records
	if !ok || b.Attempts > 1 {
		msgs = bt.msgs.batch(b.Records, b.Range, b.High)
	}
	if b.Attempts > 1 {
		return bt.addReplay(ctx, id, b, msgs)
	}
	o := bt.open[id]
	if o == nil {
		batcher, err := bt.acquire(ctx)
		if err != nil {
			b.Nack(err)
			return err
		}
		o = &openRange{batcher: batcher}
		bt.open[id] = o
	}
	first := 0 // index in msgs of b's first record
	for i, m := range msgs {
		if !o.batcher.Add(m) {
			continue
		}
		if i+1 < len(msgs) {
			rest := b.Split(i + 1 - first)
			o.parts = append(o.parts, b)
			b, first = rest, i+1
		} else {
			o.parts = append(o.parts, b)
			b = nil
		}
		bt.cut(ctx, id, o)
	}
	if b != nil {
		o.parts = append(o.parts, b)
	}
	if bt.ordered {
		bt.cut(ctx, id, o)
	}
	return nil
}

// addReplay cuts a rejected engine batch delivered again as one batch.
func (bt *batching) addReplay(ctx context.Context, id rangeID, b *engine.Batch, msgs service.MessageBatch) error {
	if bt.replay == nil {
		batcher, err := bt.acquire(ctx)
		if err != nil {
			b.Nack(err)
			return err
		}
		bt.replay = batcher
	}
	for _, m := range msgs {
		bt.replay.Add(m) // cut once, whatever it says
	}
	bt.cutAs(ctx, id, &openRange{batcher: bt.replay, parts: []*engine.Batch{b}}, true)
	return nil
}

// acquire returns an empty batcher whose period starts now.
func (bt *batching) acquire(ctx context.Context) (*service.Batcher, error) {
	if n := len(bt.free); n > 0 {
		b := bt.free[n-1]
		bt.free = bt.free[:n-1]
		_, _ = b.Flush(ctx) // empty: restarts its period, runs no processor
		return b, nil
	}
	b, err := bt.policy.NewBatcher(bt.res)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fieldBatching, err)
	}
	return b, nil
}

// cut flushes o's batcher (running the processors) into a batch to hand
// out, carrying o's engine batches.
func (bt *batching) cut(ctx context.Context, id rangeID, o *openRange) {
	bt.cutAs(ctx, id, o, false)
}

// cutAs is cut, of a replay if replay is set.
func (bt *batching) cutAs(ctx context.Context, id rangeID, o *openRange, replay bool) {
	if len(o.parts) == 0 {
		return
	}
	parts := o.parts
	o.parts = nil
	out, err := o.batcher.Flush(ctx)
	switch {
	case err != nil:
		engine.NackAll(parts, err)
		return
	case len(out) == 0:
		// The processors deleted every message: done, as Benthos does.
		engine.AckAll(parts)
		return
	}
	bt.mu.Lock()
	bt.ready = append(bt.ready, &cutBatch{gate: id.r.Key(), msgs: out, parts: parts, replay: replay})
	bt.mu.Unlock()
}

// cutDue cuts the open ranges whose period is over and returns how long
// until the next one's is, 0 for none.
func (bt *batching) cutDue(ctx context.Context) time.Duration {
	var next time.Duration
	for id, o := range bt.open {
		if len(o.parts) == 0 {
			continue
		}
		d, timed := o.batcher.UntilNext()
		switch {
		case !timed:
		case d <= time.Millisecond:
			bt.cut(ctx, id, o)
		case next == 0 || d < next:
			next = d
		}
	}
	return next
}

// takeLocked removes and returns the first batch that may be handed out:
// in ordered mode the oldest of a partition whose previous batch is done
// (or a replay, which is what the partition waits for). A partition found
// busy stays busy for the rest of the pass. Its engine batches are
// acknowledged from other goroutines, without mu, so looking again at a
// later batch of it could find it idle and hand that batch out before the
// older ones it passed over (issue 43: 0..399, 9900..9999, 400..).
func (bt *batching) takeLocked() *cutBatch {
	var busy []ranges.Key // ordered: the partitions found busy in this pass
	for i, c := range bt.ready {
		if bt.ordered && !c.replay {
			if slices.Contains(busy, c.gate) {
				continue
			}
			if !bt.idleLocked(c.gate) {
				busy = append(busy, c.gate)
				continue
			}
		}
		bt.ready = append(bt.ready[:i], bt.ready[i+1:]...)
		if bt.ordered {
			busy := bt.busy[c.gate]
			if busy == nil {
				busy = map[*engine.Batch]struct{}{}
				bt.busy[c.gate] = busy
			}
			for _, p := range c.parts {
				busy[p] = struct{}{}
			}
		}
		return c
	}
	return nil
}

// idleLocked reports whether every engine batch handed out of partition g,
// of any incarnation, is done (acknowledged, or dropped by the engine). A
// partition revoked or lost and assigned back goes on only once its earlier
// incarnation's batches are through, as the engine's own ordered gate does.
func (bt *batching) idleLocked(g ranges.Key) bool {
	busy := bt.busy[g]
	for p := range busy {
		if p.Done() {
			delete(busy, p)
		}
	}
	if len(busy) > 0 {
		return false
	}
	delete(bt.busy, g)
	return true
}

// ackFunc finishes c's engine batches once the pipeline is done with it
// (Nack: each is rejected, and with auto_replay_nacks delivered again
// alone), and in ordered mode lets its partition's next batch go.
func (bt *batching) ackFunc(c *cutBatch) service.AckFunc {
	var once atomic.Bool // this delivery's ack runs once
	return func(_ context.Context, err error) error {
		if once.Swap(true) {
			return nil
		}
		// One acknowledgement of the pipeline: stale, it counts once.
		if err != nil {
			engine.NackAll(c.parts, err)
		} else {
			engine.AckAll(c.parts)
		}
		if bt.ordered {
			bt.mu.Lock()
			for _, r := range bt.ready {
				if r.gate == c.gate && bt.interrupt != nil {
					bt.interrupt()
					break
				}
			}
			bt.mu.Unlock()
		}
		return nil
	}
}

// close closes every batcher (and with them their processors). What they
// held was never acknowledged, so it is read again by the next run.
func (bt *batching) close(ctx context.Context) error {
	var errs []error
	all := bt.free
	for _, o := range bt.open {
		all = append(all, o.batcher)
	}
	if bt.replay != nil {
		all = append(all, bt.replay)
	}
	for _, b := range all {
		if err := b.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: close: %w", fieldBatching, err))
		}
	}
	bt.free, bt.open, bt.replay = nil, map[rangeID]*openRange{}, nil
	return errors.Join(errs...)
}

// alignedWithoutCuts: align_ranges emits each range as one whole batch (one
// file per range), which a batching policy that cuts (count, byte_size,
// period, check) would break up. Processors alone are fine.
func alignedWithoutCuts(pc *service.ParsedConfig) []error {
	aligned, _ := pc.FieldBool(fieldAlignRanges)
	if !aligned || !pc.Contains(fieldBatching) {
		return nil
	}
	p, err := pc.FieldBatchPolicy(fieldBatching)
	if err != nil {
		return nil // the policy's own checks report it
	}
	var set []string
	if p.Count > 0 {
		set = append(set, "count")
	}
	if p.ByteSize > 0 {
		set = append(set, "byte_size")
	}
	if p.Period != "" {
		set = append(set, "period")
	}
	if p.Check != "" {
		set = append(set, "check")
	}
	if len(set) == 0 {
		return nil
	}
	return one(fmt.Errorf("%s.%s cannot be used with %s: true, which emits each range as one whole batch (set %s to size the batches)",
		fieldBatching, strings.Join(set, ", "+fieldBatching+"."), fieldAlignRanges, fieldMaxRangeRecords))
}
