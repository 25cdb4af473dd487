package plugin

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kbr/kafka_batched_ranges/plugin/promexport"
)

// shareRun is a stream with a share_group input on kfake, run until stop.
type shareRun struct {
	mu   sync.Mutex
	msgs []got
	lens []int // batch sizes, in delivery order
	log  *syncBuffer
	fail error

	stream *service.Stream
	done   chan error
}

// startShareStream runs inputYAML (KAFKA_BROKERS substituted) into a batch
// consumer; consume decides each delivery's ack (nil) or nack. With
// metricsFile, the stream's metrics are plugin/promexport's, written to
// that file when the stream stops.
func startShareStream(t *testing.T, addr, inputYAML string, consume func(service.MessageBatch) error, metricsFile ...string) *shareRun {
	t.Helper()
	r := &shareRun{log: &syncBuffer{}, done: make(chan error, 1)}
	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{OnFailure: func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.fail = err
	}}))
	if len(metricsFile) > 0 {
		require.NoError(t, promexport.Register(env))
	}
	sb := env.NewStreamBuilder()
	if len(metricsFile) > 0 {
		require.NoError(t, sb.SetMetricsYAML("prometheus: {file_output_path: \""+metricsFile[0]+"\"}"))
	}
	sb.SetEnvVarLookupFunc(func(name string) (string, bool) { return addr, name == "KAFKA_BROKERS" })
	sb.SetLogger(slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.NoError(t, sb.AddInputYAML(inputYAML))
	require.NoError(t, sb.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		r.mu.Lock()
		for _, m := range batch {
			body, _ := m.AsBytes()
			meta := map[string]any{}
			_ = m.MetaWalkMut(func(k string, v any) error { meta[k] = v; return nil })
			r.msgs = append(r.msgs, got{body: bytes.Clone(body), meta: meta})
		}
		r.lens = append(r.lens, len(batch))
		r.mu.Unlock()
		if consume != nil {
			return consume(batch)
		}
		return nil
	}))
	s, err := sb.Build()
	require.NoError(t, err)
	r.stream = s
	go func() { r.done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = s.StopWithin(10 * time.Second)
		if t.Failed() {
			t.Logf("stream log:\n%s", r.log)
		}
	})
	return r
}

// waitMsgs waits until n messages were delivered.
func (r *shareRun) waitMsgs(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.msgs) >= n
	}, 30*time.Second, 5*time.Millisecond, "waiting for %d messages", n)
}

func (r *shareRun) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, r.stream.StopWithin(10*time.Second))
}

// finish waits for n messages, then settle more (a second delivery that
// should not come would come within it), stops the stream and locks r
// for the rest of the test.
func (r *shareRun) finish(t *testing.T, n int, settle time.Duration) {
	t.Helper()
	r.waitMsgs(t, n)
	time.Sleep(settle)
	r.stop(t)
	r.mu.Lock()
	t.Cleanup(r.mu.Unlock)
}

// newShareKafka starts kfake with a one-partition topic of n records
// valued 0..n-1, and the share group g reading from the start.
func newShareKafka(t *testing.T, topic string, n int, opts ...kfake.Opt) string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topic)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	c.SetGroupConfigs("g", map[string]string{"share.auto.offset.reset": "earliest"})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i)), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	return c.ListenAddrs()[0]
}

