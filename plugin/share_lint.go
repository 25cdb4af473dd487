package plugin

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// shareExcluded are the fields a share group has no use for, and why. Each
// is refused when written with share_group. The why names the share
// group's own setting where there is one.
var shareExcluded = []struct{ name, why string }{
	{fieldConsumerGroup, "a share group is a group of its own kind: the broker keeps what its members acknowledged, there are no offsets to commit"},
	{fieldStartFrom, "where a share group starts in a partition it has not read is the group's config share.auto.offset.reset (latest by default; earliest; or by_duration:<ISO 8601 duration>): kafka-configs.sh --bootstrap-server <broker> --alter --entity-type groups --entity-name <share_group> --add-config share.auto.offset.reset=earliest"},
	{fieldStopAt, "a share group has no end to stop at: the broker hands out records until the input stops, so there is no bounded read"},
	{fieldStartTimestamp, "a share group starts where share.auto.offset.reset says (by_duration:<ISO 8601 duration> starts at a time ago)"},
	{fieldStopTimestamp, "a share group has no end to stop at"},
	{fieldAlignRanges, "the broker decides which records each member acquires: there are no ranges to align"},
	{fieldOrdered, "the broker hands one partition's records to several members at once and delivers released ones again later: there is no order within a partition"},
	{fieldMaxRangeRecords, "there are no ranges: share_max_records bounds what a member acquires per fetch"},
	{fieldMaxInFlight, "there are no ranges: each of share_members members holds one fetch's records at a time"},
	{fieldPollInterval, "there are no watermarks to list: the broker hands out records as they come"},
	{fieldProgressInterval, "there is no bounded read to report on"},
	{fieldConsumerCache, "a share group has no per-partition read positions to cache"},
	{fieldIsolationLevel, "it is the group's config share.isolation.level (read_uncommitted by default), set with kafka-configs.sh --entity-type groups"},
	{fieldCommitPeriod, "acknowledgements go to the broker as batches are acknowledged: there is nothing to commit"},
	{fieldFetchMaxPartitionBytes, "a share fetch has no per-partition limit: share_max_records bounds it"},
	{fieldFetchConnections, "each of share_members members fetches on one connection per broker: share_members is what reads in parallel"},
	{fieldRangeMetadata, "there are no ranges"},
	{fieldLagMetadata, "a share fetch carries no high watermark"},
	{fieldRegexpTopicsExclude, "a share group reads what its patterns match: write patterns that leave those topics out"},
	{fieldOnDataLoss, "the broker moves a share group past deleted records: there is no data loss to detect"},
	{fieldOnMissingTopic, "a share group reads the topics that exist, and topics created later"},
	{fieldStartTimeout, "it bounds the start of a bounded read, and a share group has none"},
	{fieldUnreachable, "it bounds an outage of a bounded read, and a share group has none"},
	{fieldResetOffsets, "a share group's start is its config share.auto.offset.reset; kafka-share-groups.sh --reset-offsets moves it"},
	{fieldGroupProtocol, "a share group has its own protocol (KIP-932)"},
	{fieldGroupBalancers, "the broker assigns a share group's partitions"},
	{fieldRemoteAssignor, "the broker assigns a share group's partitions"},
	{fieldSessionTimeout, "it is the broker's group.share.session.timeout.ms"},
	{fieldHeartbeatInterval, "it is the broker's group.share.heartbeat.interval.ms"},
	{fieldRebalanceTimeout, "a share group does not rebalance: records are acquired, not partitions"},
	{fieldRevokeDrain, "a share group does not revoke partitions: a leaving member releases what it holds"},
	{fieldInstanceID, "a share group has no static membership"},
}

// shareOnly are the fields used only with share_group.
var shareOnly = []string{fieldShareAcquireMode, fieldShareMaxDeliveries, fieldShareMaxRecords, fieldShareMembers, fieldShareRenewInterval}

// Messages of the share group rules.
const (
	msgShareExcluded = "%s cannot be used with %s (%s): %s"
	msgSharePinned   = "%s[%d]: %s names partitions, but a share group reads whole topics (the broker hands records of every partition to its members)"
	msgShareOnly     = "%s is set but only used with %s"
	// msgShareDeliveriesNoReplay takes share_max_deliveries and its
	// value, auto_replay_nacks, share_max_deliveries, auto_replay_nacks
	// and the value again.
	msgShareDeliveriesNoReplay = "%s (%d) cannot be used with %s: false: a nack then rejects a record at once (the broker archives it), so no record is delivered again; remove %s, or set %s: true to replay a failed record until it was delivered %d times"
)

// shareRules checks the share group fields against the others. written
// reports whether a top-level field was written. Benthos hands the lint
// and ParseConfig the config with its defaults filled in, so a field counts
// as written when it differs from its default (differsFromDefault): a
// default written out, such as start_from: earliest, cannot be told apart,
// which is why the member logs the group's share.auto.offset.reset when it
// starts.
func shareRules(pc *service.ParsedConfig, written func(name string) bool) []error {
	group := text(pc, fieldShareGroup)
	var errs []error
	if group == "" {
		for _, name := range shareOnly {
			if written(name) {
				errs = append(errs, fmt.Errorf(msgShareOnly, name, fieldShareGroup))
			}
		}
		return errs
	}
	for _, f := range shareExcluded {
		if written(f.name) {
			errs = append(errs, fmt.Errorf(msgShareExcluded, f.name, fieldShareGroup, group, f.why))
		}
	}
	if replay, err := pc.FieldBool(service.AutoRetryNacksToggleFieldName); err == nil && !replay && written(fieldShareMaxDeliveries) {
		if v, err := pc.FieldAny(fieldShareMaxDeliveries); err == nil {
			if n, err := parseInteger(fieldShareMaxDeliveries, v); err == nil && n > 0 {
				errs = append(errs, fmt.Errorf(msgShareDeliveriesNoReplay, fieldShareMaxDeliveries, n, service.AutoRetryNacksToggleFieldName, fieldShareMaxDeliveries, service.AutoRetryNacksToggleFieldName, n))
			}
		}
	}
	if patterns, _ := pc.FieldBool(fieldRegexpTopics); !patterns {
		for i, e := range entriesOf(pc, fieldTopics) {
			if strings.Contains(e, ":") {
				errs = append(errs, fmt.Errorf(msgSharePinned, fieldTopics, i, strconv.Quote(e)))
			}
		}
	}
	return errs
}

var (
	defaultsOnce sync.Once
	defaultsPC   *service.ParsedConfig // a config of only the required fields: every other field at its default
)

// differsFromDefault returns the written test of shareRules. A field is
// written when its value is not its default.
func differsFromDefault(pc *service.ParsedConfig) func(string) bool {
	defaultsOnce.Do(func() {
		var err error
		defaultsPC, err = lintSpec().ParseYAML("seed_brokers: [\"localhost:9092\"]\ntopics: [\"t\"]\n", nil)
		if err != nil {
			panic(err) // the spec's own defaults: cannot fail
		}
	})
	return func(name string) bool {
		if !pc.Contains(name) {
			return false
		}
		v, err := pc.FieldAny(name)
		if err != nil || v == nil {
			return false
		}
		d, err := defaultsPC.FieldAny(name)
		if err != nil {
			return true // no default: set
		}
		return !reflect.DeepEqual(v, d) && fmt.Sprint(v) != fmt.Sprint(d)
	}
}
