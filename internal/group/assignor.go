package group

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Names of the server-side assignors of the consumer group protocol, as
// Kafka's group.remote.assignor and group.consumer.assignors name them.
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

// assignorsConfig is the broker setting whose first entry is the group
// coordinator's default assignor. The one it runs for a member that names
// none (Kafka's Java consumer with group.remote.assignor unset).
const assignorsConfig = "group.consumer.assignors"

// ErrBrokerAssignor is the error of a member asked to run the broker's
// default assignor when the broker does not say which one that is, or names
// one franz-go cannot ask for.
var ErrBrokerAssignor = errors.New("the broker's default assignor cannot be used: set group_remote_assignor to uniform or range")

// BrokerAssignor is the group option (with kgo.ServerSideBalancer) of a
// member that leaves the choice of the server-side assignor to the broker.
// franz-go always names an assignor in its heartbeats, so the broker's own
// default would never apply. New reads the group coordinator's
// group.consumer.assignors (DescribeConfigs) and asks for its first entry,
// which is what the coordinator runs for a member that names none. It fails
// with ErrBrokerAssignor when the broker does not answer or names an
// assignor other than uniform or range.
func BrokerAssignor() kgo.Opt { return kgo.Balancers(brokerAssignor{}) }

// Assignor returns the group option that asks the broker for the assignor
// named (AssignorUniform or AssignorRange), or BrokerAssignor when name is
// empty. franz-go asks for uniform when its first balancer is sticky, range
// when it is range.
func Assignor(name string) kgo.Opt {
	switch name {
	case "":
		return BrokerAssignor()
	case AssignorRange:
		return kgo.Balancers(kgo.RangeBalancer())
	default:
		return kgo.Balancers(kgo.StickyBalancer())
	}
}

// brokerAssignor marks BrokerAssignor among the group options. New replaces
// it by the balancer of the broker's default before the member's client
// exists, so franz-go never balances with it.
type brokerAssignor struct{}

func (brokerAssignor) ProtocolName() string                                         { return "broker-default" }
func (brokerAssignor) JoinGroupMetadata([]string, map[string][]int32, int32) []byte { return nil }
func (brokerAssignor) ParseSyncAssignment([]byte) (map[string][]int32, error) {
	return nil, errors.New("the broker-default marker balancer never balances")
}
func (brokerAssignor) MemberBalancer([]kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	return nil, nil, errors.New("the broker-default marker balancer never balances")
}
func (brokerAssignor) IsCooperative() bool { return true }

// wantsBrokerAssignor reports whether cl's first balancer is BrokerAssignor's.
func wantsBrokerAssignor(cl *kgo.Client) bool {
	bs, _ := cl.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
	if len(bs) == 0 {
		return false
	}
	_, ok := bs[0].(brokerAssignor)
	return ok
}

// brokerDefaultAssignor asks the coordinator of group for its
// group.consumer.assignors and returns the first entry's name (uniform or
// range) and where it came from, for the member's joining line.
func brokerDefaultAssignor(ctx context.Context, adm *kadm.Client, group string) (name, from string, err error) {
	// fail wraps cause (nil: none) too, so that an authorisation error
	// is seen as one.
	fail := func(cause error, format string, args ...any) (string, string, error) {
		msg := fmt.Sprintf("group %q: group_remote_assignor empty (the broker's default): %s", group, fmt.Sprintf(format, args...))
		if cause != nil {
			return "", "", fmt.Errorf("%s: %w: %w", msg, cause, ErrBrokerAssignor)
		}
		return "", "", fmt.Errorf("%s: %w", msg, ErrBrokerAssignor)
	}
	coord, ok := adm.FindGroupCoordinators(ctx, group)[group]
	if !ok {
		return fail(nil, "no coordinator found")
	}
	if coord.Err != nil {
		return fail(coord.Err, "finding the group's coordinator")
	}
	configs, err := adm.DescribeBrokerConfigs(ctx, coord.NodeID)
	if err != nil {
		return fail(err, "broker %d (the group's coordinator) did not describe its %s", coord.NodeID, assignorsConfig)
	}
	var value string
	found := false
	for _, rc := range configs {
		if rc.Err != nil {
			return fail(rc.Err, "broker %d (the group's coordinator) did not describe its %s", coord.NodeID, assignorsConfig)
		}
		for _, c := range rc.Configs {
			if c.Key == assignorsConfig {
				value, found = c.MaybeValue(), true
			}
		}
	}
	if !found {
		return fail(nil, "broker %d (the group's coordinator) does not say its %s", coord.NodeID, assignorsConfig)
	}
	first, _, _ := strings.Cut(value, ",")
	first = strings.TrimSpace(first)
	// The setting names an assignor or its class.
	switch first[strings.LastIndex(first, ".")+1:] {
	case AssignorUniform, "UniformAssignor":
		name = AssignorUniform
	case AssignorRange, "RangeAssignor":
		name = AssignorRange
	default:
		return fail(nil, "broker %d's %s %q names %q first, which this input cannot ask for", coord.NodeID, assignorsConfig, value, first)
	}
	return name, fmt.Sprintf("the first of %s=%s of broker %d, the group's coordinator", assignorsConfig, value, coord.NodeID), nil
}
