package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The test in this file checks align_ranges end to end (issue 18, part 1): a bounded read through
// config/examples/exactly_once_files.yaml, SIGKILLed mid-run and restarted until it ends, writes
// the same files with the same bytes as an uninterrupted run, and no record in two files.

const (
	eoPartitions   = 4
	eoPerPartition = 12_500 // 12 whole blocks of 1000 and a short last range of 500
	eoMaxRange     = 1000
	eoMaxKills     = 12
)

// exactlyOnceConfig writes the example with what the test needs changed: blocks of 1000
// records, commits every 300ms (so each killed run makes progress), a 150ms sleep per batch (before
// its first message) on two pipeline threads (so a run takes seconds and is killed mid-way), no HTTP server. Each
// change must apply exactly once, so the test follows the example as it is.
func exactlyOnceConfig(t *testing.T, dir string) string {
	t.Helper()
	example := filepath.Join(repoRoot, "config", "examples", "exactly_once_files.yaml")
	b, err := os.ReadFile(example)
	require.NoError(t, err)
	s := string(b)
	for _, c := range [][2]string{
		{"    max_range_records: 10000", fmt.Sprintf("    max_range_records: %d", eoMaxRange)},
		{"    align_ranges: true\n", "    align_ranges: true\n    commit_period: 1s\n"},
		// More slots than the run's 52 ranges: no commit comes early because every slot waits
		// for one, so a kill finds files of ranges not committed yet.
		{"    max_in_flight: 8\n", "    max_in_flight: 64\n"},
		{"pipeline:\n  processors:\n", "pipeline:\n  threads: 2\n  processors:\n    - sleep:\n        duration: '${! if batch_index() == 0 { \"150ms\" } else { \"0s\" } }'\n"},
	} {
		require.Equalf(t, 1, strings.Count(s, c[0]), "%s: expected %q once", example, c[0])
		s = strings.Replace(s, c[0], c[1], 1)
	}
	s += "\nhttp:\n  enabled: false\n"
	path := filepath.Join(dir, "exactly_once_files.yaml")
	require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	return path
}

// readTree returns every file below dir by its path relative to dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		out[rel], err = os.ReadFile(path)
		return err
	}))
	return out
}

// fileStat is the size and modification time of an output file.
type fileStat struct {
	size int64
	mod  time.Time
}

// stats returns the size and modification time of every file below dir, by relative path;
// files that vanish while it looks are left out.
func stats(dir string) map[string]fileStat {
	out := map[string]fileStat{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			rel, _ := filepath.Rel(dir, path)
			out[rel] = fileStat{info.Size(), info.ModTime()}
		}
		return nil
	})
	return out
}

// rewrittenSince counts the files of before that were written again since (a later
// modification time, or a different size).
func rewrittenSince(before, now map[string]fileStat) int {
	n := 0
	for rel, b := range before {
		if s, ok := now[rel]; ok && (s.size != b.size || !s.mod.Equal(b.mod)) {
			n++
		}
	}
	return n
}

// eoFile is what the name of an output file says: partition and range start.
func eoFile(t *testing.T, topic, rel string) (partition int32, start int64) {
	t.Helper()
	parts := strings.Split(filepath.ToSlash(rel), "/")
	require.Lenf(t, parts, 3, "unexpected output file %s", rel)
	require.Equalf(t, topic, parts[0], "output file %s", rel)
	p, err := strconv.Atoi(parts[1])
	require.NoErrorf(t, err, "output file %s", rel)
	s, err := strconv.ParseInt(strings.TrimSuffix(parts[2], ".jsonl"), 10, 64)
	require.NoErrorf(t, err, "output file %s", rel)
	return int32(p), s
}

