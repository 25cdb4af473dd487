package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// withChaos nacks about one batch in five: after the output mapping each batch is archived into
// one message (so a nack covers the whole batch), a mapping throws on it at random, and
// reject_errored turns the error into a nack.
//
// A per-message nack inside a multi-message batch is deliberately avoided: Benthos v4.60 itself
// duplicates and loses messages when reject_errored partially nacks a batch and
// auto_replay_nacks replays it (reproducible with the stock generate input).
func withChaos() runOption {
	return func(conf map[string]any) {
		pl := conf["pipeline"].(map[string]any)
		pl["processors"] = append(pl["processors"].([]any),
			map[string]any{"archive": map[string]any{"format": "lines"}},
			map[string]any{"mapping": `root = if random_int(max: 4) == 0 { throw("chaos") } else { content() }`},
		)
		conf["output"] = map[string]any{"reject_errored": conf["output"]}
	}
}

// TestNackedMessagesAreReplayed nacks about 20% of the batches (reject_errored output). With
// auto_replay_nacks: true every record must still be written exactly once and the group must
// commit the end offsets; with auto_replay_nacks: false the nacked records are dropped (Benthos'
// contract), nothing is written twice, and the ranges still count as done (commits reach the end
// and the run exits 0).
func TestNackedMessagesAreReplayed(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 3
	topic := createTopic(t, partitions)
	prod := produceSpread(t, topic, []int32{0, 1, 2}, 1000, "nack")
	ends := endOffsets(t, topic)
	adm := newAdmin(t)

	for _, replay := range []bool{true, false} {
		t.Run(fmt.Sprintf("auto_replay_nacks_%v", replay), func(t *testing.T) {
			group := uniqueName(t, "group")
			deleteGroupOnCleanup(t, adm, group)
			in := baseInput(topic)
			in["consumer_group"] = group
			in["start_from"] = "earliest"
			in["stop_at"] = "end"
			in["max_range_records"] = 100
			in["auto_replay_nacks"] = replay
			recs, res := runInputResult(t, in, 2*time.Minute, withChaos())
			nacks := strings.Count(res.Stdout+res.Stderr, "chaos")
			require.NotZero(t, nacks, "no batch was nacked; the test proves nothing")
			t.Logf("%d batches nacked", nacks)
			requireCommitted(t, adm, group, topic, ends)
			if replay {
				requireExactlyOnce(t, offsetsOf(prod), recs)
				return
			}
			counts := countOffsets(recs)
			for p, m := range counts {
				for o, n := range m {
					require.Equalf(t, 1, n, "%d/%d written %d times", p, o, n)
					_, ok := prod[p][o]
					require.Truef(t, ok, "%d/%d was not produced", p, o)
				}
			}
			require.Less(t, len(recs), prod.count(), "with ~20%% of batches nacked and not replayed, some records must be missing")
			t.Logf("%d of %d records written; the rest were nacked and dropped", len(recs), prod.count())
		})
	}
}

// TestNeverModeFollowsNewRecordsAndPartitions runs stop_at: never with a consumer group and a
// long commit_period: records produced while it runs, also to partitions added while it runs,
// must be delivered exactly once; SIGTERM must end it with exit 0 and the final commit on close
// must store the end offsets of every partition.
func TestNeverModeFollowsNewRecordsAndPartitions(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 2)
	group, adm := newGroup(t)

	all := produced{}
	add := func(p produced) { mergeProduced(all, p) }
	add(produceSpread(t, topic, []int32{0, 1}, 300, "before"))

	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["stop_at"] = "never"
	in["poll_interval"] = "200ms"
	in["commit_period"] = "1h" // only the commit on close can store the offsets
	in["max_range_records"] = 100
	dir := t.TempDir()
	outPath := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, outPath)
	rc := startConnect(t, 3*time.Minute, nil, "run", cfg)

	waitLines := func(n int, what string) {
		t.Helper()
		ok := rc.waitFor(60*time.Second, func() bool { return completeLines(outPath) >= n })
		if !ok {
			res := rc.stop(syscall.SIGTERM, 30*time.Second)
			t.Fatalf("%s: %d of %d records written within 60s\n%s", what, completeLines(outPath), n, res)
		}
	}
	waitLines(all.count(), "initial records")

	add(produceSpread(t, topic, []int32{0, 1}, 200, "while-running"))
	waitLines(all.count(), "records produced while running")

	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	cp, err := adm.CreatePartitions(ctx, 2, topic)
	require.NoError(t, err)
	require.NoError(t, cp.Error())
	require.Eventually(t, func() bool {
		td, err := adm.ListTopics(ctx, topic)
		return err == nil && len(td[topic].Partitions) == 4
	}, 20*time.Second, 100*time.Millisecond, "metadata never showed 4 partitions")
	add(produceSpread(t, topic, []int32{0, 1, 2, 3}, 100, "new-partitions"))
	waitLines(all.count(), "records in partitions added while running")

	res := rc.stop(syscall.SIGTERM, 45*time.Second)
	require.Falsef(t, res.TimedOut, "connect did not stop within 45s of SIGTERM\n%s", res)
	require.Equalf(t, 0, res.ExitCode, "exit code after SIGTERM\n%s", res)
	recs := readOutput(t, outPath)
	requireExactlyOnce(t, offsetsOf(all), recs)
	requireCommitted(t, adm, group, topic, endOffsets(t, topic))
}

