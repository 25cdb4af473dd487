package plugin_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	// The Benthos components the example's YAML uses.
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	// A blank import of the package is enough to add the input to Benthos'
	// global environment (as Redpanda Connect users add plugins), e.g. in a
	// main that calls service.RunCLI. Stopping errors are then only logged;
	// a host that must exit non-zero on them registers the input in its own
	// environment, as below.
	"github.com/kbr/kafka_batched_ranges/plugin"
)

// ExampleRegister adds the input to a host program's own environment with
// an OnFailure callback, runs a bounded read and exits non-zero if the input
// stopped on an error (data loss, a missing topic in a bounded run, a
// permanent cluster error, a failed final commit): Benthos itself ends such
// a stream cleanly. The broker is an in-process kfake cluster holding 250
// records over 4 partitions.
func ExampleRegister() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	produce(cluster.ListenAddrs()[0], "orders", 250)

	// The host's environment: Benthos' components without the globally
	// registered input, which is added again with the host's options.
	var failed atomic.Bool
	env := service.NewEnvironment().Without(plugin.InputName)
	if err := plugin.Register(env, plugin.Options{
		OnFailure: func(err error) { failed.Store(true) }, // e.g. log err
	}); err != nil {
		panic(err)
	}

	// A stream, as a host would build it (a CLI host passes the environment
	// with service.CLIOptSetEnvironment and checks failed after
	// service.RunCLIToCode returns, as cmd/connect does).
	var received atomic.Int64
	sb := env.NewStreamBuilder()
	if err := sb.SetLoggerYAML("level: none"); err != nil {
		panic(err)
	}
	if err := sb.AddInputYAML(fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ orders ]
  stop_at: end
  max_range_records: 100
`, cluster.ListenAddrs()[0])); err != nil {
		panic(err)
	}
	if err := sb.AddBatchConsumerFunc(func(_ context.Context, b service.MessageBatch) error {
		received.Add(int64(len(b)))
		return nil
	}); err != nil {
		panic(err)
	}
	stream, err := sb.Build()
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := stream.Run(ctx); err != nil {
		panic(err)
	}

	exitCode := 0
	if failed.Load() {
		exitCode = 1 // os.Exit(1) in a real host
	}
	fmt.Printf("read %d records, exit code %d\n", received.Load(), exitCode)
	// Output: read 250 records, exit code 0
}

// produce writes n records to topic, round robin over its partitions.
func produce(addr, topic string, n int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "order-%d", i)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		panic(err)
	}
}

// ExampleOptions_onFailure is the path ExampleRegister guards against: a
// bounded read of a topic the cluster does not have stops the input with an
// error. Benthos ends the stream without one; OnFailure is how the host
// learns the run did not read everything.
func ExampleOptions_onFailure() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	var failure atomic.Pointer[error]
	env := service.NewEnvironment().Without(plugin.InputName)
	if err := plugin.Register(env, plugin.Options{
		OnFailure: func(err error) { failure.Store(&err) },
	}); err != nil {
		panic(err)
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetLoggerYAML("level: none"); err != nil {
		panic(err)
	}
	if err := sb.AddInputYAML(fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ no_such_topic ]
  stop_at: end
`, cluster.ListenAddrs()[0])); err != nil {
		panic(err)
	}
	if err := sb.AddBatchConsumerFunc(func(context.Context, service.MessageBatch) error { return nil }); err != nil {
		panic(err)
	}
	stream, err := sb.Build()
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runErr := stream.Run(ctx)

	exitCode := 0
	if failure.Load() != nil {
		exitCode = 1 // os.Exit(1) in a real host, after logging *failure.Load()
	}
	fmt.Printf("stream.Run error: %v, input failed: %v, exit code %d\n", runErr, failure.Load() != nil, exitCode)
	// Output: stream.Run error: <nil>, input failed: true, exit code 1
}
