// Package tests holds the integration and end-to-end tests of kafka_batched_ranges: they run the
// compiled `connect` binary against the real Apache Kafka broker started by resources/kafka.sh
// (bootstrap address from KBR_KAFKA_BROKERS, default 127.0.0.1:9092).
//
// TestMain builds ./cmd/connect once into a temporary directory (or uses KBR_CONNECT_BIN when
// set); a build failure fails the whole package. A test that needs the broker fails, never skips,
// when the broker does not answer within 10s.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	envBrokers    = "KBR_KAFKA_BROKERS"
	envConnectBin = "KBR_CONNECT_BIN"

	defaultBrokers = "127.0.0.1:9092"
	brokerTimeout  = 10 * time.Second
)

var (
	// repoRoot is the module root (the parent of this package's directory).
	repoRoot string
	// connectBin is the path of the compiled connect binary, set by TestMain.
	connectBin string

	brokerOnce sync.Once
	brokerErr  error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests: getwd: %v\n", err)
		return 1
	}
	repoRoot = filepath.Dir(wd)

	if bin := os.Getenv(envConnectBin); bin != "" {
		connectBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "kbr-connect-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests: mkdtemp: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	connectBin = filepath.Join(dir, "connect")

	start := time.Now()
	cmd := exec.Command("go", "build", "-o", connectBin, "./cmd/connect")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests: go build ./cmd/connect failed (%v); every test fails:\n%s\n", err, out)
		return 1
	}
	fmt.Fprintf(os.Stderr, "tests: built %s in %s\n", connectBin, time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// brokers returns the bootstrap address list of the real broker.
func brokers() []string {
	v := os.Getenv(envBrokers)
	if v == "" {
		v = defaultBrokers
	}
	var out []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// requireBroker fails the test when the broker does not answer within 10s. The probe runs once
// per test binary.
func requireBroker(t *testing.T) {
	t.Helper()
	brokerOnce.Do(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers()...))
		if err != nil {
			brokerErr = err
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
		defer cancel()
		adm := kadm.NewClient(cl)
		for {
			if _, brokerErr = adm.ListBrokers(ctx); brokerErr == nil || ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	if brokerErr != nil {
		t.Fatalf("kafka broker %v did not answer within %s (%v); start it with resources/kafka.sh start",
			brokers(), brokerTimeout, brokerErr)
	}
}

// newClient returns a kgo client for the real broker, closed when the test ends.
func newClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers()...)}, opts...)
	cl, err := kgo.NewClient(all...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func newAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t))
}

var nonTopicChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// uniqueName returns a Kafka-safe name derived from the test name, unique per call.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	n := nonTopicChars.ReplaceAllString(t.Name(), "_")
	if len(n) > 150 {
		n = n[:150]
	}
	return fmt.Sprintf("%s-%s-%d", prefix, n, time.Now().UnixNano())
}

// createTopic creates a fresh topic with the given partitions (RF 1) and deletes it when the
// test ends.
func createTopic(t *testing.T, partitions int32) string {
	t.Helper()
	topic := uniqueName(t, "kbr")
	adm := newAdmin(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error(), "create topic %s", topic)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopics(ctx, topic); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	})
	return topic
}

// producedRecord is what the produce promise reported for one record.
type producedRecord struct {
	Key       string
	Value     []byte // nil for a tombstone
	Header    string // value of header "h"
	Timestamp int64  // unix ms
}

// produced maps partition -> offset -> record as acknowledged by the broker.
type produced map[int32]map[int64]producedRecord

func (p produced) count() int {
	n := 0
	for _, m := range p {
		n += len(m)
	}
	return n
}

// producer returns a fast, batching, idempotent producer that sends every record to the
// partition set on it.
func producer(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClient(t, producerOpts(opts...)...)
}

