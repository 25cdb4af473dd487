package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The readers of the wan mode, as -variants names them.
const (
	wanInput   = "input"
	wanTuned   = "tuned consumer"
	wanDefault = "default consumer"
)

// wanCase is one measurement of the wan mode: a topic of partitions partitions and records
// records read through the proxy at round trip rtt.
type wanCase struct {
	partitions, records int
	rtt                 time.Duration
}

// wanSample is one run of one reader: its process's sample and the connections it opened to
// the proxy.
type wanSample struct {
	sample
	conns int64
}

// runWAN runs the wan mode: for every partition count and round trip, every reader R times in
// alternating order through a latency proxy in front of a broker that advertises the proxy's
// address, then prints the table and the summary line.
func runWAN(o options, self string) error {
	for _, r := range o.rtts {
		if err := checkRTT(r); err != nil {
			return err
		}
	}
	if o.kfake {
		return errors.New("-kfake: the wan mode needs a broker that advertises the proxy's address (kafka.sh wan-start); kfake advertises its own")
	}
	proxy, err := startLatencyProxy(o.proxyListen, o.proxyUpstream)
	if err != nil {
		return err
	}
	defer proxy.Close()
	o.brokers = proxy.Addr()
	if err := checkAdvertised(o.brokers); err != nil {
		return err
	}

	cfgDir, err := os.MkdirTemp("", "kbr-bench-wan")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cfgDir)
	rows := wanInputRows(o.inputExtra, o.wanInputs)
	var variants []variant
	for _, name := range selected(o, []string{wanInput, wanTuned, wanDefault}) {
		switch name {
		case wanInput:
			for _, fields := range rows {
				variants = append(variants, boundedInputLogging(o, cfgDir, wanRowName(fields), fields, "info"))
			}
		case wanTuned:
			variants = append(variants, baselineVariant(o, self, wanTuned, true))
		case wanDefault:
			variants = append(variants, baselineVariant(o, self, wanDefault, false))
		}
	}
	if names := selected(o, []string{wanInput, wanTuned}); len(names) != 2 {
		return fmt.Errorf("-variants must name %q and %q in the wan mode (the ratio), got %q", wanInput, wanTuned, o.variants)
	}

	cases := wanCases(o)
	results := map[wanCase]map[string][]wanSample{}
	for i, c := range cases {
		if i == 0 || c.partitions != cases[i-1].partitions {
			// The topic is produced and checked without delay.
			if err := proxy.SetRTT(0); err != nil {
				return err
			}
			po := o
			po.records, po.partitions = c.records, c.partitions
			t0 := time.Now()
			produced, err := ensureTopicInChild(po, self, wanTopic(c))
			if err != nil {
				return err
			}
			if produced {
				fmt.Fprintf(os.Stderr, "produced %d records of %d bytes over %d partitions to %s in %s\n", c.records, o.size, c.partitions, wanTopic(c), time.Since(t0).Round(time.Millisecond))
			}
		}
		if err := proxy.SetRTT(c.rtt); err != nil {
			return err
		}
		results[c] = map[string][]wanSample{}
		mbytes := float64(c.records) * float64(o.size) / 1e6
		for round := range o.rounds {
			for _, v := range alternate(variants, round) {
				before := proxy.Accepted()
				s, err := runChild(v.cmd(wanTopic(c)))
				if err != nil {
					return fmt.Errorf("%s, round %d, %s: %w", c, round+1, v.name, err)
				}
				conns := proxy.Accepted() - before
				if conns == 0 {
					return fmt.Errorf("%s, %s: no connection through the proxy at %s", c, v.name, o.brokers)
				}
				if s.first == 0 || s.last < s.first {
					return fmt.Errorf("%s, round %d, %s: the reader printed no %q and %q lines", c, round+1, v.name, markFirst, markLast)
				}
				results[c][v.name] = append(results[c][v.name], wanSample{sample: s, conns: conns})
				fmt.Fprintf(os.Stderr, "%s round %d %-40s first to last %6.2fs %7.1f MB/s, start to exit %6.2fs %7.1f MB/s  CPU %6.2fs  peak RSS %4d MiB  connections %d\n",
					c, round+1, v.name, s.reading(), mbytes/s.reading(), s.secs, mbytes/s.secs, s.cpu, s.rssKB/1024, conns)
			}
		}
	}
	printWANTable(o, cases, rows, results)
	return nil
}

