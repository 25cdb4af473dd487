package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tests in this file check the stop paths of a run: an error that stops the input (records
// deleted before they were read, a topic deleted under the reader) must end a run promptly with a
// non-zero exit and a message naming the topic, the partition and the offsets lost, whatever the
// readers in flight were doing when it happened; a topic deleted after it was read completely
// must not stop the other topics of a continuous run.

// stopMapping writes topic, partition and offset: enough to check that nothing was written twice
// across several topics.
const stopMapping = `root = {"t": @kafka_topic, "p": @kafka_partition, "o": @kafka_offset}`

// slowBatch holds every batch 30ms (one sleep before its first message): with one pipeline
// thread and batches of about 30 records (32 KiB fetches of 1 KiB records) the pipeline drains
// about 1,000 records/s, so readers spend most of their time blocked handing batches over.
const slowBatch = `${! if batch_index() == 0 { "30ms" } else { "0s" } }`

// stopWithin is how long a run may take to end on its own after a fault that must stop it.
const stopWithin = 30 * time.Second

// producePadded produces perPart records of about 1 KiB to each partition of topic, in producer
// batches of at most 16 KiB, so one 32 KiB fetch holds a few batches and a reader fetches again
// every 30 records or so.
func producePadded(t *testing.T, topic string, partitions int32, perPart int) produced {
	t.Helper()
	pad := strings.Repeat("d", 1000)
	records := make([]*kgo.Record, 0, perPart*int(partitions))
	for i := range perPart * int(partitions) {
		records = append(records, &kgo.Record{
			Topic:     topic,
			Partition: int32(i) % partitions,
			Value:     []byte(fmt.Sprintf("%d-%s", i, pad)),
		})
	}
	prod := produceAll(t, producer(t, kgo.ProducerBatchMaxBytes(16384)), records)
	require.Equal(t, perPart*int(partitions), prod.count())
	return prod
}

// slowInput is a bounded or continuous input of topic with several small ranges in flight and
// small fetches.
func slowInput(topic, stopAt string, maxInFlight int) inputConfig {
	in := baseInput(topic)
	in["start_from"] = "earliest"
	in["stop_at"] = stopAt
	in["max_in_flight"] = maxInFlight
	in["max_range_records"] = 100
	in["fetch_max_partition_bytes"] = 32768
	in["fetch_max_bytes"] = 65536
	in["poll_interval"] = "200ms"
	return in
}

// startSlowRun starts `connect run` on in with one pipeline thread holding each batch 30ms,
// writing stopMapping lines to the returned path, and waits until the first line is written.
func startSlowRun(t *testing.T, in inputConfig) (*runningConnect, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, out, withMappingPipeline(1, slowBatch, stopMapping), withShutdownTimeout("10s"))
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	if !rc.waitFor(30*time.Second, func() bool { return completeLines(out) > 0 }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("nothing written within 30s\n%s", res)
	}
	return rc, out
}

// readStopLines reads the complete stopMapping lines of an output file (a last line without its
// newline, from a killed writer, is left out).
func readStopLines(t *testing.T, path string) []outRecord {
	t.Helper()
	return readCompleteLines(t, path, func(r outRecord) bool { return r.T != "" && r.P.Valid && r.O.Valid }, "has no topic/partition/offset")
}

// topicPartOffset identifies one record.
type topicPartOffset struct {
	t string
	p int32
	o int64
}

// requireNoDuplicates fails when a record (topic, partition, offset) was written more than once.
func requireNoDuplicates(t *testing.T, recs []outRecord) {
	t.Helper()
	seen := map[topicPartOffset]int{}
	var dups []string
	for _, r := range recs {
		k := topicPartOffset{r.T, int32(r.P.V), r.O.V}
		seen[k]++
		if seen[k] == 2 && len(dups) < 20 {
			dups = append(dups, fmt.Sprintf("%s/%d@%d", k.t, k.p, k.o))
		}
	}
	require.Emptyf(t, dups, "records written more than once (first 20 shown) among %d lines", len(recs))
}

// writtenIn counts the records of topic/partition written with offsets in [from, to).
func writtenIn(recs []outRecord, topic string, partition int32, from, to int64) int {
	n := 0
	for _, r := range recs {
		if r.T == topic && int32(r.P.V) == partition && r.O.V >= from && r.O.V < to {
			n++
		}
	}
	return n
}

// lostSpan is an offset span [From, To) of a partition that a log message reports as lost.
type lostSpan struct {
	Partition int32
	From, To  int64
	Line      string
}