// producerOpts are the options of producer (without seed brokers), followed by opts, which
// override them.
func producerOpts(opts ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.MaxBufferedRecords(50_000),
		kgo.ProducerBatchMaxBytes(1 << 20),
		// A topic just created may be unknown to a broker for a while on a
		// loaded machine: keep producing until the caller's context ends
		// (the default gives up after 4 metadata loads, a flake seen in CI).
		kgo.UnknownTopicRetries(-1),
	}, opts...)
}

// mergeProduced adds every record of src to dst.
func mergeProduced(dst, src produced) {
	for p, m := range src {
		if dst[p] == nil {
			dst[p] = map[int64]producedRecord{}
		}
		for o, r := range m {
			dst[p][o] = r
		}
	}
}

// produceAll produces the records asynchronously, flushes, and returns what the broker
// acknowledged. Any produce error fails the test (from the test goroutine).
func produceAll(t *testing.T, cl *kgo.Client, records []*kgo.Record) produced {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		out      = produced{}
		firstErr error
	)
	for _, r := range records {
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("produce %s/%d: %w", r.Topic, r.Partition, err)
				}
				return
			}
			m := out[r.Partition]
			if m == nil {
				m = map[int64]producedRecord{}
				out[r.Partition] = m
			}
			var h string
			for _, hd := range r.Headers {
				if hd.Key == "h" {
					h = string(hd.Value)
				}
			}
			m[r.Offset] = producedRecord{Key: string(r.Key), Value: r.Value, Header: h, Timestamp: r.Timestamp.UnixMilli()}
		})
	}
	require.NoError(t, cl.Flush(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, firstErr)
	return out
}

// endOffsets returns the high watermark of every partition of the topic.
func endOffsets(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	return listEndOffsets(t, newAdmin(t), topic)
}

// listEndOffsets returns the high watermark of every partition of topic, asked through adm.
func listEndOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lo, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, lo.Error())
	out := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// ---------------------------------------------------------------------------------------------
// connect run

// inputConfig is the kafka_batched_ranges input block; keys are the plugin's field names.
type inputConfig map[string]any

// baseInput returns an input config for the real broker and the given topics.
func baseInput(topics ...string) inputConfig {
	return inputConfig{
		"seed_brokers": brokers(),
		"topics":       topics,
	}
}

// outputMapping turns every message into one JSON line carrying its metadata.
const outputMapping = `root = {
  "p": @kafka_partition,
  "o": @kafka_offset,
  "k": @kafka_key,
  "t": @kafka_topic,
  "ts": @kafka_timestamp_ms,
  "tsu": @kafka_timestamp_unix,
  "tomb": @kafka_tombstone_message,
  "rs": @kafka_range_start,
  "re": @kafka_range_end,
  "h": @h,
  "v": content().string()
}`