func (c wanCase) String() string {
	return fmt.Sprintf("%d %s rtt %s", c.partitions, plural(c.partitions, "partition"), rttString(c.rtt))
}

func wanTopic(c wanCase) string {
	return fmt.Sprintf("kbr-wan-p%d-n%d", c.partitions, c.records)
}

// The lines a reader prints when it delivers its first and its last record, each followed by
// the time in unix nanoseconds: the tuned and the default consumer print them themselves
// (runBaseline); the input's come from its closing summary (summaryMarks).
const (
	markFirst = "kbr-bench first-record"
	markLast  = "kbr-bench last-record"
)

// reading is the time from the first record delivered to the last, in seconds, as the reader
// printed them.
func (s sample) reading() float64 { return float64(s.last-s.first) / 1e9 }

// recordMarks returns the times the output of a reader gives for its first and its last record
// (markFirst, markLast; for the input, the first and the last batch its closing summary says it
// handed out, summaryMarks), 0 for a line missing.
func recordMarks(out string) (first, last int64) {
	for line := range strings.SplitSeq(out, "\n") {
		if f, l, ok := summaryMarks(line); ok {
			first, last = f, l
			continue
		}
		for mark, to := range map[string]*int64{markFirst: &first, markLast: &last} {
			i := strings.Index(line, mark+" ")
			if i < 0 {
				continue
			}
			digits := line[i+len(mark)+1:]
			if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
				digits = digits[:j]
			}
			if n, err := strconv.ParseInt(digits, 10, 64); err == nil {
				*to = n
			}
		}
	}
	return first, last
}

// handedOut is how the input's closing summary (logged at info) says when it handed out its
// first and its last batch, after its start (engine.Summary).
const handedOut = "; batches handed out from "

// summaryMarks reads the input's own times from its closing summary line: the first and the
// last batch it handed out, in nanoseconds after its start (1 at the least, so 0 stays
// "missing"). No pipeline runs for them: a processor costs per message (a tracing span each),
// which the consumers never pay.
func summaryMarks(line string) (first, last int64, ok bool) {
	i := strings.Index(line, handedOut)
	if i < 0 || !strings.Contains(line, "Closed: ") {
		return 0, 0, false
	}
	f, rest, ok := strings.Cut(line[i+len(handedOut):], " to ")
	if !ok {
		return 0, 0, false
	}
	l, _, ok := strings.Cut(rest, " after the start")
	if !ok {
		return 0, 0, false
	}
	fd, err1 := time.ParseDuration(f)
	ld, err2 := time.ParseDuration(l)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return max(int64(fd), 1), max(int64(ld), 1), true
}

// wanCases returns the cases of -partitions and -rtt in that order, with 1 partition at 100ms
// added when -rtt100 asks for it.
func wanCases(o options) []wanCase {
	var cases []wanCase
	for _, p := range o.partitionList {
		rtts := slices.Clone(o.rtts)
		if o.rtt100 && p == 1 && !slices.Contains(rtts, 100*time.Millisecond) {
			rtts = append(rtts, 100*time.Millisecond)
		}
		for _, r := range rtts {
			cases = append(cases, wanCase{partitions: p, records: wanRecords(o.wanRecords, p), rtt: r})
		}
	}
	return cases
}

// wanRecords returns the records of a topic of p partitions: as -wan-records says, else
// 100,000 per partition.
func wanRecords(records map[int]int, p int) int {
	if n, ok := records[p]; ok {
		return n
	}
	return p * 100_000
}

// parseWANRecords parses -wan-records: partitions:records pairs, comma-separated.
func parseWANRecords(s string) (map[int]int, error) {
	out := map[int]int{}
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		ps, ns, ok := strings.Cut(f, ":")
		p, perr := strconv.Atoi(strings.TrimSpace(ps))
		n, nerr := strconv.Atoi(strings.TrimSpace(ns))
		if !ok || perr != nil || nerr != nil || p <= 0 || n <= 0 {
			return nil, fmt.Errorf("-wan-records must be partitions:records pairs, comma-separated, got %q", s)
		}
		out[p] = n
	}
	return out, nil
}

