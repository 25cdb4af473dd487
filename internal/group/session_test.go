package group

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestConsumerProtocolSessionIsTheBrokers (issue 50, defect 4): a member of
// the consumer group protocol (KIP-848) takes its session timeout from the
// broker, which ends its session, not from kgo.SessionTimeout (never sent
// with that protocol; before, SessionTimeout said franz-go's 45 s whatever
// the broker's): the group's consumer.session.timeout.ms where the group
// sets one, else the coordinator's group.consumer.session.timeout.ms (kfake
// answers a group's unset config without a value), else Kafka's 45 s,
// saying why. A classic member keeps its option.
func TestConsumerProtocolSessionIsTheBrokers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		broker   string // group.consumer.session.timeout.ms; "" kfake's default (45 s)
		group    string // the group's consumer.session.timeout.ms; "" unset
		silent   bool   // no DescribeConfigs answered
		classic  bool
		want     time.Duration
		wantFrom string
	}{
		{name: "broker", broker: "9000", want: 9 * time.Second, wantFrom: "group.consumer.session.timeout.ms of broker 0, the group's coordinator"},
		{name: "group", broker: "9000", group: "12000", want: 12 * time.Second, wantFrom: "the group's consumer.session.timeout.ms"},
		{name: "not answered", broker: "9000", silent: true, want: 45 * time.Second, wantFrom: "Kafka's default group.consumer.session.timeout.ms; the cluster did not say the group's"},
		{name: "classic", broker: "9000", classic: true, want: 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t")}
			if tc.broker != "" {
				opts = append(opts, kfake.BrokerConfigs(map[string]string{"group.consumer.session.timeout.ms": tc.broker}))
			}
			c, err := kfake.NewCluster(opts...)
			require.NoError(t, err)
			t.Cleanup(c.Close)
			if tc.group != "" {
				setGroupSession(t, c, "g", tc.group)
			}
			if tc.silent {
				c.ControlKey(kmsg.DescribeConfigs.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					req := r.(*kmsg.DescribeConfigsRequest)
					resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
					for _, rr := range req.Resources {
						res := kmsg.NewDescribeConfigsResponseResource()
						res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
						resp.Resources = append(resp.Resources, res) // no config
					}
					return resp, nil, true
				})
			}
			groupOpts := []kgo.Opt{kgo.ServerSideBalancer(), Assignor(AssignorUniform), kgo.SessionTimeout(7 * time.Second)}
			if tc.classic {
				groupOpts = []kgo.Opt{kgo.SessionTimeout(7 * time.Second)}
			}
			h := &failHandler{assigned: make(chan []ranges.Key, 1), failed: make(chan error, 1)}
			m, err := New(t.Context(), MemberConfig{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}, GroupOpts: groupOpts}, h)
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			assert.Equal(t, tc.want, m.SessionTimeout())
			if tc.wantFrom == "" {
				assert.Empty(t, m.SessionTimeoutSource())
			} else {
				assert.Contains(t, m.SessionTimeoutSource(), tc.wantFrom)
			}
		})
	}
}

// setGroupSession sets group's consumer.session.timeout.ms on c (a Kafka
// group config).
func setGroupSession(t *testing.T, c *kfake.Cluster, group, ms string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value, cfg.Op = groupSessionConfig, kmsg.StringPtr(ms), kmsg.IncrementalAlterConfigOpSet
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(t.Context(), cl)
	require.NoError(t, err)
	for _, r := range resp.Resources {
		require.Zero(t, r.ErrorCode, "setting %s of group %s", groupSessionConfig, group)
	}
}
