package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Kafka's own command-line tools, run as resources/kafka.sh runs the broker: java from PATH
// with the jars of the shared broker's KBR_KAFKA_HOME on the classpath, and kafka-tools, which
// kafka.sh fetch adds there.

// kafkaToolTimeout bounds one run of a Kafka tool (a JVM start is 1-2s).
const kafkaToolTimeout = time.Minute

// kafkaToolsClasspath returns the classpath of Kafka's tools: the shared broker's jars, with
// kafka-tools among them (kafka.sh fetch is run first when it is missing).
func kafkaToolsClasspath(t *testing.T) string {
	t.Helper()
	libs := sharedKafkaLibs(t)
	version := os.Getenv("KBR_KAFKA_VERSION")
	if version == "" {
		version = "4.4.0"
	}
	jar := filepath.Join(libs, "kafka-tools-"+version+".jar")
	csv, _ := filepath.Glob(filepath.Join(libs, "jackson-dataformat-csv-*.jar")) // --export, --from-file
	if _, err := os.Stat(jar); err != nil || len(csv) == 0 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "resources", "kafka.sh"), "fetch")
		cmd.Env = append(os.Environ(), "KBR_KAFKA_HOME="+filepath.Dir(libs))
		out, err := cmd.CombinedOutput()
		require.NoErrorf(t, err, "cannot run Kafka's tools: kafka.sh fetch of kafka-tools into %s:\n%s", libs, out)
		_, err = os.Stat(jar)
		require.NoErrorf(t, err, "cannot run Kafka's tools: kafka.sh fetch left no %s", jar)
	}
	return filepath.Join(libs, "*")
}

// kafkaConsumerGroups runs Kafka's kafka-consumer-groups tool (ConsumerGroupCommand) against
// the shared broker with args and returns what it printed. It fails the test, naming the
// command and its output, when the tool cannot run or exits non-zero.
func kafkaConsumerGroups(t *testing.T, args ...string) string {
	t.Helper()
	return kafkaTool(t, "ConsumerGroupCommand", args...)
}

// kafkaShareGroups runs Kafka's kafka-share-groups.sh (ShareGroupCommand) against the shared
// broker, as kafkaConsumerGroups does.
func kafkaShareGroups(t *testing.T, args ...string) string {
	t.Helper()
	return kafkaTool(t, "ShareGroupCommand", args...)
}

// kafkaTool runs one of Kafka's group commands (org.apache.kafka.tools.consumer.group.<class>)
// with args against the shared broker and returns its stdout; it fails the test when the tool
// fails.
func kafkaTool(t *testing.T, class string, args ...string) string {
	t.Helper()
	java, err := exec.LookPath("java")
	require.NoError(t, err, "cannot run Kafka's %s: java (17 or later) not in PATH", class)
	ctx, cancel := context.WithTimeout(t.Context(), kafkaToolTimeout)
	defer cancel()
	argv := append([]string{
		// A short-lived client: no JIT past C1, a small serial heap.
		"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xms32m", "-Xmx256m", "-Djava.awt.headless=true",
		"-cp", kafkaToolsClasspath(t),
		"org.apache.kafka.tools.consumer.group." + class,
		"--bootstrap-server", strings.Join(brokers(), ","),
	}, args...)
	cmd := exec.CommandContext(ctx, java, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	require.NoErrorf(t, err, "Kafka's %s %s failed after %s\nstdout:\n%s\nstderr:\n%s",
		class, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	t.Logf("%s %s (%s):\n%s", class, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String())
	return stdout.String()
}

// toolRows parses the table the tool printed: the line starting with GROUP is the header, the
// lines after it with as many whitespace-separated fields are the rows, as maps from column to
// value (a header of two words, "COORDINATOR (ID)", is two columns, as its value is).
func toolRows(out string) []map[string]string {
	var header []string
	var rows []map[string]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "GROUP" && header == nil:
			header = f
		case header != nil && len(f) == len(header):
			row := map[string]string{}
			for i, h := range header {
				row[h] = f[i]
			}
			rows = append(rows, row)
		}
	}
	return rows
}
