package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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

// The tests in this file check the issue "nothing lost under faults" for the broker itself: a
// broker that stops in the middle of a bounded read and comes back, and a broker that is not
// there when the run starts. Each test runs an Apache Kafka broker of its own (resources/kafka.sh
// with its own KBR_KAFKA_HOME and ports), so stopping it never disturbs the shared broker at
// KBR_KAFKA_BROKERS that the other tests use.

// ---------------------------------------------------------------------------------------------
// a broker of the test's own

const (
	// ownBrokerFirstPort is the PLAINTEXT port of the first slot; slot i listens on
	// ownBrokerFirstPort+2i and its controller on the port after it.
	ownBrokerFirstPort = 19192
	ownBrokerSlots     = 16
	// ownBrokerScriptTimeout bounds one kafka.sh call (start waits up to 90s, stop up to 30s).
	ownBrokerScriptTimeout = 3 * time.Minute
	// slotWait bounds how long a test waits for a free broker or cluster slot.
	slotWait = 10 * time.Minute
)

// ownBroker is a single-node Kafka broker run by resources/kafka.sh for one test, in a slot (a
// KBR_KAFKA_HOME under os.TempDir() and a pair of ports) that the test holds an exclusive lock
// on. Slots have fixed homes so a broker left running by a test binary that was killed is found
// (through the script's pid file) and stopped by the next test that takes the slot; the lock
// keeps concurrent tests, in this binary or another, out of each other's slot.
type ownBroker struct {
	home           string
	port, ctrlPort int
	env            []string // extra kafka.sh environment (KEY=VALUE), e.g. a SASL_SSL listener's
}

// newOwnBroker takes a free slot, stops whatever broker an earlier run left in it and wipes its
// state, and registers a cleanup that stops the broker (and, when the test passed, wipes its
// state). The broker is not started.
func newOwnBroker(t *testing.T) *ownBroker {
	t.Helper()
	libs := sharedKafkaLibs(t)
	root := filepath.Join(os.TempDir(), "kbr-own-brokers")
	require.NoError(t, os.MkdirAll(root, 0o755))
	// Every slot may be taken by tests running in parallel (of this run, or of another checkout):
	// wait for one to free up rather than fail.
	for wait := time.Now().Add(slotWait); ; time.Sleep(time.Second) {
		for slot := range ownBrokerSlots {
			b := &ownBroker{port: ownBrokerFirstPort + 2*slot}
			b.ctrlPort = b.port + 1
			b.home = filepath.Join(root, strconv.Itoa(b.port))
			require.NoError(t, os.MkdirAll(b.home, 0o755))
			lock, err := os.OpenFile(filepath.Join(b.home, ".slot.lock"), os.O_CREATE|os.O_RDWR, 0o644)
			require.NoError(t, err)
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				lock.Close()
				continue // another test holds this slot
			}
			require.NoError(t, linkKafkaLibs(b.home, libs))
			// A broker still running here belongs to a test binary that died: stop it, forget its
			// topics.
			if out, err := b.script(context.Background(), "reset"); err != nil {
				lock.Close()
				t.Fatalf("kafka.sh reset in %s: %v\n%s", b.home, err, out)
			}
			if portInUse(b.port) || portInUse(b.ctrlPort) {
				lock.Close() // something else listens here
				continue
			}
			t.Cleanup(func() {
				defer lock.Close()
				ctx, cancel := contextTimeout(ownBrokerScriptTimeout)
				defer cancel()
				if out, err := b.script(ctx, "stop"); err != nil {
					t.Errorf("kafka.sh stop of %s: %v\n%s", b.addr(), err, out)
				}
				if t.Failed() {
					out, _ := b.script(ctx, "logs")
					t.Logf("broker %s logs (state kept in %s):\n%s", b.addr(), b.home, tail(out, 16<<10))
					return
				}
				if out, err := b.script(ctx, "reset"); err != nil {
					t.Logf("kafka.sh reset of %s: %v\n%s", b.addr(), err, out)
				}
			})
			return b
		}
		if time.Now().After(wait) {
			break
		}
	}
	t.Fatalf("no free broker slot among ports %d-%d (each needs two free ports)", ownBrokerFirstPort, ownBrokerFirstPort+2*ownBrokerSlots-1)
	return nil
}

