package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// start_from: committed is Kafka's auto.offset.reset=none: a partition the
// group has no committed offset for is not read, and one warning names the
// partitions skipped at once. Before, such partitions were read from their
// log start ("same as earliest").

// commitSome commits the offsets of some partitions of topic in group, from
// outside the group.
func commitSome(t *testing.T, adm *kadm.Client, group, topic string, at map[int32]int64) {
	t.Helper()
	offs := kadm.Offsets{}
	for p, o := range at {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	_, err := adm.CommitOffsets(t.Context(), group, offs)
	require.NoError(t, err)
}

// uncommittedWarnings returns the WARN lines about partitions skipped for
// want of a committed offset.
func uncommittedWarnings(log *testLogger) []string {
	var got []string
	for _, l := range levelLines(log, "WARN") {
		if strings.Contains(l, "No committed offset") {
			got = append(got, l)
		}
	}
	return got
}

// TestCommittedSkipsPartitionsWithoutOffsets: pinned partitions in a bounded
// run; the partitions with a committed offset are read from it, the others
// are not read, one warning names them, and the run ends (also when nothing
// at all is readable).
func TestCommittedSkipsPartitionsWithoutOffsets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		commits   map[int32]int64
		want      map[string]int
		wantNamed string
	}{
		{"some committed", map[int32]int64{1: 50, 2: 70}, map[string]int{"t/1": 50, "t/2": 30}, `No committed offset in group "g" for t/0, t/3; not reading them (start_from: committed)`},
		{"none committed", nil, map[string]int{}, `No committed offset in group "g" for t/0, t/1, t/2, t/3; not reading them (start_from: committed)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 4, 100, "t")
			adm := kadm.NewClient(kgoClient(t, c))
			commitSome(t, adm, "g", "t", tc.commits)
			e, log := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t", Partitions: []int32{0, 1, 2, 3}}}
				cfg.Group.Name = "g"
				cfg.StartFrom = StartCommitted
				cfg.StopAtEnd = true
			})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			got, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd, "the bounded run did not end\n%s", log)
			require.NoError(t, e.Err())
			assert.Equal(t, tc.want, got, "records read per partition")
			warns := uncommittedWarnings(log)
			require.Len(t, warns, 1, "want one warning naming the skipped partitions\n%s", log)
			assert.Contains(t, warns[0], tc.wantNamed)
			require.NoError(t, e.Close(ctx))
			for _, p := range []int32{0, 3} {
				assert.Equal(t, int64(-1), committed(ctx, t, adm, "g", "t", p), "partition %d was committed", p)
			}
		})
	}
}

// TestCommittedSkipsAssignedPartitionsWithoutOffsets: a member assigned a
// partition the group has no offset for does not read it, warns once for
// the assignment (not at every listing), and a bounded run of the group
// ends: nobody will ever commit that partition.
func TestCommittedSkipsAssignedPartitionsWithoutOffsets(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		t.Run(map[bool]string{false: "continuous", true: "bounded"}[bounded], func(t *testing.T) {
			c := newKafka(t, 2, 300, "t")
			adm := kadm.NewClient(kgoClient(t, c))
			commitSome(t, adm, "g", "t", map[int32]int64{0: 100})
			e, log := newEngine(t, c, func(cfg *Config) {
				memberConfig(kgo.CooperativeStickyBalancer())(cfg)
				cfg.StartFrom = StartCommitted
				cfg.StopAtEnd = bounded
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if bounded {
				got, err := drain(ctx, e)
				require.ErrorIs(t, err, ErrEnd, "the bounded group run did not end\n%s", log)
				require.NoError(t, e.Err())
				assert.Equal(t, map[string]int{"t/0": 200}, got)
			} else {
				got := 0
				for got < 200 {
					b, err := e.Next(ctx)
					require.NoError(t, err, "%s", log)
					require.Equal(t, int32(0), b.Range.Partition, "a record of the partition without a committed offset\n%s", log)
					got += len(b.Records)
					b.Ack()
				}
				time.Sleep(300 * time.Millisecond) // six poll intervals: listings must not warn again nor start it
				assert.False(t, owns(e, ranges.Key{Topic: "t", Partition: 1}), "the partition without a committed offset is read")
			}
			warns := uncommittedWarnings(log)
			require.Len(t, warns, 1, "want one warning for the assignment\n%s", log)
			assert.Contains(t, warns[0], `No committed offset in group "g" for t/1; not reading them (start_from: committed)`)
		})
	}
}

// TestCommittedSkipsNewPartitions: without membership, a partition created
// while a continuous run reads a whole topic has no committed offset either:
// under start_from committed it is not read (other start_from values read it
// from its first offset), with one warning, not one per listing.
func TestCommittedSkipsNewPartitions(t *testing.T) {
	c := newKafka(t, 1, 10, "t")
	adm := kadm.NewClient(kgoClient(t, c))
	commitSome(t, adm, "g", "t", map[int32]int64{0: 0})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group.Name = "g"
		cfg.StartFrom = StartCommitted
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := 0
	for got < 10 {
		b, err := e.Next(ctx)
		require.NoError(t, err, "%s", log)
		got += len(b.Records)
		b.Ack()
	}
	_, err := adm.CreatePartitions(ctx, 1, "t")
	require.NoError(t, err)
	produceTo(t, c, "t", 1, 5)
	require.Eventually(t, func() bool { return len(uncommittedWarnings(log)) > 0 }, 5*time.Second, 10*time.Millisecond, "the new partition was not seen\n%s", log)
	time.Sleep(300 * time.Millisecond) // six poll intervals
	assert.False(t, owns(e, ranges.Key{Topic: "t", Partition: 1}), "the new partition is read")
	warns := uncommittedWarnings(log)
	require.Len(t, warns, 1, "%s", log)
	assert.Contains(t, warns[0], `No committed offset in group "g" for t/1; not reading them (start_from: committed)`)
}