// spanAfterPartition matches what follows one mention of "<topic>/": the partition, then (on the
// same line) the first span written "[from, to)". A range is written "[start,end)", without the
// space, so the retry warning "Reading <topic>/0[100,200) stopped at offset 130, retrying ..."
// reports no span.
var spanAfterPartition = regexp.MustCompile(`^(\d+)\D.*?\[(\d+), (\d+)\)`)

// lostSpans returns, for every mention of "<topic>/<partition>" in log, the first "[from, to)"
// span that follows it before the next mention of the topic or the end of its line. So in
// "<topic>/0: unknown topic; <topic>/1: offsets [5, 900) no longer exist" the span belongs to
// partition 1 only.
func lostSpans(log, topic string) []lostSpan {
	var out []lostSpan
	for _, line := range strings.Split(log, "\n") {
		segs := strings.Split(line, topic+"/")
		for _, seg := range segs[1:] {
			m := spanAfterPartition.FindStringSubmatch(seg)
			if m == nil {
				continue
			}
			p, errP := strconv.ParseInt(m[1], 10, 32)
			from, errF := strconv.ParseInt(m[2], 10, 64)
			to, errT := strconv.ParseInt(m[3], 10, 64)
			if errP != nil || errF != nil || errT != nil {
				continue
			}
			out = append(out, lostSpan{Partition: int32(p), From: from, To: to, Line: line})
		}
	}
	return out
}

// TestDataLossWithRangesInFlightExitsNonZero deletes records (DeleteRecords up to offset 2000)
// far ahead of a slow bounded run of a 4-partition topic (3,000 records of 1 KiB per partition)
// on partition 0 only, once 800 records are written, while 4 ranges of 100 records are in flight
// (ordered and unordered) and their readers are blocked handing batches to a pipeline that drains
// about 1,000 records/s. max_in_flight is the partition count: the round-robin planner then gives
// most ranges their turn to emit as they start, so their readers send while still reading (with
// more slots than partitions, most ranges are read ahead and queued, and whether a reader is
// caught in a send when the input stops depends on timing).
//
// The reader that meets the new log start stops the input; the readers blocked in a send are
// cancelled. Every batch they had counted as unacknowledged must be uncounted, so ReadBatch ends
// the input and the run exits non-zero within 30s of the delete, on its own. The log must name
// the lost span as "<topic>/0: offsets [A, 2000)" (A < 2000 where the reader stood, the end the new
// log start), none of [A, 2000) may have been written, and nothing may be written twice.
func TestDataLossWithRangesInFlightExitsNonZero(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered_%v", ordered), func(t *testing.T) {
			t.Parallel()
			requireBroker(t)
			const (
				partitions = 4
				perPart    = 3000
				lossPart   = 0
				deleteAt   = 2000
				// steadyLines are written before the delete: 2 ranges of 100 per
				// partition, a sixth of what lies below deleteAt.
				steadyLines = 800
			)
			topic := createTopic(t, partitions)
			producePadded(t, topic, partitions, perPart)
			const maxInFlight = partitions
			in := slowInput(topic, "end", maxInFlight)
			in["ordered"] = ordered
			rc, out := startSlowRun(t, in)
			// Past the first range of every partition, so the delete meets the readers in
			// their steady state (some reading ahead, some waiting for their turn, some
			// blocked handing over a batch), not only the first ranges, which start with
			// their turn.
			if !rc.waitFor(30*time.Second, func() bool { return completeLines(out) >= steadyLines }) {
				res := rc.stop(syscall.SIGTERM, 30*time.Second)
				t.Fatalf("%d of %d records written within 30s\n%s", completeLines(out), steadyLines, res)
			}

			ctx, cancel := contextTimeout(30 * time.Second)
			defer cancel()
			del := kadm.Offsets{}
			del.Add(kadm.Offset{Topic: topic, Partition: lossPart, At: deleteAt})
			resp, err := newAdmin(t).DeleteRecords(ctx, del)
			require.NoError(t, err)
			require.NoError(t, resp.Error())
			deleted := time.Now()
			before := completeLines(out)
			require.Lessf(t, before, partitions*perPart/3, "the run read too fast for this test (%d records before the delete)", before)

			res, exited := waitExit(rc, stopWithin)
			took := time.Since(deleted)
			require.Truef(t, exited, "the run did not end within %s of deleting %s/%d up to %d with %d ranges in flight (killed after %s)",
				stopWithin, topic, lossPart, deleteAt, maxInFlight, took.Round(time.Millisecond))
			require.NotEqualf(t, 0, res.ExitCode, "deleting %s/%d up to %d before it was read must fail the run", topic, lossPart, deleteAt)

			recs := readStopLines(t, out)
			requireNoDuplicates(t, recs)
			var found *lostSpan
			for _, s := range lostSpans(res.Stdout+res.Stderr, topic) {
				if s.Partition == lossPart && s.To == deleteAt {
					found = &s
					break
				}
			}
			require.NotNilf(t, found, "no log line names the lost span as %q (want %s/%d ... [A, %d))",
				fmt.Sprintf("%s/%d: offsets [A, %d)", topic, lossPart, deleteAt), topic, lossPart, deleteAt)
			require.Lessf(t, found.From, int64(deleteAt), "lost span start in: %s", found.Line)
			require.Zerof(t, writtenIn(recs, topic, lossPart, found.From, deleteAt),
				"records of %s/%d in the span [%d, %d) reported lost were written", topic, lossPart, found.From, deleteAt)
			t.Logf("exit %d %s after the delete; %d records written (%d before the delete); lost span [%d, %d) of partition %d",
				res.ExitCode, took.Round(time.Millisecond), len(recs), before, found.From, deleteAt, lossPart)
		})
	}
}

