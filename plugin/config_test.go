package plugin

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/config/examples"
	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// defaultTCP is the tcp block's defaults: franz-go's dial timeout, Go's
// keep-alive.
var defaultTCP = security.TCP{ConnectTimeout: 10 * time.Second, KeepAlive: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}}

func TestParseTopic(t *testing.T) {
	tests := []struct {
		entry string
		want  TopicSpec
	}{
		{entry: "t", want: TopicSpec{Name: "t"}},
		{entry: "  t  ", want: TopicSpec{Name: "t"}},
		{entry: "orders.v1_x-y", want: TopicSpec{Name: "orders.v1_x-y"}},
		{entry: "t:0", want: TopicSpec{Name: "t", Partitions: []int32{0}}},
		{entry: "t:0-3", want: TopicSpec{Name: "t", Partitions: []int32{0, 1, 2, 3}}},
		{entry: "t:2-2", want: TopicSpec{Name: "t", Partitions: []int32{2}}},
		{entry: "t:0,2,5", want: TopicSpec{Name: "t", Partitions: []int32{0, 2, 5}}},
		{entry: "t:0-3,7", want: TopicSpec{Name: "t", Partitions: []int32{0, 1, 2, 3, 7}}},
		{entry: "t: 0 - 1 , 4", want: TopicSpec{Name: "t", Partitions: []int32{0, 1, 4}}},
		// Sorted and deduplicated.
		{entry: "t:5,0,5", want: TopicSpec{Name: "t", Partitions: []int32{0, 5}}},
		{entry: "t:2-4,0-3,3", want: TopicSpec{Name: "t", Partitions: []int32{0, 1, 2, 3, 4}}},
		// An explicit start offset (topic:partition:offset), as kafka_franz reads it.
		{entry: "t:0:100", want: TopicSpec{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 100}}},
		{entry: " t: 3 : 0 ", want: TopicSpec{Name: "t", Partitions: []int32{3}, Offsets: map[int32]int64{3: 0}}},
	}
	for _, tc := range tests {
		got, err := ParseTopic(tc.entry)
		require.NoError(t, err, "ParseTopic(%q)", tc.entry)
		assert.Equal(t, tc.want, got, "ParseTopic(%q) = %v, want %v", tc.entry, got, tc.want)
	}
}

