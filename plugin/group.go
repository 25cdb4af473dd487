package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/group"
)

// Field names of the consumer group's settings.
const (
	fieldResetOffsets      = "reset_offsets"
	fieldGroupBalancers    = "group_balancers"
	fieldSessionTimeout    = "session_timeout"
	fieldHeartbeatInterval = "heartbeat_interval"
	fieldRebalanceTimeout  = "rebalance_timeout"
	fieldRevokeDrain       = "revoke_drain_timeout"
	fieldInstanceID        = "instance_id"
	fieldGroupProtocol     = "group_protocol"
	fieldRemoteAssignor    = "group_remote_assignor"
)

// Values of group_protocol (Kafka's group.protocol) and
// group_remote_assignor (Kafka's group.remote.assignor).
const (
	protocolClassic  = "classic"
	protocolConsumer = "consumer"
	assignorUniform  = "uniform"
	assignorRange    = "range"
)

// The defaults of the fields that group_protocol: consumer rejects. They
// are optional fields (no spec default) so that a rule can tell a value
// written from a default, as Kafka's Java consumer does.
var (
	defaultBalancers         = []string{"cooperative_sticky"}
	defaultSessionTimeout    = 45 * time.Second
	defaultHeartbeatInterval = 3 * time.Second
)

// balancers maps group_balancers values to franz-go's balancers.
var balancers = map[string]func() kgo.GroupBalancer{
	"cooperative_sticky": kgo.CooperativeStickyBalancer,
	"sticky":             kgo.StickyBalancer,
	"range":              kgo.RangeBalancer,
	"roundrobin":         kgo.RoundRobinBalancer,
	"round_robin":        kgo.RoundRobinBalancer, // Bento's name
}

// balancerNames are the keys of balancers, as the messages list them.
var balancerNames = []string{"cooperative_sticky", "sticky", "range", "roundrobin"}

// maxDefaultRevokeDrain bounds revoke_drain_timeout when it is not set (half
// of rebalance_timeout): a pipeline that takes longer to acknowledge what it
// holds has more to gain from a shorter rebalance than from the drain.
const maxDefaultRevokeDrain = 10 * time.Second

// minSessionTimeout is the shortest session_timeout: Kafka brokers reject a
// session below group.min.session.timeout.ms, 6 s unless configured lower.
var minSessionTimeout = durationBound{6 * time.Second, "6s"}

// GroupConfig is the consumer group's part of Config.
type GroupConfig struct {
	ResetOffsets      bool
	Protocol          string // group_protocol: classic or consumer (KIP-848)
	RemoteAssignor    string // group_remote_assignor, with Protocol consumer
	Balancers         []string
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration
	RevokeDrain       time.Duration // revoke_drain_timeout, or its default: engine.Config.Group.RevokeDrainTimeout
	InstanceID        string
}

