package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/bloblang"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

// lintCase is a case of plugin/testdata/lint_cases.json (plugin/config_test.go
// runs the same cases through the spec's lint rule and ParseConfig).
type lintCase struct {
	Name   string         `json:"name"`
	Fields map[string]any `json:"fields"` // replace those of a valid input
	Lints  []string       `json:"lints"`  // every lint, exactly
}

// lintCases reads plugin/testdata/lint_cases.json.
func lintCases(t *testing.T) (invalid, valid []lintCase) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "plugin", "testdata", "lint_cases.json"))
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

// writeLintConfig writes a stream config (JSON is YAML) whose input is c's
// fields over a valid kafka_batched_ranges input, and returns its path.
func writeLintConfig(t *testing.T, dir string, i int, c lintCase) string {
	t.Helper()
	in := map[string]any{"seed_brokers": []string{"127.0.0.1:9092"}, "topics": []string{"t"}}
	maps.Copy(in, c.Fields)
	b, err := json.MarshalIndent(map[string]any{
		"input":  map[string]any{"kafka_batched_ranges": in},
		"output": map[string]any{"drop": map[string]any{}},
	}, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(dir, fmt.Sprintf("case-%02d.yaml", i))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// lintLine is one lint `connect lint` prints: `path(line,col) message`.
var lintLine = regexp.MustCompile(`^(.+)\((\d+),(\d+)\) (.*)$`)

// lintMessages returns the messages of the lints `connect lint` printed for path.
func lintMessages(res runResult, path string) []string {
	var out []string
	for _, l := range strings.Split(res.Stdout+"\n"+res.Stderr, "\n") {
		if m := lintLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil && m[1] == path {
			out = append(out, m[4])
		}
	}
	return out
}

// TestBinaryLintCases runs `connect lint` of the compiled binary on each case
// of plugin/testdata/lint_cases.json, written to a file of its own: an
// invalid value must fail the lint with exactly the case's lints, which name
// the field; the valid values must pass it.
func TestBinaryLintCases(t *testing.T) {
	t.Parallel()
	invalid, valid := lintCases(t)
	dir := t.TempDir()
	for i, c := range invalid {
		t.Run(c.Name, func(t *testing.T) {
			path := writeLintConfig(t, dir, i, c)
			res := runConnect(t, time.Minute, nil, "lint", path)
			require.False(t, res.TimedOut, "connect lint timed out\n%s", res)
			assert.NotEqual(t, 0, res.ExitCode, "connect lint passed an invalid config\n%s", res)
			assert.ElementsMatch(t, c.Lints, lintMessages(res, path), "connect lint %s\n%s", path, res)
		})
	}
	t.Run("valid", func(t *testing.T) {
		var paths []string
		for i, c := range valid {
			paths = append(paths, writeLintConfig(t, dir, len(invalid)+i, c))
		}
		res := runConnect(t, time.Minute, nil, append([]string{"lint"}, paths...)...)
		requireExitZero(t, res)
	})
}

// TestLintRuleWithoutPureComponents registers the input in an environment of
// a binary that does not link Benthos' pure components (this test binary:
// it runs connect as a process), where bloblang lacks the methods they
// register, such as parse_duration. The lint rule must still parse and
// report, as the input may be registered (by its init function) before those
// components are.
func TestLintRuleWithoutPureComponents(t *testing.T) {
	t.Parallel()
	_, err := bloblang.NewEnvironment().OnlyPure().Parse(`root = "1s".parse_duration()`)
	require.Error(t, err, "this test binary links Benthos' pure components, so it cannot check the lint rule without them")

	env := service.NewEmptyEnvironment()
	require.NoError(t, plugin.Register(env, plugin.Options{}))
	lint := func(fields string) []string {
		lints, err := env.NewComponentConfigLinter().LintInputYAML([]byte("kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n  topics: [ t ]\n" + fields))
		require.NoError(t, err)
		var out []string
		for _, l := range lints {
			out = append(out, l.What)
		}
		return out
	}
	assert.Empty(t, lint(""))
	assert.Equal(t, []string{`poll_interval must be > 0, got "0s"`}, lint("  poll_interval: 0s\n"))
	assert.Equal(t, []string{`fetch_max_bytes must be a byte size such as 1048576, 512KiB or 50MiB, got "1.5MiB"`}, lint("  fetch_max_bytes: 1.5MiB\n"))
	assert.Equal(t, []string{`max_in_flight must be an integer, got 1.5`}, lint("  max_in_flight: 1.5\n"))
}

// lintsAt returns the lints `connect lint` printed for path, as "line: message".
func lintsAt(res runResult, path string) []string {
	var out []string
	for _, l := range strings.Split(res.Stdout+"\n"+res.Stderr, "\n") {
		if m := lintLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil && m[1] == path {
			out = append(out, m[2]+": "+m[4])
		}
	}
	return out
}

// TestBinaryLintLines runs `connect lint` of the compiled binary on a config
// with many errors and checks that each is printed once, at the line of the
// field that is wrong: a scalar field's own line, a list's first line (where
// its value starts: Benthos gives a field's lint rule the line of its value),
// a nested field's line. Rules across fields run in the spec's lint rule,
// which Benthos' public API reports at the input's first line (the line of
// the mapping under kafka_batched_ranges); their messages name the fields.
// The topics entries are such a rule (names, or patterns with regexp_topics).
func TestBinaryLintLines(t *testing.T) {
	t.Parallel()
	const conf = `input:
  kafka_batched_ranges:
    seed_brokers: [ "127.0.0.1:9092" ]
    topics:
      - t
      - "t:3-1"
    start_from: beginning
    max_in_flight: 0
    consumer_cache:
      capacity: -1
    poll_interval: 0s
    stop_at: timestamp
    session_timeout: 1ms
    group_balancers: [ foo ]
    sasl:
      - mechanism: PLAIN
        username: alice
      - mechanism: GSSAPI
    reset_offsets: true
    on_data_loss: Skip
output:
  drop: {}
`
	path := filepath.Join(t.TempDir(), "lines.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	res := runConnect(t, time.Minute, nil, "lint", path)
	require.False(t, res.TimedOut, "connect lint timed out\n%s", res)
	assert.NotEqual(t, 0, res.ExitCode, "connect lint passed an invalid config\n%s", res)
	assert.ElementsMatch(t, []string{
		`3: stop_timestamp is required with stop_at: timestamp`,
		`3: reset_offsets requires consumer_group to be set`,
		`3: topics[1]: invalid entry "t:3-1": partition range 3-1 runs backwards`, // an entry's rule depends on regexp_topics: a rule across fields
		`7: start_from must be one of earliest, latest, committed, timestamp, got "beginning"`,
		`8: max_in_flight must be > 0, got 0`,
		`10: consumer_cache.capacity must be >= 0, got -1`,
		`11: poll_interval must be > 0, got "0s"`,
		`13: session_timeout must be at least 6s (the default group.min.session.timeout.ms of Kafka brokers, which reject shorter sessions), got "1ms"`,
		`14: group_balancers[0] must be one of cooperative_sticky, sticky, range, roundrobin, got "foo"`,
		`16: sasl[0].password is required for mechanism PLAIN`,
		`16: sasl[1].mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM, got "GSSAPI": unknown sasl mechanism`,
		`20: on_data_loss must be one of fail, skip, got "Skip"`,
	}, lintsAt(res, path), "connect lint %s\n%s", path, res)
}

// TestBinaryLintSaysOnlyWhatIsWrong (issue 44): `connect lint` of the compiled binary on a string
// where a list belongs, and on a list left without a value by an environment variable that is
// not set, says that and nothing more (before, it added "topics must name at least one topic" and
// "seed_brokers must name at least one broker" beside Benthos' "expected array value"); and the
// fields of Bento's and Redpanda Connect's inputs that have a row in docs/migrating.md get their
// hint at their own line instead of "field not recognised".
func TestBinaryLintSaysOnlyWhatIsWrong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, input string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte("input:\n  kafka_batched_ranges:\n"+input+"output:\n  drop: {}\n"), 0o644))
		return path
	}
	const unset = "KBR_TEST_NEVER_SET_BROKERS"
	require.Empty(t, os.Getenv(unset))
	for _, tc := range []struct {
		name, input string
		want        []string
	}{
		{"a string for topics", "    seed_brokers: [ \"127.0.0.1:9092\" ]\n    topics: orders\n",
			[]string{`4: topics must be a list, such as [ orders ], got "orders"`}},
		{"an unset variable for seed_brokers", "    seed_brokers: ${" + unset + "}\n    topics: [ orders ]\n",
			[]string{`1: required environment variables were not set: [` + unset + `]`, `3: seed_brokers has no value: write a list, such as [ "localhost:9092" ]`}},
		// Inside the list: Benthos leaves an empty entry, and its message is the whole error
		// (issue 50: "seed_brokers must name at least one broker" came with it).
		{"an unset variable in seed_brokers' list", "    seed_brokers: [ \"${" + unset + "}\" ]\n    topics: [ orders ]\n",
			[]string{`1: required environment variables were not set: [` + unset + `]`}},
		{"empty lists", "    seed_brokers: []\n    topics: []\n",
			[]string{`3: seed_brokers must name at least one broker`, `3: topics must name at least one topic (or regexp_topics_include a pattern)`}},
		{"fields of other inputs", "    seed_brokers: [ \"127.0.0.1:9092\" ]\n    topics: [ orders ]\n    preferring_lag: 1000\n    rate_limit: orders_limit\n    reconnect_on_unknown_topic: true\n    max_yield_batch_bytes: 32KB\n    timely_nacks_maximum_wait: 1m\n    tcp:\n      tcp_user_timeout: 5s\n",
			[]string{
				`5: preferring_lag is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; ranges of every partition are planned in turn, so a lagging partition is read at once, with max_in_flight ranges in flight across partitions`,
				`6: rate_limit is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; throttle with a rate_limit processor in the pipeline (pipeline.processors: [ { rate_limit: { resource: orders_limit } } ]), which takes the same rate_limit resource`,
				`7: reconnect_on_unknown_topic is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; a topic that does not exist never stops a continuous run (it is read once it is created), and on_missing_topic decides for a bounded run`,
				`8: max_yield_batch_bytes is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; batching (Benthos' batch policy, byte_size included) sizes the message batches, cut within each range of at most max_range_records offsets`,
				`9: timely_nacks_maximum_wait is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; a batch waits for the pipeline's acknowledgement as long as it takes (a crash re-reads at most max_in_flight × max_range_records records; with share_group, share_renew_interval keeps its records)`,
				`11: tcp.tcp_user_timeout is a field of kafka_franz, redpanda or the old kafka input, not of kafka_batched_ranges: remove it; tcp.keep_alive notices a connection whose peer stopped answering (after idle + count × interval, 2m30s by default)`,
			}},
	} {
		path := write(strings.ReplaceAll(tc.name, " ", "_")+".yaml", tc.input)
		res := runConnect(t, time.Minute, nil, "lint", path)
		require.False(t, res.TimedOut, "connect lint timed out\n%s", res)
		assert.NotEqual(t, 0, res.ExitCode, "%s: connect lint passed\n%s", tc.name, res)
		assert.ElementsMatch(t, tc.want, lintsAt(res, path), "%s: connect lint %s\n%s", tc.name, path, res)
	}
}
