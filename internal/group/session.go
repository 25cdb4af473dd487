package group

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The session timeout of a member of the consumer group protocol (KIP-848)
// is the broker's, not the client's: the group's consumer.session.timeout.ms
// (a Kafka group config, KIP-848's per-group override), else the
// coordinator's group.consumer.session.timeout.ms. franz-go's
// kgo.SessionTimeout is not sent with that protocol, so its value (45 s by
// default) says nothing of when the coordinator ends the session.
const (
	groupSessionConfig  = "consumer.session.timeout.ms"
	brokerSessionConfig = "group.consumer.session.timeout.ms"
	defaultSession      = 45 * time.Second // Kafka's default of both
)

// sessionReadTimeout bounds the reading of the broker's session timeout at
// New: a cluster that does not answer it costs the start that long at most.
const sessionReadTimeout = 10 * time.Second

// brokerSession returns the session timeout the coordinator of group applies
// to a consumer-protocol member and where it was read: the group's config
// (DescribeConfigs of the group, which Kafka answers with the broker's value
// where the group sets none), else the coordinator's
// group.consumer.session.timeout.ms, else Kafka's default (45 s), saying why.
func brokerSession(ctx context.Context, cl *kgo.Client, group string) (time.Duration, string) {
	ctx, cancel := context.WithTimeout(ctx, sessionReadTimeout)
	defer cancel()
	d, from, err := groupSession(ctx, cl, group)
	if err == nil {
		return d, from
	}
	d, from, err2 := coordinatorSession(ctx, kadm.NewClient(cl), group)
	if err2 == nil {
		return d, from
	}
	return defaultSession, fmt.Sprintf("Kafka's default %s; the cluster did not say the group's: %v; %v", brokerSessionConfig, err, err2)
}

// groupSession reads the group's consumer.session.timeout.ms.
func groupSession(ctx context.Context, cl *kgo.Client, group string) (time.Duration, string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	res.ConfigNames = []string{groupSessionConfig}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, "", fmt.Errorf("describe the configs of group %q: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return 0, "", fmt.Errorf("describe the configs of group %q: %w%s", group, err, msg)
		}
		for _, c := range r.Configs {
			if c.Name != groupSessionConfig || c.Value == nil {
				continue
			}
			d, err := parseMillis(*c.Value)
			if err != nil {
				return 0, "", fmt.Errorf("group %q's %s: %w", group, groupSessionConfig, err)
			}
			if c.Source == kmsg.ConfigSourceGroupConfig {
				return d, fmt.Sprintf("the group's %s", groupSessionConfig), nil
			}
			return d, fmt.Sprintf("the cluster's %s; the group sets none", brokerSessionConfig), nil
		}
	}
	return 0, "", fmt.Errorf("group %q: the cluster does not say its %s", group, groupSessionConfig)
}

// coordinatorSession reads the group coordinator's
// group.consumer.session.timeout.ms.
func coordinatorSession(ctx context.Context, adm *kadm.Client, group string) (time.Duration, string, error) {
	coord, ok := adm.FindGroupCoordinators(ctx, group)[group]
	switch {
	case !ok:
		return 0, "", fmt.Errorf("group %q: no coordinator found", group)
	case coord.Err != nil:
		return 0, "", fmt.Errorf("group %q: finding the coordinator: %w", group, coord.Err)
	}
	configs, err := adm.DescribeBrokerConfigs(ctx, coord.NodeID)
	if err != nil {
		return 0, "", fmt.Errorf("broker %d (the coordinator of group %q): describe configs: %w", coord.NodeID, group, err)
	}
	for _, rc := range configs {
		if rc.Err != nil {
			return 0, "", fmt.Errorf("broker %d (the coordinator of group %q): describe configs: %w", coord.NodeID, group, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != brokerSessionConfig || c.Value == nil {
				continue
			}
			d, err := parseMillis(*c.Value)
			if err != nil {
				return 0, "", fmt.Errorf("broker %d's %s: %w", coord.NodeID, brokerSessionConfig, err)
			}
			return d, fmt.Sprintf("%s of broker %d, the group's coordinator", brokerSessionConfig, coord.NodeID), nil
		}
	}
	return 0, "", fmt.Errorf("broker %d (the coordinator of group %q) does not say its %s", coord.NodeID, group, brokerSessionConfig)
}

// parseMillis parses a config value in milliseconds.
func parseMillis(v string) (time.Duration, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("%q is not a positive number of milliseconds", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