// groupFields are the spec fields of the consumer group's membership.
func groupFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringAnnotatedEnumField(fieldGroupProtocol, map[string]string{
			protocolClassic:  "Kafka's classic group protocol: the members join, one of them (the leader) assigns the partitions with `group_balancers`, and every join or leave makes every member rejoin (under an eager balancer each revokes everything first; under `cooperative_sticky` only the moved partitions stop, over two rebalances).",
			protocolConsumer: "Kafka's next-generation consumer group protocol (KIP-848, franz-go `kgo.ServerSideBalancer`): the broker's group coordinator assigns the partitions (`group_remote_assignor`) and sets the session and heartbeat timings (`group.consumer.session.timeout.ms`, `group.consumer.heartbeat.interval.ms`), and a join or leave moves only the partitions that change, with no group-wide barrier. Needs Kafka 4.0 or later with the `consumer` rebalance protocol enabled (`group.coordinator.rebalance.protocols`, which includes it by default since 4.0; 4.3 or later recommended): a broker without it stops the input with an error naming the broker's version, never a silent fallback to `classic`.",
		}).
			LintRule(fieldLint(fieldGroupProtocol)).
			Description("The consumer group protocol this process joins `consumer_group` with, when it joins it (every topic named whole), as Kafka's `group.protocol`. During a rolling change members of both protocols share the group: with the broker's default `group.consumer.migration.policy` (`bidirectional`) the first `consumer` member converts a classic group into a consumer group online, the classic members go on inside it through the classic protocol until they restart with `consumer`, and the group turns classic again if its last `consumer` member leaves while classic ones remain.").
			Default(protocolClassic),
		service.NewStringAnnotatedEnumField(fieldRemoteAssignor, map[string]string{
			assignorUniform: "Spreads the partitions evenly and moves as few as it can (the broker's `uniform` assignor, which franz-go asks for with its sticky balancer), Kafka's default.",
			assignorRange:   "Gives each member a contiguous range of each topic's partitions, the same partitions of co-partitioned topics (the broker's `range` assignor).",
		}).
			LintRule(fieldLint(fieldRemoteAssignor)).
			Description("With `group_protocol: consumer`, the broker's assignor that decides the assignment (Kafka `group.remote.assignor`). Empty (the default): the broker's default, the first of the group coordinator's `group.consumer.assignors` (`uniform,range` unless configured), which the input reads (DescribeConfigs, so the principal needs DESCRIBE_CONFIGS on the cluster) and logs when it joins, since franz-go always names an assignor in its heartbeats; a broker that does not answer it, or names another assignor first, fails the connection with an error naming this field. Ignored with `classic`.").
			Default("").
			Advanced(),
		service.NewBoolField(fieldResetOffsets).
			Description("If true, a replay: every partition starts at `start_from` even where `consumer_group` has a committed offset, and the group's offsets are overwritten as reading progresses. With pinned partitions the whole run ignores the group's earlier offsets. With whole topics (the process joins the group) the replay resets the group once: a process that starts while the group has no live members deletes the group's committed offsets of the topics' partitions (Kafka's OffsetDelete) and logs it; one that starts while the group has members joins the replay under way and resumes from its commits, and every handover resumes from what the replay committed. If false (the default), a partition the group committed resumes from the committed offset, and `start_from` applies only to partitions the group has no offset for (as Kafka's `auto.offset.reset`). Requires `start_from` `earliest` or `latest`.").
			Default(false),
		service.NewStringListField(fieldGroupBalancers).
			LintRule(fieldLint(fieldGroupBalancers)).
			Description("With `consumer_group` set and every topic named whole, this process joins the group and reads only the partitions assigned to it. These balancers decide the assignment, in order of preference: `cooperative_sticky` (incremental rebalances: only moved partitions stop), `sticky`, `range`, `roundrobin` (also written `round_robin`, Bento's name) (franz-go `kgo.Balancers`). Every member of a group must support the one chosen. Unset or empty: `[cooperative_sticky]`. Only with `group_protocol: classic`: with `consumer` the broker assigns the partitions (`group_remote_assignor`).").
			Optional().
			Advanced(),
		service.NewDurationField(fieldSessionTimeout).
			LintRule(fieldLint(fieldSessionTimeout)).
			Description("How long the group coordinator waits for a heartbeat before it considers this member dead and gives its partitions to others (Kafka `session.timeout.ms`, franz-go `kgo.SessionTimeout`). At least `6s`, the default `group.min.session.timeout.ms` below which brokers reject a member. Unset: `45s`. Only with `group_protocol: classic`: with `consumer` the broker sets it (`group.consumer.session.timeout.ms`).").
			Optional().
			Advanced(),
		service.NewDurationField(fieldHeartbeatInterval).
			LintRule(fieldLint(fieldHeartbeatInterval)).
			Description("How often this member heartbeats to the group coordinator (Kafka `heartbeat.interval.ms`, franz-go `kgo.HeartbeatInterval`). Must be below `session_timeout`. Unset: `3s`. Only with `group_protocol: classic`: with `consumer` the broker sets it (`group.consumer.heartbeat.interval.ms`).").
			Optional().
			Advanced(),
		service.NewDurationField(fieldRebalanceTimeout).
			LintRule(fieldLint(fieldRebalanceTimeout)).
			Description("How long a rebalance may take: members must commit their revoked partitions and rejoin within it (Kafka `rebalance.timeout.ms`, franz-go `kgo.RebalanceTimeout`).").
			Default("45s").
			Advanced(),
		service.NewStringField(fieldRevokeDrain).
			LintRule(fieldLint(fieldRevokeDrain)).
			Description("How long a revocation waits, at most, for the batches of the revoked partitions already handed to the pipeline to be acknowledged before it commits them and hands the partitions over, as Kafka's own consumers finish and commit in their revocation callback. Meanwhile nothing more of those partitions is read, a rejected batch of them is not delivered again, and the rebalance waits (under an eager balancer every rebalance revokes every partition of every member; under `cooperative_sticky` only the moved ones). So a graceful handover delivers nothing twice when the pipeline acknowledges within it; what is not acknowledged in time is read again by the next owner. A bounded run (`stop_at` `end` or `timestamp`) hands out nothing until its first assignment has not changed for 3s and the group is stable, so workers started together to split a backfill hand over the partitions that move between them at the start with nothing to drain (docs/several-instances.md). Partitions lost with the session are not waited for. Must be below `rebalance_timeout`, which bounds the whole rebalance. A duration (`5s`, `500ms`); empty (the default): half of `rebalance_timeout`, at most `10s`; `0s`: no wait, the batches in the pipeline at a revocation are read again by the next owner.").
			Example("5s").
			Default("").
			Advanced(),
		service.NewStringField(fieldInstanceID).
			LintRule(fieldLint(fieldInstanceID)).
			Description("Static group membership (KIP-345, Kafka `group.instance.id`, franz-go `kgo.InstanceID`): a restart with the same ID within `session_timeout` gets its partitions back without a rebalance. Each process needs its own ID. Empty: dynamic membership.").
			Default("").
			Advanced(),
	}
}