func TestParseTopicErrors(t *testing.T) {
	tests := []struct {
		entry   string
		wantWhy string // part of the reason the error gives
	}{
		{entry: "", wantWhy: "empty topic name"},
		{entry: ":1", wantWhy: "empty topic name"},
		{entry: "t:", wantWhy: "empty partition"},
		{entry: "t:1,", wantWhy: "empty partition"},
		{entry: "t:1,,2", wantWhy: "empty partition"},
		{entry: "t:3-1", wantWhy: "backwards"},
		{entry: "t:x", wantWhy: `"x"`},
		{entry: "t:1-x", wantWhy: `"x"`},
		{entry: "t:-1", wantWhy: "not a non-negative integer"},
		{entry: "t:1-", wantWhy: "not a non-negative integer"},
		{entry: "t:1-2-3", wantWhy: "not a non-negative integer"},
		{entry: "t:4294967296", wantWhy: "partition 4294967296 is too large"},
		{entry: "t:+1", wantWhy: `partition "+1" is not a non-negative integer`},
		{entry: "t:0:x", wantWhy: `start offset "x" is not a non-negative integer (topic:partition:offset)`},
		{entry: "t:0:-5", wantWhy: `start offset "-5" is not a non-negative integer`},
		{entry: "t:0-2:5", wantWhy: `partition "0-2" is not a non-negative integer`},
		{entry: "t:0:5:6", wantWhy: `start offset "5:6" is not a non-negative integer`},
		{entry: "my topic", wantWhy: "spaces"},
		{entry: "my topic:0-1", wantWhy: "spaces"},
		{entry: "a,b", wantWhy: "commas"}, // one topic: ParseTopic does not split entries
	}
	for _, tc := range tests {
		got, err := ParseTopic(tc.entry)
		require.Error(t, err, "ParseTopic(%q) = %v, want an error", tc.entry, got)
		assert.Contains(t, err.Error(), "topics", "ParseTopic(%q) error %q does not name the field", tc.entry, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", tc.entry), "ParseTopic(%q) error %q does not name the entry", tc.entry, err)
		assert.Contains(t, err.Error(), tc.wantWhy, "ParseTopic(%q) error %q does not say why", tc.entry, err)
		assert.Equal(t, TopicSpec{}, got, "ParseTopic(%q) returned a value with its error", tc.entry)
	}
}

// parseYAML parses yaml (the fields of one kafka_batched_ranges input) with
// the input's spec and then with ParseConfig.
func parseYAML(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	pc, err := Spec().ParseYAML(yaml, nil)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(pc)
}

func TestParseConfigDefaults(t *testing.T) {
	got, err := parseYAML(t, `
seed_brokers: [ "localhost:9092" ]
topics: [ "events" ]
`)
	require.NoError(t, err)
	want := Config{
		SeedBrokers:            []string{"localhost:9092"},
		Topics:                 []TopicSpec{{Name: "events"}},
		ConsumerGroup:          "",
		StartFrom:              "earliest",
		StopAt:                 "never",
		MaxRangeRecords:        10000,
		MaxInFlight:            16,
		PollInterval:           time.Second,
		MetadataMaxAge:         5 * time.Minute,
		ProgressInterval:       10 * time.Second,
		Ordered:                false,
		Ordering:               orderingNone,
		KeyBuckets:             1024,
		CacheCapacity:          64,
		CacheIdleTimeout:       5 * time.Minute,
		ReadCommitted:          false,
		CommitPeriod:           5 * time.Second,
		ClientID:               "benthos",
		FetchMaxBytes:          52428800,
		FetchMaxPartitionBytes: 1048576,
		FetchMaxWait:           500 * time.Millisecond,
		FetchMinBytes:          1,
		FetchConnections:       4,
		RackID:                 "",
		AutoReplayNacks:        true,
		Security:               security.Config{TCP: defaultTCP},
		Group: GroupConfig{
			Protocol:          "classic",
			RemoteAssignor:    "",
			Balancers:         []string{"cooperative_sticky"},
			SessionTimeout:    45 * time.Second,
			HeartbeatInterval: 3 * time.Second,
			RebalanceTimeout:  45 * time.Second,
			RevokeDrain:       10 * time.Second,
		},
		Policy: PolicyConfig{StartTimeout: time.Minute, UnreachableTimeout: time.Minute},
		Share:  ShareConfig{MaxRecords: 500, Members: 1, RenewInterval: 10 * time.Second},
	}
	assert.Equal(t, want, got, "ParseConfig(defaults) = %+v, want %+v", got, want)
}

func TestParseConfig(t *testing.T) {
	const base = "topics: [ t ]\nseed_brokers: [ \"a:1\" ]\n"
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, c Config)
	}{
		{
			name: "seed brokers split on commas",
			yaml: "topics: [ t ]\nseed_brokers: [ \"a:1,b:2\", \"c:3\" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []string{"a:1", "b:2", "c:3"}, c.SeedBrokers)
			},
		},
		{
			name: "seed brokers trimmed, empty entries dropped",
			yaml: "topics: [ t ]\nseed_brokers: [ \" a:1 , ,b:2,\" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []string{"a:1", "b:2"}, c.SeedBrokers)
			},
		},
		{
			name: "ipv6 seed broker",
			yaml: "topics: [ t ]\nseed_brokers: [ \"[::1]:9092\" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []string{"[::1]:9092"}, c.SeedBrokers)
			},
		},
		{
			name: "topics with partitions",
			yaml: "seed_brokers: [ \"a:1\" ]\ntopics: [ \"x:0-2\", \"y\" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []TopicSpec{{Name: "x", Partitions: []int32{0, 1, 2}}, {Name: "y"}}, c.Topics)
			},
		},
		{
			name: "comma-separated topics in one entry (kafka_franz)",
			yaml: "seed_brokers: [ \"a:1\" ]\ntopics: [ \"a,b\", \" c , d:0-1,3 \" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []TopicSpec{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d", Partitions: []int32{0, 1, 3}}}, c.Topics)
			},
		},
		{
			name: "topics and partitions in one entry (Bento's foo:0,bar:1,bar:3)",
			yaml: "seed_brokers: [ \"a:1\" ]\ntopics: [ \"foo:0,bar:1,bar:3\", \"bar:5\" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []TopicSpec{{Name: "foo", Partitions: []int32{0}}, {Name: "bar", Partitions: []int32{1, 3, 5}}}, c.Topics)
			},
		},
		{
			name: "a pattern entry is not split at commas",
			yaml: "seed_brokers: [ \"a:1\" ]\nregexp_topics: true\ntopics: [ \"a{1,2}\" ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []TopicSpec{{Name: "a{1,2}"}}, c.Topics)
			},
		},
		{
			name: "Bento's balancer name round_robin",
			yaml: base + "group_balancers: [ round_robin, sticky ]\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []string{"round_robin", "sticky"}, c.Group.Balancers)
				assert.Len(t, c.Group.groupOpts(), 4, "groupOpts(): balancers, session, heartbeat, rebalance")
			},
		},
		{
			name: "byte sizes as kafka_franz writes them",
			yaml: base + "fetch_max_bytes: 50MiB\nfetch_max_partition_bytes: 1Mi\nfetch_min_bytes: 1k\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []int32{50 << 20, 1 << 20, 1000}, []int32{c.FetchMaxBytes, c.FetchMaxPartitionBytes, c.FetchMinBytes})
			},
		},
		{
			name: "every field set",
			yaml: base + `
consumer_group: g
start_from: committed
stop_at: end
max_range_records: 500
max_in_flight: 3
poll_interval: 250ms
metadata_max_age: 2m
progress_interval: 0s
ordered: true
align_ranges: true
consumer_cache:
  capacity: 0
  idle_timeout: 30s
isolation_level: read_committed
commit_period: 2s
client_id: me
fetch_max_bytes: 2000
fetch_max_partition_bytes: 1000
fetch_max_wait: 2s
fetch_min_bytes: 1KB
fetch_connections: 2
rack_id: use1-az1
group_balancers: [ range, roundrobin ]
session_timeout: 20s
heartbeat_interval: 2s
rebalance_timeout: 30s
revoke_drain_timeout: 5s
instance_id: worker-1
start_timeout: 90s
unreachable_timeout: 2m
`,
			check: func(t *testing.T, c Config) {
				want := Config{
					SeedBrokers:            []string{"a:1"},
					Topics:                 []TopicSpec{{Name: "t"}},
					ConsumerGroup:          "g",
					StartFrom:              "committed",
					StopAt:                 "end",
					MaxRangeRecords:        500,
					MaxInFlight:            3,
					PollInterval:           250 * time.Millisecond,
					MetadataMaxAge:         2 * time.Minute,
					Ordered:                true,
					Ordering:               orderingPartition,
					KeyBuckets:             1024,
					AlignRanges:            true,
					CacheCapacity:          0,
					CacheIdleTimeout:       30 * time.Second,
					ReadCommitted:          true,
					CommitPeriod:           2 * time.Second,
					ClientID:               "me",
					FetchMaxBytes:          2000,
					FetchMaxPartitionBytes: 1000,
					FetchMaxWait:           2 * time.Second,
					FetchMinBytes:          1000,
					FetchConnections:       2,
					RackID:                 "use1-az1",
					AutoReplayNacks:        true,
					Security:               security.Config{TCP: defaultTCP},
					Group: GroupConfig{
						Protocol:          "classic",
						RemoteAssignor:    "",
						Balancers:         []string{"range", "roundrobin"},
						SessionTimeout:    20 * time.Second,
						HeartbeatInterval: 2 * time.Second,
						RebalanceTimeout:  30 * time.Second,
						RevokeDrain:       5 * time.Second,
						InstanceID:        "worker-1",
					},
					Policy: PolicyConfig{StartTimeout: 90 * time.Second, UnreachableTimeout: 2 * time.Minute},
					Share:  ShareConfig{MaxRecords: 500, Members: 1, RenewInterval: 10 * time.Second},
				}
				assert.Equal(t, want, c)
			},
		},
		{
			name: "revoke_drain_timeout unset: half of rebalance_timeout",
			yaml: base + "rebalance_timeout: 8s\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, 4*time.Second, c.Group.RevokeDrain)
			},
		},
		{
			name: "start_from latest",
			yaml: base + "start_from: latest\n",
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "latest", c.StartFrom)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseYAML(t, tc.yaml)
			require.NoError(t, err, "ParseConfig(%q)", tc.yaml)
			tc.check(t, got)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	const base = "topics: [ t ]\nseed_brokers: [ \"a:1\" ]\n"
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error: the field name and the value
	}{
		{name: "max_range_records negative", yaml: base + "max_range_records: -5\n", want: []string{"max_range_records must be > 0, got -5"}},
		{name: "max_range_records zero", yaml: base + "max_range_records: 0\n", want: []string{"max_range_records must be > 0, got 0"}},
		{name: "max_in_flight zero", yaml: base + "max_in_flight: 0\n", want: []string{"max_in_flight must be > 0, got 0"}},
		{name: "fetch_connections zero", yaml: base + "fetch_connections: 0\n", want: []string{"fetch_connections must be at least 1 and at most 64, got 0"}},
		{name: "fetch_connections over 64", yaml: base + "fetch_connections: 65\n", want: []string{"fetch_connections must be at least 1 and at most 64, got 65"}},
		{name: "cache capacity negative", yaml: base + "consumer_cache: { capacity: -1 }\n", want: []string{"consumer_cache.capacity must be >= 0, got -1"}},
		{name: "cache idle timeout zero", yaml: base + "consumer_cache: { idle_timeout: 0s }\n", want: []string{"consumer_cache.idle_timeout", "0s"}},
		{name: "poll_interval zero", yaml: base + "poll_interval: 0s\n", want: []string{"poll_interval", "0s"}},
		{name: "commit_period negative", yaml: base + "commit_period: -1s\n", want: []string{"commit_period", "-1s"}},
		{name: "committed without group", yaml: base + "start_from: committed\n", want: []string{"start_from committed requires consumer_group"}},
		{
			name: "partition bytes above fetch bytes",
			yaml: base + "fetch_max_bytes: 1000\nfetch_max_partition_bytes: 2000\n",
			want: []string{"fetch_max_partition_bytes (2000) must not exceed fetch_max_bytes (1000)"},
		},
		{name: "fetch_max_bytes zero", yaml: base + "fetch_max_bytes: 0\n", want: []string{`fetch_max_bytes must be > 0 and < 2 GiB, got "0"`}},
		{name: "fetch_max_bytes too big", yaml: base + "fetch_max_bytes: 4294967296\n", want: []string{"fetch_max_bytes", "4294967296"}},
		{name: "seed broker without port", yaml: "topics: [ t ]\nseed_brokers: [ \"a:1,localhost\" ]\n", want: []string{"seed_brokers", `"localhost"`, "host:port"}},
		{name: "no seed broker", yaml: "topics: [ t ]\nseed_brokers: [ \" , \" ]\n", want: []string{"seed_brokers"}},
		{name: "no topic", yaml: "topics: []\nseed_brokers: [ \"a:1\" ]\n", want: []string{"topics"}},
		{name: "bad topic", yaml: "topics: [ \"t:3-1\" ]\nseed_brokers: [ \"a:1\" ]\n", want: []string{"topics", `"t:3-1"`}},
		{name: "topic twice", yaml: "topics: [ t, \"t:1\" ]\nseed_brokers: [ \"a:1\" ]\n", want: []string{"topics", `"t"`, "more than once"}},
		{name: "start_from out of range", yaml: base + "start_from: beginning\n", want: []string{"start_from", "beginning"}},
		{name: "stop_at out of range", yaml: base + "stop_at: later\n", want: []string{"stop_at", "later"}},
		{name: "isolation_level out of range", yaml: base + "isolation_level: serializable\n", want: []string{"isolation_level", "serializable"}},
		{name: "unknown balancer", yaml: base + "group_balancers: [ sticky, fair ]\n", want: []string{"group_balancers[1] must be one of cooperative_sticky, sticky, range, roundrobin, got \"fair\""}},
		{name: "heartbeat above session", yaml: base + "session_timeout: 10s\nheartbeat_interval: 10s\n", want: []string{"heartbeat_interval (10s) must be below session_timeout (10s)"}},
		{name: "revoke drain above rebalance", yaml: base + "rebalance_timeout: 10s\nrevoke_drain_timeout: 10s\n", want: []string{"revoke_drain_timeout (10s) must be below rebalance_timeout (10s)"}},
		{name: "reset without group", yaml: base + "reset_offsets: true\n", want: []string{"reset_offsets requires consumer_group to be set"}},
		{name: "reset from committed", yaml: base + "consumer_group: g\nstart_from: committed\nreset_offsets: true\n", want: []string{"reset_offsets requires start_from earliest or latest, got committed"}},
		{name: "rebalance timeout zero", yaml: base + "rebalance_timeout: 0s\n", want: []string{`rebalance_timeout must be > 0, got "0s"`}},
		{
			name: "every error reported at once",
			yaml: base + "max_range_records: -5\nmax_in_flight: -2\n",
			want: []string{"max_range_records must be > 0, got -5", "max_in_flight must be > 0, got -2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseYAML(t, tc.yaml)
			require.Error(t, err, "ParseConfig(%q) = %+v, want an error", tc.yaml, got)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w, "ParseConfig(%q) error %q, want it to contain %q", tc.yaml, err, w)
			}
		})
	}
}