// writeRunConfig writes a connect config (JSON is valid YAML) that reads with in and writes
// one JSON line per message to outPath. It returns the config path.
func writeRunConfig(t *testing.T, dir string, in inputConfig, outPath string, opts ...runOption) string {
	t.Helper()
	conf := map[string]any{
		"http":   map[string]any{"enabled": false},
		"logger": map[string]any{"level": "info", "format": "logfmt"},
		"input":  map[string]any{"kafka_batched_ranges": in},
		"pipeline": map[string]any{
			"processors": []any{map[string]any{"mapping": outputMapping}},
		},
		"output": map[string]any{
			"file": map[string]any{"path": outPath, "codec": "lines"},
		},
		"shutdown_timeout": "30s",
	}
	for _, o := range opts {
		o(conf)
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", time.Now().UnixNano()))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// runOption changes the generated connect config.
type runOption func(conf map[string]any)

// withPipelineThreads sets pipeline.threads (Benthos' default is the number of CPUs).
func withPipelineThreads(n int) runOption {
	return func(conf map[string]any) {
		conf["pipeline"].(map[string]any)["threads"] = n
	}
}

// withBatchJitter puts a sleep of 0-3ms before the first message of every batch ahead of the
// mapping, so pipeline threads finish batches in varying order (as real processors do).
func withBatchJitter() runOption {
	return func(conf map[string]any) {
		pl := conf["pipeline"].(map[string]any)
		sleep := map[string]any{"sleep": map[string]any{
			"duration": `${! if batch_index() == 0 { "%vms".format(random_int(max: 3)) } else { "0s" } }`,
		}}
		pl["processors"] = append([]any{sleep}, pl["processors"].([]any)...)
	}
}

// leanMapping writes only partition and offset, for tests that check nothing else.
const leanMapping = `root = {"p": @kafka_partition, "o": @kafka_offset}`

// withLeanPipeline replaces the pipeline by threads threads that run an optional sleep (a
// duration interpolation, "" for none) and then leanMapping.
func withLeanPipeline(threads int, sleep string) runOption {
	return withMappingPipeline(threads, sleep, leanMapping)
}

// withMappingPipeline replaces the pipeline by threads threads that run an optional sleep (a
// duration interpolation, "" for none) and then mapping.
func withMappingPipeline(threads int, sleep, mapping string) runOption {
	return func(conf map[string]any) {
		var procs []any
		if sleep != "" {
			procs = append(procs, map[string]any{"sleep": map[string]any{"duration": sleep}})
		}
		procs = append(procs, map[string]any{"mapping": mapping})
		conf["pipeline"] = map[string]any{"threads": threads, "processors": procs}
	}
}

// sleepMillisPerRecord holds each batch about 1ms per record (one sleep before its first
// message), so a 500-record range keeps a pipeline thread busy for half a second.
const sleepMillisPerRecord = `${! if batch_index() == 0 { "%vms".format(batch_size()) } else { "0s" } }`

// runResult is the outcome of one connect invocation.
type runResult struct {
	Args     []string
	ExitCode int // -1 when killed or not started
	TimedOut bool
	Duration time.Duration
	Stdout   string
	Stderr   string
}

func (r runResult) String() string {
	return fmt.Sprintf("connect %s: exit %d, timed out %v, took %s\n--- stdout (tail) ---\n%s\n--- stderr (tail) ---\n%s",
		strings.Join(r.Args, " "), r.ExitCode, r.TimedOut, r.Duration.Round(time.Millisecond),
		tail(r.Stdout, 24<<10), tail(r.Stderr, 48<<10))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[... " + strconv.Itoa(len(s)-n) + " bytes cut ...]\n" + s[len(s)-n:]
}

// runConnect runs the connect binary with args, extra environment (KEY=VALUE) and a timeout. On
// timeout the process gets SIGQUIT (a Go goroutine dump into stderr), then SIGKILL after 10s.
// The output is logged when the test fails.
func runConnect(t *testing.T, timeout time.Duration, env []string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, connectBin, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	// At the timeout: SIGTERM first, so a bounded run that did not end logs
	// what each partition waited for as it stops (issue 52); a goroutine
	// dump (SIGQUIT) 5 s later if it is still running.
	exited := make(chan struct{})
	defer close(exited)
	cmd.Cancel = func() error {
		err := cmd.Process.Signal(syscall.SIGTERM)
		go func() {
			select {
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGQUIT)
			case <-exited:
			}
		}()
		return err
	}
	cmd.WaitDelay = 15 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr

	start := time.Now()
	err := cmd.Run()
	res := runResult{
		Args:     args,
		ExitCode: -1,
		Duration: time.Since(start),
		TimedOut: errors.Is(ctx.Err(), context.DeadlineExceeded),
		Stdout:   stdout.String(),
		Stderr:   stderr.String(),
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !res.TimedOut {
		t.Fatalf("connect %v: %v", args, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s", res)
		}
	})
	t.Logf("connect %s: exit %d in %s", strings.Join(args, " "), res.ExitCode, res.Duration.Round(time.Millisecond))
	return res
}

// requireExitZero fails the test unless the run ended on its own with exit code 0.
func requireExitZero(t *testing.T, res runResult) {
	t.Helper()
	require.Falsef(t, res.TimedOut, "connect %v did not finish in time (goroutine dump in stderr)\n%s", res.Args, res)
	require.Equalf(t, 0, res.ExitCode, "connect %v failed\n%s", res.Args, res)
}

// runInput writes a config for in, runs `connect run` and requires exit 0 within timeout. It
// returns the delivered records in output order.
func runInput(t *testing.T, in inputConfig, timeout time.Duration, opts ...runOption) []outRecord {
	t.Helper()
	recs, _ := runInputResult(t, in, timeout, opts...)
	return recs
}

// runInputResult is runInput that also returns the run's result (exit code, output).
func runInputResult(t *testing.T, in inputConfig, timeout time.Duration, opts ...runOption) ([]outRecord, runResult) {
	t.Helper()
	dir := t.TempDir()
	outPath := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, outPath, opts...)
	res := runConnect(t, timeout, nil, "run", cfg)
	requireExitZero(t, res)
	return readOutput(t, outPath), res
}

