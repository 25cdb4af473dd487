package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

// The tests in this file belong to the issue "nothing lost under faults": an output that rejects
// whole ranges must never let the committed offsets pass them, and a slow output must hold the
// input's memory to its in-flight bound (max_in_flight × max_range_records records, their
// values plus a per-record overhead), not to the backlog.

// ---------------------------------------------------------------------------------------------
// rejected ranges

const (
	rejectPartitions  = 3
	rejectPerPart     = 4000
	rejectRangeSize   = 500
	rejectMaxInFlight = 6
	rejectEvery       = 3 // ranges whose index (start / rejectRangeSize) is a multiple are rejected once
)

// rejectLine is one line written by the reject test's pipeline.
type rejectLine struct {
	P  flexInt `json:"p"`
	O  flexInt `json:"o"`
	RS flexInt `json:"rs"`
	RE flexInt `json:"re"`
	BI flexInt `json:"bi"`
	V  string  `json:"v"`
}

// readRejectLines parses the complete lines of a JSON lines file that may still be written to:
// a last line without its newline is not a delivery yet and is left out. A missing file holds
// nothing.
func readRejectLines(t *testing.T, path string) []rejectLine {
	t.Helper()
	return readCompleteLines(t, path, func(l rejectLine) bool { return l.P.Valid && l.O.Valid && l.RS.Valid },
		"lacks partition, offset or range start")
}

// lineTail follows a JSON lines file that is being appended to: each poll parses only the
// complete lines added since the previous poll, so polling stays cheap as the file grows.
type lineTail struct {
	path    string
	off     int64     // bytes parsed so far (always at a line boundary)
	written offsetSet // how often each (partition, offset) was written so far
}

// poll parses the complete lines appended since the last poll and returns the counts so far.
func (lt *lineTail) poll(t *testing.T) offsetSet {
	t.Helper()
	if lt.written == nil {
		lt.written = offsetSet{}
	}
	f, err := os.Open(lt.path)
	if errors.Is(err, os.ErrNotExist) {
		return lt.written
	}
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Seek(lt.off, io.SeekStart)
	require.NoError(t, err)
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	lt.off += int64(len(b))
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l rejectLine
		require.NoErrorf(t, json.Unmarshal(line, &l), "%s: %s", lt.path, line)
		p := int32(l.P.V)
		if lt.written[p] == nil {
			lt.written[p] = map[int64]int{}
		}
		lt.written[p][l.O.V]++
	}
	return lt.written
}

// rejectRecords converts lines for requireExactlyOnce and countOffsets.
func rejectRecords(lines []rejectLine) []outRecord {
	out := make([]outRecord, len(lines))
	for i, l := range lines {
		out[i] = outRecord{P: l.P, O: l.O}
	}
	return out
}

// withRejectFirstDelivery makes the pipeline reject the first delivery of every batch of every
// third range (range index start/500 a multiple of 3) and accept its redelivery:
//
//   - a memory cache `seen` remembers every (partition, offset) delivered; the cache processor's
//     `add` fails when the key exists, so it succeeds exactly on a record's first delivery;
//   - inside `try`, a record's first delivery sets meta reject = "yes" if its range is one of
//     every third; `catch` turns the failed add of a redelivery into reject = "no";
//   - the switch output writes reject = "yes" batches to rejectsPath (continue) and then to a
//     `reject` output, whose error nacks the whole batch; everything else goes to outPath.
//
// A batch holds the records of one range only, so a batch is rejected or accepted whole.
func withRejectFirstDelivery(outPath, rejectsPath string) runOption {
	return func(conf map[string]any) {
		line := `root = {
  "p": @kafka_partition,
  "o": @kafka_offset,
  "rs": @kafka_range_start,
  "re": @kafka_range_end,
  "bi": batch_index(),
  "v": content().string()
}`
		conf["pipeline"] = map[string]any{
			"threads": 2,
			"processors": []any{
				// 80-200ms per batch, so the run spans several commit periods and batches
				// finish out of order.
				map[string]any{"sleep": map[string]any{
					"duration": `${! if batch_index() == 0 { "%vms".format(80 + random_int(max: 120)) } else { "0s" } }`,
				}},
				map[string]any{"try": []any{
					map[string]any{"cache": map[string]any{
						"resource": "seen",
						"operator": "add",
						"key":      `${! @kafka_partition }-${! @kafka_offset }`,
						"value":    "1",
					}},
					map[string]any{"mapping": fmt.Sprintf(
						`meta reject = if (@kafka_range_start / %d).floor() %% %d == 0 { "yes" } else { "no" }`,
						rejectRangeSize, rejectEvery)},
				}},
				map[string]any{"catch": []any{
					map[string]any{"mapping": `meta reject = "no"`},
				}},
				map[string]any{"mapping": line},
			},
		}
		conf["cache_resources"] = []any{
			map[string]any{"label": "seen", "memory": map[string]any{"default_ttl": "10m"}},
		}
		conf["output"] = map[string]any{"switch": map[string]any{
			"retry_until_success": false,
			"cases": []any{
				map[string]any{
					"check":    `@reject == "yes"`,
					"continue": true,
					"output":   map[string]any{"file": map[string]any{"path": rejectsPath, "codec": "lines"}},
				},
				map[string]any{
					"check":  `@reject == "yes"`,
					"output": map[string]any{"reject": `rejected range ${! @kafka_partition }/${! @kafka_range_start }`},
				},
				map[string]any{
					"output": map[string]any{"file": map[string]any{"path": outPath, "codec": "lines"}},
				},
			},
		}}
	}
}