// sharedKafkaLibs returns the jar directory of the shared broker's KBR_KAFKA_HOME (default
// ~/.cache/kafka_batched_ranges/kafka-<version>), fetching the jars there first if needed.
func sharedKafkaLibs(t *testing.T) string {
	t.Helper()
	home := os.Getenv("KBR_KAFKA_HOME")
	if home == "" {
		version := os.Getenv("KBR_KAFKA_VERSION")
		if version == "" {
			version = "4.4.0"
		}
		userHome, err := os.UserHomeDir()
		require.NoError(t, err)
		home = filepath.Join(userHome, ".cache", "kafka_batched_ranges", "kafka-"+version)
	}
	libs := filepath.Join(home, "libs")
	if _, err := os.Stat(filepath.Join(libs, ".complete")); err == nil {
		return libs
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "resources", "kafka.sh"), "fetch")
	cmd.Env = append(os.Environ(), "KBR_KAFKA_HOME="+home)
	out, err := cmd.CombinedOutput()
	require.NoErrorf(t, err, "kafka.sh fetch into %s:\n%s", home, out)
	return libs
}

// linkKafkaLibs makes home/libs a symlink to libs, so every slot uses the jars fetched once.
func linkKafkaLibs(home, libs string) error {
	link := filepath.Join(home, "libs")
	fi, err := os.Lstat(link)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case fi.Mode()&os.ModeSymlink == 0:
		return nil // a directory of jars of its own (fetched by an older run): the script checks it
	default:
		if dest, err := os.Readlink(link); err == nil && dest == libs {
			return nil
		}
		if err := os.Remove(link); err != nil {
			return err
		}
	}
	return os.Symlink(libs, link)
}

// portInUse reports whether something accepts connections on 127.0.0.1:port.
func portInUse(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (b *ownBroker) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// script runs resources/kafka.sh cmd on this broker's home and ports and returns its output.
func (b *ownBroker) script(ctx context.Context, cmd string) (string, error) {
	c := exec.CommandContext(ctx, filepath.Join(repoRoot, "resources", "kafka.sh"), cmd)
	c.Dir = repoRoot
	c.Env = append(os.Environ(),
		"KBR_KAFKA_HOME="+b.home,
		"KBR_KAFKA_PORT="+strconv.Itoa(b.port),
		"KBR_KAFKA_CONTROLLER_PORT="+strconv.Itoa(b.ctrlPort),
	)
	c.Env = append(c.Env, b.env...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// start starts the broker (kafka.sh waits until it answers) and returns how long that took.
func (b *ownBroker) start(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ownBrokerScriptTimeout)
	defer cancel()
	began := time.Now()
	out, err := b.script(ctx, "start")
	require.NoErrorf(t, err, "kafka.sh start of %s:\n%s", b.addr(), out)
	took := time.Since(began)
	t.Logf("broker %s started in %s", b.addr(), took.Round(time.Millisecond))
	return took
}

// stop stops the broker (SIGTERM; kafka.sh waits until it exited) and returns how long that
// took.
func (b *ownBroker) stop(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ownBrokerScriptTimeout)
	defer cancel()
	began := time.Now()
	out, err := b.script(ctx, "stop")
	require.NoErrorf(t, err, "kafka.sh stop of %s:\n%s", b.addr(), out)
	require.Falsef(t, portInUse(b.port), "%s still accepts connections after kafka.sh stop", b.addr())
	took := time.Since(began)
	t.Logf("broker %s stopped in %s", b.addr(), took.Round(time.Millisecond))
	return took
}

// client returns a client of this broker, closed when the test ends.
func (b *ownBroker) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addr())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates a topic (RF 1) on this broker; it goes with the broker's state.
func (b *ownBroker) createTopic(t *testing.T, adm *kadm.Client, partitions int32) string {
	t.Helper()
	topic := uniqueName(t, "kbr")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error(), "create topic %s on %s", topic, b.addr())
	return topic
}

