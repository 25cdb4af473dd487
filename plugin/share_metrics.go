package plugin

import (
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Metrics of share groups.
const (
	// metricShareRecords counts share group records by what happened to
	// them, acknowledgements when the broker answered them: acquired,
	// accepted, released, rejected, renewed (a record renewed twice counts
	// twice), lock_expired (an acknowledgement the broker refused because
	// the record's lock had expired), ack_failed (an acknowledgement
	// refused for another reason, or lost: the share session had ended,
	// the leader moved), renew_failed (a renewal refused or lost),
	// replayed (nacked, replayed in the member: auto_replay_nacks),
	// archived (released on the last delivery the group allows, so
	// archived by the broker; counted released too).
	metricShareRecords = "kafka_batched_ranges_share_records_total" // counter {topic, event}
)

// shareEvents are the event label values of metricShareRecords.
var shareEvents = []string{"acquired", "accepted", "released", "rejected", "renewed", "lock_expired", "ack_failed", "renew_failed", "replayed", "archived"}

// shareObserver implements share.Observer with Benthos metrics: the share
// events under metricShareRecords, and the records and bytes handed to the
// pipeline (Delivered) under the input's usual names, as observer does for
// ranges.
type shareObserver struct {
	records    *service.MetricCounter
	recordsOut *service.MetricCounter
	bytesOut   *service.MetricCounter
	seen       sync.Map // topics whose series were started at 0 (string -> struct{})
}

// newShareObserver returns the observer of the topics read. With
// regexp_topics their names are patterns, and a topic's series start when
// its first records are acquired.
func newShareObserver(m *service.Metrics, topics []TopicSpec, regexp bool) *shareObserver {
	o := &shareObserver{
		records:    m.NewCounter(metricShareRecords, "topic", "event"),
		recordsOut: m.NewCounter(metricRecords, "topic"),
		bytesOut:   m.NewCounter(metricBytes, "topic"),
	}
	// Named topics have their series from the start, at 0, so an alert on
	// increase(...{event=~"lock_expired|ack_failed"}) has a series to watch.
	if !regexp {
		for _, t := range topics {
			o.start(t.Name)
		}
	}
	return o
}

// start starts topic's series at 0, once.
func (o *shareObserver) start(topic string) {
	if _, loaded := o.seen.LoadOrStore(topic, struct{}{}); loaded {
		return
	}
	for _, e := range shareEvents {
		o.records.Incr(0, topic, e)
	}
}

func (o *shareObserver) Acquired(topic string, n int64) {
	o.start(topic)
	o.records.Incr(n, topic, "acquired")
}
func (o *shareObserver) Replayed(topic string, n int64) { o.records.Incr(n, topic, "replayed") }
func (o *shareObserver) Archived(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "archived")
}
func (o *shareObserver) Accepted(topic string, n int64) { o.records.Incr(n, topic, "accepted") }
func (o *shareObserver) Released(topic string, n int64) { o.records.Incr(n, topic, "released") }
func (o *shareObserver) Rejected(topic string, n int64) { o.records.Incr(n, topic, "rejected") }
func (o *shareObserver) Renewed(topic string, n int64)  { o.records.Incr(n, topic, "renewed") }
func (o *shareObserver) LockExpired(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "lock_expired")
}
func (o *shareObserver) AckFailed(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "ack_failed")
}
func (o *shareObserver) RenewFailed(topic string, _ int32, n int64) {
	o.records.Incr(n, topic, "renew_failed")
}
func (o *shareObserver) Delivered(topic string, records, bytes int64) {
	o.recordsOut.Incr(records, topic)
	o.bytesOut.Incr(bytes, topic)
}