// ---------------------------------------------------------------------------------------------
// output

// flexInt accepts a JSON number or a string holding an integer (metadata values may be either).
type flexInt struct {
	V     int64
	Valid bool
}

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		*f = flexInt{}
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		var err error
		if s, err = strconv.Unquote(s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fv, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || fv != float64(int64(fv)) {
			return fmt.Errorf("not an integer: %s", b)
		}
		v = int64(fv)
	}
	*f = flexInt{V: v, Valid: true}
	return nil
}

// flexBool accepts a JSON bool or a string "true"/"false".
type flexBool struct {
	V     bool
	Valid bool
}

func (f *flexBool) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		*f = flexBool{}
		return nil
	}
	s = strings.Trim(s, `"`)
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("not a bool: %s", b)
	}
	*f = flexBool{V: v, Valid: true}
	return nil
}

// outRecord is one line written by outputMapping.
type outRecord struct {
	P    flexInt  `json:"p"`
	O    flexInt  `json:"o"`
	K    *string  `json:"k"`
	T    string   `json:"t"`
	TS   flexInt  `json:"ts"`
	TSU  flexInt  `json:"tsu"`
	Tomb flexBool `json:"tomb"`
	RS   flexInt  `json:"rs"`
	RE   flexInt  `json:"re"`
	H    *string  `json:"h"`
	V    string   `json:"v"`
}

// readOutput parses the JSON lines file; a missing file means no records were delivered.
func readOutput(t *testing.T, path string) []outRecord {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []outRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var r outRecord
		require.NoErrorf(t, json.Unmarshal(b, &r), "%s line %d: %s", path, line, b)
		require.Truef(t, r.P.Valid && r.O.Valid, "%s line %d has no kafka_partition/kafka_offset: %s", path, line, b)
		out = append(out, r)
	}
	require.NoError(t, sc.Err())
	return out
}

// completeLines counts the newline-terminated lines of a file being written.
func completeLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// readCompleteLines decodes the complete JSON lines of an output file that may still be written
// to, or whose writer was killed mid-line: a last line without its newline is not a delivery and
// is left out. A missing file means nothing was delivered. A line that fails to decode, or that
// valid rejects, fails the test ("<path> line <n> <invalid>: <line>").
func readCompleteLines[T any](t *testing.T, path string, valid func(T) bool, invalid string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []T
	for n, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var v T
		require.NoErrorf(t, json.Unmarshal(line, &v), "%s line %d: %s", path, n+1, line)
		require.Truef(t, valid(v), "%s line %d %s: %s", path, n+1, invalid, line)
		out = append(out, v)
	}
	return out
}

// offsetSet is a set of offsets per partition, used to check exactly-once delivery.
type offsetSet map[int32]map[int64]int

// countOffsets counts how often every (partition, offset) was delivered.
func countOffsets(recs []outRecord) offsetSet {
	s := offsetSet{}
	for _, r := range recs {
		p := int32(r.P.V)
		if s[p] == nil {
			s[p] = map[int64]int{}
		}
		s[p][r.O.V]++
	}
	return s
}

