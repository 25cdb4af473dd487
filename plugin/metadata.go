package plugin

import (
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Metadata keys set on every message. The kafka_ keys match the other Kafka
// inputs Benthos users know; kafka_range_ keys are this input's own.
const (
	metaKey        = "kafka_key"
	metaTopic      = "kafka_topic"
	metaPartition  = "kafka_partition"
	metaOffset     = "kafka_offset"
	metaTSUnix     = "kafka_timestamp_unix"
	metaTSMillis   = "kafka_timestamp_ms"
	metaTombstone  = "kafka_tombstone_message"
	metaRangeStart = "kafka_range_start"
	metaRangeEnd   = "kafka_range_end"
)

// newBatch turns the records of one range into a message batch, and returns
// it with the number of value bytes it carries.
func newBatch(recs []*kgo.Record, r ranges.Range) (service.MessageBatch, int64) {
	batch := make(service.MessageBatch, len(recs))
	var n int64
	for i, rec := range recs {
		batch[i] = newMessage(rec, r)
		n += int64(len(rec.Value))
	}
	return batch, n
}

func newMessage(rec *kgo.Record, r ranges.Range) *service.Message {
	msg := service.NewMessage(rec.Value)
	// Headers first, so a header cannot overwrite the keys below.
	for _, h := range rec.Headers {
		msg.MetaSetMut(h.Key, string(h.Value))
	}
	msg.MetaSetMut(metaKey, string(rec.Key))
	msg.MetaSetMut(metaTopic, rec.Topic)
	msg.MetaSetMut(metaPartition, int64(rec.Partition))
	msg.MetaSetMut(metaOffset, rec.Offset)
	msg.MetaSetMut(metaTSUnix, rec.Timestamp.Unix())
	msg.MetaSetMut(metaTSMillis, rec.Timestamp.UnixMilli())
	msg.MetaSetMut(metaTombstone, rec.Value == nil)
	msg.MetaSetMut(metaRangeStart, r.Start)
	msg.MetaSetMut(metaRangeEnd, r.End)
	return msg
}
