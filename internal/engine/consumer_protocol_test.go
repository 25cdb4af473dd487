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

// TestRefusedCommitEndsConsumerOwnership: under the consumer group protocol
// (KIP-848), a commit the coordinator answers UNKNOWN_MEMBER_ID or
// STALE_MEMBER_EPOCH ends the ownership it was sent under: the incarnation
// is dropped (nothing of it committed, its late acknowledgements stale), the
// member, which still owns the partition, reads it again from the group's
// committed offset as a new incarnation, every record is delivered, and the
// group commits the end. Before, the refusal was only retried.
func TestRefusedCommitEndsConsumerOwnership(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.UnknownMemberID, kerr.StaleMemberEpoch} {
		t.Run(code.Message, func(t *testing.T) {
			c := newKafka(t, 1, 300, "t")
			// franz-go retries a stale epoch 10 times itself; the fault outlasts that.
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: code, Count: 12})
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				cfg.Group = "g"
				cfg.Membership = true
				cfg.StopAtEnd = true
				cfg.MaxInFlight = 2
				cfg.MaxRangeRecords = 50
				cfg.GroupOpts = []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer())}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			got, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd, "Next\n%s", log)
			require.NoError(t, e.Err(), "a refused commit stopped the input\n%s", log)
			assert.GreaterOrEqual(t, got["t/0"], 300, "every record delivered\n%s", log)
			assert.Positive(t, h.Hits(), "the fault was answered")
			assert.Contains(t, log.String(), "this member's ownership of them ended", "the refusal ends the ownership\n%s", log)
			assert.Contains(t, log.String(), "(incarnation 2)", "t/0 read again as a new incarnation\n%s", log)

			assert.Equal(t, int64(300), committedOf(t, c, "g", 0), "group g's offset of t/0")
		})
	}
}