// lintInput lints yaml as the config of an input component and returns the
// lint messages.
func lintInput(t *testing.T, yaml string) []string {
	t.Helper()
	lints, err := service.NewEnvironment().NewComponentConfigLinter().LintInputYAML([]byte(yaml))
	require.NoError(t, err, "LintInputYAML(%q)", yaml)
	var out []string
	for _, l := range lints {
		out = append(out, l.What)
	}
	return out
}

func TestLintRule(t *testing.T) {
	input := func(fields string) string {
		return "kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n  topics: [ t ]\n" + fields
	}
	tests := []struct {
		name string
		bad  string // fields that break the rule
		good string // the closest fields that satisfy it
		want string // the lint message of bad
	}{
		{
			name: "committed needs a group",
			bad:  "  start_from: committed\n",
			good: "  start_from: committed\n  consumer_group: g\n",
			want: "start_from committed requires consumer_group to be set",
		},
		{
			name: "committed needs a non-empty group",
			bad:  "  start_from: committed\n  consumer_group: \"\"\n",
			good: "  start_from: earliest\n  consumer_group: \"\"\n",
			want: "start_from committed requires consumer_group to be set",
		},
		{
			name: "partition bytes above fetch bytes",
			bad:  "  fetch_max_bytes: 1000\n  fetch_max_partition_bytes: 2000\n",
			good: "  fetch_max_bytes: 2000\n  fetch_max_partition_bytes: 2000\n",
			want: "fetch_max_partition_bytes (2000) must not exceed fetch_max_bytes (1000)",
		},
		{
			name: "partition bytes default above fetch bytes",
			bad:  "  fetch_max_bytes: 1000\n",
			good: "  fetch_max_bytes: 1048576\n",
			want: "fetch_max_partition_bytes (1048576) must not exceed fetch_max_bytes (1000)",
		},
		{
			name: "min bytes above fetch bytes",
			bad:  "  fetch_max_bytes: 1000\n  fetch_max_partition_bytes: 1000\n  fetch_min_bytes: 1001\n",
			good: "  fetch_max_bytes: 1000\n  fetch_max_partition_bytes: 1000\n  fetch_min_bytes: 1000\n",
			want: "fetch_min_bytes (1001) must not exceed fetch_max_bytes (1000)",
		},
		{
			name: "fetch_min_bytes zero",
			bad:  "  fetch_min_bytes: 0\n",
			good: "  fetch_min_bytes: 1B\n",
			want: `fetch_min_bytes must be > 0 and < 2 GiB, got "0"`,
		},
		{
			name: "fetch_max_wait zero",
			bad:  "  fetch_max_wait: 0s\n",
			good: "  fetch_max_wait: 1ms\n",
			want: `fetch_max_wait must be > 0, got "0s"`,
		},
		{
			name: "fetch_max_wait below a millisecond",
			bad:  "  fetch_max_wait: 999us\n",
			good: "  fetch_max_wait: 1000us\n",
			want: `fetch_max_wait must be at least 1ms and at most 1m, got "999us"`,
		},
		{
			name: "fetch_max_wait above a minute",
			bad:  "  fetch_max_wait: 60001ms\n",
			good: "  fetch_max_wait: 60000ms\n",
			want: `fetch_max_wait must be at least 1ms and at most 1m, got "60001ms"`,
		},
		{
			name: "rack_id too long",
			bad:  "  rack_id: " + strings.Repeat("r", 513) + "\n",
			good: "  rack_id: " + strings.Repeat("r", 512) + "\n",
			want: "rack_id must be at most 512 bytes, got 513",
		},
		{
			name: "max_range_records",
			bad:  "  max_range_records: -5\n",
			good: "  max_range_records: 1\n",
			want: "max_range_records must be > 0, got -5",
		},
		{
			name: "max_in_flight",
			bad:  "  max_in_flight: 0\n",
			good: "  max_in_flight: 1\n",
			want: "max_in_flight must be > 0, got 0",
		},
		{
			name: "cache capacity",
			bad:  "  consumer_cache:\n    capacity: -1\n",
			good: "  consumer_cache:\n    capacity: 0\n",
			want: "consumer_cache.capacity must be >= 0, got -1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := lintInput(t, input(tc.bad))
			assert.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }),
				"Lint(%q) = %q, want a lint containing %q", tc.bad, got, tc.want)
			got = lintInput(t, input(tc.good))
			assert.Empty(t, got, "Lint(%q) = %q, want no lints", tc.good, got)

			// The Go check agrees with the lint rule.
			_, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"+dedent(tc.bad))
			if assert.Error(t, err, "ParseConfig(%q) accepted what the lint rule rejects", tc.bad) {
				assert.Contains(t, err.Error(), tc.want)
			}
			_, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"+dedent(tc.good))
			assert.NoError(t, err, "ParseConfig(%q) rejected what the lint rule accepts", tc.good)
		})
	}
}