// TestShareGroupDeliversWithDeliveryCount: a share_group input delivers the
// records with the usual kafka_ keys, headers and kafka_delivery_count; a
// nacked batch comes again with count 2 (replayed in the member:
// auto_replay_nacks), and logs name the share group.
func TestShareGroupDeliversWithDeliveryCount(t *testing.T) {
	addr := newShareKafka(t, "s", 20)
	var nacked sync.Once
	r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
  share_max_records: 10
`, func(b service.MessageBatch) error {
		var err error
		nacked.Do(func() { err = errors.New("first batch fails") })
		return err
	})
	r.finish(t, 30, 0)
	counts := map[string][]int64{}
	for _, m := range r.msgs {
		v := string(m.body)
		require.Equal(t, "s", m.meta[metaTopic])
		require.Equal(t, "k"+v, m.meta[metaKey])
		require.Equal(t, "x", m.meta["h"])
		o, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		require.Equal(t, o, m.meta[metaOffset])
		counts[v] = append(counts[v], m.meta[metaDeliveryCount].(int64))
	}
	require.Len(t, counts, 20)
	twice := 0
	for v, cs := range counts {
		switch len(cs) {
		case 1:
			require.Equal(t, []int64{1}, cs, "record %s", v)
		case 2:
			require.Equal(t, []int64{1, 2}, cs, "record %s", v)
			twice++
		default:
			t.Fatalf("record %s delivered %d times", v, len(cs))
		}
	}
	require.Equal(t, 10, twice, "the nacked batch of 10 records comes again")
	require.Contains(t, r.log.String(), "as a member of share group g (where the group has not read a partition it starts at share.auto.offset.reset: earliest)")
	require.Contains(t, r.log.String(), "Closed: share group g: 20 records acquired, 20 accepted, 0 released, 0 rejected")
	require.Contains(t, r.log.String(), "10 replays in this member")
	require.Contains(t, r.log.String(), "kafka_batched_ranges input "+Version, "the version of the input, logged when it is built")
}

// TestShareGroupBatchingCutsInsideAFetch: a batching policy of 4 cuts the
// fetches of 10 into batches of 4, 4 and 2 (a batch never waits for a later
// fetch, which waits for its records to be acknowledged), each acknowledged
// on its own: nothing is delivered twice.
func TestShareGroupBatchingCutsInsideAFetch(t *testing.T) {
	addr := newShareKafka(t, "s", 20)
	r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
  share_max_records: 10
  batching:
    count: 4
    period: 1h
`, nil)
	r.finish(t, 20, 0)
	require.Len(t, r.msgs, 20, "delivered twice")
	require.Equal(t, []int{4, 4, 2, 4, 4, 2}, r.lens)
	require.Contains(t, r.log.String(), "20 records acquired, 20 accepted, 0 released")
}

// TestShareGroupNacksRejectWithoutReplay: with auto_replay_nacks: false a
// nack rejects: the records are archived, never delivered again.
func TestShareGroupNacksRejectWithoutReplay(t *testing.T) {
	addr := newShareKafka(t, "s", 10)
	r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
  share_max_records: 5
  auto_replay_nacks: false
`, func(b service.MessageBatch) error {
		if v, _ := b[0].AsBytes(); string(v) == "0" {
			return errors.New("poison")
		}
		return nil
	})
	r.finish(t, 10, 200*time.Millisecond)
	require.Len(t, r.msgs, 10)
	require.Contains(t, r.log.String(), "10 records acquired, 5 accepted, 0 released, 5 rejected")
}

// TestShareGroupWithoutShareGroupsStops: a broker without share groups
// stops the input with an error naming the broker and share_group.
func TestShareGroupWithoutShareGroupsStops(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "s"), kfake.MaxVersions(kversion.V3_9_0()))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	r := startShareStream(t, c.ListenAddrs()[0], `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
`, nil)
	select {
	case err := <-r.done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Error(t, r.fail)
	require.ErrorContains(t, r.fail, "share_group g: broker 0")
	require.Contains(t, r.log.String(), "Input stopped")
	t.Logf("%v", r.fail)
}

// TestShareGroupBatchErrorNacksOnlyTheFailed: a batch error naming some
// messages (as reject_errored returns) gives back only their records,
// replayed in the member (auto_replay_nacks, kafka_delivery_count one
// more); the others of the batch are accepted, never delivered again. With
// a batching policy cutting inside a fetch too.
func TestShareGroupBatchErrorNacksOnlyTheFailed(t *testing.T) {
	for _, batching := range []string{"", "  batching:\n    count: 3\n"} {
		t.Run(strconv.Quote(batching), func(t *testing.T) {
			addr := newShareKafka(t, "s", 10)
			var once sync.Once
			r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
  share_max_records: 5
`+batching, func(b service.MessageBatch) error {
				var err error
				once.Do(func() {
					err = service.NewBatchError(b, errors.New("one failed")).Failed(1, errors.New("bad record"))
				})
				return err
			})
			r.finish(t, 11, 200*time.Millisecond)
			counts := map[string][]int64{}
			for _, m := range r.msgs {
				counts[string(m.body)] = append(counts[string(m.body)], m.meta[metaDeliveryCount].(int64))
			}
			require.Len(t, counts, 10)
			require.Equal(t, []int64{1, 2}, counts["1"], "the failed record")
			for v, cs := range counts {
				if v != "1" {
					require.Equal(t, []int64{1}, cs, "record %s", v)
				}
			}
			require.Contains(t, r.log.String(), "10 records acquired, 10 accepted, 0 released")
			require.Contains(t, r.log.String(), "1 replays in this member")
		})
	}
}

