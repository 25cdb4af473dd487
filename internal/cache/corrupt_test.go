package cache

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawBatches fetches the partition's record batches as the broker stores
// them (newCluster writes batchSize records per batch) and splits them.
func rawBatches(t *testing.T, c *kfake.Cluster) [][]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	topics, err := kadm.NewClient(cl).ListTopics(t.Context(), topic)
	require.NoError(t, err)
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, topics[topic].ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(c.LeaderFor(topic, 0))).Request(t.Context(), req)
	require.NoError(t, err)
	raw := kresp.(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches
	var out [][]byte
	batches(raw, func(_ int64, b []byte) bool { out = append(out, append([]byte(nil), b...)); return true })
	return out
}

// serveBatches makes the cluster answer every fetch of the partition with
// the given batches, from the one holding the fetch offset on, as a broker
// whose log holds them would.
func serveBatches(c *kfake.Cluster, bs [][]byte) {
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				last := int64(binary.BigEndian.Uint64(bs[len(bs)-1])) + batchSize
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = last, last, 0
				for _, b := range bs {
					base := int64(binary.BigEndian.Uint64(b))
					if base+batchSize > rp.FetchOffset {
						sp.RecordBatches = append(sp.RecordBatches, b...)
					}
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// recrc recomputes a v2 batch's CRC after a change to what it covers.
func recrc(b []byte) {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
}

// TestCorruptBatchIsReportedAtItsOffset breaks the second of three batches
// (offsets 20-39) in the ways ProcessFetchPartition reports, and checks that
// Read delivers exactly the first batch, returns ErrCorrupt naming the
// topic, partition and offset 20, and stops its position there: no offset
// is skipped, whatever the decoder did with its own offset.
func TestCorruptBatchIsReportedAtItsOffset(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(b []byte)
	}{
		{"unknown magic", func(b []byte) { b[batchMagicAt] = 7 }},
		{"crc mismatch", func(b []byte) { b[len(b)-1] ^= 0xff }},
		{"undecompressable", func(b []byte) {
			b[22] |= 4 // attributes (low byte): zstd, over records that are not
			recrc(b)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 1, 3*batchSize)
			bs := rawBatches(t, c)
			require.Len(t, bs, 3)
			tt.corrupt(bs[1])
			serveBatches(c, bs)

			cc := newCache(t, c, nil)
			res := readOnce(t, cc, topic, 0, 0, 3*batchSize)
			require.ErrorIs(t, res.err, ErrCorrupt)
			assert.True(t, Permanent(res.err))
			assert.Contains(t, res.err.Error(), "t/0: corrupt record batch at offset 20")
			assert.Equal(t, seq(0, 20), res.offsets, "records before the corrupt batch must be delivered, none after")
			assert.Equal(t, int64(20), res.pos)

			// A new read from there fails the same way at once.
			res = readOnce(t, cc, topic, 0, 20, 3*batchSize)
			require.ErrorIs(t, res.err, ErrCorrupt)
			assert.Empty(t, res.offsets)
			assert.Equal(t, int64(20), res.pos)
		})
	}

	t.Run("past the range end", func(t *testing.T) {
		c := newCluster(t, 1, 3*batchSize)
		bs := rawBatches(t, c)
		bs[1][batchMagicAt] = 7
		serveBatches(c, bs)
		cc := newCache(t, c, nil)
		// The range ends where the corrupt batch starts: it completes.
		res := readOnce(t, cc, topic, 0, 0, 20)
		require.NoError(t, res.err)
		assert.Equal(t, seq(0, 20), res.offsets)
	})
}
