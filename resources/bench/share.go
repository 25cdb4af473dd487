package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/share"
)

// The share mode (issue 37): members of a share group reading one partition against the input
// in a consumer group, which gives the partition to one member. Per variant and round, on a
// fresh one-partition topic and group: -records records of -size bytes are produced first (the
// backlog), then the members start, as connect processes; once they wrote the backlog's lines,
// a producer writes -share-rate records a second for -duration, each value the produce time,
// and the members' pipelines write each such record's latency (pipeline end minus produce
// time). Every member's pipeline sleeps -work per record (once per batch, batch_size() x
// -work) on -share-threads threads, and writes one line per record into a file.
//
//	go run ./resources/bench -mode share -records 100000 -size 1024 -work 200us
//
// "share_members 4" is one connect process with share_members: 4; the "batch_optimized" variants
// set share_acquire_mode: batch_optimized; "franz-go share 1" and
// "franz-go share 4" are plain franz-go share consumers (this binary, -share-child), one and four
// processes, fetching as the input's members do and accepting each poll's records once written,
// without Benthos: the ceiling of the input on this broker (issue 51). -share-group-configs sets
// more configs on the share variants' groups (such as share.partition.max.record.locks=4000).
//
// The variants "share 1 renew 1s" and "share 1 renew 200ms" (one member with that
// share_renew_interval) run only when -variants names them; -share-batch cuts the share
// variants' fetches into batches of that many records (batching.count).
//
// It prints, per variant, the time from the members' start (their processes' start and join
// included) to the first line, the backlog's MB/s and records/s from the start to the last line
// (medians and min-max over -rounds) and its records/s from the first line to the last, the latency's p50, p99 and max (medians), and
// the members' CPU seconds together (median).

// shareVariant is one way of reading the partition.
type shareVariant struct {
	name    string
	members int
	fields  func(topic, group string) string // the input's fields
	named   bool                             // runs only when -variants names it
	// raw: the members are plain franz-go share consumers (runShareConsumer), not connect
	// processes: what the broker and franz-go give without Benthos, the ceiling of the input.
	raw bool
}

// shareVariants are the variants of the share mode.
func shareVariants(o options) []shareVariant {
	group := func(topic, group string) string {
		return fmt.Sprintf("consumer_group: %q\nstart_from: earliest\nmax_in_flight: %d\nmax_range_records: %d\n", group, o.inFlight, o.rangeSize)
	}
	sharedWith := func(extra string) func(topic, group string) string {
		return func(topic, group string) string {
			f := fmt.Sprintf("share_group: %q\n", group) + extra
			if o.shareBatch > 0 {
				f += fmt.Sprintf("batching:\n  count: %d\n", o.shareBatch)
			}
			return f
		}
	}
	shared := sharedWith("")
	return []shareVariant{
		{name: "consumer group", members: 1, fields: group},
		{name: "share 1", members: 1, fields: shared},
		{name: "share 2", members: 2, fields: shared},
		{name: "share 4", members: 4, fields: shared},
		// One process with four members (issue 51's `share_members: 4`): its batches share the
		// process's pipeline threads (-share-threads).
		{name: "share_members 4", members: 1, fields: sharedWith("share_members: 4\n")},
		// The same with share_acquire_mode: batch_optimized (whole record batches a fetch).
		{name: "share 1 batch_optimized", members: 1, fields: sharedWith("share_acquire_mode: batch_optimized\n")},
		{name: "share 4 batch_optimized", members: 4, fields: sharedWith("share_acquire_mode: batch_optimized\n")},
		{name: "share_members 4 batch_optimized", members: 1, fields: sharedWith("share_members: 4\nshare_acquire_mode: batch_optimized\n")},
		// Plain franz-go share consumers, one and four processes, as the input's members
		// fetch (500 records, strict, one fetch at a time), accepting every record once written:
		// what the broker and the client allow without Benthos (issue 51).
		{name: "franz-go share 1", members: 1, raw: true},
		{name: "franz-go share 4", members: 4, raw: true},
		// One member renewing its batches at least every second (the shortest
		// share_renew_interval the lint takes), and every 200 ms (refused since
		// issue 44; a binary from before it, -connect, takes it).
		{name: "share 1 renew 1s", members: 1, fields: sharedWith("share_renew_interval: 1s\n"), named: true},
		{name: "share 1 renew 200ms", members: 1, fields: sharedWith("share_renew_interval: 200ms\n"), named: true},
	}
}

// shareSample is one round of one variant.
type shareSample struct {
	secs      float64 // backlog: the members' start to the last line
	first     float64 // the members' start to the first line
	latencies []time.Duration
	cpu       float64 // every member's user + sys seconds
}

