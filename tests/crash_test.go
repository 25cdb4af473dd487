package tests

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// The tests in this file check the issue "nothing lost under faults": a consumer killed with
// SIGKILL, stopped with SIGTERM, or acknowledging ranges out of order must never commit past an
// offset that was not written, so a resumed run delivers every produced offset.

// crashMapping is the lean output line of the crash tests: partition, offset, the start of the
// range the record came from and its index in its batch (0 starts a batch).
const crashMapping = `root = {
  "p": @kafka_partition,
  "o": @kafka_offset,
  "rs": @kafka_range_start,
  "bi": batch_index()
}`

// slowPerRecord makes a batch take about 0.5ms per record (one sleep before its first message),
// so a 1000-record batch holds a pipeline thread for 500ms.
const slowPerRecord = `${! if batch_index() == 0 { "%vms".format(batch_size() / 2) } else { "0s" } }`

// withCrashPipeline replaces the pipeline by threads threads that run an optional sleep (a
// duration interpolation, "" for none) and then crashMapping.
func withCrashPipeline(threads int, sleep string) runOption {
	return withMappingPipeline(threads, sleep, crashMapping)
}

// withShutdownTimeout sets the config root's shutdown_timeout.
func withShutdownTimeout(d string) runOption {
	return func(conf map[string]any) { conf["shutdown_timeout"] = d }
}

// deliveredLine is one line written through crashMapping.
type deliveredLine struct {
	P  flexInt `json:"p"`
	O  flexInt `json:"o"`
	RS flexInt `json:"rs"`
	BI flexInt `json:"bi"`
}

// readDelivered parses the complete lines of an output file that may still be written to, or
// whose writer was killed mid-line: a last line without its newline is not a delivery and is
// left out. A missing file means nothing was delivered.
func readDelivered(t *testing.T, path string) []deliveredLine {
	t.Helper()
	return readCompleteLines(t, path, func(d deliveredLine) bool { return d.P.Valid && d.O.Valid }, "has no partition/offset")
}

// writtenOffsets returns the offsets per partition in the complete lines of an output file that
// is being written. It scans for the "p" and "o" fields instead of decoding JSON, so the poll loop
// of TestOutOfOrderAcksCommitOnlyContiguousFrontier stays fast under -race.
func writtenOffsets(t *testing.T, path string) map[int32]map[int64]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	out := map[int32]map[int64]bool{}
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return out // a last line without its newline is not written yet
		}
		line := b[:i]
		b = b[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		p, okP := intField(line, `"p":`)
		o, okO := intField(line, `"o":`)
		require.Truef(t, okP && okO, "%s: no partition/offset in %s", path, line)
		if out[int32(p)] == nil {
			out[int32(p)] = map[int64]bool{}
		}
		out[int32(p)][o] = true
	}
}