// TestLintEnums: enum values out of range are lint errors too (ParseConfig
// rejects them as well, see TestParseConfigErrors).
func TestLintEnums(t *testing.T) {
	for _, field := range []string{"start_from: beginning", "stop_at: later", "isolation_level: serializable", "group_remote_assignor: sticky"} {
		got := lintInput(t, "kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n  topics: [ t ]\n  "+field+"\n")
		value := strings.TrimSpace(strings.SplitN(field, ":", 2)[1])
		assert.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, value) }),
			"Lint(%q) = %q, want a lint naming %q", field, got, value)
	}
}

func TestLintRuleDefaultsClean(t *testing.T) {
	got := lintInput(t, "kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n  topics: [ t ]\n")
	assert.Empty(t, got)
}

// dedent removes the two spaces of indentation the lint tests put before each
// field line.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	return strings.Join(lines, "\n")
}

// exampleFiles returns the config/examples/*.yaml files by name.
func exampleFiles(t *testing.T) map[string]string {
	t.Helper()
	names, err := fs.Glob(examples.FS, "*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, names, "config/examples holds no *.yaml file")
	out := map[string]string{}
	for _, n := range names {
		b, err := examples.FS.ReadFile(n)
		require.NoError(t, err)
		out[n] = string(b)
	}
	return out
}

// TestSpecExamplesAreExampleFiles checks that the spec's examples are the
// files of config/examples, verbatim: every file is an example config, and
// every example config is a file.
func TestSpecExamplesAreExampleFiles(t *testing.T) {
	env := service.NewEnvironment()
	view, ok := env.GetInputConfig(InputName)
	require.True(t, ok, "input %q is not registered", InputName)
	data, err := view.TemplateData()
	require.NoError(t, err)

	var configs []string
	for _, e := range data.Examples {
		assert.NotEmpty(t, e.Title, "spec example without a title")
		configs = append(configs, e.Config)
	}
	files := exampleFiles(t)
	for name, content := range files {
		assert.Contains(t, configs, content, "config/examples/%s is not a spec example (verbatim)", name)
	}
	for i, c := range configs {
		assert.Contains(t, slices.Collect(maps.Values(files)), c, "spec example %d (%q) is not a file of config/examples", i, data.Examples[i].Title)
	}
	assert.Len(t, configs, len(files), "spec examples = %d, want one per config/examples file (%d)", len(configs), len(files))
}

// TestExampleFilesLint lints every config/examples file as a full stream
// config, as `connect lint` does (with the pure and io components the
// connect binary bundles).
func TestExampleFilesLint(t *testing.T) {
	env := service.NewEnvironment()
	linter := env.FullConfigSchema("", "").NewStreamConfigLinter().SetSkipEnvVarCheck(true)
	for name, content := range exampleFiles(t) {
		lints, err := linter.LintYAML([]byte(content))
		require.NoError(t, err, "LintYAML(%s)", name)
		assert.Empty(t, lints, "LintYAML(%s) = %v, want no lints", name, lints)
	}
}

// TestStreamLintReportsRule checks that the lint rule reaches `connect lint`:
// a full stream config breaking it gets the rule's message.
func TestStreamLintReportsRule(t *testing.T) {
	linter := service.NewEnvironment().FullConfigSchema("", "").NewStreamConfigLinter()
	const conf = `
input:
  kafka_batched_ranges:
    seed_brokers: [ "a:1" ]
    topics: [ t ]
    start_from: committed
output:
  drop: {}
`
	lints, err := linter.LintYAML([]byte(conf))
	require.NoError(t, err)
	var got []string
	for _, l := range lints {
		got = append(got, l.What)
	}
	assert.True(t, slices.ContainsFunc(got, func(s string) bool {
		return strings.Contains(s, "start_from committed requires consumer_group to be set")
	}), "LintYAML = %q, want the start_from rule", got)
}

// TestParseTopicMaxPartition parses the largest partition numbers: a
// partition loop that overflows int32 would never end and eat memory.
func TestParseTopicMaxPartition(t *testing.T) {
	// Partition numbers are bounded (maxPartition), so the largest int32 is
	// rejected at once instead of looping or allocating billions of entries.
	for _, entry := range []string{"t:2147483647", "t:2147483646-2147483647", "t:0-2147483646"} {
		_, err := ParseTopic(entry)
		require.Error(t, err, "ParseTopic(%q)", entry)
		assert.Contains(t, err.Error(), "topics: invalid entry "+strconv.Quote(entry))
		assert.Contains(t, err.Error(), "too large")
	}
	got, err := ParseTopic("t:1048574-1048575")
	require.NoError(t, err)
	assert.Equal(t, TopicSpec{Name: "t", Partitions: []int32{1048574, 1048575}}, got)
}

// lintCase is a case of testdata/lint_cases.json, which tests/lint_test.go
// runs through the compiled connect binary.
type lintCase struct {
	Name   string         `json:"name"`
	Fields map[string]any `json:"fields"` // replace those of a valid input
	Lints  []string       `json:"lints"`  // every lint, exactly
}

// lintCases reads testdata/lint_cases.json.
func lintCases(t *testing.T) (invalid, valid []lintCase) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "lint_cases.json"))
	require.NoError(t, err)
	var cases struct {
		Invalid []lintCase `json:"invalid"`
		Valid   []lintCase `json:"valid"`
	}
	require.NoError(t, json.Unmarshal(b, &cases))
	require.NotEmpty(t, cases.Invalid)
	require.NotEmpty(t, cases.Valid)
	return cases.Invalid, cases.Valid
}

