package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Helpers of the topology tests (topology_test.go, timewindow_test.go): data loss under
// on_data_loss, topics deleted and recreated, compaction, transactions, partitions added, time
// windows.

// valueMapping writes topic, partition, offset, key, timestamp and value: enough to tell a
// recreated topic's records from the old ones and to check values and time windows.
const valueMapping = `root = {
  "t": @kafka_topic,
  "p": @kafka_partition,
  "o": @kafka_offset,
  "k": @kafka_key,
  "ts": @kafka_timestamp_ms,
  "v": content().string()
}`

// lostSummary matches the count of lost offsets at the end of the input's "Closed: ..." line.
var lostSummary = regexp.MustCompile(`Closed: [^\n]*?, (\d+) lost offsets`)

// dataLossLine matches any line of the input that reports data loss.
var dataLossLine = regexp.MustCompile(`(?i)data loss|no longer exist|were never read`)

// skipWarning matches the one warning on_data_loss: skip logs per loss on topic:
// `Data loss on <topic>/<partition>: offsets [<a>, <b>) <reason>; skipping them (on_data_loss: skip)`.
func skipWarning(topic string) *regexp.Regexp {
	return regexp.MustCompile(`Data loss on ` + regexp.QuoteMeta(topic) + `/(\d+): offsets \[(\d+), (\d+)\) .*?; skipping them \(on_data_loss: skip\)`)
}

// skippedSpan is one span reported by a skip warning.
type skippedSpan struct {
	Partition int32
	From, To  int64
	Line      string
}

// skippedSpans returns the spans of every skip warning about topic in log.
func skippedSpans(t *testing.T, log, topic string) []skippedSpan {
	t.Helper()
	re := skipWarning(topic)
	var out []skippedSpan
	for _, l := range matchingLines(log, re) {
		m := re.FindStringSubmatch(l)
		p, err := strconv.ParseInt(m[1], 10, 32)
		require.NoError(t, err)
		from, err := strconv.ParseInt(m[2], 10, 64)
		require.NoError(t, err)
		to, err := strconv.ParseInt(m[3], 10, 64)
		require.NoError(t, err)
		out = append(out, skippedSpan{Partition: int32(p), From: from, To: to, Line: l})
	}
	return out
}

// lostInSummary returns the lost-offset count of the summary line and whether there is one.
func lostInSummary(t *testing.T, log string) (int64, bool) {
	t.Helper()
	m := lostSummary.FindStringSubmatch(log)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n, true
}

// requireLostInSummary requires the summary line to end with ", <want> lost offsets".
func requireLostInSummary(t *testing.T, log string, want int64) {
	t.Helper()
	require.Containsf(t, log, "Closed: ", "no summary line (`Closed: ...`) in the log")
	got, ok := lostInSummary(t, log)
	require.Truef(t, ok, "the summary line does not end with `, <N> lost offsets` (regexp %s): %v", lostSummary, matchingLines(log, regexp.MustCompile(`Closed: `)))
	require.Equalf(t, want, got, "lost offsets in the summary line")
}

// createTopicWithConfigs is createTopic with topic configs (name -> value).
func createTopicWithConfigs(t *testing.T, partitions int32, configs map[string]string) string {
	t.Helper()
	topic := uniqueName(t, "kbr")
	adm := newAdmin(t)
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, 1, cfg, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error(), "create topic %s with %v", topic, configs)
	t.Cleanup(func() {
		ctx, cancel := contextTimeout(30 * time.Second)
		defer cancel()
		if _, err := adm.DeleteTopics(ctx, topic); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	})
	return topic
}

// startRun writes a config for in whose pipeline runs threads threads of an optional sleep and
// mapping, starts `connect run` on it (killed after 3 minutes at the latest) and returns the
// process and the output path.
func startRun(t *testing.T, in inputConfig, threads int, sleep, mapping string, opts ...runOption) (*runningConnect, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	all := append([]runOption{withMappingPipeline(threads, sleep, mapping), withShutdownTimeout("10s")}, opts...)
	cfg := writeRunConfig(t, dir, in, out, all...)
	return startConnect(t, 3*time.Minute, nil, "run", cfg), out
}

