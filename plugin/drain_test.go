package plugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchingHandoverDeliversNothingTwice: with a batching policy (batches
// of 70 cut from ranges of 300, so a range's last records wait in the
// batcher for its end), a pipeline that acknowledges out of order from 4
// workers, and a second member that joins, reads for 2 s and leaves
// gracefully (it stops reading, its pipeline acknowledges what it holds, it
// closes), under each balancer: each revocation cuts what the batchers hold
// of the revoked partitions, waits for it to be acknowledged
// (revoke_drain_timeout, here half of rebalance_timeout) and commits it
// before the partitions move, so no offset is delivered twice, every offset
// is delivered and the group commits every partition to its end. Before the
// drain (adapted from the review's TestReview4BatchingAcrossRebalances) the
// same run delivered 460 to 990 offsets twice.
func TestBatchingHandoverDeliversNothingTwice(t *testing.T) {
	for _, bal := range []string{"range", "roundrobin", "sticky", "cooperative_sticky"} {
		t.Run(bal, func(t *testing.T) {
			const parts, perPart = 4, 1500
			addr := newKafka(t, "rb", parts)
			produceRecords(t, addr, "rb", parts, 0, parts*perPart)
			yaml := fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ rb ]
consumer_group: g-%s
group_balancers: [ %s ]
heartbeat_interval: 100ms
session_timeout: 6s
rebalance_timeout: 6s
commit_period: 100ms
poll_interval: 100ms
max_range_records: 300
max_in_flight: 4
range_metadata: true
batching:
  count: 70
  period: 50ms
`, addr, bal, bal)
			var mu sync.Mutex // guards seen
			seen := map[string]int{}
			// run reads batches as Benthos does; cancelling ctx stops the
			// reads, and the returned group is done once every batch read
			// was acknowledged.
			run := func(ctx context.Context, in *input) *sync.WaitGroup {
				var wg sync.WaitGroup
				work := make(chan readBatch, 8)
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for rb := range work {
							time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
							_ = rb.ack(context.Background(), nil)
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer close(work)
					for ctx.Err() == nil {
						batch, af, err := in.ReadBatch(ctx)
						if err != nil {
							if ctx.Err() == nil {
								time.Sleep(10 * time.Millisecond)
							}
							continue
						}
						rb := describe(t, batch, af)
						mu.Lock()
						for _, o := range rb.offsets {
							seen[fmt.Sprintf("%d@%d", rb.partition, o)]++
						}
						mu.Unlock()
						work <- rb
					}
				}()
				return &wg
			}
			a := connected(t, yaml)
			actx, acancel := context.WithCancel(t.Context())
			defer acancel()
			aw := run(actx, a)
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 1000 }, 20*time.Second, 10*time.Millisecond)

			b := newTestInput(t, yaml)
			cctx, ccancel := context.WithTimeout(t.Context(), 10*time.Second)
			require.NoError(t, b.Connect(cctx))
			ccancel()
			bctx, bcancel := context.WithCancel(t.Context())
			bw := run(bctx, b)
			time.Sleep(2 * time.Second)
			bcancel()
			bw.Wait()
			cctx, ccancel = context.WithTimeout(t.Context(), 10*time.Second)
			assert.NoError(t, b.Close(cctx), "close B")
			ccancel()

			adm := newAdmin(t, addr)
			done := func() bool {
				offs, err := adm.FetchOffsets(t.Context(), "g-"+bal)
				if err != nil {
					return false
				}
				for p := range int32(parts) {
					o, ok := offs.Lookup("rb", p)
					if !ok || o.At != perPart {
						return false
					}
				}
				return true
			}
			require.Eventually(t, done, 30*time.Second, 50*time.Millisecond, "the group did not commit every partition to %d", perPart)
			acancel()
			aw.Wait()
			assert.NoError(t, a.eng.Err(), "A stopped")
			assert.NoError(t, b.eng.Err(), "B stopped")
			mu.Lock()
			defer mu.Unlock()
			dups := 0
			for _, n := range seen {
				dups += n - 1
			}
			t.Logf("%s: %d of %d offsets delivered, %d duplicates; stale: A %d, B %d",
				bal, len(seen), parts*perPart, dups, a.eng.Summary().Stale, b.eng.Summary().Stale)
			assert.Len(t, seen, parts*perPart, "offsets never delivered")
			assert.Zero(t, dups, "offsets delivered twice in graceful handovers")
		})
	}
}
