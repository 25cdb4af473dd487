package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The keyorder mode (issue 55): a bounded read of one partition of -records
// records with -keys keys, through a pipeline of -share-threads threads that
// sleeps -work per record, under ordering: partition, key and none, in
// alternating rounds (-rounds), each a connect process from its start to its
// exit. It prints each variant's records/s (median and min-max), the ratio of
// key to partition and to none, and the per-key order violations found in
// what each run wrote (each record's key and offset, in the order written).
//
//	go run ./resources/bench -mode keyorder -records 4000 -keys 64 -work 2ms -share-threads 8

// keyOrderVariants are the orderings compared.
var keyOrderVariants = []string{"partition", "key", "none"}

func runKeyOrder(o options) error {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := fmt.Sprintf("bench-keyorder-%d", time.Now().UnixNano())
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}
	defer func() { _, _ = adm.DeleteTopics(context.Background(), topic) }()
	recs := make([]*kgo.Record, o.records)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("key-%d", i%o.keys)), Value: make([]byte, o.size)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-keyorder")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rates := map[string][]float64{}
	violations := map[string]int{}
	for round := range o.rounds {
		for _, v := range keyOrderVariants {
			rate, bad, err := keyOrderRun(o, dir, topic, v, round)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", v, round+1, err)
			}
			rates[v] = append(rates[v], rate)
			violations[v] += bad
			fmt.Fprintf(os.Stderr, "keyorder: round %d %-9s %8.0f records/s, %d order violations\n", round+1, v, rate, bad)
		}
	}
	fmt.Printf("\n1 partition, %d records of %d B, %d keys; pipeline: %d threads, %s per record; medians of %d rounds (min-max)\n\n", o.records, o.size, o.keys, o.shareThreads, o.work, o.rounds)
	fmt.Println("| ordering | records/s | ÷ partition | ÷ none | per-key order violations |")
	fmt.Println("|---|---|---|---|---|")
	med := map[string]float64{}
	for _, v := range keyOrderVariants {
		r := slices.Clone(rates[v])
		slices.Sort(r)
		med[v] = r[len(r)/2]
	}
	for _, v := range keyOrderVariants {
		r := slices.Clone(rates[v])
		slices.Sort(r)
		fmt.Printf("| %s | %.0f (%.0f-%.0f) | %.2fx | %.2fx | %d |\n", v, med[v], r[0], r[len(r)-1], med[v]/med["partition"], med[v]/med["none"], violations[v])
	}
	return nil
}

// keyOrderRun runs one connect process reading topic with ordering v, and
// returns its records/s from its start to its exit and the per-key order
// violations in what it wrote (ordering: none is not expected to keep it).
func keyOrderRun(o options, dir, topic, v string, round int) (float64, int, error) {
	out := filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", v, round))
	conf := map[string]any{
		"http":   map[string]any{"enabled": false},
		"logger": map[string]any{"level": "warn"},
		"input": map[string]any{"kafka_batched_ranges": map[string]any{
			"seed_brokers":      []string{o.brokers},
			"topics":            []string{topic},
			"stop_at":           "end",
			"ordering":          v,
			"max_range_records": o.rangeSize,
			"max_in_flight":     o.inFlight,
		}},
		"pipeline": map[string]any{
			"threads": o.shareThreads,
			"processors": []any{
				map[string]any{"sleep": map[string]any{"duration": o.work.String()}},
				map[string]any{"mapping": `root = {"k": @kafka_key, "o": @kafka_offset.number()}`},
			},
		},
		"output": map[string]any{"file": map[string]any{"path": out, "codec": "lines"}},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return 0, 0, err
	}
	cfg := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", v, round))
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	cmd := exec.Command(o.connect, "run", cfg)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("connect run: %w\n%s", err, msg)
	}
	secs := time.Since(start).Seconds()
	f, err := os.Open(out)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	last := map[string]int64{}
	n, bad := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			K string `json:"k"`
			O int64  `json:"o"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", out, err)
		}
		if l, ok := last[r.K]; ok && r.O <= l {
			bad++
		}
		last[r.K] = r.O
		n++
	}
	if n != o.records {
		return 0, 0, fmt.Errorf("wrote %d records, want %d", n, o.records)
	}
	return float64(n) / secs, bad, sc.Err()
}
