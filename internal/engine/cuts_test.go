package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestAlignedHandoverPlansTheGroupsCut (review 4, finding 4): README "Exactly-once
// files": a run and any re-run emit the same batches, so files named by
// kafka_range_start hold every record exactly once; "Running several
// instances": batches of a revoked partition still in the pipeline are
// delivered (and written) but not committed. Member A (snapshot 150 per
// partition, max_range_records 100) holds its batch of [100,150) in the
// pipeline; the topic grows to 250; member B starts (snapshot 250) and takes
// one partition; A commits 100 on revocation, and B reads [100,200). Both
// batches name the file <partition>/100; if A's late write lands after B's,
// the file holds [100,150) and records [150,200) are in no file, while the
// group commits past them. Now A commits offset 100 with its cut (commit
// metadata), and B plans [100,150) too, then [150,200) and [200,250).
func TestAlignedHandoverPlansTheGroupsCut(t *testing.T) {
	c := newKafka(t, 2, 150, "t")
	mod := func(cfg *Config) {
		asMember(cfg)
		cfg.StopAtEnd = true
		cfg.AlignRanges = true
		cfg.Group.Opts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	a, alog := newEngine(t, c, mod)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	heldA := map[int32]*Batch{}
	for len(heldA) < 2 {
		b, err := a.Next(ctx)
		require.NoError(t, err)
		if b.Range.Start == 100 {
			heldA[b.Range.Partition] = b // the pipeline is slow on these files
			continue
		}
		b.Ack()
	}
	adm := kadm.NewClient(kgoClient(t, c))
	require.Eventually(t, func() bool {
		return committed(ctx, t, adm, "g", "t", 0) == 100 && committed(ctx, t, adm, "g", "t", 1) == 100
	}, 20*time.Second, 20*time.Millisecond, "%s", alog)

	produce(t, c, "t", 2, 100) // 250 per partition now
	b, blog := newEngine(t, c, mod)
	var fromB *Batch
	for fromB == nil {
		bb, err := b.Next(ctx)
		require.NoError(t, err, "%s", blog)
		if bb.Range.Start == 100 {
			fromB = bb
			continue
		}
		bb.Ack()
	}
	fromA := heldA[fromB.Range.Partition]
	t.Logf("A handed out %s (%d records), B handed out %s (%d records): both are file %d/%d",
		fromA.Range, len(fromA.Records), fromB.Range, len(fromB.Records), fromB.Range.Partition, fromB.Range.Start)
	fromB.Ack()
	fromA.Ack() // A's write lands last
	assert.Equal(t, fromA.Range, fromB.Range, "two different batches of range start %d of t/%d were delivered (A's stale one can overwrite B's file)",
		fromB.Range.Start, fromB.Range.Partition)
	assert.Len(t, fromB.Records, int(fromB.Range.End-fromB.Range.Start))

	// B goes on from the cut to its own snapshot end, in aligned ranges.
	p := fromB.Range.Partition
	got := []ranges.Range{fromB.Range}
	next := fromB.Range.End
	for next < 250 {
		bb, err := b.Next(ctx)
		require.NoError(t, err, "%s", blog)
		if bb.Range.Partition == p {
			require.Equal(t, next, bb.Records[0].Offset, "a record of t/%d was skipped or read twice", p)
			next = bb.Records[len(bb.Records)-1].Offset + 1
			got = append(got, bb.Range)
		}
		bb.Ack()
	}
	want := []ranges.Range{{Topic: "t", Partition: p, Start: 100, End: 150}, {Topic: "t", Partition: p, Start: 150, End: 200}, {Topic: "t", Partition: p, Start: 200, End: 250}}
	assert.Equal(t, want, got)
}
