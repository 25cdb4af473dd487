package share

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SetGroupConfigs sets configs of a share group on the cluster (an
// IncrementalAlterConfigs of resource type GROUP), such as
// share.auto.offset.reset: earliest, which makes members start in a
// partition the group has not read yet at its first offset instead of its
// end. kadm has no call for it.
func SetGroupConfigs(ctx context.Context, cl *kgo.Client, group string, configs map[string]string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for k, v := range configs {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = k
		c.Value = kmsg.StringPtr(v)
		c.Op = kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("share group %s: setting %v: %w", group, configs, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("share group %s: setting %v: %w%s", group, configs, err, msg)
		}
	}
	return nil
}

// groupConfigs returns the values of configs of a share group as the
// cluster has them (their defaults where the group has none set). A config
// the cluster does not answer is missing.
func groupConfigs(ctx context.Context, cl *kgo.Client, group string, names ...string) map[string]string {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	res.ConfigNames = names
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil
	}
	vals := map[string]string{}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			return nil
		}
		for _, c := range r.Configs {
			if c.Value != nil && slices.Contains(names, c.Name) {
				vals[c.Name] = *c.Value
			}
		}
	}
	return vals
}
