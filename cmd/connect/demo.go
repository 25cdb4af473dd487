package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"

	"github.com/kbr/kafka_batched_ranges/config/examples"
	"github.com/kbr/kafka_batched_ranges/plugin"
)

// DemoOptions configure RunDemo.
type DemoOptions struct {
	Records    int    // sample records to produce
	Partitions int32  // partitions of the demo topic
	Topic      string // the demo topic
	Config     string // the pipeline YAML; config/examples/demo.yaml if empty
}

// demoCommand is the `connect demo` subcommand.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "Run config/examples/demo.yaml against an in-process Kafka-protocol broker filled with sample records, and print a summary",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "records", Value: 200000, Usage: "sample records to produce"},
			&cli.IntFlag{Name: "partitions", Value: 8, Usage: "partitions of the demo topic"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := RunDemo(ctx, os.Stdout, DemoOptions{
				Records:    c.Int("records"),
				Partitions: int32(c.Int("partitions")),
			})
			return err
		},
	}
}

// RunDemo starts an in-process kfake cluster on a free loopback port,
// produces sample orders, runs the demo pipeline with stop_at: end and writes
// progress and a summary line to w.
func RunDemo(ctx context.Context, w io.Writer, o DemoOptions) (plugin.Summary, error) {
	if o.Records <= 0 {
		return plugin.Summary{}, fmt.Errorf("demo: records must be > 0, got %d", o.Records)
	}
	if o.Partitions <= 0 {
		return plugin.Summary{}, fmt.Errorf("demo: partitions must be > 0, got %d", o.Partitions)
	}
	if o.Topic == "" {
		o.Topic = "demo"
	}
	if o.Config == "" {
		b, err := examples.FS.ReadFile("demo.yaml")
		if err != nil {
			return plugin.Summary{}, err
		}
		o.Config = string(b)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(o.Partitions, o.Topic))
	if err != nil {
		return plugin.Summary{}, fmt.Errorf("demo: start in-process broker: %w", err)
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()[0]
	fmt.Fprintf(w, "demo: in-process broker on %s, producing %d sample records to %q over %d partitions\n", addr, o.Records, o.Topic, o.Partitions)
	if err := produceOrders(ctx, addr, o.Topic, o.Records); err != nil {
		return plugin.Summary{}, err
	}

	var (
		mu      sync.Mutex // guards sum and failure
		sum     plugin.Summary
		failure error
	)
	env := service.NewEnvironment().Without(plugin.InputName)
	if err := plugin.Register(env, plugin.Options{
		OnClose:    func(s plugin.Summary) { mu.Lock(); sum = s; mu.Unlock() },
		OnProgress: func(p plugin.Progress) { fmt.Fprintf(w, "demo: %s\n", p) },
		OnFailure:  func(err error) { mu.Lock(); failure = err; mu.Unlock() },
	}); err != nil {
		return plugin.Summary{}, err
	}
	sb := env.NewStreamBuilder()
	sb.SetEnvVarLookupFunc(func(name string) (string, bool) {
		switch name {
		case "KAFKA_BROKERS":
			return addr, true
		case "KAFKA_TOPIC":
			return o.Topic, true
		}
		return os.LookupEnv(name)
	})
	if err := sb.SetYAML(o.Config); err != nil {
		return plugin.Summary{}, fmt.Errorf("demo: config: %w", err)
	}
	if err := sb.SetLoggerYAML("level: warn"); err != nil {
		return plugin.Summary{}, err
	}
	stream, err := sb.Build()
	if err != nil {
		return plugin.Summary{}, fmt.Errorf("demo: build stream: %w", err)
	}
	fmt.Fprintf(w, "demo: running config/examples/demo.yaml\n")
	if err := stream.Run(ctx); err != nil {
		if ctx.Err() != nil {
			// Run returns on cancellation without stopping the stream.
			stopErr := stream.StopWithin(10 * time.Second)
			return plugin.Summary{}, errors.Join(fmt.Errorf("demo: interrupted: %w", ctx.Err()), stopErr)
		}
		return plugin.Summary{}, fmt.Errorf("demo: run: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failure != nil {
		return sum, fmt.Errorf("demo: input stopped: %w", failure)
	}
	if sum.Records != int64(o.Records) {
		return sum, fmt.Errorf("demo: read %d records, produced %d", sum.Records, o.Records)
	}
	fmt.Fprintf(w, "demo: %s\n", sum)
	return sum, nil
}

// produceOrders writes n sample JSON orders, spread over the topic's
// partitions.
func produceOrders(ctx context.Context, addr, topic string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	items := []string{"keyboard", "monitor", "cable", "dock", "headset", "webcam", "mouse", "lamp"}
	var firstErr error
	errc := make(chan error, 1)
	for i := range n {
		v, _ := json.Marshal(map[string]any{
			"order_id":    i,
			"customer":    fmt.Sprintf("customer-%04d", rng.IntN(5000)),
			"item":        items[rng.IntN(len(items))],
			"quantity":    1 + rng.IntN(5),
			"price_cents": 199 + rng.IntN(20000),
			"note":        "sample order produced by connect demo for the kafka_batched_ranges input",
		})
		rec := &kgo.Record{Key: fmt.Appendf(nil, "order-%d", i), Value: v}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("demo: produce: %w", err)
	}
	select {
	case firstErr = <-errc:
	default:
	}
	if firstErr != nil {
		return fmt.Errorf("demo: produce: %w", firstErr)
	}
	return nil
}
