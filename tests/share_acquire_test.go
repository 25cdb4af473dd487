package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// TestShareAcquireModesOnTheBroker (issue 51): on the real broker a member with share_max_records
// 10 acquires at most 10 records a fetch under record_limit (the broker splits the record batch),
// and whole record batches under batch_optimized: 300 records produced at once (one or a few
// record batches) come in fetches of more than 10. Either way every record is accepted once and
// the group's lag ends at 0.
func TestShareAcquireModesOnTheBroker(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, mode := range []share.AcquireMode{share.RecordLimit, share.BatchOptimized} {
		t.Run(mode.String(), func(t *testing.T) {
			const total = 300
			topic, group := shareTopic(t, total, nil)
			r, err := share.New(share.Config{Seeds: brokers(), Group: group, Topics: []string{topic}, MaxRecords: 10, AcquireMode: mode})
			require.NoError(t, err)
			require.NoError(t, r.Start(t.Context()))
			closed := false
			t.Cleanup(func() {
				if !closed {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_ = r.Close(ctx)
				}
			})
			largest, n := 0, 0
			seen := map[int64]bool{}
			for n < total {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				b, err := r.Next(ctx)
				cancel()
				require.NoError(t, err, "after %d of %d records", n, total)
				// A fetch's records of one partition are one batch (no BatchRecords).
				largest = max(largest, len(b.Records))
				for _, rec := range b.Records {
					require.False(t, seen[rec.Offset], "offset %d delivered twice", rec.Offset)
					seen[rec.Offset] = true
				}
				n += len(b.Records)
				b.Ack()
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			require.NoError(t, r.Close(ctx))
			closed = true
			st := r.Stats()
			require.Equal(t, int64(total), st.Acquired, "%+v", st)
			require.Equal(t, int64(total), st.Accepted, "%+v", st)
			if mode == share.RecordLimit {
				require.LessOrEqual(t, largest, 10, "the largest fetch under record_limit")
			} else {
				require.Greater(t, largest, 10, "the largest fetch under batch_optimized: whole record batches")
			}
			t.Logf("%s: the largest fetch held %d records", mode, largest)
			requireShareLagZero(t, topic, group)
		})
	}
}