// requireExactlyOnce checks that recs holds every offset in want exactly once and nothing else.
// Problems are reported per partition as compressed offset ranges.
func requireExactlyOnce(t *testing.T, want map[int32][]int64, recs []outRecord) {
	t.Helper()
	got := countOffsets(recs)
	type key struct {
		p    int32
		kind string
	}
	bad := map[key][]int64{}
	for p, offs := range want {
		for _, o := range offs {
			switch n := got[p][o]; n {
			case 1:
			case 0:
				bad[key{p, "missing"}] = append(bad[key{p, "missing"}], o)
			default:
				bad[key{p, "duplicated"}] = append(bad[key{p, "duplicated"}], o)
			}
			delete(got[p], o)
		}
	}
	for p, m := range got {
		for o := range m {
			bad[key{p, "unexpected"}] = append(bad[key{p, "unexpected"}], o)
		}
	}
	if len(bad) == 0 {
		return
	}
	var problems []string
	total := 0
	for k, offs := range bad {
		slices.Sort(offs)
		total += len(offs)
		problems = append(problems, fmt.Sprintf("partition %d: %d %s offsets %s", k.p, len(offs), k.kind, compressOffsets(offs, 20)))
	}
	slices.Sort(problems)
	t.Fatalf("exactly-once violated: %d offsets wrong (%d records delivered, want %d):\n%s",
		total, len(recs), wantCount(want), strings.Join(problems, "\n"))
}

// compressOffsets renders sorted offsets as ranges, e.g. "[0-4 7 9-12]", at most limit ranges.
func compressOffsets(offs []int64, limit int) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if len(parts) == limit {
			parts = append(parts, "...")
			break
		}
		if i == j {
			parts = append(parts, strconv.FormatInt(offs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", offs[i], offs[j]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func wantCount(want map[int32][]int64) int {
	n := 0
	for _, o := range want {
		n += len(o)
	}
	return n
}

// offsetsOf lists the offsets of a produced set per partition.
func offsetsOf(p produced) map[int32][]int64 {
	out := map[int32][]int64{}
	for part, m := range p {
		for o := range m {
			out[part] = append(out[part], o)
		}
		slices.Sort(out[part])
	}
	return out
}

// offsetRange lists [from, to) for every partition.
func offsetRange(from, to map[int32]int64) map[int32][]int64 {
	out := map[int32][]int64{}
	for p, end := range to {
		for o := from[p]; o < end; o++ {
			out[p] = append(out[p], o)
		}
	}
	return out
}

// contextTimeout is for cleanups, which run after t.Context() is cancelled.
func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// syncBuffer is a bytes.Buffer safe for one writer (the process) and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runningConnect is a connect process started by startConnect, for configs that do not end on
// their own (stop_at: never).
type runningConnect struct {
	t      *testing.T
	args   []string
	cmd    *exec.Cmd
	start  time.Time
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{} // closed when the process exited
	err    error         // the result of Wait, read after done
}

// startConnect starts connect with args and extra environment. The process is killed (SIGQUIT,
// then SIGKILL) after the hard timeout or when the test ends.
func startConnect(t *testing.T, hardTimeout time.Duration, env []string, args ...string) *runningConnect {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hardTimeout)
	rc := &runningConnect{t: t, args: args, done: make(chan struct{})}
	rc.cmd = exec.CommandContext(ctx, connectBin, args...)
	rc.cmd.Dir = repoRoot
	rc.cmd.Env = append(os.Environ(), env...)
	rc.cmd.Cancel = func() error { return rc.cmd.Process.Signal(syscall.SIGQUIT) }
	rc.cmd.WaitDelay = 10 * time.Second
	rc.cmd.Stdout = &rc.stdout
	rc.cmd.Stderr = &rc.stderr
	rc.start = time.Now()
	if err := rc.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start connect %v: %v", args, err)
	}
	go func() {
		defer cancel()
		rc.err = rc.cmd.Wait()
		close(rc.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-rc.done
	})
	return rc
}

