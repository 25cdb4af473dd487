package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// keyOrderMapping writes partition, key and offset: what the per-key order
// checks read.
const keyOrderMapping = `root = {"p": @kafka_partition, "k": @kafka_key, "o": @kafka_offset}`

// keyOrderJitter holds each batch 0 to 2 ms per record (one sleep before its
// first message), so batches finish in an order of their own, as real work
// does: two batches of one key in the pipeline at once would come out of
// order.
const keyOrderJitter = `${! if batch_index() == 0 { "%vus".format(random_int(max: 2000) * batch_size()) } else { "0s" } }`

// produceKeyedRecords writes perPart records to each partition of topic, the
// i-th of a partition with key key-(i % keys), and returns what was
// produced.
func produceKeyedRecords(t *testing.T, topic string, partitions int32, perPart, keys int) produced {
	t.Helper()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range perPart {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "key-%d", i%keys), Value: []byte(strconv.Itoa(i))})
		}
	}
	prod := produceAll(t, producer(t), recs)
	require.Equal(t, int(partitions)*perPart, prod.count())
	return prod
}

// requireKeyOrderInFile checks ordering: key's promise in what one process
// wrote: each key's records of a partition in offset order. A record the
// process wrote again (read again after its partition came back, or after a
// rejected batch) is skipped: at least once allows it, and it never comes
// before a record of its key not yet written. It returns the records
// written, by partition and offset.
func requireKeyOrderInFile(t *testing.T, path string) map[[2]int64]bool {
	t.Helper()
	type pk struct {
		p int64
		k string
	}
	seen := map[[2]int64]bool{}
	last := map[pk]int64{}
	for i, r := range readOutput(t, path) {
		id := [2]int64{r.P.V, r.O.V}
		if seen[id] {
			continue
		}
		seen[id] = true
		k := pk{r.P.V, *r.K}
		if l, ok := last[k]; ok {
			require.Greater(t, r.O.V, l, "%s line %d: partition %d key %s: offset %d written after %d", filepath.Base(path), i+1, r.P.V, *r.K, r.O.V, l)
		}
		last[k] = r.O.V
	}
	return seen
}

// TestKeyOrderingOnTheRealBroker (issue 55): ordering: key on the real
// broker, 4 partitions of 6 keys, 8 pipeline threads with jitter, small
// fetches (so each key's records come in many batches, one after the
// other), a bounded run: every record once and each key in offset order.
func TestKeyOrderingOnTheRealBroker(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions, perPart = 4, 3000
	topic := createTopic(t, partitions)
	prod := produceKeyedRecords(t, topic, partitions, perPart, 6)
	in := baseInput(topic)
	in["stop_at"] = "end"
	in["fetch_max_partition_bytes"] = "4KiB"
	in["ordering"] = "key"
	in["max_range_records"] = 1000
	recs, _ := runInputResult(t, in, 2*time.Minute, withMappingPipeline(8, keyOrderJitter, keyOrderMapping))
	requireExactlyOnce(t, offsetsOf(prod), recs)
	dir := t.TempDir()
	path := filepath.Join(dir, "all.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	for _, r := range recs {
		fmt.Fprintf(f, `{"p": %d, "k": %q, "o": %d}`+"\n", r.P.V, *r.K, r.O.V)
	}
	require.NoError(t, f.Close())
	requireKeyOrderInFile(t, path)
}

