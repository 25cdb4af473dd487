package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMissingTopicWaitedForInContinuousRun (issue 25, point 2): a continuous run of `topics:
// [<missing>, <existing>]` read nothing (`Failed to connect to kafka_batched_ranges: topics:
// topic "<missing>" does not exist`, retried). Now the existing topic is read, one warning names
// the missing one, and once it is created its records are read, from its first offset.
func TestMissingTopicWaitedForInContinuousRun(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	existing := createTopic(t, 2)
	missing := uniqueName(t, "kbr-missing")
	before := produceSpread(t, existing, seqPartitions(2), 30, "before")

	in := baseInput(missing, existing)
	in["poll_interval"] = "200ms"
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	rc := startConnect(t, 2*time.Minute, nil, "run", writeRunConfig(t, dir, in, out))
	warning := fmt.Sprintf(`topics: topic \"%s\" does not exist`, missing)
	if !rc.waitFor(60*time.Second, func() bool {
		return len(readOutput(t, out)) >= before.count() && strings.Contains(rc.stdout.String(), warning)
	}) {
		t.Fatalf("%d of %d records of %s delivered\n%s", len(readOutput(t, out)), before.count(), existing, rc.stop(syscall.SIGTERM, 30*time.Second))
	}

	patternTopics(t, missing, 2, "") // creates it, deleted when the test ends
	created := produceSpread(t, missing, seqPartitions(2), 40, "created")
	want := before.count() + created.count()
	if !rc.waitFor(60*time.Second, func() bool { return len(readOutput(t, out)) >= want }) {
		t.Fatalf("%d of %d records delivered\n%s", len(readOutput(t, out)), want, rc.stop(syscall.SIGTERM, 30*time.Second))
	}
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(t, 0, res.ExitCode, "%s", res)

	topics, positions := byTopic(readOutput(t, out))
	assert.Equal(t, map[string]int{existing: before.count(), missing: created.count()}, topics, "records per topic")
	for _, p := range append(positionsOf(existing, before), positionsOf(missing, created)...) {
		assert.Equal(t, 1, positions[p], "%s delivered %d times", p, positions[p])
	}
	assert.Equal(t, 1, strings.Count(res.Stdout, warning), "warnings naming the missing topic\n%s", res.Stdout)
	assert.Contains(t, res.Stdout, fmt.Sprintf(`Topic \"%s\" exists now`, missing))
	assert.NotContains(t, res.Stdout, "Failed to connect")
}
