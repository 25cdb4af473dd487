package main

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The peers are what a user would pick instead of this input: kcat (Debian's
// kcat package) and the approach the project comes from, a Python
// ConsumerFactory reading (partition, low, high) ranges on a thread pool with
// confluent-kafka (Debian's python3-confluent-kafka, factory.py), with one
// cached consumer per thread or a new consumer per range. -peers says what to
// do when they are missing: auto runs the ones installed and names the
// others, install installs them with apt-get first, off leaves them out.

// pythonBin is Debian's python3, the one python3-confluent-kafka installs for
// (a python3 earlier in PATH may be another, without the package).
const pythonBin = "/usr/bin/python3"

//go:embed factory.py
var factoryPy []byte

// peerPackages are the Debian packages of the peers.
var peerPackages = []string{"kcat", "python3-confluent-kafka"}

// peersFound reports which peers are installed: kcat, and the Python factory.
func peersFound() (kcat, python bool) {
	_, err := exec.LookPath("kcat")
	kcat = err == nil
	python = exec.Command(pythonBin, "-c", "import confluent_kafka").Run() == nil
	return kcat, python
}

// setupPeers applies -peers: it returns which peers the run includes, and
// installs the missing ones first with -peers install.
func setupPeers(mode string) (kcat, python bool, err error) {
	switch mode {
	case "off":
		return false, false, nil
	case "auto", "install":
	default:
		return false, false, fmt.Errorf("-peers must be auto, install or off, got %q", mode)
	}
	kcat, python = peersFound()
	if mode == "install" && (!kcat || !python) {
		fmt.Fprintf(os.Stderr, "installing %s\n", strings.Join(peerPackages, " "))
		for _, args := range [][]string{{"update"}, append([]string{"install", "-y"}, peerPackages...)} {
			cmd := exec.Command("apt-get", args...)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return false, false, fmt.Errorf("apt-get %s: %w", args[0], err)
			}
		}
		kcat, python = peersFound()
	}
	if !kcat {
		fmt.Fprintln(os.Stderr, "kcat not found: leaving it out (-peers install, or apt-get install -y kcat)")
	}
	if !python {
		fmt.Fprintf(os.Stderr, "%s cannot import confluent_kafka: leaving the Python factory out (-peers install, or apt-get install -y python3-confluent-kafka)\n", pythonBin)
	}
	return kcat, python, nil
}

// peerVariants returns the throughput variants of the peers found, reading
// topic to its end; cfgDir receives factory.py.
func peerVariants(o options, cfgDir string, kcat, python bool) ([]variant, error) {
	var vs []variant
	if kcat {
		vs = append(vs, variant{name: "kcat", cmd: func(topic string) *exec.Cmd {
			// Every partition from the beginning to its end (-e), payloads to /dev/null.
			cmd := exec.Command("kcat", "-C", "-q", "-b", o.brokers, "-t", topic, "-o", "beginning", "-e", "-f", "%s\n")
			if f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
				cmd.Stdout = f // closed by the process's exit (runChild does not reuse it)
			}
			return cmd
		}})
	}
	if python {
		script := filepath.Join(cfgDir, "factory.py")
		if err := os.WriteFile(script, factoryPy, 0o644); err != nil {
			return nil, err
		}
		py := func(name string, cache bool) variant {
			return variant{name: name, cmd: func(topic string) *exec.Cmd {
				args := []string{script, "--brokers", o.brokers, "--topic", topic,
					"--threads", strconv.Itoa(o.pyThreads), "--range-records", strconv.Itoa(o.rangeSize)}
				if cache {
					args = append(args, "--cache")
				}
				return exec.Command(pythonBin, args...)
			}}
		}
		vs = append(vs, py("python cached", true), py("python no cache", false))
	}
	return vs, nil
}
