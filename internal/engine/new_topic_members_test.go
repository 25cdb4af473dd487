package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestNewTopicToLaterMemberSkipsRecords: docs/backfills.md ("Missing topics"):
// a topic named in `topics` that does not exist when the input starts,
// "once it is created it is read from its first offset, whatever
// start_from says (found at the next poll_interval; with consumer_group,
// once the group assigns its partitions)".
// Member A of group g starts (start_from latest) while topic x does not
// exist; x is created with 2 partitions and 50 records are written to each;
// member B starts (a rolling restart or a scale-out) and the group assigns
// x's partitions to B. For B, x existed at its start (record.existed), and
// the group has no offset for any partition of x yet, so groupNewLocked
// (review 4 finding 3's fix, which needs offsets for other partitions of
// the topic) does not apply: B starts x at latest and commits there. The
// records written to x before B listed it are read by no member, and the
// group's offsets pass them.
func TestNewTopicToLaterMemberSkipsRecords(t *testing.T) {
	group := func(cfg *Config) {
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StartFrom = StartLatest
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	t.Run("named", func(t *testing.T) {
		// A lists its topics every 3 s: B starts within that time of x's creation.
		newTopicCase(t, func(cfg *Config) {
			group(cfg)
			cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "x"}}
			cfg.PollInterval = 3 * time.Second
		}, func(cfg *Config) {
			group(cfg)
			cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "x"}}
		})
	})
	t.Run("regexp_topics", func(t *testing.T) {
		// docs/topics.md "Topic patterns": "A topic that starts matching while the
		// input runs (one created later) is read from its first offset
		// whatever start_from says (...), so nothing written to it before
		// it was noticed is missed". A matches again every
		// metadata_max_age (default 5m; 1m here): a member that starts
		// within that time of a topic's creation is the only one
		// subscribed to it, and reads it from latest.
		pattern := func(cfg *Config) {
			group(cfg)
			cfg.Topics = []TopicSpec{{Name: "^t$"}, {Name: "^x"}}
			cfg.RegexpTopics = true
			cfg.MetadataMaxAge = time.Minute
		}
		newTopicCase(t, pattern, pattern)
	})
}

// newTopicCase runs member A (modA) on a cluster with topic t, creates
// topic x (2 partitions, 50 records each), starts member B (modB), and
// checks that the group delivers x's 100 records.
func newTopicCase(t *testing.T, modA, modB func(*Config)) {
	c := newKafka(t, 1, 10, "t")
	a, alog := newEngine(t, c, modA)
	require.Eventually(t, func() bool { return owns(a, newTopicKey("t", 0)) }, 20*time.Second, 10*time.Millisecond, "%s", alog)

	require.NoError(t, c.CreateTopic("x", 2, nil))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 50 {
			recs = append(recs, &kgo.Record{Topic: "x", Partition: p, Value: fmt.Appendf(nil, "x-%d-%d", p, i)})
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	b, blog := newEngine(t, c, modB) // started after x was created

	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for name, e := range map[string]*Engine{"A": a, "B": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				bt, err := e.Next(ctx)
				if err != nil {
					return
				}
				if bt.Range.Topic == "x" {
					mu.Lock()
					got[name] += len(bt.Records)
					mu.Unlock()
				}
				bt.Ack()
			}
		}()
	}
	adm := kadm.NewClient(kgoClient(t, c))
	offsetOf := func(p int32) int64 {
		offs, err := adm.FetchOffsets(ctx, "g")
		if err != nil {
			return -1
		}
		o, ok := offs.Lookup("x", p)
		if !ok {
			return -1
		}
		return o.At
	}
	require.Eventually(t, func() bool { return offsetOf(0) >= 0 && offsetOf(1) >= 0 }, 30*time.Second, 50*time.Millisecond,
		"x was never committed\nA:\n%s\nB:\n%s", alog, blog)
	time.Sleep(time.Second)
	o0, o1 := offsetOf(0), offsetOf(1)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("records of x delivered: %v; group g's offsets of x: %d, %d", got, o0, o1)
	assert.Equal(t, 100, got["A"]+got["B"], "records written to x, a topic the group waited for, before a member that started after its creation listed it\nA:\n%s\nB:\n%s", alog, blog)
}

func newTopicKey(topic string, p int32) ranges.Key { return ranges.Key{Topic: topic, Partition: p} }