// TestKeyOrderingThroughMemberFaults (issue 55): three members of a group
// read 8 partitions of 8 keys (small fetches) with ordering: key while one is SIGKILLed and
// started again at once and another is stopped with SIGTERM (a graceful
// handover). Every process writes a file of its own: in each, each key's
// records are in offset order; together they hold every record.
func TestKeyOrderingThroughMemberFaults(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions, perPart = 8, 1500
	topic := createTopic(t, partitions)
	prod := produceKeyedRecords(t, topic, partitions, perPart, 8)
	group := uniqueName(t, "keyorder")
	deleteGroupOnCleanup(t, newAdmin(t), group)
	dir := t.TempDir()
	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["ordering"] = "key"
	in["fetch_max_partition_bytes"] = "4KiB"
	in["max_range_records"] = 500
	in["commit_period"] = "200ms"
	in["session_timeout"] = "6s"
	in["heartbeat_interval"] = "500ms"
	var files []string
	start := func(name string) *runningConnect {
		out := filepath.Join(dir, name+".jsonl")
		files = append(files, out)
		cfg := writeRunConfig(t, dir, in, out, withMappingPipeline(6, keyOrderJitter, keyOrderMapping))
		return startConnect(t, 3*time.Minute, nil, "run", cfg)
	}
	a, b, c := start("a1"), start("b"), start("c")
	written := func() int {
		n := 0
		for _, f := range files {
			n += completeLines(f)
		}
		return n
	}
	require.True(t, a.waitFor(30*time.Second, func() bool { return written() >= 2000 }), "the members wrote %d records in 30 s", written())
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.done
	a2 := start("a2")
	require.True(t, b.waitFor(30*time.Second, func() bool { return written() >= 6000 }), "the members wrote %d records in 30 s", written())
	res := b.stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(t, 0, res.ExitCode, "%s", res)
	all := map[[2]int64]bool{}
	done := func() bool {
		for id := range all {
			delete(all, id)
		}
		for _, f := range files {
			for _, r := range readOutput(t, f) {
				all[[2]int64{r.P.V, r.O.V}] = true
			}
		}
		return len(all) >= partitions*perPart
	}
	require.True(t, c.waitFor(90*time.Second, done), "every record written: %d of %d", len(all), partitions*perPart)
	for _, rc := range []*runningConnect{a2, c} {
		rc.stop(syscall.SIGTERM, 30*time.Second)
	}
	for _, f := range files {
		requireKeyOrderInFile(t, f)
	}
	want := offsetsOf(prod)
	for p, offs := range want {
		for _, o := range offs {
			require.True(t, all[[2]int64{int64(p), o}], "partition %d offset %d never written", p, o)
		}
	}
}

// TestRestartReadsAgainOnlyWhatWasNotAcknowledged (issue 55, item 2): a
// member whose pipeline holds one batch (partition 0's record at offset 3
// sleeps for minutes) while every other batch is written and acknowledged is
// SIGKILLed once its output stops growing and a few commit periods passed; a
// second run of the group then writes again only what the first did not
// write (ordering: key and none: the acknowledged offsets above each commit
// are in its metadata), where ordering: partition, which holds the whole
// partition behind that batch, writes again all of partition 0 past it. The
// figures are logged for the closing note.
func TestRestartReadsAgainOnlyWhatWasNotAcknowledged(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions, perPart = 4, 2000
	for _, ordering := range []string{"key", "none", "partition"} {
		t.Run(ordering, func(t *testing.T) {
			t.Parallel()
			topic := createTopic(t, partitions)
			produceKeyedRecords(t, topic, partitions, perPart, 8)
			group := uniqueName(t, "reread")
			deleteGroupOnCleanup(t, newAdmin(t), group)
			dir := t.TempDir()
			in := baseInput(topic)
			in["consumer_group"] = group
			in["start_from"] = "earliest"
			in["ordering"] = ordering
			in["max_range_records"] = 250
			in["fetch_max_partition_bytes"] = "4KiB"
			in["commit_period"] = "200ms"
			in["session_timeout"] = "6s" // the second run's join waits for the killed member's session
			in["heartbeat_interval"] = "500ms"
			first := filepath.Join(dir, "first.jsonl")
			hold := `${! if @kafka_partition == 0 && @kafka_offset.number() == 3 { "300s" } else { "0s" } }`
			rc := startConnect(t, 2*time.Minute, nil, "run", writeRunConfig(t, dir, in, first, withMappingPipeline(4, hold, keyOrderMapping)))
			last, since := -1, time.Now()
			require.True(t, rc.waitFor(60*time.Second, func() bool {
				if n := completeLines(first); n != last {
					last, since = n, time.Now()
				}
				return last > 0 && time.Since(since) > 2*time.Second
			}), "the first run's output did not settle")
			require.NoError(t, rc.cmd.Process.Signal(syscall.SIGKILL))
			<-rc.done
			written := map[[2]int64]bool{}
			for _, r := range readOutput(t, first) {
				written[[2]int64{r.P.V, r.O.V}] = true
			}
			notWritten := partitions*perPart - len(written)

			second := filepath.Join(dir, "second.jsonl")
			in["stop_at"] = "end"
			res := runConnect(t, 2*time.Minute, nil, "run", writeRunConfig(t, dir, in, second, withMappingPipeline(4, "", keyOrderMapping)))
			requireExitZero(t, res)
			again := readOutput(t, second)
			rewritten := 0
			for _, r := range again {
				if written[[2]int64{r.P.V, r.O.V}] {
					rewritten++
				}
			}
			t.Logf("ordering: %s: the first run wrote %d of %d records; the second wrote %d, %d of them written before (not written by the first: %d)",
				ordering, len(written), partitions*perPart, len(again), rewritten, notWritten)
			if ordering != "partition" {
				// Records written by the first run and acknowledged after its
				// last commit may be written again; the output settled for
				// 2 s, ten commit periods, so none should be.
				require.Zero(t, rewritten, "records written by the first run were written again")
			}
			all := map[[2]int64]bool{}
			for id := range written {
				all[id] = true
			}
			for _, r := range again {
				all[[2]int64{r.P.V, r.O.V}] = true
			}
			require.Len(t, all, partitions*perPart, "records written by one run or the other")
		})
	}
}