// exited reports whether the process has exited.
func (rc *runningConnect) exited() bool {
	select {
	case <-rc.done:
		return true
	default:
		return false
	}
}

// valueLine is one line written through valueMapping.
type valueLine struct {
	T  string  `json:"t"`
	P  flexInt `json:"p"`
	O  flexInt `json:"o"`
	K  *string `json:"k"`
	TS flexInt `json:"ts"`
	V  string  `json:"v"`
}

// readValueLines reads the complete valueMapping lines of an output file.
func readValueLines(t *testing.T, path string) []valueLine {
	t.Helper()
	return readCompleteLines(t, path, func(l valueLine) bool { return l.T != "" && l.P.Valid && l.O.Valid }, "has no topic/partition/offset")
}

// valueRecords converts value lines for requireExactlyOnce (partition, offset, key, value).
func valueRecords(lines []valueLine) []outRecord {
	out := make([]outRecord, 0, len(lines))
	for _, l := range lines {
		out = append(out, outRecord{P: l.P, O: l.O, K: l.K, T: l.T, TS: l.TS, V: l.V})
	}
	return out
}

// waitUntil polls cond every interval until it holds or timeout passes.
func waitUntil(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// scrapeUntilExit scrapes http://addr/metrics every 200ms until the process exits or timeout
// passes, and returns the last answer (nil if none) and whether the process exited.
func scrapeUntilExit(t *testing.T, rc *runningConnect, addr string, timeout time.Duration) (map[string]*dto.MetricFamily, bool) {
	t.Helper()
	var last map[string]*dto.MetricFamily
	exited := rc.waitFor(timeout, func() bool {
		if rc.exited() {
			return true
		}
		if fams := scrapeMetrics(t, addr); fams != nil {
			last = fams
		}
		return false
	})
	return last, exited
}

// recreateTopic creates topic again (after it was deleted) with the given partitions, retrying
// while the broker still finishes the deletion, and deletes it when the test ends.
func recreateTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var last error
	ok := waitUntil(45*time.Second, 250*time.Millisecond, func() bool {
		resp, err := adm.CreateTopics(ctx, partitions, 1, nil, topic)
		if err == nil {
			err = resp.Error()
		}
		last = err
		// TOPIC_ALREADY_EXISTS while the broker still removes the old one: retry.
		return err == nil
	})
	require.Truef(t, ok, "recreate topic %s: %v", topic, last)
	require.Eventuallyf(t, func() bool {
		td, err := adm.ListTopics(ctx, topic)
		return err == nil && td.Has(topic) && td[topic].Err == nil && len(td[topic].Partitions) == int(partitions)
	}, 20*time.Second, 100*time.Millisecond, "recreated topic %s never listed with %d partitions", topic, partitions)
}

// presentOffsets reads every partition of topic from its log start to ends with a plain kgo
// consumer and returns the offsets of the records it holds.
func presentOffsets(t *testing.T, topic string, ends map[int32]int64) map[int32]map[int64]bool {
	t.Helper()
	offs := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range ends {
		offs[topic][p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers()...), kgo.ConsumePartitions(offs))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out := map[int32]map[int64]bool{}
	done := func() bool {
		for p, end := range ends {
			if end == 0 {
				continue
			}
			m := out[p]
			if m == nil || !m[end-1] {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("plain consumer did not read %s up to %v within 30s (read %d partitions)", topic, ends, len(out))
		}
		for _, e := range fs.Errors() {
			t.Fatalf("plain consumer of %s: %s/%d: %v", topic, e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if out[r.Partition] == nil {
				out[r.Partition] = map[int64]bool{}
			}
			out[r.Partition][r.Offset] = true
		})
	}
	return out
}

// describeGaps renders, per partition, how many offsets below end a plain consumer did not see.
func describeGaps(present map[int32]map[int64]bool, ends map[int32]int64) string {
	s := ""
	for p := int32(0); p < int32(len(ends)); p++ {
		s += fmt.Sprintf(" p%d: %d of %d present;", p, len(present[p]), ends[p])
	}
	return s
}
