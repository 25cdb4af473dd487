package plugin

import (
	"context"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lintInputWithoutVars lints yaml as the config of an input component, as
// `connect lint` does, with no environment variable set.
func lintInputWithoutVars(t *testing.T, yaml string) []string {
	t.Helper()
	linter := service.NewEnvironment().NewComponentConfigLinter().
		SetEnvVarLookupFunc(func(context.Context, string) (string, bool) { return "", false })
	lints, err := linter.LintInputYAML([]byte(yaml))
	require.NoError(t, err, "LintInputYAML(%q)", yaml)
	var out []string
	for _, l := range lints {
		out = append(out, l.What)
	}
	return out
}

// TestUnsetVariableInSeedBrokersSaysOnlyThat (issue 50, defect 6): a seed
// broker written as an environment variable that is not set, `seed_brokers:
// [ "${KAFKA_BROKERS}" ]`, lints with Benthos' "required environment
// variables were not set" alone; the lint added "seed_brokers must name at
// least one broker", which is not what is wrong. ParseConfig, which Benthos
// runs without saying which variables are unset (connect run --chilled),
// still refuses the empty list, saying what it got.
func TestUnsetVariableInSeedBrokersSaysOnlyThat(t *testing.T) {
	const unset = "KBR_TEST_NEVER_SET_BROKERS"
	for _, tc := range []struct {
		brokers string
		parsed  string // seed_brokers as Benthos hands it to ParseConfig
		want    string // ParseConfig's error
	}{
		{`[ "${` + unset + `}" ]`, `[ "" ]`, `seed_brokers must name at least one broker, got [""] (an environment variable that is not set leaves an entry empty)`},
		{`[ "${` + unset + `}", "${` + unset + `}" ]`, `[ "", "" ]`, `seed_brokers must name at least one broker, got ["", ""] (an environment variable that is not set leaves an entry empty)`},
		// One set, one not: the run has its broker.
		{`[ "${` + unset + `}", "a:1" ]`, `[ "", "a:1" ]`, ""},
	} {
		lints := lintInputWithoutVars(t, "kafka_batched_ranges:\n  seed_brokers: "+tc.brokers+"\n  topics: [ orders ]\n")
		assert.Equal(t, []string{"required environment variables were not set: [" + strings.Repeat(unset+" ", strings.Count(tc.brokers, unset)-1) + unset + "]"}, lints,
			"lint of seed_brokers: %s: the unset variable, and nothing more", tc.brokers)

		_, err := parseYAML(t, "seed_brokers: "+tc.parsed+"\ntopics: [ orders ]\n")
		if tc.want == "" {
			assert.NoError(t, err, "ParseConfig of seed_brokers: %s", tc.parsed)
			continue
		}
		if assert.Error(t, err, "ParseConfig of seed_brokers: %s", tc.parsed) {
			assert.Equal(t, tc.want, err.Error(), "ParseConfig of seed_brokers: %s", tc.parsed)
		}
	}
	// Written empty, with no variable, the list still names no broker in
	// the lint (the case that lints clean is the one left by a variable).
	assert.Equal(t, []string{"seed_brokers must name at least one broker"},
		lintInputWithoutVars(t, "kafka_batched_ranges:\n  seed_brokers: [ \" \" ]\n  topics: [ orders ]\n"))
}

// TestBoundedOnlyFieldsInAShareGroup: with share_group, a field only a
// bounded run reads is refused once, by the share group's rule (there is
// no stop_at to name), not a second time by the continuous run's.
func TestBoundedOnlyFieldsInAShareGroup(t *testing.T) {
	for _, field := range []string{"unreachable_timeout: 30s", "start_timeout: 10s"} {
		yaml := "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\nshare_group: s\n" + field + "\n"
		lints := lintInput(t, "kafka_batched_ranges:\n"+indent(yaml))
		name := strings.SplitN(field, ":", 2)[0]
		if assert.Len(t, lints, 1, "lint of %q", field) {
			assert.True(t, strings.HasPrefix(lints[0], name+" cannot be used with share_group (s): "), "lint of %q = %q", field, lints)
		}
		_, err := parseYAML(t, yaml)
		if assert.Error(t, err, "ParseConfig(%q)", yaml) {
			assert.Equal(t, lints, strings.Split(err.Error(), "\n"), "ParseConfig(%q)", yaml)
		}
	}
}
