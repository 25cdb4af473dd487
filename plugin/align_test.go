package plugin

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestInputAlignedRangesAreWholeBatches runs align_ranges through a Benthos
// stream: every batch the pipeline sees is one whole range on a block of
// max_range_records offsets (here read in many small fetches), its records
// in offset order, and together they hold every record once.
func TestInputAlignedRangesAreWholeBatches(t *testing.T) {
	const (
		topic      = "events"
		partitions = 3
		n          = 2000
	)
	addr := newKafka(t, topic, partitions)
	// In 50 producer calls, so that a range arrives in several fetches.
	want := map[pos]produced{}
	for i := 0; i < n; i += n / 50 {
		maps.Copy(want, produceRecords(t, addr, topic, partitions, i, n/50))
	}
	ends := map[int64]int64{}
	for p := range want {
		ends[int64(p.partition)] = max(ends[int64(p.partition)], p.offset+1)
	}
	// Partition 0 resumes inside a block: its first range ends at the
	// block's end.
	const committed = 137
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: committed, LeaderEpoch: -1})
	_, err := newAdmin(t, addr).CommitOffsets(t.Context(), "g", offs)
	require.NoError(t, err)
	for o := range int64(committed) {
		delete(want, pos{0, o})
	}

	type batchInfo struct {
		partition, start, end int64
		offsets               []int64
	}
	var (
		mu      sync.Mutex // guards batches
		batches []batchInfo
	)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ events ]
  consumer_group: g
  stop_at: end
  align_ranges: true
  range_metadata: true
  max_range_records: 300
  max_in_flight: 4
  fetch_max_partition_bytes: 1KiB
`, func(b service.MessageBatch) error {
		var bi batchInfo
		for i, m := range b {
			p, _ := m.MetaGetMut("kafka_partition")
			s, _ := m.MetaGetMut("kafka_range_start")
			e, _ := m.MetaGetMut("kafka_range_end")
			o, _ := m.MetaGetMut("kafka_offset")
			if i == 0 {
				bi.partition, bi.start, bi.end = p.(int64), s.(int64), e.(int64)
			} else if p.(int64) != bi.partition || s.(int64) != bi.start || e.(int64) != bi.end {
				return fmt.Errorf("batch mixes ranges: %d/[%d,%d) and %v/[%v,%v)", bi.partition, bi.start, bi.end, p, s, e)
			}
			bi.offsets = append(bi.offsets, o.(int64))
		}
		mu.Lock()
		batches = append(batches, bi)
		mu.Unlock()
		return nil
	})
	requireEnded(t, res)
	assert.Equal(t, len(want), len(countByPos(t, res.msgs)))
	assert.Equal(t, len(want), len(res.msgs), "records delivered more than once")

	mu.Lock()
	defer mu.Unlock()
	seen := map[[2]int64]bool{}
	for _, b := range batches {
		r := fmt.Sprintf("%d/[%d,%d)", b.partition, b.start, b.end)
		require.True(t, b.start%300 == 0 || b.partition == 0 && b.start == committed, "range %s starts neither on a block nor at the committed offset", r)
		require.True(t, b.end%300 == 0 || b.end == ends[b.partition], "range %s ends neither on a block nor at the end %d", r, ends[b.partition])
		require.False(t, seen[[2]int64{b.partition, b.start}], "range %s in two batches", r)
		seen[[2]int64{b.partition, b.start}] = true
		require.Len(t, b.offsets, int(b.end-b.start), "range %s is not one whole batch", r)
		for i, o := range b.offsets {
			require.Equal(t, b.start+int64(i), o, "range %s: record %d", r, i)
		}
	}
	wantBatches := 0
	for _, end := range ends {
		wantBatches += int((end + 299) / 300) // [137, 300) replaces [0, 300) on partition 0
	}
	assert.Len(t, batches, wantBatches, "ranges in blocks of 300 up to the ends %v", ends)
}