// intField parses the integer (possibly quoted) after key in a JSON line.
func intField(line []byte, key string) (int64, bool) {
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(line[i+len(key):], ` "`)
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// asRecords converts delivered lines for requireExactlyOnce.
func asRecords(lines ...[]deliveredLine) []outRecord {
	var out []outRecord
	for _, ls := range lines {
		for _, l := range ls {
			out = append(out, outRecord{P: l.P, O: l.O})
		}
	}
	return out
}

// multiBatchRanges counts the ranges (partition, range start) whose records arrived in more
// than one batch.
func multiBatchRanges(lines []deliveredLine) int {
	type rk struct {
		p  int32
		rs int64
	}
	starts := map[rk]int{}
	for _, l := range lines {
		if l.BI.Valid && l.BI.V == 0 {
			starts[rk{int32(l.P.V), l.RS.V}]++
		}
	}
	n := 0
	for _, c := range starts {
		if c > 1 {
			n++
		}
	}
	return n
}

// lineSample is the number of complete lines of an output file at a time.
type lineSample struct {
	at    time.Time
	lines int
}

// waitLines polls the output file every 20ms until it holds at least n complete lines and
// returns the samples taken; ok is false when the process exits or the timeout passes first.
func waitLines(rc *runningConnect, path string, n int, timeout time.Duration) (samples []lineSample, ok bool) {
	deadline := time.Now().Add(timeout)
	for {
		s := lineSample{at: time.Now(), lines: completeLines(path)}
		samples = append(samples, s)
		if s.lines >= n {
			return samples, true
		}
		if s.at.After(deadline) {
			return samples, false
		}
		select {
		case <-rc.done:
			return samples, completeLines(path) >= n
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// linesSince returns how many lines were written after the last sample taken at or before
// since (all of them when there is none).
func linesSince(samples []lineSample, since time.Time, now int) int {
	before := 0
	for _, s := range samples {
		if s.at.After(since) {
			break
		}
		before = s.lines
	}
	return now - before
}

// crashSetup is a topic with 40,000 records over 4 partitions, a fresh group, and the
// continuous input of the kill and SIGTERM tests.
type crashSetup struct {
	topic, group string
	adm          *kadm.Client
	prod         produced
	ends         map[int32]int64
	in           inputConfig
	dir          string
}

const (
	crashPartitions   = 4
	crashPerPartition = 10_000
	crashMaxRange     = 1000
	crashMaxInFlight  = 4
	crashThreads      = 4
	crashCommitPeriod = 200 * time.Millisecond
)

// crashVariants are the two shapes of data the kill and SIGTERM tests run on: producer batches
// large enough that every range is read by one fetch and emitted as one batch, and 4 KiB producer
// batches with 16 KiB fetches, so a range of 1000 records arrives in several batches.
var crashVariants = []struct {
	name  string
	small bool
}{
	{"one_batch_per_range", false},
	{"several_batches_per_range", true},
}

func newCrashSetup(t *testing.T, tag string, small bool) crashSetup {
	t.Helper()
	requireBroker(t)
	s := crashSetup{topic: createTopic(t, crashPartitions), group: uniqueName(t, "group"), adm: newAdmin(t), dir: t.TempDir()}
	deleteGroupOnCleanup(t, s.adm, s.group)
	if small {
		s.prod = produceSmallBatches(t, s.topic, crashPartitions, crashPerPartition, tag)
	} else {
		s.prod = produceSpread(t, s.topic, []int32{0, 1, 2, 3}, crashPerPartition, tag)
	}
	require.Equal(t, crashPartitions*crashPerPartition, s.prod.count())
	s.ends = endOffsets(t, s.topic)
	s.in = baseInput(s.topic)
	s.in["consumer_group"] = s.group
	s.in["start_from"] = "earliest"
	s.in["stop_at"] = "never"
	s.in["commit_period"] = crashCommitPeriod.String()
	s.in["max_range_records"] = crashMaxRange
	s.in["max_in_flight"] = crashMaxInFlight
	s.in["range_metadata"] = true // crashMapping writes kafka_range_start
	if small {
		s.in["fetch_max_partition_bytes"] = 16384
	}
	return s
}

// produceSmallBatches produces perPart records to each of the partitions in producer batches
// of at most 4 KiB (about 130 records), so a range spans several fetches and batches.
func produceSmallBatches(t *testing.T, topic string, partitions, perPart int, tag string) produced {
	t.Helper()
	var records []*kgo.Record
	for i := range perPart * partitions {
		records = append(records, &kgo.Record{
			Topic:     topic,
			Partition: int32(i % partitions),
			Key:       []byte(fmt.Sprintf("k-%d", i)),
			Value:     []byte(fmt.Sprintf("%s-%d", tag, i)),
		})
	}
	return produceAll(t, producer(t, kgo.ProducerBatchMaxBytes(4096)), records)
}

// startSlow starts the continuous run with the slow pipeline (about 8,000 records/s) writing
// to out and waits until the file holds 40% of the produced records. It returns the line
// counts sampled on the way.
func (s crashSetup) startSlow(t *testing.T, out string, opts ...runOption) (*runningConnect, []lineSample) {
	t.Helper()
	cfg := writeRunConfig(t, s.dir, s.in, out, append([]runOption{withCrashPipeline(crashThreads, slowPerRecord)}, opts...)...)
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	samples, ok := waitLines(rc, out, s.prod.count()*4/10, 60*time.Second)
	if !ok {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("the first run did not write 40%% of %d records within 60s (%d written)\n%s", s.prod.count(), completeLines(out), res)
	}
	return rc, samples
}

// committed returns the group's committed offsets now.
func (s crashSetup) committed(t *testing.T) map[int32]int64 {
	t.Helper()
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	c, err := fetchCommitted(ctx, s.adm, s.group, s.topic)
	require.NoError(t, err)
	return c
}

// ackedAbove returns the offsets the group's commit metadata says were
// acknowledged above each committed offset (the engine's "kbr-acked:"
// metadata): a resumed run does not read them again.
func (s crashSetup) ackedAbove(t *testing.T) map[int32]map[int64]bool {
	t.Helper()
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	offs, err := s.adm.FetchOffsets(ctx, s.group)
	require.NoError(t, err)
	out := map[int32]map[int64]bool{}
	offs.Each(func(o kadm.OffsetResponse) {
		m, ok := strings.CutPrefix(o.Metadata, "kbr-acked:")
		if o.Topic != s.topic || !ok {
			return
		}
		spans, err := ranges.DecodeAcked(o.Topic, o.Partition, o.At, m)
		require.NoError(t, err, "metadata of %s/%d", o.Topic, o.Partition)
		out[o.Partition] = map[int64]bool{}
		for _, r := range spans {
			for x := r.Start; x < r.End; x++ {
				out[o.Partition][x] = true
			}
		}
	})
	return out
}

// withoutAcked returns want without the offsets in acked.
func withoutAcked(want map[int32][]int64, acked map[int32]map[int64]bool) map[int32][]int64 {
	out := map[int32][]int64{}
	for p, offs := range want {
		for _, o := range offs {
			if !acked[p][o] {
				out[p] = append(out[p], o)
			}
		}
	}
	return out
}

// resume runs the same group again with stop_at: end and a fast pipeline, requires exit 0 and
// the end offsets committed, and returns what it wrote.
func (s crashSetup) resume(t *testing.T) []deliveredLine {
	t.Helper()
	in := maps.Clone(s.in)
	in["stop_at"] = "end"
	out := filepath.Join(s.dir, "resume.jsonl")
	cfg := writeRunConfig(t, s.dir, in, out, withCrashPipeline(crashThreads, ""))
	requireExitZero(t, runConnect(t, 2*time.Minute, nil, "run", cfg))
	requireCommitted(t, s.adm, s.group, s.topic, s.ends)
	return readDelivered(t, out)
}

// pastCommit returns the lines at or past the committed offset of their partition, and the
// distinct ranges (partition, range start) they came from.
func pastCommit(lines []deliveredLine, committed map[int32]int64, acked map[int32]map[int64]bool) (n int, ranges map[[2]int64]bool) {
	ranges = map[[2]int64]bool{}
	for _, l := range lines {
		if l.O.V >= committed[int32(l.P.V)] && !acked[int32(l.P.V)][l.O.V] {
			n++
			ranges[[2]int64{l.P.V, l.RS.V}] = true
		}
	}
	return n, ranges
}

func sumOffsets(m map[int32]int64) int64 {
	var n int64
	for _, o := range m {
		n += o
	}
	return n
}

// TestKillAndResumeDeliversEverything SIGKILLs a continuous consumer (commit_period 200ms,
// max_in_flight 4, max_range_records 1000, about 8,000 records/s through the output) once its
// output file holds about 40% of 40,000 records, then resumes the group with stop_at: end.
//
// Together the two runs must deliver every produced offset and nothing else; the resumed run
// must read exactly [offsets committed before the kill, end) once, so the duplicates are exactly
// the first run's records at or past those offsets. They are bounded by
// max_in_flight × max_range_records: with a consumer group a range holds its slot until a commit
// covers it, so no more than that lies past the committed offsets at any moment.
func TestKillAndResumeDeliversEverything(t *testing.T) {
	t.Parallel()
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := newCrashSetup(t, "kill", v.small)
			out1 := filepath.Join(s.dir, "killed.jsonl")
			rc, samples := s.startSlow(t, out1)

			require.NoError(t, rc.cmd.Process.Kill())
			killed := time.Now()
			<-rc.done
			res := rc.stop(syscall.SIGKILL, 10*time.Second)
			require.Equalf(t, -1, res.ExitCode, "the first run must have been killed, not have exited\n%s", res)
			committed, acked := s.committed(t), s.ackedAbove(t)
			first := readDelivered(t, out1)
			second := s.resume(t)

			// The resumed run reads exactly [committed at the kill, end) once,
			// but for the offsets acknowledged above the commit (its metadata).
			requireExactlyOnce(t, withoutAcked(offsetRange(committed, s.ends), acked), asRecords(second))

			// Together: every produced offset at least once, nothing else.
			all := asRecords(first, second)
			counts := countOffsets(all)
			var missing []string
			for p, offs := range offsetsOf(s.prod) {
				var miss []int64
				for _, o := range offs {
					if counts[p][o] == 0 {
						miss = append(miss, o)
					}
				}
				if len(miss) > 0 {
					missing = append(missing, fmt.Sprintf("partition %d: %d missing offsets %s", p, len(miss), compressOffsets(miss, 20)))
				}
			}
			require.Emptyf(t, missing, "offsets lost across the kill (committed at the kill: %v)", committed)
			distinct := 0
			for p, m := range counts {
				for o := range m {
					_, ok := s.prod[p][o]
					require.Truef(t, ok, "%d/%d was delivered but not produced", p, o)
				}
				distinct += len(m)
			}
			dups := len(all) - distinct
			past, pastRanges := pastCommit(first, committed, acked)
			require.Equal(t, past, dups, "the duplicates must be exactly the first run's records at or past the committed offsets, but for those acknowledged above them")

			documented := crashMaxInFlight * crashMaxRange
			recent := linesSince(samples, killed.Add(-crashCommitPeriod-500*time.Millisecond), len(first))
			t.Logf("kill test: produced %d, delivered %d, duplicated %d, bound %d", s.prod.count(), len(all), dups, documented)
			t.Logf("kill test detail (%s): killed at %d lines (%.0f%%); committed at the kill %v (%d offsets); duplicates from %d ranges; %d lines written in the %s before the kill; within max_in_flight × max_range_records: %v; multi-batch ranges in the first run: %d",
				v.name, len(first), 100*float64(len(first))/float64(s.prod.count()), committed, sumOffsets(committed),
				len(pastRanges), recent, crashCommitPeriod+500*time.Millisecond, dups <= documented, multiBatchRanges(first))
			// With a consumer group a range keeps its max_in_flight slot until a
			// commit covers it, so at most max_in_flight ranges lie past the
			// committed offset when the process dies.
			require.LessOrEqualf(t, dups, documented,
				"duplicates beyond max_in_flight × max_range_records (%d; %d lines were written in the last commit period)", documented, recent)
		})
	}
}

// TestSigtermCommitsAndRestartRedeliversNothing stops a continuous consumer with SIGTERM once its
// output file holds about 40% of 40,000 records: it must exit 0 within shutdown_timeout (10s)
// after draining the pipeline and committing on close. Then a bounded run resumes the group.
// Nothing may be lost and nothing written twice across both runs, in both variants (one batch
// per range, several batches per range): the input emits each partition in offset order and
// commits acknowledged batches, not only whole ranges.
func TestSigtermCommitsAndRestartRedeliversNothing(t *testing.T) {
	t.Parallel()
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := newCrashSetup(t, "term", v.small)
			out1 := filepath.Join(s.dir, "terminated.jsonl")
			rc, _ := s.startSlow(t, out1, withShutdownTimeout("10s"))

			signalled := time.Now()
			res := rc.stop(syscall.SIGTERM, 30*time.Second)
			took := time.Since(signalled)
			require.Falsef(t, res.TimedOut, "connect did not exit within 30s of SIGTERM\n%s", res)
			require.Lessf(t, took, 10*time.Second, "exit took longer than shutdown_timeout\n%s", res)
			require.Equalf(t, 0, res.ExitCode, "exit code after SIGTERM\n%s", res)

			committed, acked := s.committed(t), s.ackedAbove(t)
			first := readDelivered(t, out1)
			past, pastRanges := pastCommit(first, committed, acked)
			t.Logf("sigterm (%s): exit 0 in %s; first run wrote %d of %d, committed %v; written past the commit %d in %d ranges; multi-batch ranges %d",
				v.name, took.Round(time.Millisecond), len(first), s.prod.count(), committed, past, len(pastRanges), multiBatchRanges(first))
			second := s.resume(t)
			// Each partition emits in offset order and progress is committed per
			// acknowledged batch, so what Benthos acknowledged before the stop is a
			// prefix of each partition and the final commit covers exactly it: the
			// restart writes everything else, and nothing twice, however many
			// batches a range arrived in.
			requireExactlyOnce(t, offsetsOf(s.prod), asRecords(first, second))
		})
	}
}

