package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// exampleFiles returns the config files in config/examples/ and fails when there are none: the
// examples are part of the deliverable, so an empty directory must not pass vacuously.
func exampleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, "config", "examples", pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	slices.Sort(files)
	require.NotEmptyf(t, files, "no YAML files in %s", filepath.Join(repoRoot, "config", "examples"))
	return files
}

// isTestDefinition reports whether path is a Benthos unit-test definition file rather than a
// config (`connect test` convention: <config>_benthos_test.yaml).
func isTestDefinition(path string) bool {
	b := filepath.Base(path)
	return strings.HasSuffix(b, "_benthos_test.yaml") || strings.HasSuffix(b, "_benthos_test.yml")
}

// exampleEnv points the examples at the real broker, a topic and an output directory.
func exampleEnv(topic, outDir string) []string {
	return []string{
		"KAFKA_BROKERS=" + strings.Join(brokers(), ","),
		"KAFKA_TOPIC=" + topic,
		"OUT_DIR=" + outDir,
	}
}

// TestBinaryLintAndTest runs `connect lint` on every example config and `connect test` on the
// examples directory; both must exit 0.
func TestBinaryLintAndTest(t *testing.T) {
	t.Parallel()
	files := exampleFiles(t)
	var configs []string
	for _, f := range files {
		if !isTestDefinition(f) {
			configs = append(configs, f)
		}
	}
	require.NotEmpty(t, configs, "config/examples/ holds only test definitions")
	env := exampleEnv("kbr-lint-topic", t.TempDir())

	t.Run("lint", func(t *testing.T) {
		res := runConnect(t, time.Minute, env, append([]string{"lint"}, configs...)...)
		requireExitZero(t, res)
	})
	t.Run("lint_rejects_cross_field_rule", func(t *testing.T) {
		in := baseInput("kbr-any-topic")
		in["start_from"] = "committed" // without consumer_group
		in["stop_at"] = "end"
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, in, filepath.Join(dir, "out.jsonl"))
		res := runConnect(t, time.Minute, nil, "lint", cfg)
		require.NotEqualf(t, 0, res.ExitCode, "lint must reject start_from committed without consumer_group\n%s", res)
		require.Containsf(t, res.Stdout+res.Stderr, "consumer_group", "lint output names the field\n%s", res)
		res = runConnect(t, time.Minute, nil, "run", cfg)
		require.Falsef(t, res.TimedOut, "run of an invalid config hung\n%s", res)
		require.NotEqualf(t, 0, res.ExitCode, "run must refuse start_from committed without consumer_group\n%s", res)
	})
	t.Run("test", func(t *testing.T) {
		res := runConnect(t, 2*time.Minute, env, "test", "./config/examples/...")
		requireExitZero(t, res)
		require.NotContains(t, res.Stdout, "No tests were found")
	})
}

