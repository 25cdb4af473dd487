package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// hideOffsets makes every offset listing that names topic fail
// (LEADER_NOT_AVAILABLE for each partition it asks for) while hidden is set,
// so records can be written to a topic just created before the engine lists
// its watermarks: where it then starts reading is seen in what it reads.
func hideOffsets(c *kfake.Cluster, topic string, hidden *atomic.Bool) {
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		names := false
		for _, rt := range r.Topics {
			names = names || rt.Topic == topic
		}
		if !hidden.Load() || !names {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.LeaderNotAvailable.Code
				sp.Offset, sp.Timestamp = -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// missingTopicConfig reads the topics nosuch (not created yet) and orders,
// from their latest offsets, so what a topic created later is read from
// shows in what is read.
func missingTopicConfig(cfg *Config) {
	cfg.Topics = []TopicSpec{{Name: "nosuch"}, {Name: "orders"}}
	cfg.StartFrom = StartLatest
}

// TestContinuousRunReadsTopicsThatExist (issue 25, point 2): `topics:
// [nosuch, orders]` in a continuous run read nothing: Start failed with
// `topics: topic "nosuch" does not exist`, retried for ever. Now orders is
// read, one warning names nosuch, and once nosuch is created it is read
// from its first offset (records written before the engine could list it
// are read, whatever start_from says), with and without a group.
func TestContinuousRunReadsTopicsThatExist(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"no group", missingTopicConfig},
		{"group", func(cfg *Config) {
			memberConfig(kgo.CooperativeStickyBalancer())(cfg)
			missingTopicConfig(cfg)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 2, 10, "orders")
			var hidden atomic.Bool
			hideOffsets(c, "nosuch", &hidden)
			e, log := newEngine(t, c, tc.mod)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			o0, o1 := ranges.Key{Topic: "orders", Partition: 0}, ranges.Key{Topic: "orders", Partition: 1}
			require.Eventually(t, func() bool { return owns(e, o0, o1) }, 20*time.Second, 10*time.Millisecond, "orders is not read\n%s", log)
			produce(t, c, "orders", 2, 5)
			assert.Equal(t, map[string]int{"orders/0": 5, "orders/1": 5}, take(ctx, t, e, log, 10))

			hidden.Store(true)
			require.NoError(t, c.CreateTopic("nosuch", 2, nil))
			produce(t, c, "nosuch", 2, 7)
			time.Sleep(200 * time.Millisecond) // a few listings that see nosuch without its offsets
			hidden.Store(false)
			produce(t, c, "orders", 2, 3)
			got := take(ctx, t, e, log, 20)
			assert.Equal(t, map[string]int{"nosuch/0": 7, "nosuch/1": 7, "orders/0": 3, "orders/1": 3}, got)
			require.NoError(t, e.Err())
			assert.Equal(t, 1, countLines(log, "WARN", `topic "nosuch" does not exist`), "warnings naming nosuch\n%s", log)
			assert.Equal(t, 1, countLines(log, "INFO", `Topic "nosuch" exists now`), "\n%s", log)
		})
	}
}

// TestBoundedRunWithMissingTopic: a bounded run stops naming a topic or a
// partition that does not exist and reads nothing; with SkipMissingTopics
// it warns naming it, reads the rest and ends, also with a group.
func TestBoundedRunWithMissingTopic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		topics  []TopicSpec
		skip    bool
		group   bool
		wantErr string
		want    map[string]int
	}{
		{name: "topic", topics: []TopicSpec{{Name: "nosuch"}, {Name: "orders"}}, wantErr: `topics: topic "nosuch" does not exist`},
		{name: "partition", topics: []TopicSpec{{Name: "orders", Partitions: []int32{0, 5}}}, wantErr: `topics: topic "orders" partition 5 does not exist (the topic has 2 partitions)`},
		{name: "topic skipped", topics: []TopicSpec{{Name: "nosuch"}, {Name: "orders"}}, skip: true, want: map[string]int{"orders/0": 10, "orders/1": 10}},
		{name: "partition skipped", topics: []TopicSpec{{Name: "orders", Partitions: []int32{0, 5}}}, skip: true, want: map[string]int{"orders/0": 10}},
		{name: "topic skipped with a group", topics: []TopicSpec{{Name: "nosuch"}, {Name: "orders"}}, skip: true, group: true, want: map[string]int{"orders/0": 10, "orders/1": 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 2, 10, "orders")
			e, log := newEngine(t, c, func(cfg *Config) {
				if tc.group {
					memberConfig(kgo.CooperativeStickyBalancer())(cfg)
				}
				cfg.Topics = tc.topics
				cfg.StopAtEnd = true
				cfg.SkipMissingTopics = tc.skip
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			got, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd, "%s", log)
			if tc.wantErr != "" {
				require.Error(t, e.Err())
				assert.Contains(t, e.Err().Error(), tc.wantErr)
				assert.Empty(t, got)
				return
			}
			require.NoError(t, e.Err(), "%s", log)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, 1, countLines(log, "WARN", "does not exist", "skip"), "one warning naming what is skipped\n%s", log)
		})
	}
}
