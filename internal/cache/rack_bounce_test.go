package cache

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFailingReplicaDoesNotBounceTheCursor: a leader that always points at
// a replica that always fails (FENCED_LEADER_EPOCH) bounced the cursor
// between the two thousands of times a second, reading nothing, until the
// read's context ended. After the replica's failure the cursor asks the
// leader without the rack, which serves it.
func TestFailingReplicaDoesNotBounceTheCursor(t *testing.T) {
	c, f := newRackFake(t, rackRecords, nil, func(int) bool { return true }, kerr.FencedLeaderEpoch.Code)
	cc := newCache(t, c, func(cfg *Config) { cfg.Rack = "r"; cfg.FetchMaxPartitionBytes = 512 })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := cc.Acquire(ctx, topic, 0, 0)
	require.NoError(t, err)
	pos, err := l.Read(ctx, 0, 100, func([]*kgo.Record, int64) error { return nil })
	l.Release(err)
	require.NoError(t, err)
	assert.Equal(t, int64(100), pos)
	lf, rf, red, fails, _ := f.counts()
	t.Logf("leader %d fetches (%d redirects), replica %d (%d failed); stats %+v", lf, red, rf, fails, cc.Stats())
	assert.LessOrEqual(t, red, 3, "redirects to the failing replica")
}