// produce writes perPart records of about 100 bytes to each of the topic's first partitions, in
// producer batches of at most batchBytes, and returns what the broker acknowledged.
func (b *ownBroker) produce(t *testing.T, topic string, partitions int32, perPart int, batchBytes int32) produced {
	t.Helper()
	pad := strings.Repeat("x", 80)
	var records []*kgo.Record
	for i := range perPart * int(partitions) {
		records = append(records, &kgo.Record{
			Topic:     topic,
			Partition: int32(i) % partitions,
			Key:       []byte(fmt.Sprintf("k-%d", i)),
			Value:     []byte(fmt.Sprintf("%d-%s", i, pad)),
		})
	}
	cl := b.client(t, producerOpts(kgo.ProducerBatchMaxBytes(batchBytes))...)
	prod := produceAll(t, cl, records)
	require.Equal(t, perPart*int(partitions), prod.count())
	return prod
}

// endOffsets returns the high watermark of every partition of topic.
func (b *ownBroker) endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	return listEndOffsets(t, adm, topic)
}

// ---------------------------------------------------------------------------------------------
// runs and their logs

var (
	warnLevel      = regexp.MustCompile(`\blevel=warn(ing)?\b`)
	failedConnect  = regexp.MustCompile(`Failed to connect to kafka_batched_ranges: `)
	closedSummary  = regexp.MustCompile(`Closed: .*cache: (\d+) continuations, (\d+) seeks, (\d+) new cursors, (\d+) fetches, (\d+) evictions, (\d+) invalidations`)
	logfmtTime     = regexp.MustCompile(`\btime="?([^" ]+)"?`)
	inputStopped   = regexp.MustCompile(`Input stopped`)
	readRetryWarn  = `Reading %s/(\d+)\[(\d+),(\d+)\) stopped at offset (\d+) \(attempt \d+\), retrying in `
	summaryCounter = []string{"continuations", "seeks", "new cursors", "fetches", "evictions", "invalidations"}
)

// matchingLines returns the lines of log that match re.
func matchingLines(log string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// cacheSummary parses the counters of the input's "Closed: ..." line.
func cacheSummary(t *testing.T, log string) map[string]int64 {
	t.Helper()
	m := closedSummary.FindStringSubmatch(log)
	require.NotNilf(t, m, "no summary line (`Closed: ... cache: N continuations, ...`) in the log")
	out := map[string]int64{}
	for i, name := range summaryCounter {
		v, err := strconv.ParseInt(m[i+1], 10, 64)
		require.NoError(t, err)
		out[name] = v
	}
	return out
}

// lineTime parses the time= field of a logfmt line.
func lineTime(line string) (time.Time, bool) {
	m := logfmtTime.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	ts, err := time.Parse(time.RFC3339Nano, m[1])
	return ts, err == nil
}

// requireAtLeastOnce checks that every offset in want was delivered at least once and nothing
// else was; it returns how many deliveries were duplicates.
func requireAtLeastOnce(t *testing.T, want map[int32][]int64, recs []outRecord) int {
	t.Helper()
	got := countOffsets(recs)
	var problems []string
	dups := 0
	for p, offs := range want {
		var missing []int64
		for _, o := range offs {
			switch n := got[p][o]; {
			case n == 0:
				missing = append(missing, o)
			case n > 1:
				dups += n - 1
			}
			delete(got[p], o)
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("partition %d: %d missing offsets %s", p, len(missing), compressOffsets(missing, 20)))
		}
	}
	for p, m := range got {
		if len(m) > 0 {
			problems = append(problems, fmt.Sprintf("partition %d: %d offsets delivered that were not produced", p, len(m)))
		}
	}
	require.Emptyf(t, problems, "at-least-once violated (%d records delivered, %d produced)", len(recs), wantCount(want))
	return dups
}