// boundedExamples are the example configs that read to the end (stop_at: end) of the topic
// named by ${KAFKA_TOPIC...}; at least one of them must write into ${OUT_DIR...}.
func boundedExamples(t *testing.T) []boundedExample {
	t.Helper()
	stopAtEnd := regexp.MustCompile(`(?m)^\s*stop_at:\s*["']?end["']?\s*(#.*)?$`)
	orderedTrue := regexp.MustCompile(`(?m)^\s*ordered:\s*true\s*(#.*)?$`)
	var out []boundedExample
	for _, f := range exampleFiles(t) {
		if isTestDefinition(f) {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		s := string(b)
		if strings.Contains(s, "${KAFKA_PASSWORD") {
			continue // needs a SASL_SSL listener: TestSecure runs it
		}
		if stopAtEnd.MatchString(s) && strings.Contains(s, "${KAFKA_TOPIC") {
			out = append(out, boundedExample{
				path:        f,
				writesFiles: strings.Contains(s, "${OUT_DIR"),
				ordered:     orderedTrue.MatchString(s),
			})
		}
	}
	n := 0
	for _, e := range out {
		if e.writesFiles {
			n++
		}
	}
	require.NotZero(t, n, "no example in config/examples/ has stop_at: end with ${KAFKA_TOPIC} and ${OUT_DIR}")
	return out
}

// boundedExample is an example config that ends on its own.
type boundedExample struct {
	path        string
	writesFiles bool // writes its output below ${OUT_DIR}
	ordered     bool // sets ordered: true
}

// TestConnectRunExampleExitsZero runs every bounded example against a fresh topic and checks
// that `connect run` exits 0 and the files written to OUT_DIR hold every produced record exactly
// once. Each record's value carries a unique marker `kbrmark-<id>-end` so the check does not depend
// on the example's output format, only on it writing the message content.
func TestConnectRunExampleExitsZero(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, ex := range boundedExamples(t) {
		example := ex.path
		t.Run(strings.TrimSuffix(filepath.Base(example), filepath.Ext(example)), func(t *testing.T) {
			const (
				partitions = 3
				n          = 31_500 // more than one 10,000-offset range per partition
			)
			topic := createTopic(t, partitions)
			var records []*kgo.Record
			for i := range n {
				records = append(records, &kgo.Record{
					Topic:     topic,
					Partition: int32(i % partitions),
					Key:       []byte(fmt.Sprintf("key-%d", i)),
					Value: []byte(fmt.Sprintf(`{"id":%d,"order_id":%d,"quantity":%d,"price_cents":250,"marker":"kbrmark-%d-end"}`,
						i, i, 1+i%5, i)),
				})
			}
			prod := produceAll(t, producer(t), records)
			require.Equal(t, n, prod.count())

			outDir := t.TempDir()
			group := uniqueName(t, "group") // for the examples that name ${KAFKA_GROUP}
			deleteGroupOnCleanup(t, newAdmin(t), group)
			res := runConnect(t, 2*time.Minute, append(exampleEnv(topic, outDir), "KAFKA_GROUP="+group), "run", example)
			requireExitZero(t, res)
			if !ex.writesFiles {
				return
			}

			seen := make([]int, n)
			marker := regexp.MustCompile(`kbrmark-(\d+)-end`)
			var files []string
			require.NoError(t, filepath.WalkDir(outDir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				files = append(files, path)
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				checkExampleFile(t, path, b, ex.ordered)
				for _, m := range marker.FindAllSubmatch(b, -1) {
					id, err := strconv.Atoi(string(m[1]))
					if err != nil || id >= n {
						return fmt.Errorf("%s: bad marker %s", path, m[0])
					}
					seen[id]++
				}
				return nil
			}))
			require.NotEmptyf(t, files, "example %s wrote no files into OUT_DIR=%s", example, outDir)
			var problems []string
			for id, c := range seen {
				if c != 1 {
					problems = append(problems, fmt.Sprintf("record %d (partition %d) written %d times", id, id%partitions, c))
				}
			}
			if len(problems) > 0 {
				total := len(problems)
				if total > 30 {
					problems = append(problems[:30], "...")
				}
				t.Fatalf("%s: %d of %d records not written exactly once (files %v):\n%s",
					example, total, n, files, strings.Join(problems, "\n"))
			}
			t.Logf("%s wrote %d records into %d files", filepath.Base(example), n, len(files))
		})
	}
}

// TestDemoSucceeds runs `connect demo` (an in-process broker, no real Kafka) and checks that it
// exits 0 within 2 minutes and prints a throughput summary line.
func TestDemoSucceeds(t *testing.T) {
	t.Parallel()
	res := runConnect(t, 2*time.Minute, nil, "demo")
	requireExitZero(t, res)
	summary := regexp.MustCompile(`(?m)^.*records.* [kMG]?B/s.*$`)
	line := summary.FindString(res.Stdout + "\n" + res.Stderr)
	require.NotEmptyf(t, line, "connect demo printed no summary line with \"records\" and a B/s rate\n%s", res)
	t.Logf("demo summary: %s", strings.TrimSpace(line))
}

