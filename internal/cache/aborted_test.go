package cache

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReadCommittedAfterAnAbortedTransactionInOneFetch: one fetch returns
// plain records, an aborted transaction with its marker, and a committed
// transaction of the same producer. A range ending inside the aborted
// transaction decodes the batches up to its marker; the rest of the fetch,
// kept for the next range, must not still count that transaction as open, or
// the committed records after it would be dropped as aborted.
func TestReadCommittedAfterAnAbortedTransactionInOneFetch(t *testing.T) {
	for _, cut := range []int64{6, 7, 8, 9} {
		t.Run(fmt.Sprintf("first range ends at %d", cut), func(t *testing.T) {
			c := newCluster(t, 1, 0)
			tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx-abort-then-commit"),
				kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, err)
			defer tx.Close()
			plain, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, err)
			defer plain.Close()
			for i := range 5 { // offsets 0..4
				require.NoError(t, plain.ProduceSync(t.Context(), &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "p%d", i)}).FirstErr())
			}
			txn := func(commit bool, vals ...string) {
				require.NoError(t, tx.BeginTransaction())
				var recs []*kgo.Record
				for _, v := range vals {
					recs = append(recs, &kgo.Record{Value: []byte(v)})
				}
				require.NoError(t, tx.ProduceSync(t.Context(), recs...).FirstErr())
				require.NoError(t, tx.EndTransaction(t.Context(), kgo.TransactionEndTry(commit)))
			}
			txn(false, "a1", "a2", "a3")      // offsets 5..7, abort marker 8
			txn(true, "c1", "c2", "c3", "c4") // offsets 9..12, commit marker 13

			cc := newCache(t, c, func(cfg *Config) { cfg.ReadCommitted = true })
			l, err := cc.Acquire(t.Context(), topic, 0, 0)
			require.NoError(t, err)
			defer l.Release(nil)
			var vals []string
			for _, r := range [][2]int64{{0, cut}, {cut, 14}} {
				require.Equal(t, r[1], mustRead(t, l, r[0], r[1], &vals))
			}
			assert.Equal(t, []string{"p0", "p1", "p2", "p3", "p4", "c1", "c2", "c3", "c4"}, vals)
		})
	}
}