// parseRTTs parses -rtt: durations, comma-separated, a bare 0 allowed.
func parseRTTs(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("-rtt must be durations, comma-separated, got %q: %w", s, err)
		}
		if err := checkRTT(d); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-rtt names no round trip: %q", s)
	}
	return out, nil
}

// checkRTT refuses a round trip the proxy cannot make: it delays each direction by half of it,
// in whole milliseconds.
func checkRTT(d time.Duration) error {
	if d < 0 || d%(2*time.Millisecond) != 0 {
		return fmt.Errorf("-rtt: a round trip must be a non-negative multiple of 2ms (each direction is delayed by half, in whole milliseconds), got %s", d)
	}
	return nil
}

// wanInputRows returns the input fields of each input row: -input-extra alone (the input with
// its defaults when empty), then -input-extra with each set of -wan-inputs (';' between sets,
// ',' between the fields of a set), as YAML lines.
func wanInputRows(extra, sets string) []string {
	extra = strings.TrimSpace(extra)
	rows := []string{extra}
	for set := range strings.SplitSeq(sets, ";") {
		var lines []string
		for f := range strings.SplitSeq(set, ",") {
			if f = strings.TrimSpace(f); f != "" {
				lines = append(lines, f)
			}
		}
		if len(lines) > 0 {
			rows = append(rows, strings.TrimSpace(extra+"\n"+strings.Join(lines, "\n")))
		}
	}
	return rows
}

// wanRowName names an input row by its fields.
func wanRowName(fields string) string {
	if fields == "" {
		return wanInput
	}
	return wanInput + " " + strings.Join(strings.Split(fields, "\n"), ", ")
}

// wanLastLine is the wan mode's last line, for the first input row of one case.
func wanLastLine(c wanCase, input, tuned float64) string {
	return fmt.Sprintf("wan %d %s rtt %s: input %.1f MB/s, tuned consumer %.1f MB/s, input/tuned %.2fx",
		c.partitions, plural(c.partitions, "partition"), rttString(c.rtt), input, tuned, input/tuned)
}

func rttString(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func printWANTable(o options, cases []wanCase, rows []string, results map[wanCase]map[string][]wanSample) {
	fmt.Printf("\n%d-byte records through a latency proxy (toxiproxy %s, each direction delayed by half the round trip) in front of the broker at %s, which advertises it; connect %s; %d rounds (medians, min-max), readers alternated; MB/s from each reader's first record delivered to its last, and from its start to its exit; %s\n\n",
		o.size, "v2.5.0", o.proxyUpstream, o.connect, o.rounds, loadAverage())
	fmt.Println("| partitions | records | rtt | input fields | input MB/s, first to last record | tuned consumer MB/s, first to last | default consumer MB/s, first to last | input/tuned | input MB/s, start to exit | tuned consumer MB/s, start to exit | input connections |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	// mbps is a reader's rate: from its first record to its last (reading), or from its start
	// to its exit.
	mbps := func(c wanCase, name string, reading bool) (med, lo, hi float64) {
		ss := results[c][name]
		if len(ss) == 0 {
			return 0, 0, 0
		}
		plain := make([]sample, len(ss))
		for i, s := range ss {
			plain[i] = sample{secs: s.secs}
			if reading {
				plain[i].secs = s.reading()
			}
		}
		mbytes := float64(c.records) * float64(o.size) / 1e6
		fast, slow := minMax(plain)
		return mbytes / median(plain), mbytes / slow, mbytes / fast
	}
	cell := func(c wanCase, name string, reading bool) string {
		med, lo, hi := mbps(c, name, reading)
		if med == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f (%.1f-%.1f)", med, lo, hi)
	}
	conns := func(c wanCase, name string) string {
		var lo, hi int64 = -1, 0
		for _, s := range results[c][name] {
			if lo < 0 || s.conns < lo {
				lo = s.conns
			}
			hi = max(hi, s.conns)
		}
		if lo == hi {
			return strconv.FormatInt(hi, 10)
		}
		return fmt.Sprintf("%d-%d", lo, hi)
	}
	for _, c := range cases {
		tuned, _, _ := mbps(c, wanTuned, true)
		for _, fields := range rows {
			name := wanRowName(fields)
			in, _, _ := mbps(c, name, true)
			shown := "defaults"
			if fields != "" {
				shown = "`" + strings.Join(strings.Split(fields, "\n"), "`, `") + "`"
			}
			fmt.Printf("| %d | %d | %s | %s | %s | %s | %s | %.2fx | %s | %s | %s |\n", c.partitions, c.records, rttString(c.rtt), shown,
				cell(c, name, true), cell(c, wanTuned, true), cell(c, wanDefault, true), in/tuned,
				cell(c, name, false), cell(c, wanTuned, false), conns(c, name))
		}
	}
	// The last line: 1 partition at 50ms when measured, else the last case; first to last.
	last := cases[len(cases)-1]
	for _, c := range cases {
		if c.partitions == 1 && c.rtt == 50*time.Millisecond {
			last = c
		}
	}
	in, _, _ := mbps(last, wanRowName(rows[0]), true)
	tuned, _, _ := mbps(last, wanTuned, true)
	fmt.Println()
	fmt.Println(wanLastLine(last, in, tuned))
}

// loadAverage returns the 1, 5 and 15 minute load averages, as /proc/loadavg says.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// checkAdvertised makes sure every broker in the metadata got through seed (the proxy) is
// advertised at seed, so that every connection goes through the proxy, not only the bootstrap.
func checkAdvertised(seed string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("list the brokers through the proxy at %s (is the proxied broker up? make kafka-wan-up): %w", seed, err)
	}
	for _, b := range bs {
		if addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); addr != seed {
			return fmt.Errorf("broker %d advertises %s, not the proxy at %s, so readers would bypass the proxy: start it with kafka.sh wan-start (KBR_KAFKA_ADVERTISED_PORT)", b.NodeID, addr, seed)
		}
	}
	return nil
}

