package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The test in this file checks archive mode with align_ranges end to end (issue 54): a bounded
// read through config/examples/backfill_files.yaml, each range handed out as archives of its
// values (format lines) in pieces of at most archive.max_bytes, one file per piece, SIGKILLed
// mid-run and restarted until it ends, writes the same files with the same bytes as an
// uninterrupted run, and every record in exactly one file.

// archiveMaxBytes is the pieces' cap in the test: about 450 records of its 450-byte values, so
// a range of 1000 records is three files.
const archiveMaxBytes = 200 << 10

// backfillFilesConfig writes the example with what the test needs changed, as exactlyOnceConfig
// does: blocks of 1000 records, pieces of 200 KiB, a 150ms sleep per batch on two pipeline
// threads, no HTTP server, and commits every second with up to 64 ranges in flight. The run has
// 52 ranges, so no commit comes early because every slot waits for one (the example's 4 slots
// commit each set of ranges at once), and a kill finds files of ranges not committed yet.
func backfillFilesConfig(t *testing.T, dir string) string {
	t.Helper()
	example := filepath.Join(repoRoot, "config", "examples", "backfill_files.yaml")
	b, err := os.ReadFile(example)
	require.NoError(t, err)
	s := string(b)
	for _, c := range [][2]string{
		{"    max_range_records: 100000", fmt.Sprintf("    max_range_records: %d", eoMaxRange)},
		{"      max_bytes: 64MiB", fmt.Sprintf("      max_bytes: %d", archiveMaxBytes)},
		{"    align_ranges: true\n", "    align_ranges: true\n    commit_period: 1s\n"},
		{"    max_in_flight: 4 #", "    max_in_flight: 64 #"},
		{"pipeline:\n  processors:\n", "pipeline:\n  threads: 2\n  processors:\n    - sleep:\n        duration: '${! if batch_index() == 0 { \"150ms\" } else { \"0s\" } }'\n"},
	} {
		require.Equalf(t, 1, strings.Count(s, c[0]), "%s: expected %q once", example, c[0])
		s = strings.Replace(s, c[0], c[1], 1)
	}
	s += "\nhttp:\n  enabled: false\n"
	path := filepath.Join(dir, "backfill_files.yaml")
	require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	return path
}

// pieceFile is what the name of an output file of backfill_files.yaml says: partition and the
// first offset its piece covers.
func pieceFile(t *testing.T, topic, rel string) (partition int32, start int64) {
	t.Helper()
	parts := strings.Split(filepath.ToSlash(rel), "/")
	require.Lenf(t, parts, 3, "unexpected output file %s", rel)
	require.Equalf(t, topic, parts[0], "output file %s", rel)
	p, err := strconv.Atoi(parts[1])
	require.NoErrorf(t, err, "output file %s", rel)
	name := strings.TrimSuffix(parts[2], ".jsonl")
	require.Lenf(t, name, 20, "output file %s: the start zero-padded to 20 digits", rel)
	s, err := strconv.ParseInt(name, 10, 64)
	require.NoErrorf(t, err, "output file %s", rel)
	return int32(p), s
}

// TestArchiveAlignedKillAndRestartWriteTheSameFiles is TestAlignedRangesKillAndRestartWriteTheSameFiles
// in archive mode: 50,000 records over 4 partitions, read by config/examples/backfill_files.yaml
// (align_ranges, archive format lines, pieces of 200 KiB, one file per piece written whole by the
// file output's all-bytes codec) once uninterrupted and once SIGKILLed and restarted until it ends
// (killUntilDone). Both directories must hold the same files, byte for byte; each file holds the
// values of consecutive offsets from the offset its name gives, within one block of 1000, at most
// 200 KiB; and every record is in exactly one file.
func TestArchiveAlignedKillAndRestartWriteTheSameFiles(t *testing.T) {
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
	cfg := backfillFilesConfig(t, dir)
	pinned := fmt.Sprintf("%s:0-%d", topic, eoPartitions-1) // no group membership: a restart starts at once
	env := func(out, group string) []string {
		return []string{"KAFKA_BROKERS=" + strings.Join(brokers(), ","), "KAFKA_TOPIC=" + pinned, "OUT_DIR=" + out, "KAFKA_GROUP=" + group}
	}

	refDir, refGroup := filepath.Join(dir, "reference"), uniqueName(t, "group-ref")
	deleteGroupOnCleanup(t, adm, refGroup)
	requireExitZero(t, runConnect(t, 2*time.Minute, env(refDir, refGroup), "run", cfg))
	ref := readTree(t, refDir)
	ranges := eoPartitions * ((eoPerPartition + eoMaxRange - 1) / eoMaxRange)
	require.Greaterf(t, len(ref), 2*ranges, "files of the uninterrupted run: pieces of 200 KiB, about three a range of %d", ranges)

	crashDir := filepath.Join(dir, "killed")
	killUntilDone(t, cfg, env, ref, crashDir, topic, func(rel string) (int32, int64) { return pieceFile(t, topic, rel) })

	got := readTree(t, crashDir)
	var missing, extra, differ []string
	for rel, b := range ref {
		switch g, ok := got[rel]; {
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

	seen := map[int32]map[int64]string{}
	for rel, b := range got {
		p, start := pieceFile(t, topic, rel)
		require.LessOrEqualf(t, len(b), archiveMaxBytes, "%s: larger than archive.max_bytes", rel)
		values := bytes.Split(b, []byte("\n"))
		last := start + int64(len(values)) - 1
		require.Equalf(t, start/eoMaxRange, last/eoMaxRange, "%s: offsets %d to %d are not in one block of %d", rel, start, last, eoMaxRange)
		for i, v := range values {
			o := start + int64(i)
			want, ok := prod[p][o]
			require.Truef(t, ok, "%s value %d: %d/%d was not produced", rel, i+1, p, o)
			require.Equalf(t, string(want.Value), string(v), "%s value %d: value of %d/%d", rel, i+1, p, o)
			if seen[p] == nil {
				seen[p] = map[int64]string{}
			}
			if other, dup := seen[p][o]; dup {
				t.Fatalf("record %d/%d is in %s and in %s", p, o, other, rel)
			}
			seen[p][o] = rel
		}
	}
	n := 0
	for _, m := range seen {
		n += len(m)
	}
	require.Equal(t, prod.count(), n, "records in the files")
}