// TestKeyOrderingThroughABrokerRestart (issue 55): three members of a group
// read 8 partitions of 8 keys with ordering: key from a broker of the
// test's own, which is stopped once a quarter is written and started again 5 s
// later. Each process's output keeps each key in offset order, and together
// they hold every record.
func TestKeyOrderingThroughABrokerRestart(t *testing.T) {
	t.Parallel()
	const partitions, perPart = 8, 1000
	b := newOwnBroker(t)
	b.start(t)
	adm := kadm.NewClient(b.client(t))
	topic := b.createTopic(t, adm, partitions)
	var recs []*kgo.Record
	for p := range int32(partitions) {
		for i := range perPart {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "key-%d", i%8), Value: []byte(strconv.Itoa(i))})
		}
	}
	prod := produceAll(t, b.client(t, producerOpts(kgo.ProducerBatchMaxBytes(4096))...), recs)
	require.Equal(t, partitions*perPart, prod.count())
	dir := t.TempDir()
	in := inputConfig{
		"seed_brokers":       []string{b.addr()},
		"topics":             []string{topic},
		"consumer_group":     uniqueName(t, "keyrestart"),
		"start_from":         "earliest",
		"ordering":           "key",
		"max_range_records":  250,
		"commit_period":      "200ms",
		"session_timeout":    "10s",
		"heartbeat_interval": "1s",
	}
	var files []string
	var members []*runningConnect
	for _, name := range []string{"a", "b", "c"} {
		out := filepath.Join(dir, name+".jsonl")
		files = append(files, out)
		cfg := writeRunConfig(t, dir, in, out, withMappingPipeline(4, keyOrderJitter, keyOrderMapping))
		members = append(members, startConnect(t, 3*time.Minute, nil, "run", cfg))
	}
	written := func() int {
		n := 0
		for _, f := range files {
			n += completeLines(f)
		}
		return n
	}
	require.True(t, members[0].waitFor(60*time.Second, func() bool { return written() >= partitions*perPart/4 }), "the members wrote %d records in 60 s", written())
	b.stop(t)
	time.Sleep(5 * time.Second)
	b.start(t)
	all := map[[2]int64]bool{}
	done := func() bool {
		clear(all)
		for _, f := range files {
			for _, r := range readOutput(t, f) {
				all[[2]int64{r.P.V, r.O.V}] = true
			}
		}
		return len(all) >= partitions*perPart
	}
	require.True(t, members[0].waitFor(120*time.Second, done), "every record written: %d of %d", len(all), partitions*perPart)
	for _, rc := range members {
		rc.stop(syscall.SIGTERM, 30*time.Second)
	}
	for _, f := range files {
		requireKeyOrderInFile(t, f)
	}
}
