package main

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The latency mode's peers: kcat, a Python confluent-kafka group consumer
// (group.py) and Bento's kafka_franz input in a consumer group, each reading
// the topic from its start in a group of its own and writing every value as a
// line to a file that the bench follows, as the input does.

//go:embed group.py
var groupPy []byte

// latencyPeers returns the names of the latency mode's peers that can run:
// kcat and python when installed (-peers), bento when -variants names it (it
// is built from its own module, or taken from -bento).
func latencyPeers(o options, kcat, python bool) []string {
	var names []string
	if kcat {
		names = append(names, "kcat")
	}
	if python {
		names = append(names, "python")
	}
	if named(o, "bento") {
		names = append(names, "bento")
	}
	return names
}

// peerLaunch is how a latency peer is started: the command line, the file it
// writes its lines to, whether the bench opens that file as its stdout (kcat
// writes to stdout), and the files to write into the run's directory first.
type peerLaunch struct {
	args   []string
	out    string
	stdout bool
	files  map[string][]byte
}

// latencyPeerLaunch returns how to start peer v (a name latencyPeers returns)
// as a continuous group consumer of topic in group from its start, writing to
// a file in dir; bento is the Bento binary.
func latencyPeerLaunch(o options, bento, dir, v, name, topic, group string) (peerLaunch, error) {
	out := filepath.Join(dir, slug(name)+".lines")
	switch v {
	case "kcat":
		// A librdkafka group consumer (-G), unbuffered (-u), values as lines.
		return peerLaunch{args: []string{"kcat", "-C", "-q", "-u", "-b", o.brokers, "-G", group,
			"-X", "auto.offset.reset=earliest", "-f", "%s\n", topic}, out: out, stdout: true}, nil
	case "python":
		script := filepath.Join(dir, "group.py")
		return peerLaunch{args: []string{pythonBin, script, "--brokers", o.brokers, "--topic", topic, "--group", group, "--out", out},
			out: out, files: map[string][]byte{script: groupPy}}, nil
	case "bento":
		// What a Bento user runs to read a topic continuously: kafka_franz in
		// a consumer group from the oldest offset, its defaults otherwise
		// (fetch_max_wait 5s: a fetch returns as soon as records arrive),
		// into a file output.
		cfg := filepath.Join(dir, slug(name)+".yaml")
		yaml := fmt.Sprintf(`http: {enabled: false}
logger: {level: warn}
metrics: {none: {}}
input:
  kafka_franz:
    seed_brokers: [ %q ]
    topics: [ %q ]
    consumer_group: %q
    start_from_oldest: true
output:
  file: {path: %q, codec: lines}
`, o.brokers, topic, group, out)
		return peerLaunch{args: []string{bento, "-c", cfg}, out: out, files: map[string][]byte{cfg: []byte(yaml)}}, nil
	}
	return peerLaunch{}, fmt.Errorf("latency: no variant %q", v)
}

// startLatencyPeer starts peer v as latencyPeerLaunch says.
func startLatencyPeer(o options, bento, dir, v, name, topic, group string) (*child, error) {
	l, err := latencyPeerLaunch(o, bento, dir, v, name, topic, group)
	if err != nil {
		return nil, err
	}
	for path, data := range l.files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(l.args[0], l.args[1:]...)
	if !l.stdout {
		return startChild(name, cmd, l.out)
	}
	f, err := os.Create(l.out)
	if err != nil {
		return nil, err
	}
	cmd.Stdout = f
	c, err := startChild(name, cmd, l.out)
	f.Close() // the child holds its own descriptor
	return c, err
}

// named reports whether -variants names v.
func named(o options, v string) bool {
	return slices.Contains(strings.Split(o.variants, ","), v)
}