// ---------------------------------------------------------------------------------------------
// tests

// TestBrokerRestartMidReadLosesNothing stops the broker when about a quarter of 30,000 records
// (4 partitions) went through a slow bounded run with a consumer group, keeps it down for 15s
// and starts it again. Records are produced in small batches and fetched 16 KiB at a time, so
// the cached clients cannot hold a partition's remaining records and the readers must fetch
// during the outage. The run must finish on its own with exit 0 and every offset delivered at
// least once (duplicates are reported); the log must report the outage: a warning naming a
// stalled range and saying it is retried, at most one per partition per 10s, or, when no read
// was under way (cursors and ranges read ahead, and a new range waits for a commit), the
// failing commits; the group must have committed the end offsets; and where reads failed, the
// cursor cache must have replaced the cursors that saw errors (invalidations > 0, more new
// cursors than partitions).
func TestBrokerRestartMidReadLosesNothing(t *testing.T) {
	t.Parallel()
	const (
		partitions = 4
		perPart    = 7500
		total      = partitions * perPart
		outageWait = 15 * time.Second
	)
	b := newOwnBroker(t)
	b.start(t)
	adm := kadm.NewClient(b.client(t))
	topic := b.createTopic(t, adm, partitions)
	prod := b.produce(t, topic, partitions, perPart, 4096)
	ends := b.endOffsets(t, adm, topic)
	group := uniqueName(t, "group")

	in := inputConfig{
		"seed_brokers": []string{b.addr()},
		// Pinned partitions: the group stores offsets but this process is
		// not a member, so the outage exercises the readers' retries. (A
		// member loses its partitions when its coordinator is unreachable
		// and reads them again once reassigned: tests/group_test.go.)
		"topics":                    []string{fmt.Sprintf("%s:0-%d", topic, partitions-1)},
		"consumer_group":            group,
		"start_from":                "earliest",
		"stop_at":                   "end",
		"max_range_records":         500,
		"max_in_flight":             4,
		"commit_period":             "1s",
		"fetch_max_partition_bytes": 16384,
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, out, withLeanPipeline(2, sleepMillisPerRecord))
	rc := startConnect(t, 3*time.Minute, nil, "run", cfg)

	if !rc.waitFor(60*time.Second, func() bool { return completeLines(out) >= total/4 }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("a quarter of %d records was not written within 60s (%d written)\n%s", total, completeLines(out), res)
	}
	atQuarter := time.Since(rc.start)
	stdoutBefore, stderrBefore := len(rc.stdout.String()), len(rc.stderr.String())
	outageBegan := time.Now()
	stopTook := b.stop(t)
	linesAtStop := completeLines(out)
	require.Lessf(t, linesAtStop, total*9/10,
		"%d of %d records were written by the time the broker was down: the pipeline is too fast for this test to prove anything", linesAtStop, total)
	select {
	case <-rc.done:
		res := rc.stop(syscall.SIGTERM, time.Second)
		t.Fatalf("connect exited while the broker was down (%d of %d records written)\n%s", completeLines(out), total, res)
	case <-time.After(outageWait):
	}
	linesBeforeStart := completeLines(out)
	startTook := b.start(t)
	outage := time.Since(outageBegan)
	outageLog := rc.stdout.String()[stdoutBefore:] + rc.stderr.String()[stderrBefore:]

	res, exited := waitExit(rc, 3*time.Minute-time.Since(rc.start))
	require.Truef(t, exited, "the run did not end within 3 minutes after the broker came back\n%s", res)
	requireExitZero(t, res)
	log := res.Stdout + res.Stderr // Benthos logs to stdout

	// Warnings: a clear line per stalled range, rate limited, no flood.
	outageWarns := matchingLines(outageLog, warnLevel)
	allWarns := matchingLines(log, warnLevel)
	retryRe := regexp.MustCompile(`level=warn.*` + fmt.Sprintf(readRetryWarn, regexp.QuoteMeta(topic)))
	retryWarns := matchingLines(log, retryRe)
	t.Logf("outage %s (stop took %s, start took %s): %d warning lines during it, %d in the whole run, %d of them read retries",
		outage.Round(time.Millisecond), stopTook.Round(time.Millisecond), startTook.Round(time.Millisecond), len(outageWarns), len(allWarns), len(retryWarns))
	for i, l := range allWarns {
		if i == 12 {
			t.Logf("  ... %d more", len(allWarns)-i)
			break
		}
		t.Logf("  %s", l)
	}
	// The outage must be reported. Cursors fetch ahead (two answers each)
	// and ranges read ahead, and with a group a new range waits for a
	// commit, which fails while the broker is down: whether a read is
	// under way when the broker stops depends on timing. So either a
	// stalled range is named, or the failing commits are.
	if len(retryWarns) == 0 {
		commitWarns := matchingLines(outageLog, regexp.MustCompile(`level=warn.*Committing offsets failed, retrying`))
		require.NotEmptyf(t, commitWarns, "neither a warning `Reading %s/<p>[<start>,<end>) stopped at offset <n> (attempt <a>), retrying in ...` nor a failing commit in the log\n%s", topic, res)
		t.Logf("no read was under way during the outage; %d commit warnings report it", len(commitWarns))
	}
	require.Lessf(t, len(outageWarns), 200, "%d warning lines during an outage of %s: a flood\n%s", len(outageWarns), outage, res)
	// warn() allows one line per key (for reads: per partition) per 10s.
	perPartition := map[string][]time.Time{}
	for _, l := range retryWarns {
		m := retryRe.FindStringSubmatch(l)
		ts, ok := lineTime(l)
		require.Truef(t, ok, "no time= in %s", l)
		perPartition[m[1]] = append(perPartition[m[1]], ts)
	}
	for p, times := range perPartition {
		for i := 1; i < len(times); i++ {
			gap := times[i].Sub(times[i-1])
			// time= has whole seconds.
			require.GreaterOrEqualf(t, gap, 9*time.Second, "partition %s: read-retry warnings %s apart, want at most one per 10s", p, gap)
		}
	}

	// Nothing lost; duplicates reported.
	recs := readOutput(t, out)
	dups := requireAtLeastOnce(t, offsetsOf(prod), recs)
	requireCommitted(t, adm, group, topic, ends)

	// The cache replaced the cursors that saw errors.
	sum := cacheSummary(t, log)
	t.Logf("run took %s (a quarter written after %s; %d lines written when the broker was down, %d when it was started again); %d records delivered for %d produced: %d duplicates; cache %v",
		res.Duration.Round(time.Millisecond), atQuarter.Round(time.Millisecond), linesAtStop, linesBeforeStart, len(recs), total, dups, sum)
	if len(retryWarns) > 0 { // reads failed: their cursors were replaced
		require.Positivef(t, sum["invalidations"], "no cursor was invalidated although reads failed during the outage (cache %v)", sum)
		require.Greaterf(t, sum["new cursors"], int64(partitions), "the cursors that saw errors were not replaced (cache %v)", sum)
	}
	require.Emptyf(t, matchingLines(log, inputStopped), "the input stopped on an error\n%s", res)
}