// TestContinuousExampleCommitsAndResumes runs config/examples/continuous.yaml (stop_at: never,
// consumer group) against a fresh topic: it must deliver every record once, commit the end
// offsets while running, exit 0 on SIGTERM, and a second run must deliver only records produced
// after the first.
func TestContinuousExampleCommitsAndResumes(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	example := filepath.Join(repoRoot, "config", "examples", "continuous.yaml")
	_, err := os.Stat(example)
	require.NoErrorf(t, err, "this test runs %s", example)

	const partitions = 3
	topic := createTopic(t, partitions)
	group, adm := newGroup(t)
	env := append(exampleEnv(topic, t.TempDir()), "KAFKA_GROUP="+group)

	nextID := 0
	produceMarked := func(n int) {
		t.Helper()
		var records []*kgo.Record
		for range n {
			records = append(records, &kgo.Record{
				Topic:     topic,
				Partition: int32(nextID % partitions),
				Value:     []byte(fmt.Sprintf(`{"id":%d,"marker":"kbrmark-%d-end"}`, nextID, nextID)),
			})
			nextID++
		}
		require.Equal(t, n, produceAll(t, producer(t), records).count())
	}
	marker := regexp.MustCompile(`kbrmark-(\d+)-end`)
	countMarkers := func(s string) map[int]int {
		out := map[int]int{}
		for _, m := range marker.FindAllStringSubmatch(s, -1) {
			id, _ := strconv.Atoi(m[1])
			out[id]++
		}
		return out
	}
	// runOnce runs the example until ids [from, to) were written to stdout and the group
	// committed the end offsets, then stops it with SIGTERM and checks exactly-once output.
	runOnce := func(from, to int) {
		t.Helper()
		ends := endOffsets(t, topic)
		rc := startConnect(t, 2*time.Minute, env, "run", example)
		allSeen := rc.waitFor(60*time.Second, func() bool { return len(countMarkers(rc.stdout.String())) >= to-from })
		committed := allSeen && rc.waitFor(30*time.Second, func() bool {
			got := committedOffsets(t, adm, group, topic)
			for p, end := range ends {
				if got[p] != end {
					return false
				}
			}
			return true
		})
		res := rc.stop(syscall.SIGTERM, 45*time.Second)
		require.Truef(t, allSeen, "not every record [%d, %d) was written within 60s", from, to)
		require.Truef(t, committed, "group %s did not commit the end offsets %v within 30s (commit_period 5s); committed %v",
			group, ends, committedOffsets(t, adm, group, topic))
		require.Falsef(t, res.TimedOut, "connect did not stop within 45s of SIGTERM\n%s", res)
		require.Equalf(t, 0, res.ExitCode, "connect exit code after SIGTERM\n%s", res)
		seen := countMarkers(res.Stdout)
		for id := from; id < to; id++ {
			require.Equalf(t, 1, seen[id], "record %d written %d times", id, seen[id])
			delete(seen, id)
		}
		require.Emptyf(t, seen, "records outside [%d, %d) were written", from, to)
	}

	produceMarked(900)
	runOnce(0, 900)
	produceMarked(300)
	runOnce(900, 1200)
}

// checkExampleFile checks what can be checked about an example's output file without knowing its
// format, on lines that are JSON objects with an "offset": when the file is named
// <topic>-<partition>-<start>-<end>.jsonl every offset lies in [start, end); when the example is
// ordered, offsets are strictly increasing within the file (the ordered example writes one file
// per partition).
func checkExampleFile(t *testing.T, path string, b []byte, ordered bool) {
	t.Helper()
	rangeName := regexp.MustCompile(`-(\d+)-(\d+)-(\d+)\.jsonl$`).FindStringSubmatch(filepath.Base(path))
	var last int64 = -1
	for i, line := range bytes.Split(b, []byte("\n")) {
		var rec struct {
			Offset *flexInt `json:"offset"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Offset == nil || !rec.Offset.Valid {
			continue
		}
		o := rec.Offset.V
		if rangeName != nil {
			start, _ := strconv.ParseInt(rangeName[2], 10, 64)
			end, _ := strconv.ParseInt(rangeName[3], 10, 64)
			require.Truef(t, start <= o && o < end, "%s line %d: offset %d outside the file's range [%d, %d)", path, i+1, o, start, end)
		}
		if ordered {
			require.Greaterf(t, o, last, "%s line %d: offset %d after %d (ordered: true)", path, i+1, o, last)
			last = o
		}
	}
}
