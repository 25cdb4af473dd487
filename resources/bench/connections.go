package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/resources/bench/procstat"
)

// connsResult is what one variant held and used at steady state.
type connsResult struct {
	readIn       time.Duration  // from start until every record was written
	minC, maxC   int            // connections to broker ports over the window's samples
	perBroker    map[int32]int  // at the last sample, by node ID
	cpuPct       float64        // over the window, % of one core
	remoteCounts map[string]int // at the last sample, by remote address
}

// connsVariant is one continuous reader in the connections mode.
type connsVariant struct {
	name  string
	extra string // input fields; unused for the baseline
}

// runConnections measures, for every partition count, the steady-state connections and CPU of
// the baseline and of the input at every -capacity, on one caught-up topic.
func runConnections(o options, self string) error {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(o.brokers)...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ports, err := brokerPorts(ctx, adm)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kbr-conns")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	all := []connsVariant{{name: "baseline"}}
	for _, c := range o.capacities {
		v := connsVariant{name: "input", extra: o.inputExtra}
		if c != "default" {
			v.name = "input capacity " + c
			v.extra = strings.TrimSpace(o.inputExtra + "\nconsumer_cache: {capacity: " + c + "}")
		}
		all = append(all, v)
	}
	var variants []connsVariant
	for _, v := range all {
		if o.variants == "" || slices.Contains(strings.Split(o.variants, ","), v.name) {
			variants = append(variants, v)
		}
	}

	results := map[int]map[string]connsResult{}
	for _, p := range o.partitionList {
		topic := fmt.Sprintf("kbr-conns-p%d-%d", p, time.Now().UnixNano())
		if err := createTopic(ctx, adm, topic, p); err != nil {
			return err
		}
		want := p * o.perPartition
		for i := range want {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % p), Value: []byte("x")}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			cleanup(adm, topic)
			return err
		}
		results[p] = map[string]connsResult{}
		var groups []string
		for _, v := range variants {
			group := topic + "-" + slug(v.name)
			groups = append(groups, group)
			r, err := measureConns(o, self, dir, v, topic, group, want, ports)
			if err != nil {
				cleanup(adm, topic, groups...)
				return fmt.Errorf("%d partitions, %s: %w", p, v.name, err)
			}
			results[p][v.name] = r
			fmt.Fprintf(os.Stderr, "%4d partitions %-20s read in %s, connections %d-%d %v, CPU %.2f%%\n",
				p, v.name, r.readIn.Round(time.Millisecond), r.minC, r.maxC, r.remoteCounts, r.cpuPct)
		}
		cleanup(adm, topic, groups...)
	}

	fmt.Printf("\nconnections and idle CPU: %d records per partition read, then %s of steady state, then a %s window (connections sampled every second); connect %s; input extra %q; %d brokers\n\n",
		o.perPartition, o.steady, o.window, o.connect, o.inputExtra, len(ports))
	fmt.Println("| partitions | variant | read all in | connections (min-max) | per broker (node: n) | CPU % of one core |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, p := range o.partitionList {
		for _, v := range variants {
			r := results[p][v.name]
			var per []string
			for _, id := range slices.Sorted(maps.Keys(r.perBroker)) {
				per = append(per, fmt.Sprintf("%d: %d", id, r.perBroker[id]))
			}
			conns := fmt.Sprint(r.maxC)
			if r.minC != r.maxC {
				conns = fmt.Sprintf("%d-%d", r.minC, r.maxC)
			}
			fmt.Printf("| %d | %s | %s | %s | %s | %.2f |\n", p, v.name, r.readIn.Round(10*time.Millisecond), conns, strings.Join(per, ", "), r.cpuPct)
		}
	}
	return nil
}

// measureConns runs variant v on topic in group until it has written want lines, waits o.steady,
// then samples its connections to the broker ports every second over o.window and its CPU
// time across it.
func measureConns(o options, self, dir string, v connsVariant, topic, group string, want int, ports map[uint16]int32) (connsResult, error) {
	start := time.Now()
	var (
		c   *child
		err error
	)
	if v.name == "baseline" {
		c, err = startGroupBaseline(o, self, dir, group, topic, group)
	} else {
		c, err = startInput(o, dir, group, topic, group, v.extra)
	}
	if err != nil {
		return connsResult{}, err
	}
	defer c.stop()

	var r connsResult
	for n := 0; n < want; n = countLines(c.out) {
		if err := c.exited(); err != nil {
			return r, err
		}
		if time.Since(start) > o.readTimeout {
			return r, fmt.Errorf("read %d of %d records in %s", n, want, o.readTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.readIn = time.Since(start)
	time.Sleep(o.steady)

	portSet := map[uint16]bool{}
	for p := range ports {
		portSet[p] = true
	}
	cpu0, err := procstat.CPUTime(c.pid())
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	r.minC = -1
	for end := t0.Add(o.window); ; {
		total, byRemote, err := procstat.ConnsTo(c.pid(), portSet)
		if err != nil {
			return r, err
		}
		if r.minC < 0 || total < r.minC {
			r.minC = total
		}
		r.maxC = max(r.maxC, total)
		r.remoteCounts = byRemote
		if !time.Now().Add(time.Second).Before(end) {
			time.Sleep(time.Until(end))
			break
		}
		time.Sleep(time.Second)
	}
	cpu1, err := procstat.CPUTime(c.pid())
	if err != nil {
		return r, err
	}
	if err := c.exited(); err != nil {
		return r, err
	}
	r.cpuPct = 100 * float64(cpu1-cpu0) / float64(time.Since(t0))
	r.perBroker = map[int32]int{}
	for addr, n := range r.remoteCounts {
		var port uint16
		if i := strings.LastIndexByte(addr, ':'); i >= 0 {
			fmt.Sscan(addr[i+1:], &port)
		}
		r.perBroker[ports[port]] += n
	}
	return r, nil
}

// countLines counts the newline-terminated lines of a file being written (0 while it does not
// exist).
func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}
