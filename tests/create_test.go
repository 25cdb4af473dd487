package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCreatedConfigRuns takes the config `connect create
// kafka_batched_ranges//drop` writes, makes the edits a user makes (name the
// brokers and a topic, stop at the topic's end so the run ends), and checks
// that `connect lint` passes it without a word and `connect run` reads every
// record of the topic and exits 0: nothing the generated config holds (the
// spec's examples, defaults) fails at run.
func TestCreatedConfigRuns(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 2)
	const records = 10
	var recs []*kgo.Record
	for i := range records {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))})
	}
	produceAll(t, producer(t), recs)

	res := runConnect(t, time.Minute, nil, "create", "kafka_batched_ranges//drop")
	requireExitZero(t, res)
	conf := res.Stdout
	for _, e := range []struct{ old, new string }{
		// The list fields default to the empty list (the lint says one is
		// needed), so create writes them without a comment.
		{"    seed_brokers: []\n", "    seed_brokers: [ " + strings.Join(brokers(), ", ") + " ]\n"},
		{"    topics: []\n", "    topics: [ " + topic + " ]\n"},
		{"    stop_at: never\n", "    stop_at: end\n"},
	} {
		require.Equal(t, 1, strings.Count(conf, e.old), "the created config has no line %q\n%s", e.old, conf)
		conf = strings.Replace(conf, e.old, e.new, 1)
	}
	path := filepath.Join(t.TempDir(), "created.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))

	res = runConnect(t, time.Minute, nil, "lint", path)
	requireExitZero(t, res)
	assert.Empty(t, strings.TrimSpace(res.Stdout+res.Stderr), "connect lint %s printed lints", path)

	res = runConnect(t, 2*time.Minute, nil, "run", path)
	requireExitZero(t, res)
	assert.Contains(t, res.Stdout+res.Stderr, fmt.Sprintf("Closed: %d records", records), "the run's summary line")
}
