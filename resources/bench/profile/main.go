// Command profile runs the kafka_batched_ranges input in-process on a topic
// (stop_at: end, drop output) and writes CPU and allocation profiles, for
// finding what the input path costs:
//
//	go run ./resources/bench/profile -topic kbr-bench-p8-n2000000-s1024 -cpu cpu.prof -mem mem.prof
//	go tool pprof -top cpu.prof
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "seed brokers")
	topic := flag.String("topic", "", "topic to read to its end")
	extra := flag.String("extra", "", "extra input fields, YAML lines indented by 4 spaces")
	cpu := flag.String("cpu", "", "write a CPU profile here")
	mem := flag.String("mem", "", "write an allocation profile here")
	heap := flag.String("heap", "", "write an in-use heap profile here, taken -heap-after into the run")
	heapAfter := flag.Duration("heap-after", time.Second, "when to take the -heap profile")
	tracePath := flag.String("trace", "", "write an execution trace here (go tool trace; -pprof=net, sync or sched give where goroutines wait)")
	flag.Parse()
	if *heap != "" {
		time.AfterFunc(*heapAfter, func() {
			f, err := os.Create(*heap)
			if err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				return
			}
			defer f.Close()
			runtime.GC()
			_ = pprof.Lookup("heap").WriteTo(f, 0)
		})
	}
	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			os.Exit(1)
		}
		defer f.Close()
		defer trace.Stop()
	}
	if err := run(*brokers, *topic, *extra, *cpu, *mem); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		os.Exit(1)
	}
}

func run(brokers, topic, extra, cpuPath, memPath string) error {
	if topic == "" {
		return fmt.Errorf("-topic is required")
	}
	var sum plugin.Summary
	env := service.NewEnvironment().Without(plugin.InputName)
	if err := plugin.Register(env, plugin.Options{OnClose: func(s plugin.Summary) { sum = s }}); err != nil {
		return err
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetYAML(fmt.Sprintf(`
logger: {level: warn}
input:
  kafka_batched_ranges:
    seed_brokers: [ %q ]
    topics: [ %q ]
    stop_at: end
%s
output:
  drop: {}
`, brokers, topic, extra)); err != nil {
		return err
	}
	stream, err := sb.Build()
	if err != nil {
		return err
	}
	if cpuPath != "" {
		f, err := os.Create(cpuPath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if memPath != "" {
		runtime.MemProfileRate = 64 << 10
	}
	start := time.Now()
	if err := stream.Run(context.Background()); err != nil {
		return err
	}
	fmt.Printf("%s (wall %s)\n", sum, time.Since(start).Round(time.Millisecond))
	if memPath != "" {
		f, err := os.Create(memPath)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	return nil
}