// TestAlignedRangesKillAndRestartWriteTheSameFiles produces 50,000 records over 4 partitions and
// runs config/examples/exactly_once_files.yaml (align_ranges, one file per range written whole by
// the file output's all-bytes codec, which truncates; blocks of 1000 records) twice:
//
//   - once uninterrupted into one directory;
//   - once into another, SIGKILLed at a random moment within 1.5 s of each run's first write (at
//     once when a file is seen half written) and
//     restarted with the same group until it ends on its own. After each kill, the newest file of
//     a range the group has not committed is cut to half its length, as a write torn by a crash
//     leaves it (SIGKILL seldom lands inside a write: each file is one write call).
//
// Both directories must hold the same files with byte-identical contents, each file one whole
// range on a block, and every record in exactly one file.
func TestAlignedRangesKillAndRestartWriteTheSameFiles(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, eoPartitions)
	adm := newAdmin(t)
	pad := strings.Repeat("x", 400)
	var records []*kgo.Record
	for i := range eoPartitions * eoPerPartition {
		records = append(records, &kgo.Record{
			Topic:     topic,
			Partition: int32(i % eoPartitions),
			Key:       []byte(fmt.Sprintf("k-%d", i)),
			Value:     []byte(fmt.Sprintf(`{"id":%d,"marker":"kbrmark-%d-end","pad":%q}`, i, i, pad)),
		})
	}
	prod := produceAll(t, producer(t), records)
	require.Equal(t, len(records), prod.count())
	dir := t.TempDir()
	cfg := exactlyOnceConfig(t, dir)
	pinned := fmt.Sprintf("%s:0-%d", topic, eoPartitions-1) // no group membership: a restart starts at once
	env := func(out, group string) []string {
		return []string{"KAFKA_BROKERS=" + strings.Join(brokers(), ","), "KAFKA_TOPIC=" + pinned, "OUT_DIR=" + out, "KAFKA_GROUP=" + group}
	}

	// The uninterrupted run.
	refDir, refGroup := filepath.Join(dir, "reference"), uniqueName(t, "group-ref")
	deleteGroupOnCleanup(t, adm, refGroup)
	requireExitZero(t, runConnect(t, 2*time.Minute, env(refDir, refGroup), "run", cfg))
	ref := readTree(t, refDir)
	require.Equal(t, eoPartitions*((eoPerPartition+eoMaxRange-1)/eoMaxRange), len(ref), "files of the uninterrupted run")

	// The killed and restarted run.
	crashDir := filepath.Join(dir, "killed")
	killUntilDone(t, cfg, env, ref, crashDir, topic, func(rel string) (int32, int64) { return eoFile(t, topic, rel) })

	// The same files, byte for byte.
	got := readTree(t, crashDir)
	var missing, extra, differ []string
	for rel, b := range ref {
		g, ok := got[rel]
		switch {
		case !ok:
			missing = append(missing, rel)
		case !bytes.Equal(g, b):
			differ = append(differ, fmt.Sprintf("%s (%d bytes, want %d)", rel, len(g), len(b)))
		}
	}
	for rel := range got {
		if _, ok := ref[rel]; !ok {
			extra = append(extra, rel)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	slices.Sort(differ)
	require.Emptyf(t, missing, "files of the uninterrupted run missing after the kills")
	require.Emptyf(t, extra, "files the uninterrupted run did not write")
	require.Emptyf(t, differ, "files whose bytes differ from the uninterrupted run's")

	// Each file one whole range on a block, every record in exactly one file.
	seen := map[int32]map[int64]string{}
	for rel, b := range got {
		p, start := eoFile(t, topic, rel)
		require.Zerof(t, start%eoMaxRange, "%s: range start %d not on a block of %d", rel, start, eoMaxRange)
		end := min(start+eoMaxRange, int64(eoPerPartition))
		lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
		require.Lenf(t, lines, int(end-start), "%s: records of the range [%d, %d)", rel, start, end)
		for i, line := range lines {
			var rec struct {
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
				Key       string `json:"key"`
				Value     string `json:"value"`
			}
			require.NoErrorf(t, json.Unmarshal(line, &rec), "%s line %d", rel, i+1)
			require.Equalf(t, p, rec.Partition, "%s line %d", rel, i+1)
			require.Equalf(t, start+int64(i), rec.Offset, "%s line %d", rel, i+1)
			want, ok := prod[p][rec.Offset]
			require.Truef(t, ok, "%s line %d: %d/%d was not produced", rel, i+1, p, rec.Offset)
			require.Equalf(t, string(want.Value), rec.Value, "%s line %d: value of %d/%d", rel, i+1, p, rec.Offset)
			if seen[p] == nil {
				seen[p] = map[int64]string{}
			}
			if other, dup := seen[p][rec.Offset]; dup {
				t.Fatalf("record %d/%d is in %s and in %s", p, rec.Offset, other, rel)
			}
			seen[p][rec.Offset] = rel
		}
	}
	n := 0
	for _, m := range seen {
		n += len(m)
	}
	require.Equal(t, prod.count(), n, "records in the files")
}

// killUntilDone runs cfg (env gives its environment for an output directory and a group) into
// crashDir, SIGKILLed at a random moment within 1.5 s of each run's first write, or up to 1.5 s
// later at the first moment a file it wrote belongs to a range the group has not committed (at
// once when a file is seen half written, by its size against ref, the uninterrupted run's files) and
// restarted with the same group until it ends on its own, at most eoMaxKills times. After each
// kill, the newest file of a range the group has not committed (fileRange says a file's
// partition and first offset) is cut to half its length, as a write torn by a crash leaves it
// (SIGKILL seldom lands inside a write: each file is one write call). It requires at least two
// kills and one torn file, so the run proves something.
func killUntilDone(t *testing.T, cfg string, env func(out, group string) []string, ref map[string][]byte, crashDir, topic string, fileRange func(rel string) (int32, int64)) {
	t.Helper()
	group := uniqueName(t, "group-killed")
	adm := newAdmin(t)
	require.NoError(t, os.MkdirAll(crashDir, 0o755))
	deleteGroupOnCleanup(t, adm, group)
	var (
		kills, caughtMidWrite, cut, rewritten int
		finished                              bool
		runs                                  []string
	)
	for run := 1; !finished; run++ {
		require.LessOrEqualf(t, run, eoMaxKills+1, "did not finish after %d runs", run-1)
		before := stats(crashDir)
		rc := startConnect(t, 2*time.Minute, env(crashDir, group), "run", cfg)
		if kills == eoMaxKills {
			res, exited := waitExit(rc, 90*time.Second)
			require.Truef(t, exited, "the last run did not end\n%s", res)
			requireExitZero(t, res)
			rewritten += rewrittenSince(before, stats(crashDir))
			runs = append(runs, "ended")
			finished = true
			break
		}
		// Kill at a random moment within 1.5 s of the run's first write (so every killed run
		// wrote, however slowly it started), or at once when a file this run changed differs in
		// size from the same file of the uninterrupted run: it is being written. Once the random
		// moment has passed, the kill waits (at most 1.5 s more) for a moment when a file this
		// run wrote belongs to a range the group has not committed: the input commits at once
		// when every slot waits for a commit, so such moments are short, and a kill that
		// misses every one of them tests nothing of a restart that writes a range again.
		var deadline, aimed time.Time
		giveUp := time.Now().Add(60 * time.Second)
		midWrite := ""
		exited, uncommittedSeen := false, false
		for !exited && midWrite == "" && !uncommittedSeen && (aimed.IsZero() || time.Now().Before(aimed)) {
			select {
			case <-rc.done:
				exited = true
				continue
			default:
			}
			var changed []string
			for rel, st := range stats(crashDir) {
				if b, ok := before[rel]; !ok || b != st {
					if deadline.IsZero() {
						deadline = time.Now().Add(rand.N(1500 * time.Millisecond))
						aimed = deadline.Add(1500 * time.Millisecond)
					}
					changed = append(changed, rel)
					if st.size != int64(len(ref[rel])) {
						midWrite = rel
						break
					}
				}
			}
			if midWrite == "" && !deadline.IsZero() && time.Now().After(deadline) {
				ctx, cancel := contextTimeout(2 * time.Second)
				committed, err := fetchCommitted(ctx, adm, group, topic)
				cancel()
				for _, rel := range changed {
					if p, start := fileRange(rel); err == nil && start >= committed[p] {
						uncommittedSeen = true
					}
				}
			}
			require.Falsef(t, deadline.IsZero() && time.Now().After(giveUp), "run %d wrote nothing within 60s", run)
			time.Sleep(200 * time.Microsecond)
		}
		if exited {
			res := rc.stop(syscall.SIGTERM, 10*time.Second)
			requireExitZero(t, res)
			rewritten += rewrittenSince(before, stats(crashDir))
			runs = append(runs, "ended")
			finished = true
			break
		}
		killErr := rc.cmd.Process.Kill()
		<-rc.done
		res := rc.stop(syscall.SIGKILL, 10*time.Second)
		if res.ExitCode == 0 {
			// It ended by itself between the last look and the kill (CI saw
			// "os: process already finished"): a finished run, as above.
			require.Truef(t, killErr == nil || errors.Is(killErr, os.ErrProcessDone), "kill of run %d: %v", run, killErr)
			rewritten += rewrittenSince(before, stats(crashDir))
			runs = append(runs, "ended")
			finished = true
			break
		}
		require.NoError(t, killErr)
		require.Equalf(t, -1, res.ExitCode, "run %d must have been killed, not have exited\n%s", run, res)
		kills++

		// What the kill left: files that differ from the uninterrupted run (torn by the kill),
		// and files written whole whose range the group has not committed (they are read and
		// written again by the next run).
		ctx, cancel := contextTimeout(30 * time.Second)
		committed, err := fetchCommitted(ctx, adm, group, topic)
		cancel()
		require.NoError(t, err)
		after := stats(crashDir)
		rewritten += rewrittenSince(before, after)
		now := readTree(t, crashDir)
		torn, uncommitted := 0, []string{}
		for rel, b := range now {
			p, start := fileRange(rel)
			if was, ok := before[rel]; (!ok || was != after[rel]) && !bytes.Equal(b, ref[rel]) {
				torn++ // written by this run, and not whole
			}
			if start >= committed[p] {
				uncommitted = append(uncommitted, rel)
			}
		}
		if torn > 0 {
			caughtMidWrite++
		}
		if len(uncommitted) > 0 {
			// Tear the newest uncommitted file, as a crash inside its write would have.
			slices.SortFunc(uncommitted, func(a, b string) int {
				ia, _ := os.Stat(filepath.Join(crashDir, a))
				ib, _ := os.Stat(filepath.Join(crashDir, b))
				return ib.ModTime().Compare(ia.ModTime())
			})
			path := filepath.Join(crashDir, uncommitted[0])
			require.NoError(t, os.Truncate(path, int64(len(now[uncommitted[0]])/2)))
			cut++
		}
		runs = append(runs, fmt.Sprintf("killed (files %d, torn by the kill %d, uncommitted %d; committed %v; seen mid-write %q)",
			len(now), torn, len(uncommitted), committed, midWrite))
	}
	t.Logf("runs: %s", strings.Join(runs, "; "))
	t.Logf("%d kills, %d of them left a file torn by the kill, %d files torn by the test, %d files written again by a later run", kills, caughtMidWrite, cut, rewritten)
	require.GreaterOrEqualf(t, kills, 2, "the run was killed fewer than twice: the test proves little (runs: %v)", runs)
	require.Positivef(t, cut, "no kill left a file of an uncommitted range: the test proves little (runs: %v)", runs)

}