// TestBrokerUnreachableAtStart starts a bounded run while its only seed broker is down (the topic
// and its records were written before the broker was stopped, since a missing topic ends a
// bounded run). Connect must fail with an error naming the seed broker within 20s and be retried
// with backoff (several lines, at most about one a second, not a flood); once the broker is
// started the run must read every record exactly once and exit 0.
func TestBrokerUnreachableAtStart(t *testing.T) {
	t.Parallel()
	const (
		partitions = 2
		perPart    = 2000
		downFor    = 15 * time.Second // how long connect runs with the broker down
	)
	b := newOwnBroker(t)
	b.start(t)
	adm := kadm.NewClient(b.client(t))
	topic := b.createTopic(t, adm, partitions)
	prod := b.produce(t, topic, partitions, perPart, 1<<20)
	b.stop(t)

	in := inputConfig{
		"seed_brokers":      []string{b.addr()},
		"topics":            []string{topic},
		"stop_at":           "end",
		"max_range_records": 500,
		"start_timeout":     "3m", // the broker's own start, under load, may take most of the default 1m
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	cfg := writeRunConfig(t, dir, in, out, withLeanPipeline(2, ""))
	rc := startConnect(t, 3*time.Minute, nil, "run", cfg)

	failures := func() []string { return matchingLines(rc.stdout.String()+rc.stderr.String(), failedConnect) }
	if !rc.waitFor(20*time.Second, func() bool { return len(failures()) > 0 }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("no `Failed to connect to kafka_batched_ranges` line within 20s of starting with the broker down\n%s", res)
	}
	firstAt := time.Since(rc.start)
	first := failures()[0]
	require.Containsf(t, first, b.addr(), "the connect error does not name the seed broker %s: %s", b.addr(), first)
	require.Containsf(t, first, "level=error", "the connect failure is not logged as an error: %s", first)

	rc.waitFor(downFor-time.Since(rc.start), func() bool { return false })
	select {
	case <-rc.done:
		res := rc.stop(syscall.SIGTERM, time.Second)
		t.Fatalf("connect exited while the broker was down\n%s", res)
	default:
	}
	down := time.Since(rc.start)
	failed := failures()
	startTook := b.start(t)

	res, exited := waitExit(rc, 90*time.Second)
	require.Truef(t, exited, "the run did not end within 90s after the broker was started\n%s", res)
	requireExitZero(t, res)
	log := res.Stdout + res.Stderr
	all := matchingLines(log, failedConnect)
	t.Logf("first connect failure after %s; %d failures in the first %s with the broker down, %d in all (broker start took %s); run took %s",
		firstAt.Round(time.Millisecond), len(failed), down.Round(time.Millisecond), len(all), startTook.Round(time.Millisecond), res.Duration.Round(time.Millisecond))
	for i, l := range all {
		if i == 3 {
			t.Logf("  ... %d more", len(all)-i)
			break
		}
		t.Logf("  %s", l)
	}
	// Retried, with backoff: Benthos waits 100ms, 1.5 times longer after each failure, at most
	// 1s (±50%), so about 6 attempts in the first 3s and then about one a second.
	require.GreaterOrEqualf(t, len(failed), 2, "Connect was not retried in %s", down)
	require.LessOrEqualf(t, len(failed), int(down/time.Second)+8, "%d connect failures in %s: retried without backoff", len(failed), down)

	recs := readOutput(t, out)
	requireExactlyOnce(t, offsetsOf(prod), recs)
	require.Emptyf(t, matchingLines(log, inputStopped), "the input stopped on an error\n%s", res)
}

// readyStatus gets http://addr/ready and returns its status code, 0 if the server does not
// answer.
func readyStatus(addr string) int {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/ready")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// withHTTP enables Benthos' HTTP server (/ready, /ping) on addr.
func withHTTP(addr string) runOption {
	return func(conf map[string]any) {
		conf["http"] = map[string]any{"enabled": true, "address": addr}
	}
}

// TestBrokerDeathEndsABoundedRun (issue 43, defect 5): a bounded run whose only broker is
// SIGKILLed mid-run must not retry for ever. While no broker answers, /ready answers 503; once
// unreachable_timeout (5s here) passed with no broker answering and nothing handed out or
// acknowledged, the run stops with an error naming the broker and the field, and connect exits 1.
// A continuous run retries, /ready answers 503, and once the broker is back it answers 200 again
// and the run reads on, losing nothing.
func TestBrokerDeathEndsABoundedRun(t *testing.T) {
	t.Parallel()
	for _, bounded := range []bool{true, false} {
		name := "continuous"
		if bounded {
			name = "bounded"
		}
		t.Run(name, func(t *testing.T) { testBrokerDeath(t, bounded) })
	}
}

func testBrokerDeath(t *testing.T, bounded bool) {
	const (
		partitions = 2
		perPart    = 4000
		total      = partitions * perPart
	)
	b := newOwnBroker(t)
	b.start(t)
	adm := kadm.NewClient(b.client(t))
	topic := b.createTopic(t, adm, partitions)
	prod := b.produce(t, topic, partitions, perPart, 4096)
	in := inputConfig{
		"seed_brokers":              []string{b.addr()},
		"topics":                    []string{topic},
		"start_from":                "earliest",
		"stop_at":                   "end",
		"max_range_records":         500,
		"max_in_flight":             2,
		"fetch_max_partition_bytes": 16384,
		"unreachable_timeout":       "5s",
	}
	if !bounded {
		in["stop_at"] = "never"
		delete(in, "unreachable_timeout") // refused with stop_at: never (issue 50)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	addr := freeLoopbackAddr(t)
	cfg := writeRunConfig(t, dir, in, out, withLeanPipeline(1, sleepMillisPerRecord), withHTTP(addr))
	rc := startConnect(t, 3*time.Minute, nil, "run", cfg)
	if !rc.waitFor(60*time.Second, func() bool { return completeLines(out) >= total/8 && readyStatus(addr) == http.StatusOK }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("an eighth of %d records was not written, or /ready did not answer 200, within 60s (%d written, /ready %d)\n%s", total, completeLines(out), readyStatus(addr), res)
	}
	b.kill(t)
	killed := time.Now()
	require.Lessf(t, completeLines(out), total/2, "the pipeline is too fast for this test to prove anything")
	if !rc.waitFor(30*time.Second, func() bool { return readyStatus(addr) == http.StatusServiceUnavailable }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("/ready did not answer 503 within 30s of the broker's death (%d)\n%s", readyStatus(addr), res)
	}
	t.Logf("/ready answered 503 %s after the kill", time.Since(killed).Round(100*time.Millisecond))

	if bounded {
		res, exited := waitExit(rc, 90*time.Second)
		require.Truef(t, exited, "the bounded run did not end within 90s of its broker's death\n%s", res)
		t.Logf("the run exited %d, %s after the kill", res.ExitCode, time.Since(killed).Round(100*time.Millisecond))
		require.Equalf(t, 1, res.ExitCode, "exit code of a bounded run whose broker died\n%s", res)
		for _, l := range matchingLines(res.Stdout+res.Stderr, regexp.MustCompile(`level=(warn|error)`)) {
			t.Logf("  %s", l)
		}
		log := res.Stdout + res.Stderr
		require.Regexpf(t, `Input stopped: no broker reachable: no broker of `+regexp.QuoteMeta(b.addr())+` answered for \d+s \(last failure: broker `+regexp.QuoteMeta(b.addr())+`: .*unreachable_timeout \(5s\)`, log, "the error names the broker and the field\n%s", res)
		return
	}
	// Continuous: it waits. Bring the broker back; the run reads on.
	rc.waitFor(8*time.Second, func() bool { return false })
	select {
	case <-rc.done:
		res := rc.stop(syscall.SIGTERM, time.Second)
		t.Fatalf("the continuous run exited while its broker was down\n%s", res)
	default:
	}
	b.start(t)
	if !rc.waitFor(60*time.Second, func() bool { return readyStatus(addr) == http.StatusOK }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("/ready did not answer 200 within 60s of the broker's start (%d)\n%s", readyStatus(addr), res)
	}
	if !rc.waitFor(90*time.Second, func() bool { return completeLines(out) >= total }) {
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("the continuous run wrote %d of %d records within 90s of the broker's return\n%s", completeLines(out), total, res)
	}
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	requireAtLeastOnce(t, offsetsOf(prod), readOutput(t, out))
	require.Contains(t, res.Stdout+res.Stderr, "answers again", "the log says when a broker answers again")
}