// parseGroup reads the consumer group's fields.
func parseGroup(pc *service.ParsedConfig) (GroupConfig, error) {
	var (
		g    GroupConfig
		errs []error
		err  error
	)
	g.ResetOffsets, err = pc.FieldBool(fieldResetOffsets)
	errs = append(errs, err)
	g.Protocol, err = pc.FieldString(fieldGroupProtocol)
	errs = append(errs, err)
	g.RemoteAssignor, err = pc.FieldString(fieldRemoteAssignor)
	errs = append(errs, err)
	g.Balancers, g.SessionTimeout, g.HeartbeatInterval = slices.Clone(defaultBalancers), defaultSessionTimeout, defaultHeartbeatInterval
	if balancersSet(pc) {
		g.Balancers, err = pc.FieldStringList(fieldGroupBalancers)
		errs = append(errs, err)
	}
	if written(pc, fieldSessionTimeout) {
		g.SessionTimeout, err = pc.FieldDuration(fieldSessionTimeout)
		errs = append(errs, err)
	}
	if written(pc, fieldHeartbeatInterval) {
		g.HeartbeatInterval, err = pc.FieldDuration(fieldHeartbeatInterval)
		errs = append(errs, err)
	}
	g.RebalanceTimeout, err = pc.FieldDuration(fieldRebalanceTimeout)
	errs = append(errs, err)
	g.RevokeDrain = min(maxDefaultRevokeDrain, g.RebalanceTimeout/2)
	if s := text(pc, fieldRevokeDrain); s != "" {
		g.RevokeDrain, err = parseOptionalDuration(fieldRevokeDrain, s)
		errs = append(errs, err)
	}
	g.InstanceID, err = pc.FieldString(fieldInstanceID)
	errs = append(errs, err)
	return g, errors.Join(errs...)
}