// TestDeletedTopicNextToLiveOneKeepsFlowing reads two topics in one continuous input
// (stop_at: never, poll_interval 200ms) to their ends, deletes one of them (all of its offsets
// were read, so nothing is lost), and produces 10 records to the other: all 10 must be written
// within 20s while the process keeps running, a warning must name the deleted topic, SIGTERM must
// end the run with exit 0, and every record must have been written exactly once.
func TestDeletedTopicNextToLiveOneKeepsFlowing(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	gone := createTopic(t, 2)
	live := createTopic(t, 2)
	want := map[string]produced{
		gone: produceSpread(t, gone, []int32{0, 1}, 100, "gone"),
		live: produceSpread(t, live, []int32{0, 1}, 100, "live"),
	}
	total := want[gone].count() + want[live].count()

	in := baseInput(gone, live)
	in["start_from"] = "earliest"
	in["stop_at"] = "never"
	in["poll_interval"] = "200ms"
	in["max_range_records"] = 100
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, out, withMappingPipeline(2, "", stopMapping), withShutdownTimeout("10s"))
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	if !rc.waitFor(60*time.Second, func() bool { return completeLines(out) >= total }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("%d of %d records written within 60s\n%s", completeLines(out), total, res)
	}

	adm := newAdmin(t)
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	dr, err := adm.DeleteTopics(ctx, gone)
	require.NoError(t, err)
	require.NoError(t, dr.Error())
	require.Eventuallyf(t, func() bool {
		td, err := adm.ListTopics(ctx, gone)
		return err == nil && (!td.Has(gone) || td[gone].Err != nil)
	}, 20*time.Second, 100*time.Millisecond, "topic %s still listed after DeleteTopics", gone)
	time.Sleep(1 * time.Second) // five poll intervals: the input has seen the topic gone

	mergeProduced(want[live], produceSpread(t, live, []int32{0, 1}, 5, "after-delete"))
	total += 10
	arrived := rc.waitFor(20*time.Second, func() bool { return completeLines(out) >= total })
	n := completeLines(out)
	running := true
	select {
	case <-rc.done:
		running = false
	default:
	}
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Truef(t, arrived, "%d of the 10 records produced to %s after deleting %s were written within 20s",
		n-(total-10), live, gone)
	require.Truef(t, running, "the process exited after %s was deleted", gone)
	require.Falsef(t, res.TimedOut, "connect did not stop within 30s of SIGTERM")
	require.Equalf(t, 0, res.ExitCode, "exit code after SIGTERM (the deleted topic had been read completely)")

	var warned []string
	for _, l := range matchingLines(res.Stdout+res.Stderr, warnLevel) {
		if strings.Contains(l, gone) {
			warned = append(warned, l)
		}
	}
	require.NotEmptyf(t, warned, "no warning names the deleted topic %s", gone)

	recs := readStopLines(t, out)
	requireNoDuplicates(t, recs)
	got := map[string]offsetSet{}
	for _, r := range recs {
		if got[r.T] == nil {
			got[r.T] = offsetSet{}
		}
		if got[r.T][int32(r.P.V)] == nil {
			got[r.T][int32(r.P.V)] = map[int64]int{}
		}
		got[r.T][int32(r.P.V)][r.O.V]++
	}
	for topic, prod := range want {
		for p, m := range prod {
			for o := range m {
				require.Equalf(t, 1, got[topic][p][o], "%s/%d@%d written %d times", topic, p, o, got[topic][p][o])
			}
		}
	}
	require.Lenf(t, recs, total, "records written")
	t.Logf("all %d records written; warning: %s", total, warned[0])
}

