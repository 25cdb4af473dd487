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

// TestNewPartitionToLaterMemberIsReadFromFirst (review 4, finding 3): docs/several-instances.md "Running several
// instances": "A partition created after the process started is read from
// its first offset where the group has no offset for it, whatever
// start_from says (as Flink and Spark do): every record of it is new". Member
// A reads t (1 partition) with start_from latest; t gets a second partition
// and 50 records are written to it; member B starts (scale-out, or a
// rolling restart) and the group hands t/1 to B. For B, t/1 existed at its
// start, so B started it at latest: the 50 records written to a partition
// the group never read were skipped by the group as a whole. Now "new" is
// decided per group: at B's start the group had an offset for t/0, none for
// t/1 (newToGroup).
func TestNewPartitionToLaterMemberIsReadFromFirst(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	mod := func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StartFrom = StartLatest
		cfg.GroupOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}
	}
	a, alog := newEngine(t, c, mod)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool { return owns(a, k0) }, 20*time.Second, 10*time.Millisecond, "%s", alog)

	adm := kadm.NewClient(kgoClient(t, c))
	_, err := adm.CreatePartitions(t.Context(), 1, "t")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var recs []*kgo.Record
	for i := range 50 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 1, Value: fmt.Appendf(nil, "new-%d", i)})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	cl.Close()

	b, blog := newEngine(t, c, mod) // started after t/1 was created

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
				if bt.Range.Partition == 1 {
					mu.Lock()
					got[name] += len(bt.Records)
					mu.Unlock()
				}
				bt.Ack()
			}
		}()
	}
	require.Eventually(t, func() bool { return owns(a, k1) || owns(b, k1) }, 30*time.Second, 20*time.Millisecond,
		"t/1 was never assigned\nA:\n%s\nB:\n%s", alog, blog)
	owner := "A"
	if owns(b, k1) {
		owner = "B"
	}
	time.Sleep(3 * time.Second) // let its owner read it
	cancel()
	wg.Wait()
	t.Logf("t/1 assigned to %s; records of t/1 delivered: %v; group offset of t/1: %d", owner, got,
		committed(context.Background(), t, adm, "g", "t", 1))
	assert.Equal(t, 50, got["A"]+got["B"], "records written to the new partition before the group read it\nA:\n%s\nB:\n%s", alog, blog)
}

// TestStartLatestWithNewGroupStartsAtLatest: the guard of newToGroup: a
// group without offsets for a topic starts its partitions where start_from
// says (latest), every one of them, with one member or two.
func TestStartLatestWithNewGroupStartsAtLatest(t *testing.T) {
	c := newKafka(t, 2, 10, "t")
	mod := func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.StartFrom = StartLatest
	}
	a, alog := newEngine(t, c, mod)
	b, blog := newEngine(t, c, mod)
	k0, k1 := ranges.Key{Topic: "t", Partition: 0}, ranges.Key{Topic: "t", Partition: 1}
	require.Eventually(t, func() bool {
		return (owns(a, k0) || owns(b, k0)) && (owns(a, k1) || owns(b, k1))
	}, 20*time.Second, 10*time.Millisecond, "A:\n%s\nB:\n%s", alog, blog)
	time.Sleep(500 * time.Millisecond) // both started where they start
	produceTo(t, c, "t", 0, 5)
	produceTo(t, c, "t", 1, 5)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	var offsets []int64
	var wg sync.WaitGroup
	for _, e := range []*Engine{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				bt, err := e.Next(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				for _, r := range bt.Records {
					offsets = append(offsets, r.Offset)
				}
				mu.Unlock()
				bt.Ack()
			}
		}()
	}
	wg.Wait()
	assert.Len(t, offsets, 10, "records read: %v\nA:\n%s\nB:\n%s", offsets, alog, blog)
	for _, o := range offsets {
		assert.GreaterOrEqual(t, o, int64(10), "a record written before the start was read (start_from latest)")
	}
}
