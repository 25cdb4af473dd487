package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// latencyResult is what one variant showed over one measurement window.
type latencyResult struct {
	produced  int             // records produced in the window
	latencies []time.Duration // of the ones seen, sorted
	acks      []time.Duration // produce round trips of the window's records, sorted
	dups      int             // lines seen again
}

func (r latencyResult) pct(p float64) time.Duration { return pct(r.latencies, p) }

// pct returns the p-quantile (0..1, nearest rank below) of sorted ds, 0 for none.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(p*float64(len(ds)-1))]
}

// runLatency measures, for every partition count, the baseline, the input and the peers, each on
// a fresh topic and group of its own.
func runLatency(o options, self string) error {
	ctx := context.Background()
	// No linger: each record is sent when produced, so its latency is the reader's alone
	// (plus the produce round trip, the same for every variant).
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(o.brokers)...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	dir, err := os.MkdirTemp("", "kbr-latency")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	names := []string{"baseline", "input"}
	kcat, python, err := setupPeers(o.peers)
	if err != nil {
		return err
	}
	names = append(names, latencyPeers(o, kcat, python)...)
	variants := selected(o, names)
	var bento string // built before the first measurement, not during one
	if slices.Contains(variants, "bento") {
		if bento, err = bentoBinary(o, dir); err != nil {
			return err
		}
	}
	results := map[int]map[string]latencyResult{}
	for _, p := range o.partitionList {
		results[p] = map[string]latencyResult{}
		for _, v := range variants {
			topic := fmt.Sprintf("kbr-latency-p%d-%s-%d", p, v, time.Now().UnixNano())
			if err := createTopic(ctx, adm, topic, p); err != nil {
				return err
			}
			if o.warmup == 0 {
				if err := prime(ctx, cl, adm, topic, p); err != nil {
					return fmt.Errorf("%d partitions, %s: %w", p, v, err)
				}
			}
			r, err := measureLatency(ctx, o, self, bento, cl, dir, v, topic, p)
			cleanup(adm, topic, topic)
			if err != nil {
				return fmt.Errorf("%d partitions, %s: %w", p, v, err)
			}
			results[p][v] = r
			fmt.Fprintf(os.Stderr, "%4d partitions %-8s seen %d of %d, p50 %s p99 %s max %s\n",
				p, v, len(r.latencies), r.produced, fmtDur(r.pct(0.5)), fmtDur(r.pct(0.99)), fmtDur(r.pct(1)))
		}
	}

	window := fmt.Sprintf("measured for %s after a %s warm-up", o.duration, o.warmup)
	if o.warmup == 0 {
		window = fmt.Sprintf("measured for %s from the first record, produced once the reader holds its assignment (no warm-up; the producer primed with a record per partition, deleted before the reader starts)", o.duration)
	}
	fmt.Printf("\nlatency: one record every %s round-robin, %s, through a file; connect %s; input extra %q\n\n",
		o.interval, window, o.connect, o.inputExtra)
	fmt.Println("| partitions | variant | seen / produced | p50 | p90 | p99 | max | p50 vs baseline | p99 vs baseline | produce ack p50 / p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, p := range o.partitionList {
		base, hasBase := results[p]["baseline"]
		for _, v := range variants {
			r := results[p][v]
			r50, r99 := "-", "-"
			if hasBase && v != "baseline" && base.pct(0.5) > 0 {
				r50 = fmt.Sprintf("%.1fx", float64(r.pct(0.5))/float64(base.pct(0.5)))
				r99 = fmt.Sprintf("%.1fx", float64(r.pct(0.99))/float64(base.pct(0.99)))
			}
			seen := fmt.Sprintf("%d / %d", len(r.latencies), r.produced)
			if r.dups > 0 {
				seen += fmt.Sprintf(" (+%d again)", r.dups)
			}
			fmt.Printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", p, v, seen,
				fmtDur(r.pct(0.5)), fmtDur(r.pct(0.9)), fmtDur(r.pct(0.99)), fmtDur(r.pct(1)), r50, r99,
				fmtDur(pct(r.acks, 0.5)), fmtDur(pct(r.acks, 0.99)))
		}
	}
	if len(variants) > 1 && slices.Contains(variants, "baseline") {
		fmt.Println()
		fmt.Print("| partitions |")
		for _, v := range variants {
			fmt.Printf(" %s p50 / p99 / max |", v)
		}
		fmt.Print("\n|---|")
		for range variants {
			fmt.Print("---|")
		}
		fmt.Println()
		for _, p := range o.partitionList {
			fmt.Printf("| %d |", p)
			for _, v := range variants {
				r := results[p][v]
				fmt.Printf(" %s / %s / %s |", fmtDur(r.pct(0.5)), fmtDur(r.pct(0.99)), fmtDur(r.pct(1)))
			}
			fmt.Println()
		}
	}
	return nil
}

