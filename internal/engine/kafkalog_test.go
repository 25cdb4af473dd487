package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tracingLogger is a testLogger that also logs at TRACE, as Benthos'
// logger does.
type tracingLogger struct{ testLogger }

func (l *tracingLogger) Tracef(f string, a ...any) { l.add("TRACE", f, a...) }

// TestKafkaLogLevels checks how franz-go's levels map onto the engine's
// logger: debug to TRACE (dropped by a logger without Tracef, which then
// asks franz-go for info and above only), info to DEBUG, warn and error to
// WARN, each line naming the client and holding franz-go's key-value pairs.
func TestKafkaLogLevels(t *testing.T) {
	log := &tracingLogger{}
	k := newKafkaLogger(log, "listing", newLineLimit())
	require.Equal(t, kgo.LogLevelDebug, k.Level())
	k.Log(kgo.LogLevelDebug, "opening connection to broker", "addr", "127.0.0.1:9092", "broker", "seed_0")
	k.Log(kgo.LogLevelInfo, "joining group", "group", "g")
	k.Log(kgo.LogLevelWarn, "join group failed", "group", "g")
	k.Log(kgo.LogLevelError, "group manage loop errored", "group", "g", "err", "EOF")
	k.Log(kgo.LogLevelInfo, "no pairs")
	assert.Equal(t, []string{
		"TRACE franz-go (listing client): opening connection to broker; addr: 127.0.0.1:9092, broker: seed_0",
		"DEBUG franz-go (listing client): joining group; group: g",
		"WARN franz-go (listing client): join group failed; group: g",
		"WARN franz-go (listing client): group manage loop errored; group: g, err: EOF",
		"DEBUG franz-go (listing client): no pairs",
	}, log.kafka)

	plain := &testLogger{}
	k = newKafkaLogger(plain, "cursor", newLineLimit())
	require.Equal(t, kgo.LogLevelInfo, k.Level(), "a logger without Tracef asks franz-go for its debug lines")
	k.Log(kgo.LogLevelDebug, "dropped")
	k.Log(kgo.LogLevelInfo, "kept")
	assert.Equal(t, []string{"DEBUG franz-go (cursor client): kept"}, plain.kafka)
}

// TestKafkaLogExpectedAtDebug checks that the franz-go warnings and errors a
// correct run sees (a commit answered after a rebalance ended the session)
// or that the input reports itself in one line (connection, TLS and SASL
// failures) are logged at DEBUG, never at WARN.
func TestKafkaLogExpectedAtDebug(t *testing.T) {
	log := &tracingLogger{}
	k := newKafkaLogger(log, "group", newLineLimit())
	k.Log(kgo.LogLevelWarn, "received an OffsetCommitResponse after our group session has ended, unable to handle this (were we kicked from the group?)")
	k.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "b:9092", "err", "connection refused")
	k.Log(kgo.LogLevelWarn, "unable to open connection to broker due to an immediate EOF, which often means the client is using TLS when the broker is not expecting it (is TLS misconfigured?)", "addr", "b:9092")
	k.Log(kgo.LogLevelError, "unable to initialize sasl", "broker", "seed_0", "err", "SASL_AUTHENTICATION_FAILED")
	k.Log(kgo.LogLevelError, "unable to request api versions", "broker", "seed_0", "err", "EOF")
	k.Log(kgo.LogLevelWarn, "read from broker received EOF during api versions discovery, which often happens when the broker requires TLS and the client is not using it (is TLS misconfigured?)")
	k.Log(kgo.LogLevelWarn, "read from broker errored, killing connection after 0 successful responses (is SASL missing?)", "req", "Metadata")
	k.Log(kgo.LogLevelWarn, "sync group failed", "group", "g")
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Len(t, log.kafka, 8)
	for _, l := range log.kafka[:7] {
		assert.Truef(t, strings.HasPrefix(l, "DEBUG franz-go (group client): "), "not at DEBUG: %s", l)
	}
	assert.Equal(t, "WARN franz-go (group client): sync group failed; group: g", log.kafka[7], "another warning is not at WARN")
}