// membership reports whether the input joins consumer_group. A group is set
// and every topic is named whole. With pinned partitions (name:0-3) the
// group only stores offsets.
func (c Config) membership() bool {
	if c.ConsumerGroup == "" {
		return false
	}
	for _, t := range c.Topics {
		if t.Partitions != nil {
			return false
		}
	}
	return true
}

// groupSettle is how long a bounded group run's first assignment must stay
// unchanged, with the group stable, before the member hands out its first
// batch (engine.GroupConfig.Settle): workers started together join within
// it, so the partitions that move between them at the start move before any
// of them is handed out. Kafka's group.initial.rebalance.delay.ms (3 s by
// default) does the same on the broker's side for an empty group's first
// rebalance, when the broker sets it.
const groupSettle = 3 * time.Second

// settle returns the engine's Group.Settle: groupSettle for a bounded run
// that joins a group, where members started together split one backfill.
// None for a continuous run, which starts delivering at once and hands
// partitions over through the drain.
func (c Config) settle() time.Duration {
	if c.membership() && c.StopAt != stopNever {
		return groupSettle
	}
	return 0
}

// groupOpts are the member's franz-go group options.
func (g GroupConfig) groupOpts() []kgo.Opt {
	if g.Protocol == protocolConsumer {
		// The assignor named, or the broker's default (empty). The session
		// and heartbeat timings are the broker's.
		opts := []kgo.Opt{kgo.ServerSideBalancer(), group.Assignor(g.RemoteAssignor), kgo.RebalanceTimeout(g.RebalanceTimeout)}
		if g.InstanceID != "" {
			opts = append(opts, kgo.InstanceID(g.InstanceID))
		}
		return opts
	}
	var bs []kgo.GroupBalancer
	for _, b := range g.Balancers {
		if f, ok := balancers[b]; ok {
			bs = append(bs, f())
		}
	}
	opts := []kgo.Opt{
		kgo.Balancers(bs...),
		kgo.SessionTimeout(g.SessionTimeout),
		kgo.HeartbeatInterval(g.HeartbeatInterval),
		kgo.RebalanceTimeout(g.RebalanceTimeout),
	}
	if g.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(g.InstanceID))
	}
	return opts
}

// checkBalancers is the rule of group_balancers.
func checkBalancers(name string, v any) []error {
	entries, ok := stringList(v)
	if !ok {
		return nil
	}
	var errs []error
	for i, b := range entries {
		if _, ok := balancers[b]; !ok {
			errs = append(errs, fmt.Errorf(msgNotOneOf, fmt.Sprintf("%s[%d]", name, i), strings.Join(balancerNames, ", "), strconv.Quote(b)))
		}
	}
	return errs
}

// checkSessionTimeout checks session_timeout against the broker's bounds.
func checkSessionTimeout(name, s string, d time.Duration) error {
	if d < minSessionTimeout.d {
		return fmt.Errorf(msgSessionTooShort, name, minSessionTimeout.text, strconv.Quote(s))
	}
	return nil
}

// resetOffsets: a replay overwrites a group's offsets from start_from.
func resetOffsets(pc *service.ParsedConfig) []error {
	if reset, _ := pc.FieldBool(fieldResetOffsets); !reset {
		return nil
	}
	var errs []error
	if text(pc, fieldConsumerGroup) == "" {
		errs = append(errs, fmt.Errorf("%s requires %s to be set", fieldResetOffsets, fieldConsumerGroup))
	}
	if text(pc, fieldStartFrom) == startCommitted {
		errs = append(errs, fmt.Errorf("%s requires %s earliest or latest, got %s", fieldResetOffsets, fieldStartFrom, startCommitted))
	}
	return errs
}

