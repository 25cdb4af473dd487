package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCommitRefusedUnknownMemberHandsOverAsLost: under the classic protocol
// a commit answered UNKNOWN_MEMBER_ID (the member's session ended: a process
// paused past session_timeout) makes franz-go rejoin, and an eager balancer
// then revokes every partition of the session that is over. Draining and
// committing them would only hold the rebalance (the coordinator refuses
// the commit, other members may read them already), so they are handed over
// as a lost session's are: logged as lost, no drain, no commit, no warning;
// every record is still delivered and the group commits the end. Before,
// they were revoked: drained and committed under the ended session (CI saw
// "Committing revoked partitions failed ... UNKNOWN_MEMBER_ID" on a resumed
// member, TestHandoverSessionLost/range).
func TestCommitRefusedUnknownMemberHandsOverAsLost(t *testing.T) {
	c := newKafka(t, 1, 300, "t")
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.UnknownMemberID, Count: 1})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StopAtEnd = true
		cfg.MaxInFlight = 2
		cfg.MaxRangeRecords = 50
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd, "Next\n%s", log)
	require.NoError(t, e.Err(), "a refused commit stopped the input\n%s", log)
	require.Equal(t, 1, h.Hits(), "the fault was answered\n%s", log)
	assert.GreaterOrEqual(t, got["t/0"], 300, "every record delivered\n%s", log)
	assert.Contains(t, log.String(), `lost 1 partitions of this member`, "the ended session's partitions are handed over as lost\n%s", log)
	assert.NotContains(t, log.String(), `revoked 1 partitions of this member`, "the ended session's partitions were revoked (drained, committed)\n%s", log)
	assert.NotContains(t, log.String(), "Committing revoked partitions failed", "\n%s", log)

	assert.Equal(t, int64(300), committedOf(t, c, "g", 0), "group g's offset of t/0")
}