// TestKafkaLogWarningsBounded checks that a franz-go warning repeated within
// 10 seconds (every dial of a broker that is down) is logged at WARN once per
// client and then at DEBUG, across the clients an engine makes, so an
// outage gives a line, not a flood.
func TestKafkaLogWarningsBounded(t *testing.T) {
	log := &tracingLogger{}
	limit := newLineLimit()
	for range 3 {
		// a new client each time, as each Start attempt makes a new listing client
		newKafkaLogger(log, "listing", limit).Log(kgo.LogLevelWarn, "fetch response has unexpected top-level error", "broker", "1")
	}
	newKafkaLogger(log, "group", limit).Log(kgo.LogLevelWarn, "fetch response has unexpected top-level error", "broker", "1")
	newKafkaLogger(log, "group", limit).Log(kgo.LogLevelError, "join group failed", "group", "g")
	assert.Equal(t, []string{
		"WARN franz-go (listing client): fetch response has unexpected top-level error; broker: 1",
		"DEBUG franz-go (listing client): fetch response has unexpected top-level error; broker: 1",
		"DEBUG franz-go (listing client): fetch response has unexpected top-level error; broker: 1",
		"WARN franz-go (group client): fetch response has unexpected top-level error; broker: 1",
		"WARN franz-go (group client): join group failed; group: g",
	}, log.kafka)
}

// TestEngineForwardsClientLogs runs an engine with group membership and
// checks that each of its franz-go clients (the start's listing client, the
// cursor client, and the group member's, which the cursors and the listings
// share from the join on) logs through the engine's logger.
func TestEngineForwardsClientLogs(t *testing.T) {
	c := newKafka(t, 2, 50, "t")
	log := &tracingLogger{}
	e, _ := newTestEngine(t, c, func(cfg *Config) {
		asMember(cfg)
		cfg.StopAtEnd = true
		cfg.Hooks.Logger = log
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, e.Start(ctx))
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	assert.Equal(t, map[string]int{"t/0": 50, "t/1": 50}, got)
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer closeCancel()
	require.NoError(t, e.Close(closeCtx))

	log.mu.Lock()
	out := strings.Join(log.kafka, "\n")
	log.mu.Unlock()
	for _, want := range []string{
		"TRACE franz-go (cursor client): opening connection to broker",
		"TRACE franz-go (cursor client): wrote ListOffsets",
		"TRACE franz-go (group client): wrote Fetch",
		"DEBUG franz-go (group client): joining group; group: g",
	} {
		assert.Truef(t, strings.Contains(out, want), "no line %q in the log:\n%s", want, out)
	}
}

// BenchmarkKafkaLogDropped measures a franz-go debug line that the logger
// drops (Benthos below TRACE): what each request costs with the logger set.
func BenchmarkKafkaLogDropped(b *testing.B) {
	k := newKafkaLogger(droppingTracer{}, "cursor", newLineLimit())
	b.ReportAllocs()
	for b.Loop() {
		k.Log(kgo.LogLevelDebug, "wrote Fetch v16", "broker", 1, "bytes_written", 123, "write_wait", time.Millisecond, "time_to_write", time.Millisecond, "err", nil)
	}
}

type droppingTracer struct{ discard }

func (droppingTracer) Tracef(string, ...any) {}

// BenchmarkReadWithKafkaLogs reads 20,000 records from kfake with StopAtEnd,
// with a logger that takes no franz-go lines (quiet: Level info, as without
// Tracef) and with one that asks for franz-go's debug lines and drops them
// (Benthos' logger below TRACE): the cost of forwarding franz-go's logs on
// the read path. It reports ns per record; compare the two.
func BenchmarkReadWithKafkaLogs(b *testing.B) {
	c := kfakeCluster(b, kfake.NumBrokers(1), kfake.SeedTopics(4, "t"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(b, err)
	var recs []*kgo.Record
	for i := range 20000 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: int32(i % 4), Value: make([]byte, 100)})
	}
	require.NoError(b, cl.ProduceSync(context.Background(), recs...).FirstErr())
	cl.Close()
	for _, bc := range []struct {
		name string
		log  Logger
	}{{"quiet", discard{}}, {"debug asked and dropped", droppingTracer{}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := New(Config{
					Seeds: c.ListenAddrs(), Topics: []TopicSpec{{Name: "t"}}, StopAtEnd: true,
					MaxRangeRecords: 1000, MaxInFlight: 8, PollInterval: 50 * time.Millisecond,
					Fetch: FetchConfig{CacheCapacity: 16, CacheIdleTimeout: time.Minute}, Hooks: Hooks{Logger: bc.log},
				})
				require.NoError(b, err)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				require.NoError(b, e.Start(ctx))
				got, err := drain(ctx, e)
				require.ErrorIs(b, err, ErrEnd)
				n := 0
				for _, v := range got {
					n += v
				}
				require.Equal(b, 20000, n)
				require.NoError(b, e.Close(ctx))
				cancel()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*20000), "ns/record")
		})
	}
}
