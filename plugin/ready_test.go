package plugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestBatchingHandsOutNothingWhileUnreachable (issue 50, defect 6): with a
// batching policy or ordering: key, once the engine says no broker answers
// (its log says "reported not ready"), ReadBatch reports the input not
// connected at once, though batches cut already wait in the input, so
// Benthos' /ready answers 503 while the log says so; Connect keeps failing
// until a broker answers.
func TestBatchingHandsOutNothingWhileUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		waiting      func(in *input) int // batches cut, waiting in the input
	}{
		{"batching", "batching:\n  count: 10\n", func(in *input) int {
			in.batching.mu.Lock()
			defer in.batching.mu.Unlock()
			return len(in.batching.ready)
		}},
		{"ordering key", "ordering: key\n", func(in *input) int {
			in.keys.mu.Lock()
			defer in.keys.mu.Unlock()
			return len(in.keys.ready)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "held"))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			addr := c.ListenAddrs()[0]
			produceRecords(t, addr, "held", 1, 0, 2000)
			in := connected(t, fmt.Sprintf("seed_brokers: [ %q ]\ntopics: [ held ]\nmax_range_records: 1000\n%s", addr, tc.fields))
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			_, ack, err := in.ReadBatch(ctx)
			require.NoError(t, err)
			require.NoError(t, ack(ctx, nil))
			waiting := tc.waiting(in)
			require.Positive(t, waiting, "no cut batch waits in the input: the test proves nothing")

			c.Close()
			require.Eventually(t, func() bool { return in.eng.Reachable() != nil }, 30*time.Second, 20*time.Millisecond, "the engine never said no broker answers")
			_, _, err = in.ReadBatch(ctx)
			require.ErrorIs(t, err, service.ErrNotConnected, "ReadBatch while the engine says no broker answers, with %d cut batches waiting", waiting)
			require.Error(t, in.Connect(ctx), "Connect while no broker answers")
		})
	}
}
