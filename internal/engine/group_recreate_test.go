package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// TestGroupTopicDeletedThenCreatedAgain (review 4, finding 2): docs/backfills.md, data loss table: "a
// topic deleted with offsets not read ... if the topic is created again
// (continuous runs), it is read from its first offset"; "a topic deleted
// after everything in it was read: a warning; the other topics go on".
// Without a group the refresh reads the topic created again as new
// partitions. With a group, once a listing saw the topic missing
// (topicGone drops t/0), the topic created again is never read: franz-go's
// group client keeps the topic's old ID and the partition assigned (no
// rebalance: "we do not adopt the new ID"), so Assigned is not called
// again, and the refresh, which sees the new ID, finds no planned key of t
// to restart (topicGone(name, nil) only restarts keys still planned) and
// adds no partitions under Membership: t/0 stayed assigned to the member
// and unread. Now the partitions the member still owns are read again.
func TestGroupTopicDeletedThenCreatedAgain(t *testing.T) {
	for _, from := range []StartFrom{StartEarliest, StartLatest} {
		name := map[StartFrom]string{StartLatest: "latest", StartEarliest: "earliest"}[from]
		t.Run(name, func(t *testing.T) {
			c := newKafka(t, 1, 100, "t", "other")
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}, {Name: "other"}}
				cfg.Group = "g"
				cfg.Membership = true
				cfg.StartFrom = from
				cfg.SkipDataLoss = true
				cfg.GroupOpts = []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			k := ranges.Key{Topic: "t", Partition: 0}
			require.Eventually(t, func() bool { return owns(e, k) }, 20*time.Second, 10*time.Millisecond, "%s", log)
			stop := drainInBackground(ctx, e)
			adm := kadm.NewClient(kgoClient(t, c))
			require.Eventually(t, func() bool { return committed(ctx, t, adm, "g", "t", 0) == 100 }, 20*time.Second, 20*time.Millisecond,
				"t/0 was not committed to 100\n%s", log)
			stop()

			require.NoError(t, c.DeleteTopic("t"))
			require.Eventually(t, func() bool { return strings.Contains(log.String(), `Topic "t" was deleted`) }, 20*time.Second, 10*time.Millisecond,
				"the deletion was not noticed\n%s", log)
			t.Logf("group offset of t/0 after the deletion: %d", committed(ctx, t, adm, "g", "t", 0))
			_, err := adm.CreateTopic(ctx, 1, 1, nil, "t")
			require.NoError(t, err)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, err)
			var recs []*kgo.Record
			for i := range 50 {
				recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Value: fmt.Appendf(nil, "new-%d", i)})
			}
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
			cl.Close()

			got := 0
			deadline := time.Now().Add(25 * time.Second)
			for time.Now().Before(deadline) && e.Err() == nil && got < 50 {
				nctx, ncancel := context.WithTimeout(ctx, 500*time.Millisecond)
				b, err := e.Next(nctx)
				ncancel()
				if err != nil {
					continue
				}
				if b.Range.Topic == "t" {
					got += len(b.Records)
				}
				b.Ack()
			}
			t.Logf("records of the new topic delivered: %d of 50; owns t/0: %v; owns other/0: %v; engine error: %v", got, owns(e, k), owns(e, ranges.Key{Topic: "other"}), e.Err())
			assert.NoError(t, e.Err(), "the member stopped")
			assert.Equal(t, 50, got, "records of the topic created again delivered\n%s", log)
		})
	}
}
