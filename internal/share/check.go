package share

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareKeys are the request keys a member of a share group sends (KIP-932).
var shareKeys = []struct {
	key  int16
	name string
}{
	{int16(kmsg.ShareGroupHeartbeat), "ShareGroupHeartbeat"},
	{int16(kmsg.ShareFetch), "ShareFetch"},
	{int16(kmsg.ShareAcknowledge), "ShareAcknowledge"},
}

// checkBrokers returns an error wrapping ErrNoShareGroups, naming the
// broker, its version (as guessed from its API versions) and share_group,
// when a broker of the cluster does not serve share groups. It does not
// know their requests (before Kafka 4.0), or its cluster's share.version
// feature is not finalized at 1 or more (a broker then answers the share
// group heartbeat with UNSUPPORTED_VERSION). Other errors (the cluster
// cannot be reached) are returned as they are.
func checkBrokers(ctx context.Context, cl *kgo.Client, group string) error {
	adm := kadm.NewClient(cl)
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("share group %s: listing the brokers: %w", group, err)
	}
	addr := map[int32]string{}
	for _, b := range brokers {
		addr[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("share group %s: asking the brokers for their API versions: %w", group, err)
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			return fmt.Errorf("share group %s: asking broker %d (%s) for its API versions: %w", group, v.NodeID, addr[v.NodeID], v.Err)
		}
		name := fmt.Sprintf("broker %d (%s, Kafka %s by its API versions)", v.NodeID, addr[v.NodeID], v.VersionGuess())
		for _, k := range shareKeys {
			if _, ok := v.KeyMaxVersion(k.key); !ok {
				return fmt.Errorf("share_group %s: %s does not know %s: %w (KIP-932 needs Kafka 4.0 or later, with the share.version feature on)",
					group, name, k.name, ErrNoShareGroups)
			}
		}
		if level := shareVersion(v.Raw()); level < 1 {
			return fmt.Errorf("share_group %s: %s has share groups off, its cluster's share.version feature is %d: %w; "+
				"turn them on with kafka-features.sh --bootstrap-server %s upgrade --feature share.version=1 (resources/kafka.sh start does it)",
				group, name, level, ErrNoShareGroups, addr[v.NodeID])
		}
	}
	return nil
}

// shareVersion returns the finalized level of the share.version feature in
// resp (a broker lists a feature only above level 0).
func shareVersion(resp *kmsg.ApiVersionsResponse) int16 {
	if resp == nil {
		return 0
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "share.version" {
			return f.MaxVersionLevel
		}
	}
	return 0
}
