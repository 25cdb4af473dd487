// Package plugin is the kafka_batched_ranges Benthos input: its config spec
// (config.go), the input itself (input.go: Connect, ReadBatch, nack replay,
// Close), the scheduler and readers (scheduler.go), commits (commit.go), the
// cluster view through kadm (cluster.go), message metadata (metadata.go) and
// `connect demo` (demo.go).
//
// It and plugin/promexport (the prometheus metrics exporter) are the only
// packages outside cmd that import Benthos. It plans ranges with
// internal/ranges and reads them through internal/cache, and owns every
// goroutine it starts: the scheduler and the committer, started by Connect,
// and one reader per range in flight, started by the scheduler. All of them
// stop through the input's shutdown signaller and are waited for by Close,
// which then commits the acknowledged progress once more and closes every
// Kafka client.
//
// Delivery is at least once. A partition's committed offset only ever covers
// acknowledged records; see scheduler.go for how ranges, batches, emission
// order and max_in_flight slots make a crash re-read at most
// max_in_flight x max_range_records records and a graceful stop re-deliver
// nothing that was acknowledged.
package plugin
