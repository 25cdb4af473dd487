// Command bench measures the kafka_batched_ranges input against a plain
// franz-go consumer (the baseline) on a real broker, in one run. It has six
// modes (-mode), each printing a Markdown table: the handover mode the group
// protocols side by side, the share mode share groups against a consumer
// group, the others the baseline beside the input.
//
// # throughput (the default)
//
// It produces N records of S bytes over P partitions (reusing the topic when
// it already holds exactly that), then runs every variant R times in
// alternating order, each as its own process so its peak RSS is its own:
//
//	baseline            the raw consumer: a franz-go direct consumer reading every partition to its
//	                    end offset, tuned (10 MiB per partition per fetch, 50 MiB per fetch), counting
//	                    records and bytes, no Benthos
//	ceiling             a Benthos input of the benchmark's own (resources/bench/ceiling) handing out
//	                    pre-built records as batches of -ceiling-batch records, built by the input's
//	                    own code (plugin.Messages) into drop: no Kafka, what Benthos costs per message
//	input               connect run with kafka_batched_ranges (stop_at: end) into drop
//	input ordered       the same with ordered: true
//	no cache 1000       consumer_cache.capacity 0 (a new client per range), max_range_records 1000
//	no cache 10000      the same at max_range_records 10000
//	input 1000          the cache at max_range_records 1000 (what no cache 1000 is compared with)
//	kcat                kcat -C -o beginning -e over every partition, payloads to /dev/null
//	python cached       factory.py: a Python ConsumerFactory reading (partition, low, high) ranges of
//	                    -max-range-records on -python-threads threads, one cached confluent-kafka
//	                    consumer per thread (the approach this project comes from)
//	python no cache     the same with a new consumer per range
//	bento               Bento's kafka_franz input (github.com/warpstreamlabs/bento v1.10.0, no group) into
//	                    drop: resources/bench/bento, a module of its own; only when -variants names it
//
// The last three are the peers: what a user would pick instead. They need
// Debian's kcat and python3-confluent-kafka; -peers auto (the default) runs
// those installed and names the others, -peers install apt-gets them first
// (make bench-deps does the same), -peers off leaves them out.
//
// and prints median and min-max MB/s and records/s, the ratio of each median
// to the raw consumer's (baseline) and to the ceiling's, the median CPU time
// (user + sys) and the peak RSS; then the input's own CPU, what it spends
// beyond reading Kafka and beyond Benthos: input − baseline − ceiling CPU
// seconds (medians), as a share of the input's.
//
// -kfake runs an in-process Kafka (franz-go's kfake, in a child process of
// its own) instead of -brokers; -cpus N runs every variant pinned to N cores
// (taskset to CPUs 0..N-1 and GOMAXPROCS=N), the brokers unpinned.
//
//	go run ./resources/bench -records 2000000 -size 1024 -partitions 8
//	go run ./resources/bench -kfake -records 1000000 -size 1024 -partitions 256 -rounds 5 -variants baseline,input,ceiling
//	go run ./resources/bench -cpus 1 -records 2000000 -size 100 -partitions 8
//
// # latency
//
// For every partition count in -partitions (default 8,300) and every variant,
// on a fresh topic and group of its own: a producer writes one small record
// every -interval (50ms), round-robin over the partitions, its value the
// produce time in unix nanoseconds. Once the reader wrote its first line, a
// -warmup (3s) passes, then the records produced during -duration (20s) are
// counted: latency is the time this command read a record's line from the
// reader's output file (inotify, so within a fraction of a millisecond of the
// write) minus the time in its value. Variants, run one after the other:
//
//	baseline  a franz-go group consumer (kgo.ConsumeTopics, kgo.ConsumerGroup, default fetch settings)
//	          in a child process, writing each value as a line to a file
//	input     connect run: kafka_batched_ranges, continuous, consumer_group, start_from earliest,
//	          plus -input-extra, into output file (codec lines)
//	kcat      kcat -G (a librdkafka group consumer), unbuffered (-u), values as lines into a file
//	          (when installed)
//	python    group.py: a confluent-kafka consumer subscribed in a group (default settings), each
//	          value written as a line, unbuffered (when installed; the factory reads bounded ranges only)
//	bento     Bento's kafka_franz input with consumer_group into output file (codec lines); only when
//	          -variants names it (-bento, or built from resources/bench/bento)
//
// It prints p50, p90, p99 and max per variant and the input's p50 and p99 as a
// multiple of the baseline's:
//
//	go build -o /tmp/connect-new ./cmd/connect
//	go run ./resources/bench -mode latency -connect /tmp/connect-new
//	go run ./resources/bench -mode latency -connect /tmp/connect-old -partitions 8 -input-extra 'poll_interval: 50ms'
//
// # connections
//
// For every partition count in -partitions (default 8,300,1000): a topic with
// -per-partition (3) records in each partition, read to the end by every
// variant in turn (the baseline above, and the input once per -capacity
// value, "default" leaving consumer_cache.capacity unset), each in a group of
// its own. Once a variant wrote every record it runs -steady (15s) caught up;
// then, over a -window (20s), its TCP connections to the brokers' ports are
// counted every second from its sockets (/proc/<pid>/fd matched to
// /proc/<pid>/net/tcp and tcp6, see procstat) and its CPU time (utime+stime)
// is taken across the window, as % of one core:
//
//	go run ./resources/bench -mode connections -connect /tmp/connect-new -capacity default,400
//	go run ./resources/bench -mode connections -connect /tmp/connect-old -capacity 64,400 -partitions 300
//
// # handover
//
// For every group protocol in -protocols (default classic:cooperative_sticky,
// classic:range, consumer), on a fresh topic of -partitions (12) and a group of
// its own: -members (2) continuous input members (connect run, as in the
// latency mode, each writing its own file, logger at info) join; once each
// logged an assignment and -warmup passed, one record is produced every
// -interval with the produce time as its value. After -phase (15s) a member
// joins, after -phase more the first member leaves (SIGTERM), after -phase
// more (with -kill, the default) the second is SIGKILLed and the run goes on
// for -kill-phase (60s, past the 45s session timeout of both protocols' defaults).
// It prints per protocol the latency of each record's first delivery (p50, p99,
// max over the run, and the max of the records produced in each phase), the
// records delivered again (a value in a second line of any member's file),
// split into those seen before the kill (the graceful moves) and after it, the
// time from the joiner's start to its first assignment (its log line) and
// first record, and how long the leaving member took to exit:
//
//	go run ./resources/bench -mode handover -connect /tmp/connect-new -phase 12s -kill-phase 55s
//	go run ./resources/bench -mode handover -protocols consumer -kill=false
//
// # wan
//
// Bounded reads from a distant cluster: every reader connects through a TCP
// proxy in this process (toxiproxy's, github.com/Shopify/toxiproxy/v2, with a
// latency toxic in each direction) that delays each direction by half a round
// trip, in front of a broker that advertises the proxy's address (-proxy,
// default 127.0.0.1:9494), so every connection goes through it, not only the
// bootstrap: the broker of kafka.sh wan-start (make kafka-wan-up), whose own
// listener is -upstream (127.0.0.1:9492). The mode checks that the broker
// advertises the proxy and that every reader connected through it. For every
// partition count in -partitions (default 1,8; -wan-records records each,
// default 400,000 for 1 partition and 800,000 for 8, of -size bytes, produced
// without delay) and every round trip in -rtt (default 0,10ms,50ms; 1
// partition also at 100ms unless -rtt100=false), the readers run -rounds
// times in alternating order, each as its own process, rated from the first
// record it delivered to its last (the consumers print both times, the
// input's closing summary, logged at info, says when it handed out its first
// and its last batch, summaryMarks: no pipeline, whose processors would cost
// per message), so that what a reader pays at its start (about
// ten round trips of connections, metadata and listings for every reader)
// does not count, and from its start to its exit as in the throughput mode:
//
//	input             connect run with kafka_batched_ranges (stop_at: end, its defaults plus
//	                  -input-extra) into drop; -wan-inputs adds rows with more fields
//	tuned consumer    the baseline of the throughput mode (10 MiB per partition per fetch,
//	                  50 MiB per fetch)
//	default consumer  the same with franz-go's default fetch settings (1 MiB per partition)
//
// It prints per case and input row the MB/s (median, min-max) of each reader
// from its first record to its last, the ratio of the input's median to the
// tuned consumer's (of those), the input's and the tuned consumer's MB/s from
// start to exit, and the connections the input opened to the proxy, then as
// its last line the case of 1 partition at 50ms (or the last case), first
// record to last:
//
//	wan 1 partition rtt 50ms: input X MB/s, tuned consumer Y MB/s, input/tuned N.NNx
//
//	make bench-wan
//	go run ./resources/bench -mode wan -connect bin/connect -partitions 1 -rtt 50ms -rtt100=false -wan-inputs 'fetch_max_partition_bytes: 10MiB;max_range_records: 100000'
//
// Without -connect every mode first builds ./cmd/connect into a temp dir.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	mode          string
	brokers       string
	records       int
	size          int
	partitions    int   // the first of partitionList: the throughput mode takes one
	partitionList []int // -partitions
	rounds        int
	connect       string
	oldConnect    string // -old-connect: another connect binary, run as "old <variant>" beside each input variant
	inFlight      int
	rangeSize     int
	variants      string
	inputExtra    string // input fields (YAML lines) for the latency and connections modes
	peers         string // -peers: auto, install or off
	pyThreads     int    // threads of the Python factory
	bento         string // -bento: a prebuilt resources/bench/bento binary
	ceilingBatch  int    // -ceiling-batch: records per batch of the ceiling (0: as a fetch of the input brings)
	cpus          int    // -cpus: cores every variant is pinned to (0: not pinned)
	kfake         bool   // -kfake: an in-process Kafka instead of -brokers

	// latency
	interval, warmup, duration, drain time.Duration
	dump                              string   // -dump: a directory for every record's latency and the readers' stderr
	inputEnv                          []string // -input-env: environment added to the input's process
	inputLog                          string   // -input-log: the input's logger level

	// connections
	capacities     []string // consumer_cache.capacity values, "default" for unset
	perPartition   int
	steady, window time.Duration
	readTimeout    time.Duration

	// share
	work         time.Duration     // -work: pipeline time per record
	shareThreads int               // -share-threads: pipeline threads per member
	shareRate    int               // -share-rate: records a second in the latency phase
	shareConfigs map[string]string // -share-group-configs: configs of the share variants' groups
	shareBatch   int               // -share-batch: batching.count of the share variants

	// keyorder
	keys int // -keys: distinct keys of the keyorder mode's records

	// wan
	rtts          []time.Duration // -rtt
	rtt100        bool            // -rtt100: 1 partition at 100ms too
	proxyListen   string          // -proxy: the latency proxy's address, which the broker advertises
	proxyUpstream string          // -upstream: the broker's own listener
	wanRecords    map[int]int     // -wan-records: records of each partition count
	wanInputs     string          // -wan-inputs: more input rows

	// handover
	protocols        []string // -protocols: consumer or classic:<balancer>
	members          int
	phase, killPhase time.Duration
	kill             bool
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "throughput", "throughput, latency, connections, handover, share, wan or keyorder")
	flag.StringVar(&o.brokers, "brokers", envOr("KBR_KAFKA_BROKERS", "127.0.0.1:9092"), "seed brokers")
	flag.IntVar(&o.records, "records", 2_000_000, "records to produce")
	flag.IntVar(&o.size, "size", 1024, "record value size in bytes")
	partitions := flag.String("partitions", "", "partitions, comma-separated in the latency, connections and wan modes (default 8; latency 8,300; connections 8,300,1000; handover 12; wan 1,8)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of every variant")
	flag.StringVar(&o.connect, "connect", "", "connect binary (default: build ./cmd/connect into a temp dir)")
	flag.StringVar(&o.oldConnect, "old-connect", "", "throughput: another connect binary (an older build): each input variant X also runs with it as \"old X\" (name it in -variants), alternated with the others in one run, to compare two builds under the same load")
	flag.IntVar(&o.inFlight, "max-in-flight", 16, "max_in_flight of the input variants")
	flag.IntVar(&o.rangeSize, "max-range-records", 10000, "max_range_records of the input and ordered variants")
	flag.StringVar(&o.variants, "variants", "", "comma-separated subset of variants to run (default all)")
	flag.StringVar(&o.inputExtra, "input-extra", "", "latency, connections, wan: extra kafka_batched_ranges fields, YAML lines (e.g. 'poll_interval: 50ms')")
	flag.StringVar(&o.peers, "peers", "auto", "throughput, latency: the peers (kcat, the Python factory): auto runs those installed, install apt-gets the missing ones first, off leaves them out")
	flag.IntVar(&o.pyThreads, "python-threads", 16, "threads of the Python factory (one range each at a time, like max_in_flight)")
	flag.StringVar(&o.bento, "bento", "", "throughput, latency: the Bento binary of the bento variant (default: build resources/bench/bento into a temp dir; the variant runs only when -variants names it)")
	flag.IntVar(&o.ceilingBatch, "ceiling-batch", 0, "throughput: records per batch of the ceiling variant (0: what one fetch of the input brings, fetch_max_partition_bytes / -size, at most -max-range-records)")
	flag.IntVar(&o.cpus, "cpus", 0, "throughput: pin every variant to this many cores (CPUs 0..N-1, GOMAXPROCS=N); 0 leaves them unpinned")
	flag.BoolVar(&o.kfake, "kfake", false, "throughput: read an in-process Kafka (kfake, in a child process) instead of -brokers")
	flag.DurationVar(&o.interval, "interval", 50*time.Millisecond, "latency: time between two produced records")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "latency: time after the first line read that is not counted; 0 counts from the first record, produced once the reader holds its assignment")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "latency: measurement window")
	flag.DurationVar(&o.drain, "drain", 10*time.Second, "latency: how long to wait for the window's last records")
	flag.StringVar(&o.dump, "dump", "", "latency: a directory to write, per partition count and variant, every record of the window (produced at, partition, latency, produce ack; CSV) and the reader's stderr")
	flag.StringVar(&o.inputLog, "input-log", "warn", "latency: the input's logger level (trace logs every franz-go request with its timing; with -dump to keep it)")
	inputEnv := flag.String("input-env", "", "latency: space-separated NAME=value pairs added to the input's environment (e.g. 'GODEBUG=gctrace=1', with -dump to keep its stderr)")
	capacities := flag.String("capacity", "default", "connections: comma-separated consumer_cache.capacity values, one input variant each; \"default\" leaves it unset")
	flag.IntVar(&o.perPartition, "per-partition", 3, "connections: records in each partition")
	flag.DurationVar(&o.steady, "steady", 15*time.Second, "connections: time caught up before the window")
	flag.DurationVar(&o.window, "window", 20*time.Second, "connections: window over which connections and CPU are measured")
	flag.DurationVar(&o.readTimeout, "read-timeout", 3*time.Minute, "connections: time allowed to read every record")
	protocols := flag.String("protocols", "classic:cooperative_sticky,classic:range,consumer", "handover: comma-separated group protocols, consumer or classic:<balancer>, one run each")
	flag.IntVar(&o.members, "members", 2, "handover: members at the start (one more joins)")
	flag.DurationVar(&o.phase, "phase", 15*time.Second, "handover: time before the join, between the join and the leave, and between the leave and the kill")
	flag.BoolVar(&o.kill, "kill", true, "handover: SIGKILL the second member after the leave")
	flag.DurationVar(&o.killPhase, "kill-phase", 60*time.Second, "handover: time after the kill (longer than the session timeout, 45s by default, so the killed member's partitions move)")
	flag.DurationVar(&o.work, "work", 0, "share: pipeline time per record (a sleep of batch_size() x work per batch)")
	flag.IntVar(&o.shareThreads, "share-threads", 2, "share: pipeline threads of each member")
	flag.IntVar(&o.keys, "keys", 64, "keyorder: distinct keys of the records")
	flag.IntVar(&o.shareRate, "share-rate", 200, "share: records a second produced in the latency phase (for -duration)")
	rtts := flag.String("rtt", "0,10ms,50ms", "wan: round trips between the readers and the broker, comma-separated, each a multiple of 2ms (the proxy delays each direction by half)")
	flag.BoolVar(&o.rtt100, "rtt100", true, "wan: also read 1 partition at a 100ms round trip (issue 46's target)")
	flag.StringVar(&o.proxyListen, "proxy", "127.0.0.1:9494", "wan: the latency proxy's listen address, which the broker advertises (kafka.sh wan-start: KBR_KAFKA_WAN_PORT + 2)")
	flag.StringVar(&o.proxyUpstream, "upstream", "127.0.0.1:9492", "wan: the broker's own listener, where the proxy forwards (kafka.sh wan-start: KBR_KAFKA_WAN_PORT)")
	wanRecordsFlag := flag.String("wan-records", "1:400000,8:800000", "wan: records of each partition count, partitions:records pairs, comma-separated (a count not listed: 100,000 per partition)")
	flag.StringVar(&o.wanInputs, "wan-inputs", "", "wan: more input rows, ';' between rows, ',' between the fields of one (e.g. 'fetch_max_partition_bytes: 10MiB;max_range_records: 100000'), each added to -input-extra")
	flag.IntVar(&o.shareBatch, "share-batch", 0, "share: batching.count of the share variants (0: none, a batch per fetch and partition), to spread a fetch over the pipeline's threads")
	baseline := flag.String("baseline-child", "", "internal: run the baseline consumer on this topic and exit")
	baselineTuned := flag.Bool("baseline-tuned", true, "internal: the baseline consumer's fetch settings, tuned (10 MiB per partition, 50 MiB per fetch) or franz-go's defaults")
	kfakeChild := flag.Bool("kfake-child", false, "internal: run a kfake cluster, print its address, and serve until stdin closes")
	produceChild := flag.String("produce-child", "", "internal: produce -records records of -size bytes over -partitions partitions to this topic unless it holds them, and exit")
	groupChild := flag.String("group-child", "", "internal: run the continuous baseline group consumer on this topic until SIGTERM")
	shareChild := flag.String("share-child", "", "internal: run the share mode's franz-go share consumer on this topic until SIGTERM (its group -child-group, its file -child-out)")
	shareConfigs := flag.String("share-group-configs", "", "share: configs set on every share variant's group besides share.auto.offset.reset: earliest, name=value pairs, comma-separated (e.g. share.partition.max.record.locks=4000)")
	childGroup := flag.String("child-group", "", "internal: the group of -group-child")
	childOut := flag.String("child-out", "", "internal: the output file of -group-child")
	flag.Parse()

	if *kfakeChild {
		if err := serveKfake(); err != nil {
			fmt.Fprintln(os.Stderr, "kfake:", err)
			os.Exit(1)
		}
		return
	}
	if *baseline != "" {
		if err := runBaseline(o.brokers, *baseline, *baselineTuned); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			os.Exit(1)
		}
		return
	}
	if *produceChild != "" {
		o.partitions, _ = strconv.Atoi(*partitions)
		produced, err := ensureTopic(context.Background(), o, *produceChild)
		if err != nil {
			fmt.Fprintln(os.Stderr, "produce:", err)
			os.Exit(1)
		}
		if produced {
			fmt.Println("produced")
		}
		return
	}
	if *shareChild != "" {
		if err := runShareConsumer(o.brokers, *shareChild, *childGroup, *childOut); err != nil {
			fmt.Fprintln(os.Stderr, "share consumer:", err)
			os.Exit(1)
		}
		return
	}
	if *shareConfigs != "" {
		o.shareConfigs = map[string]string{}
		for _, kv := range strings.Split(*shareConfigs, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fmt.Fprintf(os.Stderr, "bench: -share-group-configs takes name=value pairs, got %q\n", kv)
				os.Exit(2)
			}
			o.shareConfigs[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if *groupChild != "" {
		if err := runGroupConsumer(o.brokers, *groupChild, *childGroup, *childOut); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			os.Exit(1)
		}
		return
	}
	defaults := map[string]string{"throughput": "8", "latency": "8,300", "connections": "8,300,1000", "handover": "12", "share": "1", "wan": "1,8", "keyorder": "1"}
	if _, ok := defaults[o.mode]; !ok {
		fmt.Fprintf(os.Stderr, "bench: -mode must be throughput, latency, connections, handover, share, wan or keyorder, got %q\n", o.mode)
		os.Exit(2)
	}
	var err error
	if o.rtts, err = parseRTTs(*rtts); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.wanRecords, err = parseWANRecords(*wanRecordsFlag); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *partitions == "" {
		*partitions = defaults[o.mode]
	}
	for _, f := range strings.Split(*partitions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -partitions must be positive integers, got %q\n", *partitions)
			os.Exit(2)
		}
		o.partitionList = append(o.partitionList, n)
	}
	o.partitions = o.partitionList[0]
	if (o.mode == "throughput" || o.mode == "handover") && len(o.partitionList) > 1 {
		fmt.Fprintf(os.Stderr, "bench: the %s mode takes one partition count, got %q\n", o.mode, *partitions)
		os.Exit(2)
	}
	o.inputEnv = strings.Fields(*inputEnv)
	for _, p := range strings.Split(*protocols, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.protocols = append(o.protocols, p)
		}
	}
	for _, c := range strings.Split(*capacities, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.capacities = append(o.capacities, c)
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// alternate returns the variants in their order in even rounds and reversed in odd ones, so
// no variant always runs first (on a cold cache) or right after the same other.
func alternate[T any](variants []T, round int) []T {
	order := slices.Clone(variants)
	if round%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// selected returns the names among all that -variants names (all of them without it).
func selected(o options, all []string) []string {
	if o.variants == "" {
		return all
	}
	var out []string
	for _, v := range all {
		if slices.Contains(strings.Split(o.variants, ","), v) {
			out = append(out, v)
		}
	}
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// variant is one way of reading the topic, run as a child process.
type variant struct {
	name string
	cmd  func(topic string) *exec.Cmd
	run  func(topic string) (sample, error) // instead of cmd, for a reader that does not stop at the end (bento)
}

// sample is one run of one variant.
type sample struct {
	secs  float64
	cpu   float64 // user + sys seconds
	rssKB int64
	// first and last are when the child delivered its first and its last record (unix
	// nanoseconds), as it printed them (markFirst, markLast); 0 when it did not.
	first, last int64
}

func run(o options) error {
	if o.connect == "" {
		dir, err := os.MkdirTemp("", "kbr-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.connect = filepath.Join(dir, "connect")
		build := exec.Command("go", "build", "-o", o.connect, "./cmd/connect")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build connect: %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	switch o.mode {
	case "latency":
		return runLatency(o, self)
	case "connections":
		return runConnections(o, self)
	case "handover":
		return runHandover(o)
	case "share":
		return runShare(o, self)
	case "wan":
		return runWAN(o, self)
	case "keyorder":
		return runKeyOrder(o)
	}

	if o.kfake {
		addr, stop, err := startKfake(self)
		if err != nil {
			return err
		}
		defer stop()
		o.brokers = addr
	}
	if o.cpus < 0 || o.cpus > runtime.NumCPU() {
		return fmt.Errorf("-cpus must be between 0 and this machine's %d, got %d", runtime.NumCPU(), o.cpus)
	}
	topic := fmt.Sprintf("kbr-bench-p%d-n%d-s%d", o.partitions, o.records, o.size)
	t0 := time.Now()
	produced, err := ensureTopicInChild(o, self, topic)
	if err != nil {
		return err
	}
	if produced {
		fmt.Printf("produced %d records of %d bytes over %d partitions to %s in %s\n", o.records, o.size, o.partitions, topic, time.Since(t0).Round(time.Millisecond))
	} else {
		fmt.Printf("reusing %s (%d records of %d bytes over %d partitions)\n", topic, o.records, o.size, o.partitions)
	}

	cfgDir, err := os.MkdirTemp("", "kbr-bench-cfg")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cfgDir)
	var olds []variant // with -old-connect: each input variant run by the other binary
	input := func(name string, extra string, rangeSize int) variant {
		fields := fmt.Sprintf("max_in_flight: %d\nmax_range_records: %d\n%s", o.inFlight, rangeSize, extra)
		if o.oldConnect != "" {
			old := o
			old.connect = o.oldConnect
			olds = append(olds, boundedInput(old, cfgDir, "old "+name, fields))
		}
		return boundedInput(o, cfgDir, name, fields)
	}
	all := []variant{
		baselineVariant(o, self, "baseline", true),
		input("input", "", o.rangeSize),
		input("input ordered", "ordered: true", o.rangeSize),
		// Issue 54: each range handed out as archives (one message per piece of
		// at most 16 MiB), and record mode without per-record metadata.
		input("input archive", "archive: {format: binary}", o.rangeSize),
		input("input bare", "record_metadata: false", o.rangeSize),
		input("input 1000", "", 1000),
		input("no cache 1000", "consumer_cache: {capacity: 0}", 1000),
		input("no cache 10000", "consumer_cache: {capacity: 0}", 10000),
		ceilingVariant(o, cfgDir),
	}
	all = append(all, olds...)
	kcat, python, err := setupPeers(o.peers)
	if err != nil {
		return err
	}
	peers, err := peerVariants(o, cfgDir, kcat, python)
	if err != nil {
		return err
	}
	all = append(all, peers...)
	if slices.Contains(strings.Split(o.variants, ","), "bento") {
		bv, err := bentoVariant(o, cfgDir)
		if err != nil {
			return err
		}
		all = append(all, bv)
	}
	var variants []variant
	for _, v := range all {
		if o.variants == "" || slices.Contains(strings.Split(o.variants, ","), v.name) {
			variants = append(variants, v)
		}
	}

	results := map[string][]sample{}
	for round := range o.rounds {
		for _, v := range alternate(variants, round) {
			var s sample
			if v.run != nil {
				s, err = v.run(topic)
			} else {
				s, err = runChild(pinned(o, v.cmd(topic)))
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, v.name, err)
			}
			results[v.name] = append(results[v.name], s)
			fmt.Fprintf(os.Stderr, "round %d %-15s %6.2fs %7.1f MB/s  CPU %6.2fs  peak RSS %4d MiB\n", round+1, v.name, s.secs, mb(o)/s.secs, s.cpu, s.rssKB/1024)
		}
	}
	printTable(o, variants, results)
	return nil
}

// boundedInput is the variant name: connect run with kafka_batched_ranges reading every
// partition of the topic from -brokers to its end offsets (stop_at: end) into drop, with the
// input fields in fields (YAML lines, indented here) and the defaults for the others. Its
// config is written to dir when the variant runs.
func boundedInput(o options, dir, name, fields string) variant {
	// At info the input's closing summary says when it handed out its first
	// and last batch, which the table's reading rates use (one line at the
	// end: nothing per message).
	return boundedInputLogging(o, dir, name, fields, "info")
}

// boundedInputLogging is boundedInput with the logger at level (the wan mode reads the
// input's own times from its closing summary, at info).
func boundedInputLogging(o options, dir, name, fields, level string) variant {
	return variant{name: name, cmd: func(topic string) *exec.Cmd {
		path := filepath.Join(dir, slug(name)+".yaml")
		cfg := fmt.Sprintf(`http: {enabled: false}
logger: {level: %s}
metrics: {none: {}}
input:
  kafka_batched_ranges:
    seed_brokers: [ %q ]
    topics: [ %q ]
    stop_at: end
%s
output:
  drop: {}
`, level, o.brokers, topic, indent(fields, "    "))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			panic(err)
		}
		return exec.Command(o.connect, "run", path)
	}}
}

// baselineVariant is the variant name: this binary as a franz-go direct consumer of -brokers
// (runBaseline), tuned or with franz-go's default fetch settings.
func baselineVariant(o options, self, name string, tuned bool) variant {
	return variant{name: name, cmd: func(topic string) *exec.Cmd {
		return exec.Command(self, "-brokers", o.brokers, "-baseline-tuned="+strconv.FormatBool(tuned), "-baseline-child", topic)
	}}
}

func mb(o options) float64 { return float64(o.records) * float64(o.size) / 1e6 }

// runChild runs cmd to completion and returns its wall time and peak RSS.
func runChild(cmd *exec.Cmd) (sample, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if cmd.Stdout == nil {
		cmd.Stdout = &stderr
	}
	start := time.Now()
	err := cmd.Run()
	secs := time.Since(start).Seconds()
	if f, ok := cmd.Stdout.(*os.File); ok {
		f.Close()
	}
	if err != nil {
		return sample{}, fmt.Errorf("%v: %s", err, tail(stderr.String(), 2000))
	}
	first, last := recordMarks(stderr.String())
	return sample{secs: secs, cpu: cpuSecs(cmd.ProcessState), rssKB: maxRSS(cmd.ProcessState), first: first, last: last}, nil
}

// cpuSecs is a finished process's CPU time, user + sys, in seconds.
func cpuSecs(ps *os.ProcessState) float64 {
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

// maxRSS is a finished process's peak RSS in KiB.
func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss // KiB on Linux
	}
	return 0
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func printTable(o options, variants []variant, results map[string][]sample) {
	pin := "not pinned"
	if o.cpus > 0 {
		pin = fmt.Sprintf("pinned to %d of %d cores", o.cpus, runtime.NumCPU())
	}
	broker := "Kafka at " + o.brokers
	if o.kfake {
		broker = "kfake"
	}
	fmt.Printf("\n%d records x %d B over %d partitions (%.0f MB), %s, %d rounds (medians), max_in_flight %d, %s/%s, variants %s\n\n",
		o.records, o.size, o.partitions, mb(o), broker, o.rounds, o.inFlight, runtime.GOOS, runtime.GOARCH, pin)
	fmt.Println("| variant | MB/s median (min-max) | records/s median | vs raw consumer | vs ceiling | CPU s (user+sys) | peak RSS MiB (max) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	base, ceil := median(results["baseline"]), median(results["ceiling"])
	ratio := func(of, med float64) string {
		if of <= 0 || med <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", of/med)
	}
	for _, v := range variants {
		ss := results[v.name]
		med := median(ss)
		lo, hi := minMax(ss)
		var rss int64
		for _, s := range ss {
			rss = max(rss, s.rssKB)
		}
		fmt.Printf("| %s | %.1f (%.1f-%.1f) | %.0f | %s | %s | %.2f | %d |\n", v.name, mb(o)/med, mb(o)/hi, mb(o)/lo, float64(o.records)/med,
			ratio(base, med), ratio(ceil, med), medianCPU(ss), rss/1024)
	}
	var perGB []string
	for _, v := range variants {
		if cpu := medianCPU(results[v.name]); cpu > 0 {
			perGB = append(perGB, fmt.Sprintf("%s %.2f", v.name, cpu/(mb(o)/1000)))
		}
	}
	fmt.Printf("\nCPU s per GB of values (medians): %s\n", strings.Join(perGB, ", "))
	printReading(o, variants, results)
	if in, nc := median(results["input 1000"]), median(results["no cache 1000"]); in > 0 && nc > 0 {
		fmt.Printf("\ncache vs no cache at max_range_records 1000: %.2fx\n", nc/in)
	}
	if in, raw, cl := medianCPU(results["input"]), medianCPU(results["baseline"]), medianCPU(results["ceiling"]); in > 0 && raw > 0 && cl > 0 {
		own := in - raw - cl
		fmt.Printf("\nthe input's own CPU (input - raw consumer - ceiling): %.2f s of its %.2f s, %.0f%%\n", own, in, 100*own/in)
	}
}

// medianCPU returns the median CPU seconds (user + sys).
func medianCPU(ss []sample) float64 {
	cpu := make([]sample, len(ss))
	for i, s := range ss {
		cpu[i] = sample{secs: s.cpu}
	}
	return median(cpu)
}

// median returns the median wall time in seconds.
func median(ss []sample) float64 {
	if len(ss) == 0 {
		return 0
	}
	secs := make([]float64, len(ss))
	for i, s := range ss {
		secs[i] = s.secs
	}
	slices.Sort(secs)
	if len(secs)%2 == 1 {
		return secs[len(secs)/2]
	}
	return (secs[len(secs)/2-1] + secs[len(secs)/2]) / 2
}

func minMax(ss []sample) (lo, hi float64) {
	lo, hi = ss[0].secs, ss[0].secs
	for _, s := range ss {
		lo, hi = min(lo, s.secs), max(hi, s.secs)
	}
	return lo, hi
}

// ensureTopic creates and fills the topic unless it already holds exactly the
// requested records. It reports whether it produced.
// ensureTopicInChild runs ensureTopic in a child process (-produce-child):
// a child's peak RSS as Linux reports it (ru_maxrss) starts from its
// parent's at the fork, so a parent that produced the topic itself would
// report its own RSS for every variant that uses less.
func ensureTopicInChild(o options, self, topic string) (bool, error) {
	cmd := exec.Command(self, "-brokers", o.brokers, "-records", strconv.Itoa(o.records), "-size", strconv.Itoa(o.size),
		"-partitions", strconv.Itoa(o.partitions), "-produce-child", topic)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return false, fmt.Errorf("produce %s: %w", topic, err)
	}
	return strings.TrimSpace(string(out)) == "produced", nil
}

func ensureTopic(ctx context.Context, o options, topic string) (bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(o.brokers)...),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return false, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil && ends.Error() == nil {
		var total int64
		ends.Each(func(lo kadm.ListedOffset) { total += lo.Offset })
		if total == int64(o.records) && len(ends[topic]) == o.partitions {
			return false, nil
		}
		if _, err := adm.DeleteTopics(ctx, topic); err != nil {
			return false, err
		}
		time.Sleep(time.Second)
	}
	resp, err := adm.CreateTopic(ctx, int32(o.partitions), 1, map[string]*string{"retention.ms": ptr("-1"), "retention.bytes": ptr("-1")}, topic)
	if err != nil {
		return false, err
	}
	if resp.Err != nil {
		return false, fmt.Errorf("create %s: %w", topic, resp.Err)
	}
	value := make([]byte, o.size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	errc := make(chan error, 1)
	for i := range o.records {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
		if i%100_000 == 0 {
			select {
			case err := <-errc:
				return true, err
			default:
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return true, err
	}
	select {
	case err := <-errc:
		return true, err
	default:
	}
	return true, nil
}

func ptr(s string) *string { return &s }

// runBaseline reads every partition of topic from its start to the end
// offsets listed at start with a franz-go direct consumer, and checks the
// count. Tuned, it fetches up to 10 MiB per partition and 50 MiB per fetch
// and waits at most 500ms for a fetch; otherwise it keeps franz-go's defaults
// (1 MiB per partition, 50 MiB, 5s).
func runBaseline(brokers, topic string, tuned bool) error {
	ctx := context.Background()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds(brokers)...))
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	admCl.Close()
	if err != nil {
		return err
	}
	offsets := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	var want int64
	starts.Each(func(lo kadm.ListedOffset) {
		end, _ := ends.Lookup(topic, lo.Partition)
		if end.Offset > lo.Offset {
			offsets[lo.Partition] = kgo.NewOffset().At(lo.Offset)
			remaining[lo.Partition] = end.Offset
			want += end.Offset - lo.Offset
		}
	})
	opts := []kgo.Opt{kgo.SeedBrokers(seeds(brokers)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})}
	if tuned {
		opts = append(opts, kgo.FetchMaxBytes(50<<20), kgo.FetchMaxPartitionBytes(10<<20),
			kgo.FetchMaxWait(500*time.Millisecond))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var n, bytes int64
	var first time.Time
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("%s/%d: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if n == 0 {
				first = time.Now()
			}
			n++
			bytes += int64(len(r.Value))
			if r.Offset == end-1 {
				delete(remaining, r.Partition)
			}
		})
	}
	last := time.Now()
	if n != want {
		return errors.New("baseline read a different number of records than listed")
	}
	if n > 0 {
		// For the wan mode, which rates a read from its first record to its last.
		fmt.Printf("%s %d\n%s %d\n", markFirst, first.UnixNano(), markLast, last.UnixNano())
	}
	return nil
}

// printReading prints each variant's rate from its first record to its last
// (the raw consumer's own marks, the input's handout times from its closing
// summary), medians, and its ratio to the raw consumer's: the rate without
// each process's start (connect's takes about 0.1 s, a quarter of the raw
// consumer's whole run on 410 MB) and its exit. Variants without marks are
// left out.
func printReading(o options, variants []variant, results map[string][]sample) {
	reading := func(ss []sample) float64 {
		var r []sample
		for _, s := range ss {
			if s.first > 0 && s.last > s.first {
				r = append(r, sample{secs: s.reading()})
			}
		}
		if len(r) < len(ss) {
			return 0 // a round without marks: no median of the others alone
		}
		return median(r)
	}
	base := reading(results["baseline"])
	var parts []string
	for _, v := range variants {
		med := reading(results[v.name])
		if med <= 0 {
			continue
		}
		part := fmt.Sprintf("%s %.1f MB/s", v.name, mb(o)/med)
		if base > 0 {
			part += fmt.Sprintf(" (%.2fx)", base/med)
		}
		parts = append(parts, part)
	}
	if len(parts) > 0 {
		fmt.Printf("\nFrom the first record to the last (medians; vs raw consumer): %s\n", strings.Join(parts, ", "))
	}
}
