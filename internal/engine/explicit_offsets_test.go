package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestExplicitStartOffsets: a partition whose topics entry names a start
// offset (topic:partition:offset) starts there instead of where start_from
// says, the others of the same run where start_from says; the first batch
// of it holds that offset first.
func TestExplicitStartOffsets(t *testing.T) {
	c := newKafka(t, 3, 300, "t")
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0, 1, 2}, Offsets: map[int32]int64{0: 120, 2: 0}}}
		cfg.StartFrom = StartLatest
		cfg.StopAtEnd = true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	first := map[string]int64{}
	got := map[string]int{}
	for {
		b, err := e.Next(ctx)
		if err != nil {
			require.ErrorIs(t, err, ErrEnd)
			break
		}
		k := b.Range.Key().String()
		if _, ok := first[k]; !ok && len(b.Records) > 0 {
			first[k] = b.Records[0].Offset
		}
		got[k] += len(b.Records)
		b.Ack()
	}
	assert.Equal(t, map[string]int{"t/0": 180, "t/2": 300}, got, "records read (t/1 from latest: none)")
	assert.Equal(t, map[string]int64{"t/0": 120, "t/2": 0}, first, "first offsets")
	assert.Contains(t, log.String(), "(start_from latest, stop_at end): 1 from latest, 2 from the offsets their topics entries name;", "the start line says where they start")
}

// TestExplicitStartOffsetOutsideTheLog: a start offset past the partition's
// end stops the run with an error naming the partition, the offset and the
// end; nothing is read from elsewhere instead.
func TestExplicitStartOffsetOutsideTheLog(t *testing.T) {
	c := newKafka(t, 1, 50, "t")
	e, _ := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 51}}}
		cfg.StopAtEnd = true
	})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := e.Start(ctx)
	if err == nil {
		_, err = drain(ctx, e)
		if err == ErrEnd {
			err = e.Err()
		}
	}
	require.Error(t, err)
	assert.ErrorContains(t, err, "t/0: its topics entry starts it at offset 51, past the partition's end 50")
}

// commitGroupOffset stores offset at for group g of t/0.
func commitGroupOffset(t *testing.T, ctx context.Context, adm *kadm.Client, g string, at int64) {
	t.Helper()
	var os kadm.Offsets
	os.AddOffset("t", 0, at, -1)
	r, err := adm.CommitOffsets(ctx, g, os)
	require.NoError(t, err)
	require.NoError(t, r.Error())
}

// TestCommittedOffsetWinsOverExplicitBelowLogStart: the group
// committed 80 (a previous run that started at t:0:10 and read to 80); then
// retention deleted [0, 50). The same config restarts: the committed
// offset 80 is valid and, as documented, wins; the run must read [80, 100).
// Today it stops with "its topics entry starts it at offset 10 but the log
// now starts at 50".
func TestCommittedOffsetWinsOverExplicitBelowLogStart(t *testing.T) {
	for _, skip := range []bool{false, true} {
		name := "on_data_loss_error"
		if skip {
			name = "on_data_loss_skip"
		}
		t.Run(name, func(t *testing.T) {
			c := newKafka(t, 1, 100, "t")
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			adm := kadm.NewClient(kgoClient(t, c))
			commitGroupOffset(t, ctx, adm, "g", 80)
			require.NoError(t, c.DeleteRecords("t", 0, 50))
			e, log := newTestEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 10}}}
				cfg.Group = "g"
				cfg.StopAtEnd = true
				cfg.SkipDataLoss = skip
			})
			t.Cleanup(func() { _ = e.Close(context.Background()) })
			err := e.Start(ctx)
			var got map[string]int
			if err == nil {
				got, err = drain(ctx, e)
				if errors.Is(err, ErrEnd) {
					err = e.Err()
				}
			}
			require.NoError(t, err, "the group's committed offset 80 is inside the log; log:\n%s", log)
			require.NoError(t, e.Close(ctx))
			assert.Equal(t, map[string]int{"t/0": 20}, got, "records read: [80, 100)")
			assert.Zero(t, e.Summary().Lost, "nothing was lost: the group had read past the deleted span")
			assert.NotContains(t, log.String(), "Data loss", "a loss that did not happen was logged")
		})
	}
}

// TestCommittedOffsetWinsOverExplicitPastEnd: the group committed
// 40, and the topics entry names t:0:500, past the end 100 (e.g. a config
// copied from another cluster or written ahead of the data). The committed
// offset wins by the docs; today the run stops with "past the partition's
// end".
func TestCommittedOffsetWinsOverExplicitPastEnd(t *testing.T) {
	c := newKafka(t, 1, 100, "t")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(kgoClient(t, c))
	commitGroupOffset(t, ctx, adm, "g", 40)
	e, log := newTestEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 500}}}
		cfg.Group = "g"
		cfg.StopAtEnd = true
	})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	err := e.Start(ctx)
	var got map[string]int
	if err == nil {
		got, err = drain(ctx, e)
		if errors.Is(err, ErrEnd) {
			err = e.Err()
		}
	}
	require.NoError(t, err, "the group's committed offset 40 wins; log:\n%s", log)
	assert.Equal(t, map[string]int{"t/0": 60}, got, "records read: [40, 100)")
}

// TestExplicitOffsetOfTopicCreatedLater: `t:0:5` names a topic that
// does not exist yet; once created (10 records), partition 0 is read from
// offset 0, not from 5 as its topics entry says (addPartitionLocked applies
// the explicit offset only with origin fromConfig; a partition of a topic
// created after the start starts fromFirst).
func TestExplicitOffsetOfTopicCreatedLater(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0}, Offsets: map[int32]int64{0: 5}}}
	})
	require.Eventually(t, func() bool { return len(log.String()) > 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.CreateTopic("t", 1, nil))
	produce(t, c, "t", 1, 10)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := e.Next(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, b.Records)
	assert.Equal(t, int64(5), b.Records[0].Offset, "first offset read of t/0 (its topics entry says 5); log:\n%s", log)
	b.Ack()
}