// TestRejectedRangesAreRetriedAndNeverCommittedPast reads 12,000 records over 3 partitions with
// ranges of 500, 6 in flight and commits every 100ms, through an output that rejects the first
// delivery of every third range (see withRejectFirstDelivery). While it runs the group's
// committed offsets are polled every 50ms: each committed offset C of a partition must have
// every produced offset below C of that partition already in the output file (fetched before
// the file is read; the file output writes before it acknowledges), so a commit never passes a
// rejected range. At the end the run exits 0, every record was written exactly once with its
// produced value, every record of a rejected range was rejected exactly once and then written,
// and the group committed the end offsets.
func TestRejectedRangesAreRetriedAndNeverCommittedPast(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, rejectPartitions)
	group, adm := newGroup(t)
	prod := produceSpread(t, topic, []int32{0, 1, 2}, rejectPerPart, "rej")
	require.Equal(t, rejectPartitions*rejectPerPart, prod.count())
	ends := endOffsets(t, topic)
	want := offsetsOf(prod)

	in := baseInput(topic)
	in["consumer_group"] = group
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["commit_period"] = "100ms"
	in["max_range_records"] = rejectRangeSize
	in["max_in_flight"] = rejectMaxInFlight
	in["range_metadata"] = true // the pipeline rejects ranges by kafka_range_start
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	rejects := filepath.Join(dir, "rejects.jsonl")
	cfg := writeRunConfig(t, dir, in, out, withRejectFirstDelivery(out, rejects))

	lint := runConnect(t, 30*time.Second, nil, "lint", cfg)
	require.Equalf(t, 0, lint.ExitCode, "connect lint %s\n%s", cfg, lint)

	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	tail := &lineTail{path: out}
	var (
		mid  int // polls that saw a commit strictly inside a partition
		held int // polls that saw a commit stopped at a rejected range while later ranges were written
	)
	exited, violation, polls, lastErr := pollCommitted(rc, adm, group, topic, 50*time.Second, func(committed map[int32]int64) (violation string) {
		written := tail.poll(t) // after the fetch: what a commit covers was written before it
		sawMid, sawHeld := false, false
		for p, c := range committed {
			if c > 0 && c < ends[p] {
				sawMid = true
				if (c/rejectRangeSize)%rejectEvery == 0 && written[p][c] == 0 && written[p][c+rejectRangeSize] > 0 {
					sawHeld = true
				}
			}
			for _, o := range want[p] {
				if o >= c {
					break
				}
				if written[p][o] == 0 {
					violation = fmt.Sprintf("partition %d committed %d but offset %d was not written (range starting at %d; committed %v)",
						p, c, o, o/rejectRangeSize*rejectRangeSize, committed)
					break
				}
			}
		}
		if sawMid {
			mid++
		}
		if sawHeld {
			held++
		}
		return violation
	})
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Emptyf(t, violation, "committed past a rejected (not yet written) range\n%s", res)
	require.Truef(t, exited, "the bounded run did not end within 50s\n%s", res)
	requireExitZero(t, res)
	if lastErr != nil {
		t.Logf("some polls of the committed offsets failed, the last with: %v", lastErr)
	}

	// Every record written exactly once, with the value that was produced.
	lines := readRejectLines(t, out)
	requireExactlyOnce(t, want, rejectRecords(lines))
	for _, l := range lines {
		p, o := int32(l.P.V), l.O.V
		require.Equalf(t, string(prod[p][o].Value), l.V, "value of %d/%d", p, o)
		require.Truef(t, l.RS.V <= o && o < l.RE.V, "%d/%d arrived with range [%d, %d)", p, o, l.RS.V, l.RE.V)
	}
	requireCommitted(t, adm, group, topic, ends)

	// The rejected deliveries: exactly the records of every third range, each once.
	rejected := readRejectLines(t, rejects)
	wantRejected := map[int32][]int64{}
	rejectedRanges := 0
	for p, offs := range want {
		for _, o := range offs {
			if (o/rejectRangeSize)%rejectEvery == 0 {
				wantRejected[p] = append(wantRejected[p], o)
				if o%rejectRangeSize == 0 {
					rejectedRanges++
				}
			}
		}
	}
	require.NotEmpty(t, rejected, "no batch was rejected; the test proves nothing")
	requireExactlyOnce(t, wantRejected, rejectRecords(rejected))
	rejectedBatches := 0
	for _, l := range rejected {
		if l.BI.V == 0 {
			rejectedBatches++
		}
	}
	nackWarnings := strings.Count(res.Stdout+res.Stderr, "rejected range")
	t.Logf("rejected: %d records in %d batches of %d ranges, all written after their replay; %d nack warnings logged (rate limited)",
		len(rejected), rejectedBatches, rejectedRanges, nackWarnings)
	t.Logf("commits: %d polls, %d saw a commit mid-partition, %d saw a commit held at a rejected range while a later range was written; run took %s",
		polls, mid, held, res.Duration.Round(time.Millisecond))
	require.NotZero(t, mid, "no commit was observed mid-stream; the test proves nothing")
}