// measureLatency starts variant v on topic, produces one record every o.interval (partition i
// mod partitions, value: the produce time in unix nanoseconds), waits for the first line and
// o.warmup more (with o.warmup 0: for the reader's assignment, and counts from the first record),
// then counts the records produced during o.duration: latency is the time the tailer read a
// value's line minus the time in the value. bento is the Bento binary of the bento variant.
func measureLatency(ctx context.Context, o options, self, bento string, cl *kgo.Client, dir, v, topic string, partitions int) (latencyResult, error) {
	var (
		c   *child
		err error
	)
	switch v {
	case "baseline":
		c, err = startGroupBaseline(o, self, dir, v+"-"+topic, topic, topic)
	case "input":
		c, err = startInputLogging(o, dir, v+"-"+topic, topic, topic, o.inputExtra, o.inputLog)
	default:
		c, err = startLatencyPeer(o, bento, dir, v, v+"-"+topic, topic, topic)
	}
	if err != nil {
		return latencyResult{}, err
	}
	defer c.stop()

	var (
		mu    sync.Mutex // guards seen, dups, lines, acked
		seen  = map[int64]time.Time{}
		dups  int
		lines int
		acked = map[int64]time.Time{}
	)
	tl := newTailer(c.out, func(line []byte, at time.Time) {
		ns, err := strconv.ParseInt(string(line), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		lines++
		if err != nil {
			return
		}
		if _, ok := seen[ns]; ok {
			dups++
			return
		}
		seen[ns] = at
	})
	defer tl.Close()

	var (
		produced    []int64 // produce times (unix ns) inside the window
		parts       []int32 // the partition of each of produced
		firstSeen   time.Time
		windowStart time.Time
		windowEnd   time.Time
		perr        = make(chan error, 1)
	)
	if o.warmup == 0 {
		// No warm-up: the window opens with the first record, produced as
		// soon as the reader holds its assignment, so it counts the first
		// records after a start (listing, planning, following). Before
		// that no reader could have them (the broker delays a new group's
		// first rebalance by group.initial.rebalance.delay.ms).
		if err := waitAssigned(ctx, cl, topic, c); err != nil {
			return latencyResult{}, err
		}
		windowStart = time.Now()
		windowEnd = windowStart.Add(o.duration)
	}
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		now := time.Now()
		if windowStart.IsZero() {
			mu.Lock()
			n := lines
			mu.Unlock()
			switch {
			case n > 0 && firstSeen.IsZero():
				firstSeen = now
			case !firstSeen.IsZero() && now.Sub(firstSeen) >= o.warmup:
				windowStart, windowEnd = now, now.Add(o.duration)
			case firstSeen.IsZero() && i > 0 && time.Duration(i)*o.interval > time.Minute:
				return latencyResult{}, fmt.Errorf("nothing read in a minute: %s", tail(c.stderr.String(), 2000))
			}
		} else if now.After(windowEnd) {
			break
		}
		if err := c.exited(); err != nil {
			return latencyResult{}, err
		}
		ns := now.UnixNano()
		if !windowStart.IsZero() {
			produced = append(produced, ns)
			parts = append(parts, int32(i%partitions))
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(strconv.FormatInt(ns, 10))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case perr <- err:
					default:
					}
					return
				}
				at := time.Now()
				mu.Lock()
				acked[ns] = at
				mu.Unlock()
			})
		select {
		case err := <-perr:
			return latencyResult{}, fmt.Errorf("produce: %w", err)
		case <-tick.C:
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return latencyResult{}, err
	}
	// Drain: wait until every record of the window was seen, for up to o.drain.
	for deadline := time.Now().Add(o.drain); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		all := true
		for _, ns := range produced {
			if _, ok := seen[ns]; !ok {
				all = false
				break
			}
		}
		mu.Unlock()
		if all {
			break
		}
	}
	tl.Close()
	mu.Lock()
	defer mu.Unlock()
	r := latencyResult{produced: len(produced), dups: dups}
	for _, ns := range produced {
		if at, ok := seen[ns]; ok {
			r.latencies = append(r.latencies, at.Sub(time.Unix(0, ns)))
		}
		if at, ok := acked[ns]; ok {
			r.acks = append(r.acks, at.Sub(time.Unix(0, ns)))
		}
	}
	if o.dump != "" {
		if err := dumpLatency(o.dump, fmt.Sprintf("p%d-%s", partitions, v), windowStart, produced, parts, seen, acked, c.stderr.String()); err != nil {
			return latencyResult{}, err
		}
	}
	slices.Sort(r.latencies)
	slices.Sort(r.acks)
	return r, nil
}

