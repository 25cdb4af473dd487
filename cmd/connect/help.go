package main

import (
	"io"
	"os"
	"strings"
)

// docsURL is where the Benthos core's own guides live (streams mode,
// Bloblang, templating): the subcommands' help links below it.
const docsURL = "https://docs.redpanda.com/redpanda-connect"

// usage replaces Benthos' one-line summary of the binary.
const usage = "Benthos with the kafka_batched_ranges Kafka input (reference: docs/kafka_batched_ranges.md; Benthos guides: " + docsURL + ")"

// description replaces Benthos' examples, which name components this binary
// does not have (`create kafka//file`): each of these works here.
const description = `Either run this binary as a stream processor or choose a command:

     connect demo
     connect create kafka_batched_ranges//file > ./config.yaml
     connect lint config/examples/backfill.yaml
     connect run config/examples/backfill.yaml
     connect list inputs`

// isRootHelp reports whether args (without the binary name) ask for the
// top-level help.
func isRootHelp(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "-h", "--help", "-help", "help", "h":
		return true
	}
	return false
}

// rewriteHelp puts this binary's summary and examples into Benthos'
// top-level help text, keeping its command and option lists.
func rewriteHelp(help string) string {
	lines := strings.Split(help, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		switch strings.TrimSpace(lines[i]) {
		case "NAME:":
			out = append(out, lines[i], "   connect - "+usage)
			i++ // Benthos' summary line
		case "DESCRIPTION:":
			out = append(out, lines[i], "   "+description)
			for i+1 < len(lines) && (lines[i+1] == "" || strings.HasPrefix(lines[i+1], " ")) {
				i++ // Benthos' examples, up to the next section
			}
			out = append(out, "")
		default:
			out = append(out, lines[i])
		}
	}
	return strings.Join(out, "\n")
}

// withRootHelp runs fn, which writes Benthos' top-level help to os.Stdout,
// and writes the help rewritten for this binary to w instead.
func withRootHelp(w io.Writer, fn func() int) int {
	r, pw, err := os.Pipe()
	if err != nil {
		return fn()
	}
	stdout := os.Stdout
	os.Stdout = pw
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	code := fn()
	os.Stdout = stdout
	_ = pw.Close()
	_, _ = io.WriteString(w, rewriteHelp(string(<-read)))
	_ = r.Close()
	return code
}
