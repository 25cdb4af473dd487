package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/plugin"
)

type ev struct {
	at      time.Time
	write   bool
	bytes   int
	wait    time.Duration
	toRead  time.Duration
	cxnNode int32
}

type hook struct {
	mu  sync.Mutex
	evs []ev
}

func (h *hook) OnBrokerWrite(m kgo.BrokerMetadata, key int16, n int, wait, toWrite time.Duration, err error) {
	if key != 1 {
		return
	}
	h.mu.Lock()
	h.evs = append(h.evs, ev{at: time.Now(), write: true, bytes: n, cxnNode: m.NodeID})
	h.mu.Unlock()
}
func (h *hook) OnBrokerRead(m kgo.BrokerMetadata, key int16, n int, wait, toRead time.Duration, err error) {
	if key != 1 {
		return
	}
	h.mu.Lock()
	h.evs = append(h.evs, ev{at: time.Now(), bytes: n, wait: wait, toRead: toRead, cxnNode: m.NodeID})
	h.mu.Unlock()
}

type nolog struct{}

func (nolog) Debugf(string, ...any) {}
func (nolog) Infof(string, ...any)  {}
func (nolog) Warnf(f string, a ...any) {
	fmt.Printf("WARN "+f+"\n", a...)
}
func (nolog) Errorf(f string, a ...any) { fmt.Printf("ERR "+f+"\n", a...) }

func main() {
	topic := flag.String("topic", "", "")
	brokers := flag.String("brokers", "127.0.0.1:9092", "")
	inflight := flag.Int("inflight", 16, "")
	rangeRecs := flag.Int64("range", 10000, "")
	partBytes := flag.Int("partbytes", 1<<20, "")
	prep := flag.Bool("prepare", false, "")
	flag.Parse()
	h := &hook{}
	cfg := (engine.Config{Seeds: []string{*brokers}, Topics: []engine.TopicSpec{{Name: *topic}}, StopAtEnd: true,
		MaxRangeRecords: *rangeRecs, MaxInFlight: *inflight, PollInterval: time.Second, Logger: nolog{},
		FetchMaxPartitionBytes: int32(*partBytes), ClientOpts: []kgo.Opt{kgo.WithHooks(h)}})
	if *prep {
		cfg.Prepare = func(b *engine.Batch) any {
			return plugin.Messages(b.Records, b.Range.Topic, b.Range.Partition, b.Range.Start, b.Range.End, b.High)
		}
	}
	e, err := engine.New(cfg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	start := time.Now()
	n := 0
	for {
		b, err := e.Next(ctx)
		if errors.Is(err, engine.ErrEnd) {
			break
		}
		if err != nil {
			panic(err)
		}
		n += len(b.Records)
		b.Ack()
	}
	el := time.Since(start)
	_ = e.Close(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	sort.Slice(h.evs, func(i, j int) bool { return h.evs[i].at.Before(h.evs[j].at) })
	var reads, rbytes int
	var waitSum, readSum time.Duration
	inFl, maxIn := 0, 0
	var idle time.Duration
	var lastZero time.Time = start
	for _, x := range h.evs {
		if x.write {
			if inFl == 0 {
				idle += x.at.Sub(lastZero)
			}
			inFl++
			maxIn = max(maxIn, inFl)
		} else {
			reads++
			rbytes += x.bytes
			waitSum += x.wait
			readSum += x.toRead
			inFl--
			if inFl == 0 {
				lastZero = x.at
			}
		}
	}
	fmt.Printf("%d records in %s (%.0f MB/s); %d fetches, %.1f MB/fetch, mean wait %s, mean read %s; max in flight %d; no fetch in flight for %s\n",
		n, el.Round(time.Millisecond), float64(rbytes)/el.Seconds()/1e6, reads, float64(rbytes)/float64(max(reads, 1))/1e6,
		(waitSum / time.Duration(max(reads, 1))).Round(time.Microsecond), (readSum / time.Duration(max(reads, 1))).Round(time.Microsecond), maxIn, idle.Round(time.Millisecond))
}
