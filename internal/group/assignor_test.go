package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// answerAssignors makes c answer a DescribeConfigs of a broker with
// group.consumer.assignors = value (kfake does not know the setting).
func answerAssignors(c *kfake.Cluster, value string) {
	c.ControlKey(kmsg.DescribeConfigs.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rr := range req.Resources {
			res := kmsg.NewDescribeConfigsResponseResource()
			res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
			cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
			cfg.Name, cfg.Value = assignorsConfig, kmsg.StringPtr(value)
			cfg.Source = kmsg.ConfigSourceDefaultConfig
			res.Configs = append(res.Configs, cfg)
			resp.Resources = append(resp.Resources, res)
		}
		return resp, nil, true
	})
}

// heartbeatAssignors records the ServerAssignor of every
// ConsumerGroupHeartbeat c sees, which c then handles as usual.
func heartbeatAssignors(c *kfake.Cluster) func() []string {
	var mu sync.Mutex
	var seen []string
	c.ControlKey(kmsg.ConsumerGroupHeartbeat.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if a := r.(*kmsg.ConsumerGroupHeartbeatRequest).ServerAssignor; a != nil {
			mu.Lock()
			seen = append(seen, *a)
			mu.Unlock()
		}
		return nil, nil, false
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestBrokerAssignor: with BrokerAssignor (group_remote_assignor empty) the
// member reads its coordinator's group.consumer.assignors and asks, in its
// heartbeats, for the first entry, named or as its class; Joining says
// which and where it was read. A broker that does not say the setting, or
// names another assignor first, fails New with ErrBrokerAssignor naming
// group_remote_assignor. A named assignor is asked for without asking the
// broker.
func TestBrokerAssignor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   string // "": not answered (kfake's own DescribeConfigs)
		opt     kgo.Opt
		want    string // the heartbeats' ServerAssignor; "" New fails
		from    string
		wantErr string
	}{
		{name: "range first", value: "range,uniform", opt: BrokerAssignor(), want: "range", from: "the first of group.consumer.assignors=range,uniform of broker 0, the group's coordinator"},
		{name: "classes", value: "org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor", opt: BrokerAssignor(), want: "uniform", from: "the first of group.consumer.assignors=org.apache.kafka.coordinator.group.assignor.UniformAssignor,"},
		{name: "custom first", value: "com.example.MyAssignor,uniform", opt: BrokerAssignor(), wantErr: `names "com.example.MyAssignor" first`},
		{name: "not answered", opt: BrokerAssignor(), wantErr: "does not say its group.consumer.assignors"},
		{name: "named", value: "uniform,range", opt: Assignor(AssignorRange), want: "range", from: "group_remote_assignor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			if tc.value != "" {
				answerAssignors(c, tc.value)
			}
			seen := heartbeatAssignors(c)
			h := &failHandler{assigned: make(chan []ranges.Key, 1), failed: make(chan error, 1)}
			var joined []string
			m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"},
				GroupOpts: []kgo.Opt{kgo.ServerSideBalancer(), tc.opt},
				Joining:   func(p, a string) { joined = []string{p, a} }}, h)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrBrokerAssignor)
				assert.ErrorContains(t, err, tc.wantErr)
				assert.ErrorContains(t, err, "group_remote_assignor")
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			m.Join()
			require.Len(t, joined, 2)
			assert.Equal(t, ProtocolConsumer, joined[0])
			assert.Contains(t, joined[1], "with the broker's "+tc.want+" assignor ("+tc.from)
			select {
			case <-h.assigned:
			case err := <-h.failed:
				require.FailNow(t, "fell back", "%v", err)
			case <-time.After(15 * time.Second):
				require.FailNow(t, "no assignment")
			}
			got := seen()
			require.NotEmpty(t, got, "heartbeats naming an assignor")
			for _, a := range got {
				assert.Equal(t, tc.want, a, "ServerAssignor of the heartbeats %v", got)
			}
		})
	}
}

// TestBrokerAssignorNeedsConsumerProtocol: BrokerAssignor without
// kgo.ServerSideBalancer is a mistake New reports, not a balancer.
func TestBrokerAssignorNeedsConsumerProtocol(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h := &failHandler{assigned: make(chan []ranges.Key, 1), failed: make(chan error, 1)}
	_, err = New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}, GroupOpts: []kgo.Opt{BrokerAssignor()}}, h)
	require.ErrorContains(t, err, "without the consumer group protocol")
}
