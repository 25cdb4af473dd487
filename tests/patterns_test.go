package tests

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file check topic patterns (regexp_topics) against the real broker: a
// matching topic created while the input runs is read from its first offset, one that does not
// match is not, alone and as members of a consumer group.

// patternTopics creates topics named prefix+suffix for each suffix, with partitions each, and
// deletes them when the test ends.
func patternTopics(t *testing.T, prefix string, partitions int32, suffixes ...string) []string {
	t.Helper()
	adm := newAdmin(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var names []string
	for _, s := range suffixes {
		names = append(names, prefix+s)
	}
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, names...)
	require.NoError(t, err)
	require.NoError(t, resp.Error(), "create topics %v", names)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopics(ctx, names...); err != nil {
			t.Logf("delete topics %v: %v", names, err)
		}
	})
	return names
}

// patternInput reads, from start_from latest and for ever, the topics matching `^prefix\.`,
// matching them again every second.
func patternInput(prefix string) inputConfig {
	in := baseInput("^" + regexp.QuoteMeta(prefix) + `\.`)
	in["regexp_topics"] = true
	in["metadata_max_age"] = "1s"
	in["poll_interval"] = "200ms"
	in["start_from"] = "latest"
	return in
}

// byTopic counts the records of recs per topic and per topic/partition/offset.
func byTopic(recs []outRecord) (topics map[string]int, positions map[string]int) {
	topics, positions = map[string]int{}, map[string]int{}
	for _, r := range recs {
		topics[r.T]++
		positions[fmt.Sprintf("%s/%d/%d", r.T, r.P.V, r.O.V)]++
	}
	return topics, positions
}

// positionsOf lists every topic/partition/offset of p, a topic's produced records.
func positionsOf(topic string, p produced) []string {
	var out []string
	for part, offs := range offsetsOf(p) {
		for _, o := range offs {
			out = append(out, fmt.Sprintf("%s/%d/%d", topic, part, o))
		}
	}
	return out
}

// TestRegexpTopicCreatedMidRun: with start_from latest, the records of a matching topic that
// existed at start are read from the end; a matching topic created while the input runs is read
// from its first offset (every record of it); a topic that does not match is not read.
func TestRegexpTopicCreatedMidRun(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	prefix := uniqueName(t, "kbr-re")
	old := patternTopics(t, prefix, 2, ".a")[0]
	produceSpread(t, old, seqPartitions(2), 50, "before")

	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	rc := startConnect(t, 3*time.Minute, nil, "run", writeRunConfig(t, dir, patternInput(prefix), out))
	if !rc.waitFor(60*time.Second, func() bool { return strings.Contains(rc.stdout.String(), "match 1 topics") }) {
		t.Fatalf("the input did not start\n%s", rc.stop(syscall.SIGTERM, 30*time.Second))
	}

	// The non-matching topic first: whatever listing found the new one found it too.
	other := patternTopics(t, prefix, 1, "-other")[0]
	produceSpread(t, other, seqPartitions(1), 40, "other")
	created := patternTopics(t, prefix, 3, ".b")[0]
	newRecs := produceSpread(t, created, seqPartitions(3), 100, "new")
	oldRecs := produceSpread(t, old, seqPartitions(2), 10, "after")
	want := len(positionsOf(created, newRecs)) + len(positionsOf(old, oldRecs))
	if !rc.waitFor(90*time.Second, func() bool { return len(readOutput(t, out)) >= want }) {
		t.Fatalf("%d of %d records delivered\n%s", len(readOutput(t, out)), want, rc.stop(syscall.SIGTERM, 30*time.Second))
	}
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(t, 0, res.ExitCode, "%s", res)

	topics, positions := byTopic(readOutput(t, out))
	assert.Equal(t, map[string]int{created: 300, old: 20}, topics, "records per topic")
	for _, p := range append(positionsOf(created, newRecs), positionsOf(old, oldRecs)...) {
		assert.Equal(t, 1, positions[p], "%s delivered %d times", p, positions[p])
	}
	assert.Contains(t, res.Stdout, fmt.Sprintf(`Topic \"%s\" matches pattern`, created))
	assert.NotContains(t, res.Stdout, other)
}

// TestRegexpTopicCreatedMidRunWithGroup: two members of a group with the same pattern; a
// matching topic created while they run is taken into both subscriptions, its partitions are
// read from their first offsets and the group commits them to their ends; a topic that does not
// match is neither read nor committed.
func TestRegexpTopicCreatedMidRunWithGroup(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	prefix := uniqueName(t, "kbr-reg")
	old := patternTopics(t, prefix, 2, ".a")[0]
	group, adm := newGroup(t)
	in := patternInput(prefix)
	in["consumer_group"] = group
	in["commit_period"] = "500ms"
	in["session_timeout"] = "10s"
	in["heartbeat_interval"] = "500ms"
	in["rebalance_timeout"] = "20s"
	ms := startMembers(t, 2, in)
	for i, m := range ms {
		if !m.rc.waitFor(60*time.Second, func() bool { return assignedLine.MatchString(m.rc.stdout.String()) }) {
			t.Fatalf("member %d was never assigned a partition\n%s", i, m.rc.stop(syscall.SIGTERM, 30*time.Second))
		}
	}

	other := patternTopics(t, prefix, 2, "-other")[0]
	produceSpread(t, other, seqPartitions(2), 40, "other")
	created := patternTopics(t, prefix, 4, ".b")[0]
	newRecs := produceSpread(t, created, seqPartitions(4), 200, "new")
	oldRecs := produceSpread(t, old, seqPartitions(2), 20, "after")
	// Both topics committed to their ends: the old topic's new records too, which the
	// rebalance that takes the new topic in may move to the other member (CI saw a run stopped
	// once the new topic alone was committed, before the old one's last records came).
	for _, topic := range []string{created, old} {
		ends := endOffsets(t, topic)
		var last map[int32]int64
		done := ms[0].rc.waitFor(90*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			c, err := fetchCommitted(ctx, adm, group, topic)
			if err != nil {
				return false
			}
			last = c
			return maps.Equal(c, ends)
		})
		require.Truef(t, done, "group %s committed %v of %s, want %v", group, last, topic, ends)
	}

	var recs []outRecord
	for i, m := range ms {
		res := m.rc.stop(syscall.SIGTERM, 30*time.Second)
		require.Equalf(t, 0, res.ExitCode, "member %d\n%s", i, res)
		assert.Containsf(t, res.Stdout, fmt.Sprintf(`Topic \"%s\" matches pattern`, created), "member %d did not subscribe to the new topic", i)
		assert.NotContains(t, res.Stdout, other, "member %d", i)
		recs = append(recs, readOutput(t, ms[i].out)...)
	}
	topics, positions := byTopic(recs)
	assert.NotContains(t, topics, other, "records per topic: %v", topics)
	for _, p := range append(positionsOf(created, newRecs), positionsOf(old, oldRecs)...) {
		assert.GreaterOrEqual(t, positions[p], 1, "%s never delivered", p)
	}
	assert.Empty(t, committedOffsets(t, adm, group, other), "the group committed the topic that does not match")
}
