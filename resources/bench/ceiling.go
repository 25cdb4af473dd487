package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// ceilingVariant returns the ceiling variant: resources/bench/ceiling, built
// into cfgDir, handing out -records pre-built records of -size bytes over
// -partitions partitions, built as the input builds its messages, into drop.
// It is what Benthos costs per message without Kafka: no Benthos input
// delivers more on the machine.
func ceilingVariant(o options, cfgDir string) variant {
	return variant{name: "ceiling", cmd: func(string) *exec.Cmd {
		bin := filepath.Join(cfgDir, "ceiling")
		if _, err := os.Stat(bin); err != nil {
			build := exec.Command("go", "build", "-o", bin, "./resources/bench/ceiling")
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				panic(fmt.Sprintf("build resources/bench/ceiling (run from the repository's root): %v", err))
			}
		}
		path := filepath.Join(cfgDir, "ceiling.yaml")
		cfg := fmt.Sprintf(`http: {enabled: false}
logger: {level: warn}
metrics: {none: {}}
input:
  bench_ceiling: {records: %d, size: %d, partitions: %d, batch_records: %d}
output:
  drop: {}
`, o.records, o.size, o.partitions, ceilingBatch(o))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			panic(err)
		}
		return exec.Command(bin, "run", path)
	}}
}

// ceilingBatch is -ceiling-batch, or what one fetch answer of the input
// brings by default: fetch_max_partition_bytes (1 MiB) of records, at most
// a range.
func ceilingBatch(o options) int {
	if o.ceilingBatch > 0 {
		return o.ceilingBatch
	}
	return max(1, min(o.rangeSize, (1<<20)/max(o.size, 1)))
}

// pinned returns cmd run on CPUs 0..-cpus-1 with GOMAXPROCS set to -cpus,
// or cmd as it is without -cpus.
func pinned(o options, cmd *exec.Cmd) *exec.Cmd {
	if o.cpus <= 0 {
		return cmd
	}
	p := exec.Command("taskset", append([]string{"-c", fmt.Sprintf("0-%d", o.cpus-1), cmd.Path}, cmd.Args[1:]...)...)
	p.Env = append(append(os.Environ(), cmd.Env...), "GOMAXPROCS="+strconv.Itoa(o.cpus))
	p.Stdout, p.Stderr, p.Stdin, p.Dir = cmd.Stdout, cmd.Stderr, cmd.Stdin, cmd.Dir
	return p
}

// startKfake starts this binary as a kfake cluster (-kfake-child) and
// returns its address and how to stop it. The cluster lives in a process of
// its own, so its CPU and memory are not the variants'.
func startKfake(self string) (addr string, stop func(), err error) {
	cmd := exec.Command(self, "-kfake-child")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("kfake child: %w", err)
	}
	return strings.TrimSpace(line), stop, nil
}

// serveKfake runs a one-broker kfake cluster on a loopback port, prints its
// address, and serves until stdin closes.
func serveKfake() error {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println(strings.Join(c.ListenAddrs(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