// ---------------------------------------------------------------------------------------------
// bounded memory under a slow output

const (
	slowPartitions  = 4
	slowRecords     = 60_000
	slowValueSize   = 1024
	slowSample      = 8 * time.Second
	boundedInFlight = 2
	boundedRange    = 1000
)

// perRecordOverhead is the memory a record in flight costs beyond its value, as stated in
// max_in_flight's description: franz-go's decoded record (160 B), the Benthos message with its
// metadata map (about 500 B with the default seven keys), batch slices and fetch buffers.
const perRecordOverhead = 1 << 10

// memoryBound is the documented bound on the peak RSS of a run (max_in_flight's description):
// 1.5 × max_in_flight ranges of max_range_records records of recordSize bytes plus
// perRecordOverhead each, plus 100 MiB for the process itself.
func memoryBound(inFlight, rangeRecords, recordSize int) int64 {
	return int64(inFlight)*int64(rangeRecords)*int64(recordSize+perRecordOverhead)*3/2 + 100<<20
}

// produceSized produces slowRecords records of slowValueSize bytes, round robin over
// slowPartitions, with the producer's default (snappy) compression. Each value starts with its
// index; the rest is random bytes (incompressible) or one repeated letter (compressible).
func produceSized(t *testing.T, topic string, compressible bool) produced {
	t.Helper()
	rnd := rand.NewChaCha8([32]byte{'k', 'b', 'r'})
	records := make([]*kgo.Record, slowRecords)
	for i := range records {
		v := fmt.Appendf(make([]byte, 0, slowValueSize), "%08d-", i)
		fill := make([]byte, slowValueSize-len(v))
		if compressible {
			for j := range fill {
				fill[j] = 'm'
			}
		} else {
			_, _ = rnd.Read(fill)
		}
		records[i] = &kgo.Record{Topic: topic, Partition: int32(i % slowPartitions), Value: append(v, fill...)}
	}
	return produceAll(t, producer(t), records)
}

