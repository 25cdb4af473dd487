package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// child is a continuous reader (connect run, or the baseline consumer) running as its own
// process and writing one line per record value to out.
type child struct {
	name   string
	cmd    *exec.Cmd
	out    string
	stderr syncBuffer
	done   chan struct{} // closed when the process exited
	err    error         // Wait's result, read after done
}

// syncBuffer is a bytes.Buffer for one writer (the process) and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startChild starts cmd, which writes its lines to out.
func startChild(name string, cmd *exec.Cmd, out string) (*child, error) {
	c := &child{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	cmd.Stderr = &c.stderr
	if cmd.Stdout == nil { // a child writing its lines to stdout has it set to out
		cmd.Stdout = &c.stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited returns an error when the process has already exited (it should run until stopped).
func (c *child) exited() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited early (%v): %s", c.name, c.err, tail(c.stderr.String(), 2000))
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to 30s for the process to exit, then kills it.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "%s: no exit 30s after SIGTERM, killing it\n", c.name)
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// startInput starts `connect run` on a continuous kafka_batched_ranges config that joins group,
// reads topic from its start and writes every value as a line to a file in dir. extra holds
// input fields as YAML lines (indented here).
func startInput(o options, dir, name, topic, group, extra string) (*child, error) {
	return startInputLogging(o, dir, name, topic, group, extra, "warn")
}

// startInputLogging is startInput with the connect logger at level (info to see the group's
// assignments).
func startInputLogging(o options, dir, name, topic, group, extra, level string) (*child, error) {
	out := filepath.Join(dir, slug(name)+".lines")
	cfg := fmt.Sprintf(`http: {enabled: false}
logger: {level: %s}
metrics: {none: {}}
input:
  kafka_batched_ranges:
    seed_brokers: [ %q ]
    topics: [ %q ]
    consumer_group: %q
    start_from: earliest
%s
output:
  file: {path: %q, codec: lines}
`, level, o.brokers, topic, group, indent(extra, "    "), out)
	path := filepath.Join(dir, slug(name)+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.connect, "run", path)
	if len(o.inputEnv) > 0 {
		cmd.Env = append(os.Environ(), o.inputEnv...)
	}
	return startChild(name, cmd, out)
}

// startGroupBaseline starts this binary as the baseline consumer (runGroupConsumer) of topic in
// group, writing to a file in dir.
func startGroupBaseline(o options, self, dir, name, topic, group string) (*child, error) {
	out := filepath.Join(dir, slug(name)+".lines")
	cmd := exec.Command(self, "-brokers", o.brokers, "-group-child", topic, "-child-group", group, "-child-out", out)
	return startChild(name, cmd, out)
}

// runGroupConsumer is the continuous baseline: a plain franz-go group consumer with default
// fetch settings (kgo.ConsumeTopics, kgo.ConsumerGroup, autocommit) that reads topic from its
// start and writes each value and a newline to out with one write per record, as Benthos' file
// output does, until SIGTERM.
func runGroupConsumer(brokers, topic, group, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(brokers)...),
		kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	line := make([]byte, 0, 64)
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		var werr error
		fs.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", t, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			line = append(append(line[:0], r.Value...), '\n')
			if _, err := f.Write(line); err != nil && werr == nil {
				werr = err
			}
		})
		if werr != nil {
			return werr
		}
	}
}

// createTopic creates topic with partitions partitions (replication factor 1).
func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	resp, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}
	return nil
}

// cleanup deletes the topic and the groups, logging what fails.
func cleanup(adm *kadm.Client, topic string, groups ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(groups) > 0 {
		if _, err := adm.DeleteGroups(ctx, groups...); err != nil {
			fmt.Fprintf(os.Stderr, "delete groups %v: %v\n", groups, err)
		}
	}
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		fmt.Fprintf(os.Stderr, "delete topic %s: %v\n", topic, err)
	}
}

// brokerPorts returns the listener port of every broker in the cluster's metadata, mapped to
// its node ID.
func brokerPorts(ctx context.Context, adm *kadm.Client) (map[uint16]int32, error) {
	bs, err := adm.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	if len(bs) == 0 {
		return nil, errors.New("no brokers in the metadata")
	}
	ports := map[uint16]int32{}
	for _, b := range bs {
		ports[uint16(b.Port)] = b.NodeID
	}
	return ports, nil
}

func indent(s, prefix string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// seeds splits a comma-separated broker list.
func seeds(brokers string) []string {
	var out []string
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
