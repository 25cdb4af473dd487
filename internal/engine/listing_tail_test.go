package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// endListingOf reports whether req lists the end offset (latest) of
// topic/partition, as the engine's watermark listing does.
func endListingOf(req *kmsg.ListOffsetsRequest, topic string, partition int32) bool {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic == topic && rp.Partition == partition && rp.Timestamp == -1 {
				return true
			}
		}
	}
	return false
}

// produceOne writes one record to topic/partition from a goroutine that is
// not the test's (a kfake control function's), returning its error.
func produceOne(c *kfake.Cluster, topic string, partition int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: partition, Value: []byte("tail")}).FirstErr()
}

// plannedEnd is the planner's end of k.
func (e *Engine) plannedEnd(k ranges.Key) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, end, _ := e.parts.planner.Position(k)
	return end
}

// readTail reads the first 10 records of t/0 and returns the batch that
// holds offset 10, and whether release (the held listing's) had happened
// by then.
func readTail(ctx context.Context, t *testing.T, e *Engine, released *atomic.Bool, log *testLogger) bool {
	t.Helper()
	for {
		b, err := e.Next(ctx)
		require.NoError(t, err, "the record at offset 10 was not delivered\n%s", log)
		b.Ack()
		for _, r := range b.Records {
			if r.Offset == 10 {
				return released.Load()
			}
		}
	}
}

// TestTailRecordIsReadWhileAListingIsHeld: in a continuous read, a record
// written to a followed partition while the scheduler's watermark listing
// waits for the broker is planned and delivered at once (the follower's
// fetch reports the new end), not once the listing is answered. Before, the
// scheduler listed on its own goroutine and planned nothing meanwhile: at
// 300 partitions every record written during the listing every
// poll_interval came as late as the listing took.
func TestTailRecordIsReadWhileAListingIsHeld(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	var (
		armed    atomic.Bool // the next end listing of t/0 is held until the tail record is delivered
		released atomic.Bool // the held listing was answered
		produced = make(chan error, 1)
	)
	delivered := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // before the cluster closes: no sleeper outlives the test
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !endListingOf(kreq.(*kmsg.ListOffsetsRequest), "t", 0) || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		c.SleepControl(func() {
			produced <- produceOne(c, "t", 0)
			select {
			case <-delivered:
			case <-done:
			case <-time.After(10 * time.Second):
			}
			released.Store(true)
		})
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < 10; {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got += len(b.Records)
		b.Ack()
	}
	armed.Store(true)
	late := readTail(ctx, t, e, &released, log)
	close(delivered)
	require.NoError(t, <-produced)
	assert.False(t, late, "the record written while the listing was held was delivered only once the listing was answered\n%s", log)
}

// TestListingOlderThanAFetchKeepsTheFetchedEnd: a watermark listing
// answered before a record was written, and applied after the follower's
// fetch reported that record (the partition's end moved past the listed
// one), leaves the end the fetch reported: the record is delivered at once.
// Before, the listing moved the planned end back to what it had listed, and
// the record waited for the next listing (a poll_interval: 1 s records were
// seen at 300 partitions), since its follower had reported that end already.
func TestListingOlderThanAFetchKeepsTheFetchedEnd(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	k := ranges.Key{Topic: "t", Partition: 0}
	var (
		stage    atomic.Int32 // 1: the next end listing answers 10 and is held until the fetch reported 11; 2: the one after is held until the record is delivered
		released atomic.Bool  // the listing after the stale one was answered
		eng      atomic.Pointer[Engine]
		produced = make(chan error, 1)
	)
	delivered := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if !endListingOf(req, "t", 0) {
			return nil, nil, false
		}
		switch {
		case stage.CompareAndSwap(1, 2):
			// The answer as it was before the record: end 10.
			resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
			resp.Version = req.Version
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = "t"
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = 0
			rp.Timestamp = -1
			rp.Offset = 10
			rp.LeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
			resp.Topics = append(resp.Topics, rt)
			c.SleepControl(func() {
				produced <- produceOne(c, "t", 0)
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if eng.Load().plannedEnd(k) == 11 { // the follower's fetch reported it
						return
					}
				}
			})
			return resp, nil, true
		case stage.Load() == 2:
			c.SleepControl(func() {
				select {
				case <-delivered:
				case <-done:
				case <-time.After(10 * time.Second):
				}
				released.Store(true)
			})
		}
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
	})
	eng.Store(e)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < 10; {
		b, err := e.Next(ctx)
		require.NoError(t, err)
		got += len(b.Records)
		b.Ack()
	}
	stage.Store(1)
	late := readTail(ctx, t, e, &released, log)
	close(delivered)
	require.NoError(t, <-produced)
	assert.False(t, late, "the record was delivered only at the listing after the stale one: the stale listing moved the end back\n%s", log)
	assert.NotContains(t, log.String(), "below offsets already planned")
}