// heartbeatBelowSession: a member heartbeats within its session, or the
// coordinator drops it between heartbeats.
func heartbeatBelowSession(pc *service.ParsedConfig) []error {
	hs, ss := textOr(pc, fieldHeartbeatInterval, defaultHeartbeatInterval.String()), textOr(pc, fieldSessionTimeout, defaultSessionTimeout.String())
	heartbeat, err1 := parseDuration(fieldHeartbeatInterval, hs)
	session, err2 := parseDuration(fieldSessionTimeout, ss)
	if err1 != nil || err2 != nil || checkSessionTimeout(fieldSessionTimeout, ss, session) != nil {
		return nil // their own rules report them
	}
	if heartbeat >= session {
		return one(fmt.Errorf(msgBelow, fieldHeartbeatInterval, hs, fieldSessionTimeout, ss))
	}
	return nil
}

// drainBelowRebalance: a revocation's drain holds the rebalance, which the
// coordinator ends after rebalance_timeout, dropping a member that is late.
func drainBelowRebalance(pc *service.ParsedConfig) []error {
	ds, rs := text(pc, fieldRevokeDrain), text(pc, fieldRebalanceTimeout)
	if ds == "" {
		return nil // the default is half of rebalance_timeout
	}
	drain, err1 := parseOptionalDuration(fieldRevokeDrain, ds)
	rebalance, err2 := parseDuration(fieldRebalanceTimeout, rs)
	if err1 != nil || err2 != nil {
		return nil // their own rules report them
	}
	if drain >= rebalance {
		return one(fmt.Errorf(msgBelow, fieldRevokeDrain, ds, fieldRebalanceTimeout, rs))
	}
	return nil
}

// emptyOrDuration is the rule of revoke_drain_timeout: empty (its default
// applies) or a duration >= 0.
func emptyOrDuration(name string, v any) []error {
	if s, ok := scalarText(v); ok && s == "" {
		return nil
	}
	return zeroOrDuration(name, v)
}

// balancersSet reports whether group_balancers is written. An empty list
// is the field unset (Benthos fills an unset list field with one).
func balancersSet(pc *service.ParsedConfig) bool {
	l, err := pc.FieldStringList(fieldGroupBalancers)
	return err == nil && len(l) > 0
}

// textOr is text, or def when the field is unset or empty.
func textOr(pc *service.ParsedConfig, name, def string) string {
	if !written(pc, name) {
		return def
	}
	return text(pc, name)
}

// written reports whether an optional scalar field is set to something. An
// empty value is the field unset (connect create writes optional fields
// without a default as "").
func written(pc *service.ParsedConfig, name string) bool {
	return pc.Contains(name) && text(pc, name) != ""
}

// emptyOr is rule, except that an empty value is the field unset.
func emptyOr(rule func(string, any) []error) func(string, any) []error {
	return func(name string, v any) []error {
		if s, ok := scalarText(v); ok && s == "" {
			return nil
		}
		return rule(name, v)
	}
}

// consumerProtocolFields: with group_protocol: consumer the broker assigns
// the partitions and sets the session's timings, so the classic protocol's
// fields are refused when written, as Kafka's Java consumer refuses
// partition.assignment.strategy, session.timeout.ms and
// heartbeat.interval.ms with group.protocol=consumer.
func consumerProtocolFields(pc *service.ParsedConfig) []error {
	if text(pc, fieldGroupProtocol) != protocolConsumer {
		return nil
	}
	var errs []error
	for _, f := range []struct{ name, why string }{
		{fieldGroupBalancers, "the broker assigns the partitions: choose its assignor with " + fieldRemoteAssignor},
		{fieldSessionTimeout, "the broker sets it: group.consumer.session.timeout.ms"},
		{fieldHeartbeatInterval, "the broker sets it: group.consumer.heartbeat.interval.ms"},
	} {
		set := written(pc, f.name)
		if f.name == fieldGroupBalancers {
			set = balancersSet(pc)
		}
		if set {
			errs = append(errs, fmt.Errorf(msgConsumerProtocol, f.name, fieldGroupProtocol, protocolConsumer, f.why))
		}
	}
	return errs
}