// caseConfig returns the input fields of c as YAML (JSON is YAML).
func caseConfig(t *testing.T, c lintCase) string {
	t.Helper()
	in := map[string]any{"seed_brokers": []string{"a:1"}, "topics": []string{"t"}}
	maps.Copy(in, c.Fields)
	b, err := json.Marshal(in)
	require.NoError(t, err)
	return string(b)
}

// TestLintCases checks every case of testdata/lint_cases.json with the
// spec's lint rules and with ParseConfig: an invalid value gets exactly the
// case's lints, each once, and ParseConfig rejects it with the same
// messages; a valid one gets no lint and parses.
func TestLintCases(t *testing.T) {
	invalid, valid := lintCases(t)
	for _, c := range invalid {
		t.Run(c.Name, func(t *testing.T) {
			conf := caseConfig(t, c)
			got := lintInput(t, `{"kafka_batched_ranges": `+conf+`}`)
			assert.ElementsMatch(t, c.Lints, got, "Lint(%s)", conf)

			_, err := parseYAML(t, conf)
			require.Error(t, err, "ParseConfig(%s) accepted what the lint rule rejects", conf)
			assert.ElementsMatch(t, c.Lints, strings.Split(err.Error(), "\n"), "ParseConfig(%s) error, want the lint messages", conf)
		})
	}
	for _, c := range valid {
		t.Run("valid "+c.Name, func(t *testing.T) {
			conf := caseConfig(t, c)
			got := lintInput(t, `{"kafka_batched_ranges": `+conf+`}`)
			assert.Empty(t, got, "Lint(%s)", conf)
			_, err := parseYAML(t, conf)
			assert.NoError(t, err, "ParseConfig(%s)", conf)
		})
	}
}

