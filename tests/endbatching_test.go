package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// withOutputBatching wraps the config's output in a broker output with the
// batching policy policy (the file output has no batching field of its own).
func withOutputBatching(policy map[string]any) runOption {
	return func(conf map[string]any) {
		conf["output"] = map[string]any{"broker": map[string]any{
			"outputs":  []any{conf["output"]},
			"batching": policy,
		}}
	}
}

// TestBoundedRunWithOutputBatching (issue 50, defect 1), real broker, the
// issue's shape: stop_at: end, 4 partitions x 12,500 records in two ranges
// each, an output batching by 50, ordered and not, 4 pipeline threads.
//   - Without a period the run used to wait for ever with the last records
//     in the output's batch (Benthos flushes it only once the input ended, and
//     ends the input only once those records are acknowledged): connect run
//     refuses it at once, exit 1, naming the policy and the fix.
//   - With the period the error asks for, it ends with exit 0, every record
//     written once, and in offset order per partition under ordered: true.
func TestBoundedRunWithOutputBatching(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const (
		partitions = 4
		perPart    = 12500
	)
	topic := createTopic(t, partitions)
	var records []*kgo.Record
	for i := range partitions * perPart {
		records = append(records, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: fmt.Appendf(nil, "%08d", i)})
	}
	prod := produceAll(t, producer(t), records)
	require.Equal(t, partitions*perPart, prod.count())
	input := func(ordered bool) inputConfig {
		in := baseInput(topic)
		in["start_from"] = "earliest"
		in["stop_at"] = "end"
		in["ordered"] = ordered
		in["max_range_records"] = perPart / 2
		return in
	}

	t.Run("count_without_period_is_refused", func(t *testing.T) {
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, input(true), filepath.Join(dir, "out.jsonl"),
			withLeanPipeline(4, ""), withOutputBatching(map[string]any{"count": 50}))
		res := runConnect(t, time.Minute, nil, "run", cfg)
		require.False(t, res.TimedOut, "connect run did not end\n%s", res)
		assert.Equal(t, 1, res.ExitCode, "%s", res)
		assert.Less(t, res.Duration, 15*time.Second, "%s", res)
		out := res.Stdout + res.Stderr
		assert.Contains(t, out, "output.broker.batching: a batching policy without a period holds the last messages of a bounded run")
		assert.NotContains(t, out, "Reading 4 partitions", "the input started")
	})
	for _, ordered := range []bool{true, false} {
		for run := range 2 {
			t.Run(fmt.Sprintf("period_ordered_%t_run_%d", ordered, run+1), func(t *testing.T) {
				recs, res := runInputResult(t, input(ordered), 2*time.Minute,
					withLeanPipeline(4, ""), withOutputBatching(map[string]any{"count": 50, "period": "500ms"}))
				requireExactlyOnce(t, offsetsOf(prod), recs)
				if ordered {
					requireOffsetOrder(t, recs)
				}
				assert.True(t, strings.Contains(res.Stdout+res.Stderr, "50000 records acknowledged of 50000 handed out"), "%s", res)
			})
		}
	}
}
