package engine

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/logs"
)

// tracer is a Logger that also logs below debug (logs.Tracer). Benthos'
// *service.Logger is one. With it franz-go's debug lines (every request,
// connection and SASL step) are logged at TRACE. With a Logger without
// Tracef they are not asked for.
type tracer = logs.Tracer

// kafkaLogger forwards the log lines of one franz-go client (kgo.WithLogger)
// to the engine's Logger. franz-go's debug goes to TRACE and its info to
// DEBUG. Its warn and error go to WARN, except the warnings of
// kafkaExpected, which go to DEBUG. A repeated warning goes to WARN at most
// once per 10 seconds per client, then to DEBUG, so a broker outage does
// not flood. franz-go's lines hold no secret. It never logs
// credentials or SASL messages, only mechanism names and the brokers' error
// messages.
type kafkaLogger struct {
	log    Logger
	trace  func(format string, args ...any) // nil: debug lines are not asked for
	client string                           // which client, e.g. "listing"
	limit  *lineLimit
}

// newKafkaLogger returns the franz-go logger of the engine's client named
// client ("cursor" for the listings and the cursors, or "group"), its
// warnings limited by limit.
func newKafkaLogger(log Logger, client string, limit *lineLimit) *kafkaLogger {
	k := &kafkaLogger{log: log, client: client, limit: limit}
	if t, ok := log.(tracer); ok {
		k.trace = t.Tracef
	}
	return k
}

// kafkaOpt returns the option that makes the engine's client named client
// log through the engine's Logger, or nil when it discards everything.
func (l limitedLog) kafkaOpt(client string) []kgo.Opt {
	if _, ok := l.Logger.(discard); ok {
		return nil
	}
	return []kgo.Opt{kgo.WithLogger(newKafkaLogger(l.Logger, client, l.lines))}
}

// Level implements kgo.Logger.
func (k *kafkaLogger) Level() kgo.LogLevel {
	if k.trace != nil {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelInfo
}

// kafkaLogFormat formats a line. It holds the client, franz-go's message and
// its key-value pairs (formatted only if the line is logged).
const kafkaLogFormat = "franz-go (%s client): %s%v"

// kafkaExpected are the beginnings of franz-go warnings and errors that are
// logged at DEBUG. They are what a correct run sees (a rebalance), or a
// failure the input reports itself, in one line that says what to change.
// For a failed connection that line is Connect's error, or the readers' and
// committer's retry warnings.
var kafkaExpected = []string{
	// A commit answered after a rebalance ended the group session. The
	// engine commits again within the next generation (or the revocation's
	// final commit did).
	"received an OffsetCommitResponse after our group session has ended",
	// Connection failures, of dialing, TLS and SASL.
	"unable to open connection to broker",
	"unable to initialize sasl",
	"unable to request api versions",
	"read from broker received EOF during api versions discovery",
	"read from broker errored, killing connection after 0 successful responses",
}

// expected reports whether franz-go's msg is one of kafkaExpected.
func expected(msg string) bool {
	for _, p := range kafkaExpected {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Log implements kgo.Logger.
func (k *kafkaLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	kv := kafkaKeyvals(keyvals)
	if level <= kgo.LogLevelWarn && level != kgo.LogLevelNone && expected(msg) {
		level = kgo.LogLevelInfo // logged at DEBUG
	}
	switch level {
	case kgo.LogLevelDebug:
		if k.trace != nil {
			k.trace(kafkaLogFormat, k.client, msg, kv)
		}
	case kgo.LogLevelInfo:
		k.log.Debugf(kafkaLogFormat, k.client, msg, kv)
	case kgo.LogLevelWarn, kgo.LogLevelError:
		if k.limit.due(k.client + "\x00" + msg) {
			k.log.Warnf(kafkaLogFormat, k.client, msg, kv)
		} else {
			k.log.Debugf(kafkaLogFormat, k.client, msg, kv)
		}
	}
}

// kafkaKeyvals formats franz-go's key-value pairs as its BasicLogger does:
// "; key: val, key: val", or "" without pairs.
type kafkaKeyvals []any

func (kv kafkaKeyvals) String() string {
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("; ")
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		if i+1 < len(kv) {
			fmt.Fprintf(&b, "%v: %v", kv[i], kv[i+1])
		} else {
			fmt.Fprintf(&b, "%v", kv[i])
		}
	}
	return b.String()
}