// TestShareGroupMembersInOneProcess: share_members: 3 runs three members in
// one input; every record is delivered once, and the close line adds up
// the members' counts.
func TestShareGroupMembersInOneProcess(t *testing.T) {
	addr := newShareKafka(t, "s", 300)
	r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
  share_members: 3
  share_max_records: 10
`, nil)
	r.finish(t, 300, 100*time.Millisecond)
	seen := map[string]int{}
	for _, m := range r.msgs {
		seen[string(m.body)]++
	}
	require.Len(t, seen, 300)
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s", v)
	}
	log := r.log.String()
	for i := 1; i <= 3; i++ {
		require.Contains(t, log, "Member "+strconv.Itoa(i)+" of 3: Reading [s] as a member of share group g")
	}
	require.Contains(t, log, "Closed: share group g: 300 records acquired, 300 accepted, 0 released")
}

// TestShareGroupRefusedAckIsCountedRefused: an acknowledgement the broker
// refuses is not counted as accepted: the pipeline holds a batch 2 s, four
// times the group's 500 ms lock, with no renewal before it ends, so the
// broker refuses the Ack (INVALID_RECORD_STATE). The Closed: line and
// kafka_batched_ranges_share_records_total count the records as lock
// expiries, none accepted; every event's series is there from the start,
// at 0 where nothing happened; the records handed to the pipeline are
// counted under the range input's names.
func TestShareGroupRefusedAckIsCountedRefused(t *testing.T) {
	addr := newShareKafka(t, "s", 5, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "500",
		"share.record.lock.sweep.interval.ms": "50",
	}))
	path := filepath.Join(t.TempDir(), "metrics.prom")
	var slow sync.Once
	r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ s ]
  share_group: g
  share_max_records: 5
`, func(service.MessageBatch) error {
		slow.Do(func() { time.Sleep(2 * time.Second) })
		return nil
	}, path)
	r.finish(t, 10, 0) // the 5 records, and again once their lock expired
	log := r.log.String()
	require.Contains(t, log, "Closed: share group g: 10 records acquired, 5 accepted, 0 released, 0 rejected, 0 renewals, 5 lock expiries, 0 failed acknowledgements, 0 failed renewals", "log:\n%s", log)
	require.Contains(t, log, "the acknowledgement of 5 records (5 accepted, 0 released, 0 rejected; offsets 0-4) was made after their acquisition lock ended")
	require.Contains(t, log, "the broker refused it: INVALID_RECORD_STATE: counted as lock expiries")

	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, 10*time.Second, 10*time.Millisecond, "metrics file")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err)
	events := map[string]float64{}
	for _, m := range fams[metricShareRecords].GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if labels["topic"] == "s" {
			events[labels["event"]] = m.GetCounter().GetValue()
		}
	}
	require.Equal(t, map[string]float64{"acquired": 10, "accepted": 5, "released": 0, "rejected": 0, "renewed": 0, "lock_expired": 5, "ack_failed": 0, "renew_failed": 0, "replayed": 0, "archived": 0}, events, "%s", b)
	// The records and their value bytes handed to the pipeline, under the
	// range input's names (share.Observer's Delivered): "0" to "4", twice.
	for name, want := range map[string]float64{metricRecords: 10, metricBytes: 10} {
		var got float64
		for _, m := range fams[name].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "topic" && lp.GetValue() == "s" {
					got = m.GetCounter().GetValue()
				}
			}
		}
		require.Equalf(t, want, got, "%s\n%s", name, b)
	}
}

// TestShareGroupRegexpTopicsStartSeriesByTopic (issue 51): with regexp_topics the share series
// start at 0 under the topics read, when their first records are acquired, never under the
// pattern.
func TestShareGroupRegexpTopicsStartSeriesByTopic(t *testing.T) {
	addr := newShareKafka(t, "sx", 5)
	path := filepath.Join(t.TempDir(), "metrics.prom")
	r := startShareStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ "s.*" ]
  regexp_topics: true
  share_group: g
`, nil, path)
	r.finish(t, 5, 0)
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, 10*time.Second, 10*time.Millisecond, "metrics file")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err)
	events := map[string]map[string]float64{}
	for _, m := range fams[metricShareRecords].GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if events[labels["topic"]] == nil {
			events[labels["topic"]] = map[string]float64{}
		}
		events[labels["topic"]][labels["event"]] = m.GetCounter().GetValue()
	}
	require.NotContains(t, events, "s.*", "a series named by the pattern: %s", b)
	require.Len(t, events["sx"], len(shareEvents), "every event's series of the topic read: %s", b)
	require.Equal(t, float64(5), events["sx"]["accepted"])
	require.Equal(t, float64(0), events["sx"]["lock_expired"])
}
