// Command ceiling is a Benthos binary with one input of the benchmark's own,
// bench_ceiling, and Benthos' pure components: the benchmark's ceiling
// variant (resources/bench, -variants ceiling). The input hands Benthos
// pre-built records as message batches, built by the kafka_batched_ranges
// input's own code (plugin.Messages, the same seven metadata keys), from
// as many goroutines as the input's readers use (GOMAXPROCS), and ends once
// every record is acknowledged. No Kafka: what it costs is what Benthos
// costs per message, the most any Benthos input can deliver on the machine.
//
//	ceiling run config.yaml
//
//	input:
//	  bench_ceiling: {records: 2000000, size: 1024, partitions: 8, batch_records: 1000}
//	output:
//	  drop: {}
package main

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func main() {
	spec := service.NewConfigSpec().
		Summary("Hands out pre-built records as the kafka_batched_ranges input builds them, without Kafka: the benchmark's ceiling.").
		Field(service.NewIntField("records").Description("Records to hand out in all.")).
		Field(service.NewIntField("size").Description("Value size in bytes.")).
		Field(service.NewIntField("partitions").Description("Partitions the records are spread over, round-robin by batch.").Default(1)).
		Field(service.NewIntField("batch_records").Description("Records per batch."))
	err := service.RegisterBatchInput("bench_ceiling", spec, func(conf *service.ParsedConfig, _ *service.Resources) (service.BatchInput, error) {
		var ints [4]int
		for i, f := range []string{"records", "size", "partitions", "batch_records"} {
			v, err := conf.FieldInt(f)
			if err != nil {
				return nil, err
			}
			ints[i] = v
		}
		return newCeiling(ints[0], ints[1], max(ints[2], 1), max(ints[3], 1)), nil
	})
	if err != nil {
		panic(err)
	}
	service.RunCLI(context.Background())
}

// ceiling is the bench_ceiling input.
type ceiling struct {
	records, size, partitions, batch int

	batches chan service.MessageBatch
	stop    context.CancelFunc
	built   sync.WaitGroup
	acked   atomic.Int64
	done    chan struct{} // closed once every record is acknowledged
}

func newCeiling(records, size, partitions, batch int) *ceiling {
	return &ceiling{records: records, size: size, partitions: partitions, batch: batch,
		batches: make(chan service.MessageBatch, runtime.GOMAXPROCS(0)), done: make(chan struct{})}
}

// Connect starts the builders: GOMAXPROCS goroutines, each building every
// GOMAXPROCS-th batch from records of its own, made once and renumbered
// (partition, offsets) for each batch: plugin.Messages reads a record's
// fields while it builds the batch and keeps only the value, so a builder's
// records are free again once its batch is built, and the ceiling costs
// the same at 8 partitions and at 1,000.
func (c *ceiling) Connect(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	value := make([]byte, c.size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	now := time.Now()
	batches := (c.records + c.batch - 1) / c.batch
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		pool := make([]*kgo.Record, c.batch)
		for i := range pool {
			pool[i] = &kgo.Record{Topic: "ceiling", Value: value, Timestamp: now}
		}
		c.built.Add(1)
		go func() {
			defer c.built.Done()
			for b := w; b < batches; b += workers {
				n := min(c.batch, c.records-b*c.batch)
				p := b % c.partitions
				start := int64(b/c.partitions) * int64(c.batch)
				for i, r := range pool[:n] {
					r.Partition, r.Offset = int32(p), start+int64(i)
				}
				mb := plugin.Messages(pool[:n], "ceiling", int32(p), start, start+int64(c.batch), start+int64(c.batch))
				select {
				case c.batches <- mb:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		c.built.Wait()
		close(c.batches)
	}()
	return nil
}

func (c *ceiling) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	select {
	case b, ok := <-c.batches:
		if !ok {
			select {
			case <-c.done:
				return nil, nil, service.ErrEndOfInput
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		n := int64(len(b))
		return b, func(context.Context, error) error {
			if c.acked.Add(n) == int64(c.records) {
				close(c.done)
			}
			return nil
		}, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (c *ceiling) Close(context.Context) error {
	if c.stop != nil {
		c.stop()
	}
	return nil
}
