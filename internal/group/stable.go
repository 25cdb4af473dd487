package group

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Stable asks the group's coordinator whether the group is stable: no
// rebalance under way or due (DescribeGroups' state Stable under the classic
// protocol: a member that joins turns it PreparingRebalance at once, before
// the other members learn of it on their next heartbeat), or, with the
// consumer protocol, every member reconciled to the target assignment
// (ConsumerGroupDescribe's state Stable, not Assigning or Reconciling). It
// also returns the state named, for the log.
func (m *Member) Stable(ctx context.Context) (bool, string, error) {
	adm := kadm.NewClient(m.cl)
	var state string
	if m.protocol == ProtocolConsumer {
		d, err := adm.DescribeConsumerGroups(ctx, m.group)
		if err == nil {
			err = d.Error()
		}
		if err != nil {
			return false, "", fmt.Errorf("describe group %q: %w", m.group, err)
		}
		state = d[m.group].State
	} else {
		d, err := adm.DescribeGroups(ctx, m.group)
		if err == nil {
			err = d.Error()
		}
		if err != nil {
			return false, "", fmt.Errorf("describe group %q: %w", m.group, err)
		}
		state = d[m.group].State
	}
	return strings.EqualFold(state, "stable"), state, nil
}