// TestDeletedTopicWithUnreadDataFailsBoundedRun deletes the only topic (2 partitions of 3,000
// records of 1 KiB) of a slow bounded run (stop_at: end) while most of it is unread. The
// partitions can never be read to their end offsets: the run must exit non-zero within 30s of the
// delete, on its own, with a log line naming "<topic>/<partition>" and the unread span
// "[from, to)" of that partition, to being the partition's end offset of the run; none of
// [from, to) may have been written, and nothing may be written twice.
func TestDeletedTopicWithUnreadDataFailsBoundedRun(t *testing.T) {
	t.Parallel()
	deleteTopicMidRun(t, "end")
}

// TestDeletedTopicWithUnreadDataStopsContinuousRun is TestDeletedTopicWithUnreadDataFailsBoundedRun
// with stop_at: never: the unread records are lost (the default policy stops on data loss), so
// the continuous run must also exit non-zero within 30s, naming the topic, the partition and the
// unread span up to the partition's end.
func TestDeletedTopicWithUnreadDataStopsContinuousRun(t *testing.T) {
	t.Parallel()
	deleteTopicMidRun(t, "never")
}

func deleteTopicMidRun(t *testing.T, stopAt string) {
	t.Helper()
	requireBroker(t)
	const (
		partitions = 2
		perPart    = 3000
	)
	topic := createTopic(t, partitions)
	producePadded(t, topic, partitions, perPart)
	ends := endOffsets(t, topic)
	rc, out := startSlowRun(t, slowInput(topic, stopAt, 4))

	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	dr, err := newAdmin(t).DeleteTopics(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, dr.Error())
	deleted := time.Now()
	before := completeLines(out)
	require.Lessf(t, before, partitions*perPart/3, "the run read too fast for this test (%d records before the delete)", before)

	res, exited := waitExit(rc, stopWithin)
	took := time.Since(deleted)
	require.Truef(t, exited, "the stop_at: %s run did not end within %s of deleting %s with %d of %d records written (killed after %s)",
		stopAt, stopWithin, topic, before, partitions*perPart, took.Round(time.Millisecond))
	require.NotEqualf(t, 0, res.ExitCode, "deleting %s with unread records must fail the stop_at: %s run", topic, stopAt)

	recs := readStopLines(t, out)
	requireNoDuplicates(t, recs)
	spans := lostSpans(res.Stdout+res.Stderr, topic)
	var found *lostSpan
	for _, s := range spans {
		if end, ok := ends[s.Partition]; ok && s.To == end && s.From < s.To {
			found = &s
			break
		}
	}
	require.NotNilf(t, found, "no log line names a partition of %s with its unread span [from, end) (ends %v); spans found: %v",
		topic, ends, spans)
	require.Zerof(t, writtenIn(recs, topic, found.Partition, found.From, found.To),
		"records of %s/%d in the span [%d, %d) reported unread were written", topic, found.Partition, found.From, found.To)
	t.Logf("exit %d %s after the delete; %d records written (%d before the delete); %s/%d unread span [%d, %d)",
		res.ExitCode, took.Round(time.Millisecond), len(recs), before, topic, found.Partition, found.From, found.To)
}

// TestLostSpans checks the log parsing the tests above rely on, on the lines the input writes
// today: a range "[start,end)" is not a span, a span belongs to the nearest mention before it.
func TestLostSpans(t *testing.T) {
	t.Parallel()
	const topic = "kbr-x-1"
	cases := []struct {
		name string
		log  string
		want []lostSpan
	}{
		{
			name: "data loss",
			log:  `level=error msg="Input stopped: read kbr-x-1/0[300,400): kbr-x-1/0: offsets [315, 2000) no longer exist (log start is now 2000): data was deleted before it was read"`,
			want: []lostSpan{{Partition: 0, From: 315, To: 2000}},
		},
		{
			name: "retry warning has no span",
			log:  `level=warning msg="Reading kbr-x-1/1[400,500) stopped at offset 420, retrying in 10s: metadata for kbr-x-1/1: unknown topic or partition"`,
		},
		{
			name: "span belongs to the nearest mention",
			log:  "kbr-x-1/0: unknown topic; kbr-x-1/12: offsets [5, 900) were not read\nkbr-x-10/3: offsets [1, 2)",
			want: []lostSpan{{Partition: 12, From: 5, To: 900}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := lostSpans(c.log, topic)
			for i := range got {
				got[i].Line = ""
			}
			require.Equalf(t, c.want, got, "lostSpans(%q)", c.log)
		})
	}
}
