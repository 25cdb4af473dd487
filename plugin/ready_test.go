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
// batching policy, once the engine says no broker answers (its log says
// "reported not ready"), ReadBatch reports the input not connected at once,
// though batches cut already wait in the input, so Benthos' /ready answers
// 503 while the log says so; Connect keeps failing until a broker answers.
func TestBatchingHandsOutNothingWhileUnreachable(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "held"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	produceRecords(t, addr, "held", 1, 0, 2000)
	in := connected(t, fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ held ]
max_range_records: 1000
batching:
  count: 10
`, addr))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	batch, ack, err := in.ReadBatch(ctx)
	require.NoError(t, err)
	require.Len(t, batch, 10)
	require.NoError(t, ack(ctx, nil))
	in.batching.mu.Lock()
	ready := len(in.batching.ready)
	in.batching.mu.Unlock()
	require.Positive(t, ready, "no cut batch waits in the input: the test proves nothing")

	c.Close()
	require.Eventually(t, func() bool { return in.eng.Reachable() != nil }, 30*time.Second, 20*time.Millisecond, "the engine never said no broker answers")
	_, _, err = in.ReadBatch(ctx)
	require.ErrorIs(t, err, service.ErrNotConnected, "ReadBatch while the engine says no broker answers, with %d cut batches waiting", ready)
	require.Error(t, in.Connect(ctx), "Connect while no broker answers")
}