func runShare(o options, self string) error {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(o.brokers)...), kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var variants []shareVariant
	for _, v := range shareVariants(o) {
		if (o.variants == "" && !v.named) || slices.Contains(strings.Split(o.variants, ","), v.name) {
			variants = append(variants, v)
		}
	}
	if len(variants) == 0 {
		return fmt.Errorf("-variants names none of the share mode's variants (consumer group, share 1, share 2, share 4, share_members 4, share 1 batch_optimized, share 4 batch_optimized, share_members 4 batch_optimized, franz-go share 1, franz-go share 4, share 1 renew 1s, share 1 renew 200ms)")
	}
	dir, err := os.MkdirTemp("", "kbr-share-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	results := map[string][]shareSample{}
	for round := range o.rounds {
		for _, v := range alternate(variants, round) {
			s, err := measureShare(ctx, o, self, cl, adm, dir, v, round)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", v.name, round+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s, round %d: first record %.2fs, backlog %.2fs, latency p50 %s p99 %s (%d records), CPU %.2fs\n",
				v.name, round+1, s.first, s.secs, fmtDur(pct(s.latencies, 0.5)), fmtDur(pct(s.latencies, 0.99)), len(s.latencies), s.cpu)
			results[v.name] = append(results[v.name], s)
		}
	}
	fmt.Printf("\nOne partition, %d records of %d bytes, pipeline work %s per record on %d threads per member; latency at %d records/s for %s. Medians of %d rounds (min-max).\n\n",
		o.records, o.size, o.work, o.shareThreads, o.shareRate, o.duration, o.rounds)
	fmt.Println("| variant | members | first record | backlog MB/s | records/s | after the first record | latency p50 | p99 | max | CPU s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, v := range variants {
		ss := results[v.name]
		secs := make([]float64, len(ss))
		var firsts, after, p50, p99, pmax, cpu []float64
		for i, s := range ss {
			secs[i] = s.secs
			firsts = append(firsts, s.first)
			after = append(after, float64(o.records)/max(s.secs-s.first, 1e-3))
			p50 = append(p50, float64(pct(s.latencies, 0.5)))
			p99 = append(p99, float64(pct(s.latencies, 0.99)))
			pmax = append(pmax, float64(pct(s.latencies, 1)))
			cpu = append(cpu, s.cpu)
		}
		med := medianOf(secs)
		lo, hi := slices.Min(secs), slices.Max(secs)
		fmt.Printf("| %s | %d | %.2fs | %.1f (%.1f-%.1f) | %.0f | %.0f records/s | %s | %s | %s | %.2f |\n", v.name, v.members,
			medianOf(firsts), mb(o)/med, mb(o)/hi, mb(o)/lo, float64(o.records)/med, medianOf(after),
			fmtDur(time.Duration(medianOf(p50))), fmtDur(time.Duration(medianOf(p99))), fmtDur(time.Duration(medianOf(pmax))), medianOf(cpu))
	}
	return nil
}

