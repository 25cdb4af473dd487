package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bentoVariant returns the bento variant: Bento's kafka_franz input (no
// consumer group: every partition from its oldest offset) into drop, what a
// Bento user would run. The binary is -bento, or resources/bench/bento built
// into cfgDir (a module of its own, so the project's module does not depend
// on Bento). Bento's input does not stop at a topic's end, so a run ends when
// Bento's Prometheus metrics, polled every 20 ms on a loopback port, count
// every record sent to the output; the process is then stopped, and its time
// is up to that poll.
func bentoVariant(o options, cfgDir string) (variant, error) {
	bin, err := bentoBinary(o, cfgDir)
	if err != nil {
		return variant{}, err
	}
	return variant{name: "bento", run: func(topic string) (sample, error) {
		port, err := freePort()
		if err != nil {
			return sample{}, err
		}
		cfg := filepath.Join(cfgDir, "bento.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`http: {enabled: true, address: "127.0.0.1:%d"}
logger: {level: warn}
metrics: {prometheus: {}}
input:
  kafka_franz:
    seed_brokers: [ %q ]
    topics: [ %q ]
    consumer_group: ""
    start_from_oldest: true
output:
  drop: {}
`, port, o.brokers, topic)), 0o644); err != nil {
			return sample{}, err
		}
		return runUntilSent(pinned(o, exec.Command(bin, "-c", cfg)), fmt.Sprintf("http://127.0.0.1:%d/metrics", port), int64(o.records))
	}}, nil
}

// bentoBinary returns -bento, or resources/bench/bento built into dir (once:
// a binary already there is reused).
func bentoBinary(o options, dir string) (string, error) {
	if o.bento != "" {
		return o.bento, nil
	}
	bin := filepath.Join(dir, "bento")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	build := exec.Command("go", "build", "-C", filepath.Join("resources", "bench", "bento"), "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build resources/bench/bento (run from the repository's root): %w", err)
	}
	return bin, nil
}

// runUntilSent runs cmd until its metrics at url count want messages
// sent by the output (output_sent), then stops it (SIGTERM, SIGKILL after
// 10 s) and returns the time to that count and the peak RSS.
func runUntilSent(cmd *exec.Cmd, url string, want int64) (sample, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sample{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
	for {
		select {
		case err := <-exited:
			return sample{}, fmt.Errorf("exited before sending %d messages: %v: %s", want, err, tail(out.String(), 2000))
		case <-deadline:
			stop()
			return sample{}, fmt.Errorf("did not send %d messages in 10 minutes: %s", want, tail(out.String(), 2000))
		case <-tick.C:
		}
		if n, err := metric(url, "output_sent"); err == nil && n >= want {
			secs := time.Since(start).Seconds()
			stop()
			return sample{secs: secs, cpu: cpuSecs(cmd.ProcessState), rssKB: maxRSS(cmd.ProcessState)}, nil
		}
	}
}

// metric returns the sum of the Prometheus samples named name at url.
func metric(url, name string) (int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sum += v
	}
	return int64(sum), sc.Err()
}

// freePort returns a loopback TCP port free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