// TestConsumerCacheSettings reads the same topic with many small ranges and several in flight
// per partition under cache settings that force client hand-overs, seeks and evictions; every
// record must be delivered exactly once.
func TestConsumerCacheSettings(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 4)
	prod := produceSpread(t, topic, []int32{0, 1, 2, 3}, 2000, "cache")

	cases := map[string]map[string]any{
		"no_cache":          {"capacity": 0},
		"capacity_1":        {"capacity": 1},
		"short_idle":        {"capacity": 64, "idle_timeout": "5ms"},
		"default_unordered": nil,
	}
	for name, cache := range cases {
		t.Run(name, func(t *testing.T) {
			in := baseInput(topic)
			in["start_from"] = "earliest"
			in["stop_at"] = "end"
			in["max_range_records"] = 150
			in["max_in_flight"] = 12
			in["fetch_max_partition_bytes"] = 8192
			if cache != nil {
				in["consumer_cache"] = cache
			}
			recs := runInput(t, in, 2*time.Minute)
			requireExactlyOnce(t, offsetsOf(prod), recs)
			requireValuesMatchNilKeys(t, prod, recs)
		})
	}
}

// TestRecordsDeletedWhileReadingFailTheRun deletes records (DeleteRecords) ahead of a slow,
// bounded run: the reader must hit the new log start and the run must exit non-zero (data loss)
// instead of hanging or silently skipping, and nothing may be written twice.
func TestRecordsDeletedWhileReadingFailTheRun(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, 1)
	pad := strings.Repeat("d", 1000)
	var records []*kgo.Record
	for i := range 4000 {
		records = append(records, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("%d-%s", i, pad))})
	}
	produceAll(t, producer(t), records)

	in := baseInput(topic)
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["ordered"] = true
	in["max_in_flight"] = 1
	in["max_range_records"] = 100
	in["fetch_max_partition_bytes"] = 32768
	in["fetch_max_bytes"] = 65536
	dir := t.TempDir()
	outPath := filepath.Join(dir, "out.jsonl")
	slow := func(conf map[string]any) {
		pl := conf["pipeline"].(map[string]any)
		sleep := map[string]any{"sleep": map[string]any{"duration": `${! if batch_index() == 0 { "30ms" } else { "0s" } }`}}
		pl["processors"] = append([]any{sleep}, pl["processors"].([]any)...)
	}
	cfg := writeRunConfig(t, dir, in, outPath, slow)
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	started := rc.waitFor(30*time.Second, func() bool { return completeLines(outPath) > 0 })
	if !started {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("nothing written within 30s\n%s", res)
	}

	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 3000})
	resp, err := newAdmin(t).DeleteRecords(ctx, del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	lines := completeLines(outPath)
	require.Lessf(t, lines, 2500, "the run read too fast for this test (%d records before the delete)", lines)

	res, exited := waitExit(rc, 60*time.Second)
	require.Truef(t, exited, "run did not end within 60s of deleting records ahead of it\n%s", res)
	require.NotEqualf(t, 0, res.ExitCode, "deleting offsets [~%d, 3000) before they were read must fail the run\n%s", lines, res)
	recs := readOutput(t, outPath)
	for p, m := range countOffsets(recs) {
		for o, n := range m {
			require.Equalf(t, 1, n, "%d/%d written %d times", p, o, n)
		}
	}
	t.Logf("exit %d after %d records written; deleted up to 3000", res.ExitCode, len(recs))
}
