// Package plugin is the kafka_batched_ranges Benthos input: the adapter
// between Benthos and the Benthos-free engine (internal/engine).
//
// The files:
//
//   - the config spec and its parsing into a plain Config (config.go, with
//     the group fields in group.go, TLS and SASL in security.go and aws.go,
//     topic patterns in patterns.go, the retry and timeout policy in
//     policy.go)
//   - the value rules that both `connect lint` and ParseConfig run (lint.go,
//     and lintrule.go for how they become lint rules)
//   - the hints for fields of kafka_franz, redpanda and the old kafka input
//     (franz.go)
//   - the input itself (input.go: Connect, ReadBatch, acknowledgements,
//     Close and the summary, with ErrStoppedBeforeEnd for a bounded run
//     stopped early)
//   - Benthos' batch policy within ranges (batching.go)
//   - ordering: key's batches of one key bucket each (keyorder.go)
//   - message metadata (metadata.go)
//   - archive mode, ranges handed out as archives of their records' values,
//     and record_metadata (archive.go, with the formats' bytes in
//     archive_format.go)
//   - the input's metrics (metrics.go)
//   - the franz-go client options (client.go)
//   - the share-group input, on internal/share, split as the range input
//     is: its fields, their parsing and value rules (share_config.go), the
//     rules across fields (share_lint.go), the adapter (share_input.go:
//     Connect, ReadBatch, acknowledgements, Close, messages with
//     kafka_delivery_count, on share.Members, which merges the members'
//     batches), Benthos' batch policy across share batches
//     (share_batching.go) and its metrics (share_metrics.go)
//   - the version of the input a program carries (version.go)
//   - RunCLI with its exit codes (cli.go) and its refusal of a bounded run
//     that could never end (endbatching.go).
//
// It and plugin/promexport (the prometheus metrics exporter) are the only
// packages outside cmd that import Benthos. The engine plans ranges
// (internal/ranges), reads them through the consumer cache (internal/cache)
// and owns every goroutine it starts. Close here waits for them, commits
// the acknowledged progress once more and reports a stopping error through
// Options.OnFailure.
//
// Delivery is at least once. A partition's committed offset only ever covers
// acknowledged records, so a crash re-reads at most max_in_flight x
// max_range_records records and a graceful stop re-delivers nothing that was
// acknowledged (internal/engine's package doc says how).
package plugin