// TestParseByteSize checks the sizes fetch_max_bytes and
// fetch_max_partition_bytes take, and that formatByteSize writes what it
// reads.
func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int32
	}{
		{"1", 1}, {"1048576", 1048576}, {" 42 ", 42}, {"1B", 1}, {"1KB", 1000}, {"1kb", 1000},
		{"1MB", 1000000}, {"2GB", 2000000000}, {"512KiB", 512 << 10}, {"50MiB", 50 << 20},
		{"50 mib", 50 << 20}, {"1GiB", 1 << 30}, {"1k", 1000}, {"2M", 2000000}, {"1g", 1000000000},
		{"4Ki", 4 << 10}, {"1mi", 1 << 20}, {"1Gi", 1 << 30}, {"2147483647", 1<<31 - 1}, {"2097151KiB", 2097151 << 10},
	}
	for _, tc := range tests {
		got, err := parseByteSize("f", tc.in)
		require.NoError(t, err, "parseByteSize(%q)", tc.in)
		assert.Equal(t, tc.want, got, "parseByteSize(%q) = %d, want %d", tc.in, got, tc.want)
	}
	for _, n := range []int64{1, 1000, 1024, defaultFetchMaxBytes, defaultFetchMaxPartitionBytes, 3 << 30 / 2, 1<<31 - 1} {
		got, err := parseByteSize("f", formatByteSize(n))
		require.NoError(t, err, "parseByteSize(formatByteSize(%d) = %q)", n, formatByteSize(n))
		assert.Equal(t, n, int64(got), "parseByteSize(formatByteSize(%d) = %q)", n, formatByteSize(n))
	}
}