// procMemory reads VmHWM and VmRSS (bytes) from /proc/<pid>/status.
func procMemory(pid int) (hwm, rss int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		fields := strings.Fields(v) // "12345 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: unexpected line %q", pid, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, k, err)
		}
		if k == "VmHWM" {
			hwm = kb << 10
		} else {
			rss = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if hwm == 0 || rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmHWM/VmRSS", pid)
	}
	return hwm, rss, nil
}

// slowRun is one configuration of TestSlowOutputHoldsBoundedMemory.
type slowRun struct {
	name         string
	inFlight     int  // max_in_flight
	rangeRecords int  // max_range_records
	buffer       bool // a Benthos memory buffer between the input and the pipeline
}

// memoryRun is what one slow run measured.
type memoryRun struct {
	peak      int64 // largest VmHWM or VmRSS sampled, bytes
	samples   int
	delivered int // complete output lines after the process exited
}

// withSlowOutput replaces the pipeline by one thread that sleeps 1ms per record of a batch
// (before its first message) and writes a short line per record; with buffer, a memory buffer
// (Benthos' default limit, 500 MB) sits between the input and the pipeline and acknowledges
// every batch as soon as it holds it.
func withSlowOutput(buffer bool) runOption {
	return func(conf map[string]any) {
		withLeanPipeline(1, sleepMillisPerRecord)(conf)
		if buffer {
			conf["buffer"] = map[string]any{"memory": map[string]any{}}
		}
	}
}

// runSlow runs connect with stop_at: end over topic through the slow output, samples its memory
// every 100ms for slowSample and stops it: with SIGTERM (exit 3, ExitStoppedBeforeEnd, and a
// summary that says how much was left; nothing written twice), or with SIGKILL when a memory buffer holds the backlog (on SIGTERM Benthos would write
// out the whole buffer first, at 1,000 records a second). The run must still have a backlog when
// stopped.
func runSlow(t *testing.T, topic string, r slowRun) memoryRun {
	t.Helper()
	in := baseInput(topic)
	in["start_from"] = "earliest"
	in["stop_at"] = "end"
	in["max_in_flight"] = r.inFlight
	in["max_range_records"] = r.rangeRecords
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, out, withSlowOutput(r.buffer))
	rc := startConnect(t, 2*time.Minute, nil, "run", cfg)
	pid := rc.cmd.Process.Pid

	var (
		m        memoryRun
		lastErr  error
		finished bool
	)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	stopAt := time.Now().Add(slowSample)
	for !finished && time.Now().Before(stopAt) {
		if hwm, rss, err := procMemory(pid); err != nil {
			lastErr = err
		} else {
			m.samples++
			m.peak = max(m.peak, hwm, rss)
		}
		select {
		case <-rc.done:
			finished = true
		case <-tick.C:
		}
	}
	require.Falsef(t, finished, "%s: the run ended within %s: the output was not slow enough to leave a backlog", r.name, slowSample)
	require.GreaterOrEqualf(t, m.samples, 40, "%s: too few memory samples (last error: %v)", r.name, lastErr)
	if r.buffer {
		res := rc.stop(syscall.SIGKILL, 10*time.Second)
		require.Falsef(t, res.TimedOut, "%s: connect did not die on SIGKILL\n%s", r.name, res)
		m.delivered = completeLines(out)
		return m
	}
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Falsef(t, res.TimedOut, "%s: connect did not exit within 30s of SIGTERM\n%s", r.name, res)
	// A bounded run stopped before its end says so, in its exit code and its summary.
	require.Equalf(t, plugin.ExitStoppedBeforeEnd, res.ExitCode, "%s: exit code after SIGTERM before the end\n%s", r.name, res)
	require.Regexpf(t, `Closed: \d+ records acknowledged of \d+ handed out .*; stopped before the end: [1-9]\d* of \d+ offsets not acknowledged`, res.Stdout+res.Stderr,
		"%s: the summary of a bounded run stopped before its end", r.name)
	recs := readOutput(t, out)
	m.delivered = len(recs)
	for p, offs := range countOffsets(recs) {
		for o, n := range offs {
			require.Equalf(t, 1, n, "%s: %d/%d written %d times", r.name, p, o, n)
		}
	}
	require.NotZerof(t, m.delivered, "%s: nothing was delivered in %s", r.name, slowSample)
	require.Lessf(t, m.delivered, slowRecords/2, "%s: most of the backlog was delivered; the output was not slow", r.name)
	return m
}