// dumpLatency writes name.csv into dir, one line per record of the window in
// produce order (produced at, ms since the window opened; partition; latency
// in ms, empty if never seen; produce ack in ms, empty if none), and the
// reader's stderr as name.stderr, so that the slow records can be placed in
// time (-dump).
func dumpLatency(dir, name string, start time.Time, produced []int64, parts []int32, seen, acked map[int64]time.Time, stderr string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("produced_ms,partition,latency_ms,ack_ms\n")
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	for i, ns := range produced {
		at := time.Unix(0, ns)
		lat, ack := "", ""
		if t, ok := seen[ns]; ok {
			lat = ms(t.Sub(at))
		}
		if t, ok := acked[ns]; ok {
			ack = ms(t.Sub(at))
		}
		fmt.Fprintf(&b, "%s,%d,%s,%s\n", ms(at.Sub(start)), parts[i], lat, ack)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".stderr"), []byte(stderr), 0o644)
}

// prime readies the producer and the broker for topic before a run without warm-up: one record
// to every partition, produced and then deleted (DeleteRecords), so the first measured record
// does not wait for the producer to learn the new topic's leaders (the produce round trips of
// a new 300-partition topic took up to 1.4 s) while the reader still starts on an empty log.
func prime(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, partitions int) error {
	recs := make([]*kgo.Record, partitions)
	for p := range recs {
		recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("prime")}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("prime: %w", err)
	}
	del := kadm.Offsets{}
	for _, r := range recs {
		del.Add(kadm.Offset{Topic: topic, Partition: r.Partition, At: r.Offset + 1})
	}
	resp, err := adm.DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("prime: delete records: %w", err)
	}
	return nil
}

// waitAssigned returns once group (every variant's group is named after its topic) is stable with
// a member that holds an assignment, or an error if c exits or a minute passes first.
func waitAssigned(ctx context.Context, cl *kgo.Client, group string, c *child) error {
	adm := kadm.NewClient(cl)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := c.exited(); err != nil {
			return err
		}
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			continue
		}
		g := gs[group]
		if g.Err != nil || g.State != "Stable" {
			continue
		}
		for _, m := range g.Members {
			if ca, ok := m.Assigned.AsConsumer(); ok && len(ca.Topics) > 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("group %q not stable with an assignment within a minute: %s", group, tail(c.stderr.String(), 2000))
}

// fmtDur prints a latency with three significant figures (0.93ms, 12.4ms, 508ms, 1.20s).
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.2fs", ms/1000)
	}
}