// TestOutOfOrderAcksCommitOnlyContiguousFrontier reads unordered (max_in_flight 8, ranges of 200;
// 4 KiB producer batches and 4 KiB fetches, so a range arrives in several batches) through 8
// pipeline threads with a random sleep per batch (0-20ms, one batch in ten 300ms), so batches and
// ranges are acknowledged out of order, and commits every 100ms. While it runs, the group's
// committed offsets are polled every 50ms; for each committed offset C of a partition every
// produced offset below C must already be in the output file, read after the offsets were fetched
// (the file output writes before it acknowledges): a commit never passes an unacknowledged
// offset. At the end the run exits 0, every record was written once and the group committed the
// end offsets.
func TestOutOfOrderAcksCommitOnlyContiguousFrontier(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 4
	topic := createTopic(t, partitions)
	group, adm := newGroup(t)
	prod := produceSmallBatches(t, topic, partitions, 10_000, "ooo")
	ends := endOffsets(t, topic)
	want := offsetsOf(prod)

	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["ordered"] = false
	in["max_in_flight"] = 8
	in["max_range_records"] = 200
	in["commit_period"] = "100ms"
	in["fetch_max_partition_bytes"] = 4096
	in["range_metadata"] = true // crashMapping writes kafka_range_start, checked below
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	// Most batches take 0-20ms, one in ten 300ms: the later ranges of its partition are
	// acknowledged while a slow one is still being processed, for several commit periods.
	jitter := `${! if batch_index() != 0 { "0s" } else if random_int(max: 9) == 0 { "300ms" } else { "%vms".format(random_int(max: 20)) } }`
	cfg := writeRunConfig(t, dir, in, out, withCrashPipeline(8, jitter))
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)

	mid := 0 // polls that saw a commit strictly inside a partition
	exited, violation, polls, lastErr := pollCommitted(rc, adm, group, topic, 90*time.Second, func(committed map[int32]int64) (violation string) {
		written := writtenOffsets(t, out)
		sawMid := false
		for p, c := range committed {
			if c > 0 && c < ends[p] {
				sawMid = true
			}
			for _, o := range want[p] {
				if o >= c {
					break
				}
				if !written[p][o] {
					violation = fmt.Sprintf("partition %d committed %d but offset %d was not written yet (committed %v)", p, c, o, committed)
					break
				}
			}
		}
		if sawMid {
			mid++
		}
		return violation
	})
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Emptyf(t, violation, "committed past an unacknowledged offset\n%s", res)
	require.Truef(t, exited, "the bounded run did not end within 90s\n%s", res)
	requireExitZero(t, res)
	if lastErr != nil {
		t.Logf("some polls of the committed offsets failed, the last with: %v", lastErr)
	}

	lines := readDelivered(t, out)
	requireExactlyOnce(t, want, asRecords(lines))
	requireCommitted(t, adm, group, topic, ends)

	// Out of order: a batch written after a batch of a later range of its partition.
	inversions := 0
	maxStart := map[int32]int64{}
	for _, l := range lines {
		p := int32(l.P.V)
		if l.BI.V != 0 {
			continue
		}
		if m, ok := maxStart[p]; ok && l.RS.V < m {
			inversions++
		}
		maxStart[p] = max(maxStart[p], l.RS.V)
	}
	t.Logf("out of order: %d polls, %d saw a commit inside a partition; %d batches written after a later range of their partition; %d multi-batch ranges; run took %s",
		polls, mid, inversions, multiBatchRanges(lines), res.Duration.Round(time.Millisecond))
	require.NotZero(t, inversions, "no range was written out of order; the test proves nothing")
	require.NotZero(t, mid, "no commit was observed mid-stream; the test proves nothing")
}
