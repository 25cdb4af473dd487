package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSlowMemberIsNotRebalanced (issue 43, defect 2): in a bounded group
// run, one member's pipeline holds a batch longer than the group's session
// and rebalance timeouts while the other member has read its own partitions
// and waits for the group's commits. The waiting member must not force a
// rebalance of a live member: under an eager balancer each rebalance revoked
// the slow member's partitions, its drain timed out, and the batch it held
// was delivered again (100 of 600 records twice, on kfake, in 3 of 3 runs).
// Every record is delivered once, and both runs end.
func TestSlowMemberIsNotRebalanced(t *testing.T) {
	for _, b := range []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.RoundRobinBalancer(), kgo.StickyBalancer(), kgo.CooperativeStickyBalancer()} {
		t.Run(b.ProtocolName(), func(t *testing.T) { testSlowMemberIsNotRebalanced(t, b) })
	}
}

func testSlowMemberIsNotRebalanced(t *testing.T, balancer kgo.GroupBalancer) {
	const records = 300
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produce(t, c, "t", 2, records)
	member := func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StopAtEnd = true
		cfg.RevokeDrainTimeout = 500 * time.Millisecond
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(balancer), kgo.SessionTimeout(time.Second), kgo.RebalanceTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	var (
		mu   sync.Mutex // guards seen
		seen = map[string]int{}
	)
	count := func(b *Batch) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b.Records {
			seen[keyOffset(r)]++
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// Both members join before either reads: the group splits the two
	// partitions between them.
	a, alog := newEngine(t, c, member)
	slow, slog := newEngine(t, c, member)
	require.Eventually(t, func() bool {
		a.mu.Lock()
		na := a.parts.owned()
		a.mu.Unlock()
		slow.mu.Lock()
		ns := slow.parts.owned()
		slow.mu.Unlock()
		return na == 1 && ns == 1
	}, 20*time.Second, 10*time.Millisecond, "the group did not give each member one partition\n%s\n--\n%s", alog, slog)
	done := make(chan error, 2)
	go func() {
		for {
			b, err := a.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			count(b)
			b.Ack()
		}
	}()
	go func() {
		held := false
		for {
			b, err := slow.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			count(b)
			if !held && len(b.Records) > 0 {
				held = true
				// Longer than session + rebalance timeouts, twice.
				select {
				case <-time.After(4500 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			b.Ack()
		}
	}()
	for range 2 {
		require.ErrorIs(t, <-done, ErrEnd)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, seen, 2*records, "distinct records delivered")
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	assert.Zero(t, twice, "records delivered more than once")
}

// keyOffset names a record by its partition and offset.
func keyOffset(r *kgo.Record) string {
	return fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
}