// medianOf returns the median of xs (the mean of the middle two for an even count).
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// measureShare runs one round of v on a fresh topic and group.
func measureShare(ctx context.Context, o options, self string, cl *kgo.Client, adm *kadm.Client, dir string, v shareVariant, round int) (shareSample, error) {
	topic := fmt.Sprintf("kbr-share-bench-%s-%d-%d", slug(v.name), round, time.Now().UnixNano())
	group := topic + "-group"
	if err := createTopic(ctx, adm, topic, 1); err != nil {
		return shareSample{}, err
	}
	defer cleanup(adm, topic, group)
	configs := map[string]string{"share.auto.offset.reset": "earliest"}
	maps.Copy(configs, o.shareConfigs)
	if v.name != "consumer group" {
		if err := share.SetGroupConfigs(ctx, cl, group, configs); err != nil {
			return shareSample{}, err
		}
	}
	value := make([]byte, o.size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	value[0] = 'B' // a backlog record: no latency
	for range o.records {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return shareSample{}, err
	}

	began := time.Now()
	var members []*child
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	for i := range v.members {
		name := fmt.Sprintf("%s-%d-%d", v.name, round, i)
		var m *child
		var err error
		if v.raw {
			out := filepath.Join(dir, slug(name)+".lines")
			m, err = startChild(name, exec.Command(self, "-brokers", o.brokers, "-share-child", topic, "-child-group", group, "-child-out", out), out)
		} else {
			m, err = startShareBenchMember(o, dir, name, topic, v.fields(topic, group))
		}
		if err != nil {
			return shareSample{}, err
		}
		members = append(members, m)
	}
	lines := func() int {
		n := 0
		for _, m := range members {
			n += countLines(m.out)
		}
		return n
	}
	wait := func(n int, limit time.Duration) error {
		deadline := time.Now().Add(limit)
		for lines() < n {
			for _, m := range members {
				if err := m.exited(); err != nil {
					return err
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d lines within %s", lines(), n, limit)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	if err := wait(1, 2*time.Minute); err != nil {
		return shareSample{}, err
	}
	first := time.Since(began).Seconds()
	if err := wait(o.records, 30*time.Minute); err != nil {
		return shareSample{}, err
	}
	s := shareSample{secs: time.Since(began).Seconds(), first: first}

	// The latency phase: -share-rate records a second for -duration.
	every := time.Second / time.Duration(max(o.shareRate, 1))
	n := 0
	tick := time.NewTicker(every)
	end := time.Now().Add(o.duration)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		val := make([]byte, max(o.size, 20))
		copy(val, "L"+fmt.Sprintf("%019d", time.Now().UnixNano()))
		for i := 20; i < len(val); i++ {
			val[i] = 'x'
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: val}, nil)
		n++
	}
	tick.Stop()
	if err := cl.Flush(ctx); err != nil {
		return shareSample{}, err
	}
	if err := wait(o.records+n, o.drain+time.Minute); err != nil {
		return shareSample{}, err
	}
	for _, m := range members {
		m.stop()
		if m.cmd.ProcessState != nil {
			s.cpu += cpuSecs(m.cmd.ProcessState)
		}
		ls, err := latencyLines(m.out)
		if err != nil {
			return shareSample{}, err
		}
		s.latencies = append(s.latencies, ls...)
	}
	members = nil
	slices.Sort(s.latencies)
	return s, nil
}

// startShareBenchMember starts one connect process with the input's fields, the pipeline of
// the share mode and a file output.
func startShareBenchMember(o options, dir, name, topic, fields string) (*child, error) {
	out := filepath.Join(dir, slug(name)+".lines")
	work := ""
	if o.work > 0 {
		work = fmt.Sprintf("    - sleep:\n        duration: '${! if batch_index() == 0 { \"%%vns\".format(batch_size() * %d) } else { \"0s\" } }'\n", o.work.Nanoseconds())
	}
	cfg := fmt.Sprintf(`http: {enabled: false}
logger: {level: warn}
metrics: {none: {}}
input:
  kafka_batched_ranges:
    seed_brokers: [ %q ]
    topics: [ %q ]
%s
pipeline:
  threads: %d
  processors:
%s    - mapping: |
        let v = content().string()
        root = if $v.has_prefix("L") { (timestamp_unix_nano() - $v.slice(1, 20).int64()).string() } else { "b" }
output:
  file: {path: %q, codec: lines}
`, o.brokers, topic, indent(strings.TrimRight(fields, "\n"), "    "), o.shareThreads, work, out)
	path := filepath.Join(dir, slug(name)+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return startChild(name, exec.Command(o.connect, "run", path), out)
}

// latencyLines returns the latencies the file's lines hold (backlog lines, "b", are skipped).
func latencyLines(path string) ([]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ls []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t := sc.Text()
		if t == "b" || t == "" {
			continue
		}
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: a line that is no latency: %q", path, t)
		}
		ls = append(ls, time.Duration(n))
	}
	return ls, sc.Err()
}

// runShareConsumer is the share mode's plain franz-go member: it joins group as the input's
// members do (kgo.ShareMaxRecords(500), strict, kgo.MaxConcurrentFetches(0): one fetch at a
// time), writes a line per record to out as the share mode's pipeline does ("b" for a backlog
// record, the latency in nanoseconds for the others, one write each), accepts the poll's records
// (MarkAcks, sent with the next fetch) and polls again, until SIGTERM.
func runShareConsumer(brokers, topic, group, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(brokers)...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
		kgo.ShareMaxRecords(share.DefaultMaxRecords), kgo.ShareMaxRecordsStrict(), kgo.MaxConcurrentFetches(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	line := make([]byte, 0, 64)
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "share fetch %s/%d: %v\n", t, p, err)
		})
		var werr error
		fs.EachRecord(func(r *kgo.Record) {
			line = line[:0]
			if len(r.Value) >= 20 && r.Value[0] == 'L' {
				at, _ := strconv.ParseInt(string(r.Value[1:20]), 10, 64)
				line = strconv.AppendInt(line, time.Now().UnixNano()-at, 10)
			} else {
				line = append(line, 'b')
			}
			if _, err := f.Write(append(line, '\n')); err != nil && werr == nil {
				werr = err
			}
		})
		if werr != nil {
			return werr
		}
		cl.MarkAcks(kgo.AckAccept)
	}
}
