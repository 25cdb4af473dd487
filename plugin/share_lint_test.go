package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// TestShareGroupLint: share_group refuses what a share group has no use
// for, naming the group's own setting where there is one, and pinned
// partitions; the share fields are refused without share_group. Benthos
// lints the config with its defaults filled in, so a field counts as
// written when it differs from its default.
func TestShareGroupLint(t *testing.T) {
	input := func(fields string) string {
		return "kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n" + fields
	}
	for _, tc := range []struct{ fields, want string }{
		{"  topics: [ t ]\n  share_group: g\n  start_from: latest\n", "start_from cannot be used with share_group (g): where a share group starts in a partition it has not read is the group's config share.auto.offset.reset"},
		{"  topics: [ t ]\n  share_group: g\n  consumer_group: c\n", "consumer_group cannot be used with share_group (g)"},
		{"  topics: [ t ]\n  share_group: g\n  stop_at: end\n", "stop_at cannot be used with share_group (g): a share group has no end to stop at"},
		{"  topics: [ t ]\n  share_group: g\n  ordered: true\n", "ordered cannot be used with share_group (g)"},
		{"  topics: [ t ]\n  share_group: g\n  align_ranges: true\n", "align_ranges cannot be used with share_group (g)"},
		{"  topics: [ t ]\n  share_group: g\n  isolation_level: read_committed\n", "share.isolation.level"},
		{"  topics: [ t ]\n  share_group: g\n  group_protocol: consumer\n", "group_protocol cannot be used with share_group (g)"},
		{"  topics: [ t ]\n  share_group: g\n  session_timeout: 10s\n", "group.share.session.timeout.ms"},
		{"  topics: [ \"t:0-3\" ]\n  share_group: g\n", `topics[0]: "t:0-3" names partitions, but a share group reads whole topics`},
		{"  topics: [ t ]\n  share_max_deliveries: 3\n", "share_max_deliveries is set but only used with share_group"},
		{"  topics: [ t ]\n  share_acquire_mode: batch_optimized\n", "share_acquire_mode is set but only used with share_group"},
		{"  topics: [ t ]\n  share_group: g\n  share_acquire_mode: strict\n", "share_acquire_mode"},
		{"  topics: [ t ]\n  share_group: g\n  share_members: 0\n", "share_members must be at least 1 and at most 256, got 0"},
		{"  topics: [ t ]\n  share_group: g\n  share_max_records: 0\n", "share_max_records must be at least 1"},
		{"  topics: [ t ]\n  share_group: g\n  share_max_deliveries: 3\n  auto_replay_nacks: false\n", "share_max_deliveries (3) cannot be used with auto_replay_nacks: false: a nack then rejects a record at once (the broker archives it), so no record is delivered again; remove share_max_deliveries, or set auto_replay_nacks: true to replay a failed record until it was delivered 3 times"},
		{"  topics: [ t ]\n  share_group: g\n  share_renew_interval: 500ms\n", `share_renew_interval must be at least 1s and at most 50s, got "500ms"`},
		{"  topics: [ t ]\n  share_group: g\n  share_renew_interval: 1m\n", `share_renew_interval must be at least 1s and at most 50s, got "1m"`},
	} {
		lints := lintInput(t, input(tc.fields))
		assert.True(t, containsPart(lints, tc.want), "lint of %q: %q, want %q", tc.fields, lints, tc.want)
	}
	ok := input("  topics: [ t, u ]\n  share_group: g\n  share_max_deliveries: 3\n  share_members: 4\n  client_id: c\n  fetch_max_wait: 100ms\n  batching:\n    count: 10\n")
	assert.Empty(t, lintInput(t, ok))
	assert.Empty(t, lintInput(t, input("  topics: [ \"t.*\" ]\n  regexp_topics: true\n  share_group: g\n")))

	// ParseConfig (an embedding program's path) refuses what differs from
	// the default.
	_, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nstart_from: latest\n")
	require.ErrorContains(t, err, "start_from cannot be used with share_group (g)")
	_, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nshare_max_deliveries: 2\nauto_replay_nacks: false\n")
	require.ErrorContains(t, err, "share_max_deliveries (2) cannot be used with auto_replay_nacks: false")
	_, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nshare_renew_interval: 55s\n")
	require.ErrorContains(t, err, `share_renew_interval must be at least 1s and at most 50s, got "55s"`)
	for _, ok := range []string{"1s", "50s"} {
		c, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nshare_renew_interval: "+ok+"\n")
		require.NoError(t, err, "share_renew_interval: %s", ok)
		d, _ := time.ParseDuration(ok)
		require.Equal(t, d, c.Share.RenewInterval)
	}
	c, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nshare_max_deliveries: 3\n")
	require.NoError(t, err)
	require.Equal(t, ShareConfig{Group: "g", MaxDeliveries: 3, MaxRecords: 500, Members: 1, RenewInterval: 10 * time.Second}, c.Share)
	c, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nshare_acquire_mode: batch_optimized\n")
	require.NoError(t, err)
	require.Equal(t, share.BatchOptimized, c.Share.AcquireMode)
	_, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: g\nshare_acquire_mode: strict\n")
	require.ErrorContains(t, err, "share_acquire_mode")
}

func containsPart(list []string, part string) bool {
	for _, s := range list {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}
