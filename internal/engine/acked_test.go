package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestRestartReadsAgainOnlyWhatWasNotAcknowledged (issue 55, item 2): a
// member acknowledges every batch but the first of each partition, so its
// commit stays at the first batch's start; the acknowledged offsets above
// it go into the commit's metadata. A member of the group that starts next
// hands out again only the records that were not acknowledged (those of the
// first batches), not everything above the commit, and commits every
// partition to its end once they are.
func TestRestartReadsAgainOnlyWhatWasNotAcknowledged(t *testing.T) {
	const partitions, perPart = 2, 300
	c := newKafka(t, partitions, perPart, "t")
	cfg := func(cfg *Config) {
		asMember(cfg)
		cfg.MaxRangeRecords = 50
		cfg.MaxInFlight = 16
		cfg.Group.CommitPeriod = 100 * time.Millisecond
		cfg.Fetch.MaxPartitionBytes = 1 << 10 // several batches per range
	}
	a, logA := newEngine(t, c, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	held := map[int32][]int64{} // the offsets of each partition's first batch, never acknowledged
	var later []*Batch
	delivered := 0
	for delivered < partitions*perPart {
		b, err := a.Next(ctx)
		require.NoError(t, err, "%s", logA)
		delivered += len(b.Records)
		if b.Span.Start == 0 {
			for _, r := range b.Records {
				held[b.Range.Partition] = append(held[b.Range.Partition], r.Offset)
			}
			continue
		}
		later = append(later, b)
	}
	require.Len(t, held, partitions)
	// The group commits offset 0 first, with nothing acknowledged; what is
	// acknowledged next leaves the frontier where it is, and must still be
	// committed (in the metadata).
	require.Eventually(t, func() bool {
		for p := range int32(partitions) {
			if committedOf(t, c, "g", p) != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
	for _, b := range later {
		b.Ack()
	}
	cl := kgoClient(t, c)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	require.Eventually(t, func() bool {
		offs, err := adm.FetchOffsets(t.Context(), "g")
		if err != nil {
			return false
		}
		n := 0
		offs.Each(func(o kadm.OffsetResponse) {
			if strings.HasPrefix(o.Metadata, ackedPrefix) {
				n++
			}
		})
		return n == partitions
	}, 10*time.Second, 50*time.Millisecond, "the commits carry the acknowledged offsets above them")
	closeCtx, cancelClose := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancelClose()
	require.NoError(t, a.Close(closeCtx))

	b, logB := newEngine(t, c, cfg)
	again := map[int32][]int64{}
	stop := drainInBackground(ctx, b)
	require.Eventually(t, func() bool {
		for p := range int32(partitions) {
			if committedOf(t, c, "g", p) != perPart {
				return false
			}
		}
		return true
	}, 15*time.Second, 100*time.Millisecond, "every partition committed to its end\n%s", logB)
	got := stop()
	for p := range int32(partitions) {
		again[p] = held[p]
	}
	for k, n := range got {
		p := int32(k[len(k)-1] - '0')
		assert.Equal(t, len(held[p]), n, "%s: records handed out again after the restart, want only the %d not acknowledged", k, len(held[p]))
	}
	assert.Contains(t, logB.String(), "were acknowledged before that commit")
}