// latencyProxy is a TCP proxy (toxiproxy's, in process) that delays each direction of every
// connection by half a round trip, and counts the connections it accepted.
type latencyProxy struct {
	proxy    *toxiproxy.Proxy
	accepted atomic.Int64 // connections accepted since the start
}

// The latency toxics, one per direction.
var latencyToxics = []string{"upstream", "downstream"}

// startLatencyProxy starts a proxy on listen (host:port; port 0 picks one) to upstream, with
// no delay until SetRTT.
func startLatencyProxy(listen, upstream string) (*latencyProxy, error) {
	p := &latencyProxy{}
	// toxiproxy logs every connection it accepts at info: the count of those lines is the
	// count of connections.
	logger := zerolog.New(io.Discard).Level(zerolog.InfoLevel).Hook(zerolog.HookFunc(func(_ *zerolog.Event, _ zerolog.Level, msg string) {
		if msg == "Accepted client" {
			p.accepted.Add(1)
		}
	}))
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	p.proxy = toxiproxy.NewProxy(server, "kafka", listen, upstream)
	if err := p.proxy.Start(); err != nil {
		return nil, fmt.Errorf("start the latency proxy on %s: %w", listen, err)
	}
	for _, dir := range latencyToxics {
		toxic := fmt.Sprintf(`{"name": "latency_%s", "type": "latency", "stream": %q, "attributes": {"latency": 0}}`, dir, dir)
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			p.Close()
			return nil, fmt.Errorf("latency proxy: add the %s toxic: %w", dir, err)
		}
	}
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *latencyProxy) Addr() string { return p.proxy.Listen }

// Accepted is the number of connections the proxy accepted since it started.
func (p *latencyProxy) Accepted() int64 { return p.accepted.Load() }

// SetRTT delays each direction by rtt/2 from now on, connections already open included.
func (p *latencyProxy) SetRTT(rtt time.Duration) error {
	if err := checkRTT(rtt); err != nil {
		return err
	}
	for _, dir := range latencyToxics {
		attrs := fmt.Sprintf(`{"attributes": {"latency": %d}}`, (rtt / 2).Milliseconds())
		if _, err := p.proxy.Toxics.UpdateToxicJson("latency_"+dir, strings.NewReader(attrs)); err != nil {
			return fmt.Errorf("latency proxy: set the %s latency: %w", dir, err)
		}
	}
	return nil
}

// Close stops the proxy and closes its connections.
func (p *latencyProxy) Close() { p.proxy.Stop() }