// TestEveryFieldRuleLinted checks that each rule of fieldRules is the lint
// rule of its field in the spec (else `connect lint` would pass what
// ParseConfig rejects), and that no field's lint rule names a field without
// one.
func TestEveryFieldRuleLinted(t *testing.T) {
	Spec()
	var rules, linted []string
	for _, r := range fieldRules {
		rules = append(rules, r.path)
	}
	lintedFields.Range(func(k, _ any) bool {
		linted = append(linted, k.(string))
		return true
	})
	assert.ElementsMatch(t, rules, linted)
}

func TestParsePolicy(t *testing.T) {
	const base = "topics: [ t ]\nseed_brokers: [ \"a:1\" ]\n"
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixMilli()
	tests := []struct {
		name    string
		yaml    string
		want    PolicyConfig
		wantErr string
	}{
		{name: "defaults", yaml: base, want: PolicyConfig{StartTimeout: time.Minute, UnreachableTimeout: time.Minute}},
		{name: "skip", yaml: base + "on_data_loss: skip\n", want: PolicyConfig{SkipDataLoss: true, StartTimeout: time.Minute, UnreachableTimeout: time.Minute}},
		{name: "skip missing topics", yaml: base + "stop_at: end\non_missing_topic: skip\n", want: PolicyConfig{SkipMissingTopics: true, StartTimeout: time.Minute, UnreachableTimeout: time.Minute}},
		{name: "fail on missing topics", yaml: base + "stop_at: end\non_missing_topic: fail\n", want: PolicyConfig{StartTimeout: time.Minute, UnreachableTimeout: time.Minute}},
		{name: "missing topics: an unknown value", yaml: base + "on_missing_topic: wait\n", wantErr: `on_missing_topic must be one of fail, skip, got "wait"`},
		{name: "start_timeout", yaml: base + "stop_at: end\nstart_timeout: 5s\n", want: PolicyConfig{StartTimeout: 5 * time.Second, UnreachableTimeout: time.Minute}},
		{name: "start_timeout off", yaml: base + "stop_at: end\nstart_timeout: 0s\n", want: PolicyConfig{UnreachableTimeout: time.Minute}},
		{name: "unreachable_timeout", yaml: base + "stop_at: end\nunreachable_timeout: 30s\n", want: PolicyConfig{StartTimeout: time.Minute, UnreachableTimeout: 30 * time.Second}},
		{name: "unreachable_timeout off", yaml: base + "stop_at: end\nunreachable_timeout: 0s\n", want: PolicyConfig{StartTimeout: time.Minute}},
		{name: "negative unreachable_timeout", yaml: base + "unreachable_timeout: -1s\n", wantErr: `unreachable_timeout must be`},
		{name: "negative start_timeout", yaml: base + "start_timeout: -1s\n", wantErr: `start_timeout must be`},
		{name: "unreachable_timeout in a continuous run", yaml: base + "unreachable_timeout: 30s\n", wantErr: `unreachable_timeout ("30s") is only used with stop_at: end or timestamp`},
		{name: "rfc 3339 window", yaml: base + "start_from: timestamp\nstart_timestamp: 2026-11-30T10:00:00Z\nstop_at: timestamp\nstop_timestamp: \"2026-11-30T11:00:00+01:00\"\n", wantErr: "stop_timestamp (2026-11-30T10:00:00Z) must be after start_timestamp (2026-11-30T10:00:00Z)"},
		{name: "unix ms integer and string", yaml: base + fmt.Sprintf("start_from: timestamp\nstart_timestamp: %d\nstop_at: timestamp\nstop_timestamp: \"%d\"\n", start, start+1000), want: PolicyConfig{StartMillis: start, StopMillis: start + 1000, StartTimeout: time.Minute, UnreachableTimeout: time.Minute}},
		{name: "start without timestamp", yaml: base + "start_from: timestamp\n", wantErr: "start_timestamp is required with start_from: timestamp"},
		{name: "timestamp without its mode", yaml: base + "stop_timestamp: 2026-11-30T10:00:00Z\n", wantErr: "stop_timestamp is set but only used with stop_at: timestamp"},
		{name: "not a time", yaml: base + "start_from: timestamp\nstart_timestamp: noon\n", wantErr: `start_timestamp must be an RFC 3339 time such as 2026-11-30T10:00:00Z or unix milliseconds, got "noon"`},
		{name: "negative millis", yaml: base + "stop_at: timestamp\nstop_timestamp: -5\n", wantErr: `stop_timestamp must be an RFC 3339 time such as 2026-11-30T10:00:00Z or unix milliseconds, got "-5"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseYAML(t, tc.yaml)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.Policy)
			ec := c.engineConfig(nil, nil)
			assert.Equal(t, tc.want.SkipDataLoss, ec.SkipDataLoss, "engine SkipDataLoss")
			assert.Equal(t, tc.want.SkipMissingTopics, ec.SkipMissingTopics, "engine SkipMissingTopics")
		})
	}
}

// TestParseFetchFields parses fetch_max_wait, fetch_min_bytes and rack_id
// and checks that they reach the engine's config unchanged.
func TestParseFetchFields(t *testing.T) {
	const base = "topics: [ t ]\nseed_brokers: [ \"a:1\" ]\n"
	tests := []struct {
		name     string
		yaml     string
		wantWait time.Duration
		wantMin  int32
		wantRack string
	}{
		{name: "defaults", yaml: base, wantWait: 500 * time.Millisecond, wantMin: 1},
		{name: "shortest wait", yaml: base + "fetch_max_wait: 1ms\n", wantWait: time.Millisecond, wantMin: 1},
		{name: "longest wait", yaml: base + "fetch_max_wait: 1m\n", wantWait: time.Minute, wantMin: 1},
		{name: "wait in mixed units", yaml: base + "fetch_max_wait: 1s250ms\n", wantWait: 1250 * time.Millisecond, wantMin: 1},
		{name: "min bytes as a number", yaml: base + "fetch_min_bytes: 65536\n", wantWait: 500 * time.Millisecond, wantMin: 65536},
		{name: "min bytes with a unit", yaml: base + "fetch_min_bytes: 64KiB\n", wantWait: 500 * time.Millisecond, wantMin: 64 << 10},
		{name: "min bytes equal to max bytes", yaml: base + "fetch_max_bytes: 2MiB\nfetch_min_bytes: 2MiB\n", wantWait: 500 * time.Millisecond, wantMin: 2 << 20},
		{name: "rack", yaml: base + "rack_id: eu-west-1b\n", wantWait: 500 * time.Millisecond, wantMin: 1, wantRack: "eu-west-1b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseYAML(t, tc.yaml)
			require.NoError(t, err, "ParseConfig(%q)", tc.yaml)
			assert.Equal(t, tc.wantWait, c.FetchMaxWait, "FetchMaxWait")
			assert.Equal(t, tc.wantMin, c.FetchMinBytes, "FetchMinBytes")
			assert.Equal(t, tc.wantRack, c.RackID, "RackID")

			ec := c.engineConfig(nil, nil)
			assert.Equal(t, tc.wantWait, ec.Fetch.MaxWait, "engine Fetch.MaxWait")
			assert.Equal(t, tc.wantMin, ec.Fetch.MinBytes, "engine Fetch.MinBytes")
			assert.Equal(t, tc.wantRack, ec.Fetch.RackID, "engine Fetch.RackID")

			lints := lintInput(t, "kafka_batched_ranges:\n"+indent(tc.yaml))
			assert.Empty(t, lints, "Lint(%q)", tc.yaml)
		})
	}
}

// indent puts two spaces before each line of s, the input's fields under
// its component name.
func indent(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestGroupProtocolOpts checks the member's franz-go options for each
// group_protocol: consumer opts into KIP-848 (kgo.ServerSideBalancer) with
// the balancer franz-go maps to the assignor named, and sets no session or
// heartbeat timing (the broker's); classic does not opt in.
func TestGroupProtocolOpts(t *testing.T) {
	base := "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nconsumer_group: g\n"
	for _, tc := range []struct {
		yaml          string
		serverSide    bool
		wantBalancer  string
		sessionOptSet bool
	}{
		{yaml: base, serverSide: false, wantBalancer: "cooperative-sticky", sessionOptSet: true},
		{yaml: base + "group_protocol: consumer\n", serverSide: true, wantBalancer: "broker-default"},
		{yaml: base + "group_protocol: consumer\ngroup_remote_assignor: uniform\n", serverSide: true, wantBalancer: "sticky"},
		{yaml: base + "group_protocol: consumer\ngroup_remote_assignor: range\n", serverSide: true, wantBalancer: "range"},
	} {
		c, err := parseYAML(t, tc.yaml)
		require.NoError(t, err, "ParseConfig(%q)", tc.yaml)
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}, c.Group.groupOpts()...)...)
		require.NoError(t, err)
		assert.Equal(t, tc.serverSide, cl.OptValue(kgo.ServerSideBalancer), "ServerSideBalancer with %q", tc.yaml)
		bs, _ := cl.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
		require.NotEmpty(t, bs, "balancers with %q", tc.yaml)
		assert.Equal(t, tc.wantBalancer, bs[0].ProtocolName(), "first balancer with %q", tc.yaml)
		assert.Len(t, c.Group.groupOpts(), map[bool]int{true: 4, false: 3}[tc.sessionOptSet], "groupOpts(%q)", tc.yaml)
		cl.Close()
	}
}