// TestSlowOutputHoldsBoundedMemory produces 60,000 records of 1 KiB over 4 partitions (60 MB),
// reads them with stop_at: end through an output that takes 1ms per record, samples the
// process's VmHWM/VmRSS every 100ms for 8s (about 8,000 records delivered, 52 MB of backlog
// left), and stops it. With max_in_flight 2 and max_range_records 1000 the peak must stay within
// memoryBound: 1.5 × 2 × 1000 × (1 KiB + 1 KiB overhead) + 100 MiB: memory follows the in-flight bound, not
// the backlog. It is checked for two payloads, each produced with snappy compression: random
// bytes, and one repeated letter, where one fetch of fetch_max_partition_bytes compressed bytes
// decompresses to many ranges of records. For contrast (logged only) each payload also runs
// with max_in_flight 16 and max_range_records 10000. As a control that the measurement can fail,
// the bounded settings run once more behind a Benthos memory buffer, which acknowledges at once
// and so lets the input pull the whole backlog into memory: its peak must exceed the bound.
func TestSlowOutputHoldsBoundedMemory(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	bound := memoryBound(boundedInFlight, boundedRange, slowValueSize)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }

	for _, payload := range []struct {
		name         string
		compressible bool
		control      bool
	}{
		{"incompressible", false, true},
		{"compressible", true, false},
	} {
		t.Run(payload.name, func(t *testing.T) {
			t.Parallel()
			topic := createTopic(t, slowPartitions)
			prod := produceSized(t, topic, payload.compressible)
			require.Equal(t, slowRecords, prod.count())

			runs := []slowRun{
				{"bounded", boundedInFlight, boundedRange, false},
				{"wide", 16, 10_000, false},
			}
			if payload.control {
				runs = append(runs, slowRun{"prefetch_control", boundedInFlight, boundedRange, true})
			}
			var (
				mu      sync.Mutex // guards results
				results = map[string]memoryRun{}
			)
			t.Run("runs", func(t *testing.T) {
				for _, r := range runs {
					t.Run(r.name, func(t *testing.T) {
						t.Parallel()
						m := runSlow(t, topic, r)
						t.Logf("slow output: peak RSS %.1f MiB, bound %.1f MiB, records delivered %d (%s payload, %s: max_in_flight %d, max_range_records %d, memory buffer %v; %d samples)",
							mib(m.peak), mib(memoryBound(r.inFlight, r.rangeRecords, slowValueSize)), m.delivered,
							payload.name, r.name, r.inFlight, r.rangeRecords, r.buffer, m.samples)
						mu.Lock()
						defer mu.Unlock()
						results[r.name] = m
					})
				}
			})
			if t.Failed() {
				return
			}
			b := results["bounded"]
			summary := fmt.Sprintf("%s payload: bounded %.1f MiB, wide %.1f MiB", payload.name, mib(b.peak), mib(results["wide"].peak))
			if payload.control {
				summary += fmt.Sprintf(", prefetch control %.1f MiB", mib(results["prefetch_control"].peak))
			}
			t.Logf("slow output summary: %s; bound %.1f MiB", summary, mib(bound))
			require.LessOrEqualf(t, b.peak, bound,
				"%s payload: peak RSS %.1f MiB with max_in_flight %d and max_range_records %d exceeds 1.5 × %d × %d × (%d B + %d B) + 100 MiB = %.1f MiB: memory follows the backlog, not the in-flight bound",
				payload.name, mib(b.peak), boundedInFlight, boundedRange, boundedInFlight, boundedRange, slowValueSize, perRecordOverhead, mib(bound))
			if payload.control {
				c := results["prefetch_control"]
				require.Greaterf(t, c.peak, bound,
					"control: with the whole backlog pulled into a memory buffer the peak (%.1f MiB) stayed within the bound (%.1f MiB); this measurement cannot tell a bounded input from one that prefetches",
					mib(c.peak), mib(bound))
			}
		})
	}
}
