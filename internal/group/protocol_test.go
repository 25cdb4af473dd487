package group

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
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// consumerOpts are the group options of group_protocol: consumer.
var consumerOpts = []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer())}

// failHandler records Failed; the assignment changes are ignored.
type failHandler struct {
	assigned chan []ranges.Key
	failed   chan error
}

func (h *failHandler) Assigned(_ context.Context, keys []ranges.Key) {
	select {
	case h.assigned <- keys:
	default:
	}
}
func (h *failHandler) Revoked(context.Context, []ranges.Key) {}
func (h *failHandler) Lost(context.Context, []ranges.Key)    {}
func (h *failHandler) Failed(err error) {
	select {
	case h.failed <- err:
	default:
	}
}

// TestJoinConsumerProtocol: with kgo.ServerSideBalancer on a cluster that
// serves KIP-848 the member runs the consumer protocol, is assigned the
// partitions, and never falls back (no JoinGroup, so no Failed).
func TestJoinConsumerProtocol(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h := &failHandler{assigned: make(chan []ranges.Key, 1), failed: make(chan error, 1)}
	var joining string
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}, GroupOpts: consumerOpts,
		Joining: func(p, _ string) { joining = p }}, h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	m.Join()
	assert.Equal(t, ProtocolConsumer, m.Protocol())
	assert.Equal(t, ProtocolConsumer, joining, "the protocol Joining was told")
	select {
	case keys := <-h.assigned:
		assert.Len(t, keys, 2, "assigned %v", keys)
	case err := <-h.failed:
		require.FailNow(t, "fell back", "%v", err)
	case <-time.After(15 * time.Second):
		require.FailNow(t, "no assignment")
	}
	select {
	case err := <-h.failed:
		assert.Fail(t, "fell back", "%v", err)
	default:
	}
}

// TestJoinConsumerProtocolUnsupported: a cluster that does not serve
// ConsumerGroupHeartbeat (a broker before Kafka 4.0, or one whose
// group.coordinator.rebalance.protocols leaves consumer out) fails Join
// with ErrNoConsumerProtocol, naming group_protocol, the broker and its
// version, instead of franz-go's silent fallback to the classic protocol;
// without ServerSideBalancer the same cluster is joined with classic.
func TestJoinConsumerProtocolUnsupported(t *testing.T) {
	v := kversion.V3_9_0()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.MaxVersions(v))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	if got, ok := v.LookupMaxKeyVersion(kmsg.ConsumerGroupHeartbeat.Int16()); ok {
		require.Less(t, got, int16(1), "kversion 3.9 serves ConsumerGroupHeartbeat v1") // v0 was early access
	}
	h := &failHandler{assigned: make(chan []ranges.Key, 1), failed: make(chan error, 1)}
	_, err = New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}, GroupOpts: consumerOpts}, h)
	require.ErrorIs(t, err, ErrNoConsumerProtocol)
	assert.ErrorContains(t, err, "group_protocol consumer")
	assert.Regexp(t, `broker 0 \([^)]*v[0-9.]+[^)]*\) does not serve it`, err.Error(), "names the broker and its version")

	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}}, h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	assert.Equal(t, ProtocolClassic, m.Protocol())
}

// TestConsumerProtocolFallbackFails: a coordinator that answers the consumer
// protocol's first heartbeat UNSUPPORTED_VERSION (its broker advertises
// ConsumerGroupHeartbeat but does not serve it) makes franz-go fall back to
// the classic protocol; the member's JoinGroup is reported through
// h.Failed with ErrNoConsumerProtocol, naming the coordinator, instead of
// running classic without a word.
func TestConsumerProtocolFallbackFails(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ConsumerGroupHeartbeat}, Group: "g", Err: kerr.UnsupportedVersion, Count: 1})
	h := &failHandler{assigned: make(chan []ranges.Key, 1), failed: make(chan error, 1)}
	m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}, GroupOpts: consumerOpts}, h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	m.Join()
	select {
	case err := <-h.failed:
		require.ErrorIs(t, err, ErrNoConsumerProtocol)
		assert.ErrorContains(t, err, "fell back to the classic protocol")
		assert.ErrorContains(t, err, "group_protocol consumer")
	case <-time.After(15 * time.Second):
		require.FailNow(t, "no Failed after the fallback")
	}
}