// waitFor polls cond until it is true or the timeout passes; it reports whether cond held. It
// stops early when the process exits.
func (rc *runningConnect) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		select {
		case <-rc.done:
			return cond()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// waitExit waits up to timeout for the process to exit on its own and then collects its result
// (SIGTERM, then SIGQUIT, if it is still running).
func waitExit(rc *runningConnect, timeout time.Duration) (runResult, bool) {
	exited := rc.waitFor(timeout, func() bool {
		select {
		case <-rc.done:
			return true
		default:
			return false
		}
	})
	return rc.stop(syscall.SIGTERM, 30*time.Second), exited
}

// stop sends sig and waits up to timeout for the process to exit. The output is logged when the
// test fails.
func (rc *runningConnect) stop(sig os.Signal, timeout time.Duration) runResult {
	rc.t.Helper()
	select {
	case <-rc.done:
	default:
		_ = rc.cmd.Process.Signal(sig)
	}
	timedOut := false
	select {
	case <-rc.done:
	case <-time.After(timeout):
		timedOut = true
		_ = rc.cmd.Process.Signal(syscall.SIGQUIT)
		<-rc.done
	}
	res := runResult{
		Args:     rc.args,
		ExitCode: rc.cmd.ProcessState.ExitCode(),
		TimedOut: timedOut,
		Duration: time.Since(rc.start),
		Stdout:   rc.stdout.String(),
		Stderr:   rc.stderr.String(),
	}
	t := rc.t
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s", res)
		}
	})
	t.Logf("connect %s: exit %d after %s", strings.Join(rc.args, " "), res.ExitCode, res.Duration.Round(time.Millisecond))
	return res
}

// requireCommitted checks the consumer group's committed offsets of topic.
func requireCommitted(t *testing.T, adm *kadm.Client, group, topic string, want map[int32]int64) {
	t.Helper()
	got := committedOffsets(t, adm, group, topic)
	require.Equalf(t, want, got, "committed offsets of group %s on %s", group, topic)
}

// fetchCommitted returns the group's committed offsets of topic; a group that has not committed
// yet (GROUP_ID_NOT_FOUND) has none.
func fetchCommitted(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for p, o := range offs[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// pollCommitted fetches the group's committed offsets of topic every 50ms (and once more when
// the process has exited) and passes each answer to check, until check reports a violation, the
// process exits or limit passes. It returns whether the process exited, the last violation ("" for
// none), how many fetches answered and the error of the last fetch that failed.
func pollCommitted(rc *runningConnect, adm *kadm.Client, group, topic string, limit time.Duration,
	check func(committed map[int32]int64) (violation string),
) (exited bool, violation string, polls int, lastErr error) {
	deadline := time.Now().Add(limit)
	for !exited && violation == "" && time.Now().Before(deadline) {
		select {
		case <-rc.done:
			exited = true
		case <-time.After(50 * time.Millisecond):
		}
		ctx, cancel := contextTimeout(5 * time.Second)
		committed, err := fetchCommitted(ctx, adm, group, topic)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		polls++
		violation = check(committed)
	}
	return exited, violation, polls, lastErr
}

// committedOffsets returns the group's committed offset per partition of topic (absent
// partitions are left out).
func committedOffsets(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	require.NoError(t, offs.Error())
	got := map[int32]int64{}
	for p, o := range offs[topic] {
		got[p] = o.At
	}
	return got
}

// deleteGroupOnCleanup deletes the consumer group when the test ends.
func deleteGroupOnCleanup(t *testing.T, adm *kadm.Client, group string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := contextTimeout(30 * time.Second)
		defer cancel()
		if _, err := adm.DeleteGroups(ctx, group); err != nil {
			t.Logf("delete group %s: %v", group, err)
		}
	})
}

// newGroup returns a fresh consumer group name and an admin client; the group is deleted when
// the test ends.
func newGroup(t *testing.T) (string, *kadm.Client) {
	t.Helper()
	group := uniqueName(t, "group")
	adm := newAdmin(t)
	deleteGroupOnCleanup(t, adm, group)
	return group, adm
}
