// Package cache holds the partition-pinned consumer cache.
//
// A consumer here is one franz-go client that reads exactly one partition by
// issuing its own fetch requests to the partition's leader. A caller leases a
// consumer for a partition with (*Cache).Acquire, reads one half-open offset
// range [start, end) with (*Lease).Read, and hands the consumer back with
// (*Lease).Release. A lease is exclusive: while it is held no other caller
// can touch that client, and two concurrent leases of one partition get two
// different clients.
//
// The point of caching is continuation. A consumer remembers its read
// position and keeps the records it fetched past the end of the last range.
// When the next range of that partition starts exactly at that position,
// Read continues with the buffered records and the open connection: no seek,
// no new client, no refetch. A range that starts anywhere else seeks (drops
// the buffer and fetches from the new offset).
//
// A range is complete when the read position reaches its end, not when
// end-start records have arrived. Offsets taken by transaction markers,
// aborted records (under read_committed) or compaction never arrive as
// records, so counting records would hang; the position comes from the
// record batches themselves (kgo.ProcessFetchPartition), which always advance
// past such offsets.
//
// Offsets are never reset silently: a fetch answered with
// OFFSET_OUT_OF_RANGE returns an *OffsetOutOfRangeError naming the topic,
// partition and the offsets that no longer exist.
//
// # Leaders, epochs and truncation
//
// A consumer fetches from the partition's leader, with the leader epoch it
// learned from metadata (KIP-320 fencing). NOT_LEADER_OR_FOLLOWER,
// FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and the other leadership errors
// make it reload metadata and follow the new leader, at most
// maxLeaderRetries times in one Read (100 ms, 200 ms, ... between tries);
// the retries restart after every fetch that succeeds. After such an error,
// if records were fetched, the position is validated before the next fetch:
// OffsetForLeaderEpoch asks the new leader where the epoch of the last
// fetched batch (read from the batch headers) ends in its log. An end below
// the fetch position means the log was truncated under the reader (an
// unclean election): Read returns a *LogTruncatedError naming the offsets
// that are gone, never reads on. A leader that answers "epoch unknown"
// (Kafka does so only for epochs newer than its own; kfake also when
// nothing was written since the epoch changed) is checked by its high
// watermark instead. A seek forgets the epoch: a range that starts away
// from the position is not validated against what was read before it.
//
// Not done: follower fetching (KIP-392, rack_id). Every fetch goes to the
// leader; the fetch request carries no rack and the PreferredReadReplica of
// a response is ignored.
//
// # Errors
//
// Every error names the topic and partition (and the offset where it
// matters) and wraps its cause with %w. Permanent classifies them:
//
//   - Permanent (retrying cannot fix them; stop and report):
//     ErrOffsetOutOfRange (*OffsetOutOfRangeError), ErrLogTruncated
//     (*LogTruncatedError), ErrTopicRecreated, ErrUnknownPartition (the
//     metadata says the topic or partition does not exist; a fetch that
//     says so while metadata disagrees is retried as a leadership error),
//     ErrCorrupt (a batch that cannot be decompressed or decoded, or that
//     yields no record fetch after fetch; the records before it are
//     delivered and pos is its offset, so nothing is skipped), and authentication or authorisation failures
//     (kerr.TopicAuthorizationFailed, ClusterAuthorizationFailed,
//     SaslAuthenticationFailed, UnsupportedSaslMechanism, IllegalSaslState),
//     which are returned at once, the kerr error preserved, never retried
//     inside the cache.
//   - Retriable (back off and read again from pos, with a new client since
//     the failed one is released with the error): network errors, broker
//     errors, leadership that did not settle within Read's retries (the
//     broker's kerr error wrapped).
//   - Context errors: the caller stopped the read.
//
// An error from emit is returned as is. A kgo client retries some requests
// itself (metadata, by RetryTimeout); the cache adds no retries of its own
// beyond the leadership ones above.
//
// # Why the cache fetches by itself
//
// The alternative is kgo's own consumer: one client per partition with
// kgo.ConsumePartitions, (*Client).SetOffsets to seek, KeepControlRecords so
// transaction markers move the position, records past end kept for the next
// range. bench_test.go holds that prototype and measures both on the same
// data, 200,000 records of 1 KiB in one partition:
//
//	KBR_KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench Range -benchtime 5x -count 4 ./internal/cache/
//
// Medians of 4 runs on a shared 2-core machine (noisy: single runs varied
// by up to 2x):
//
//	                                     cache fetch path    kgo consumer
//	ranges of 10000, continuation:
//	  Apache Kafka 4.4.0                 ~805 MB/s           ~860 MB/s
//	  kfake                              ~950 MB/s           ~1090 MB/s
//	one 100-record range after a seek:
//	  Apache Kafka 4.4.0                 ~4.1 ms, 3.5 MB     ~29.5 ms, 29 MB
//	  kfake                              ~3.4 ms, 10 MB      ~34 ms, 39-56 MB
//
// Reading on is a draw within the noise (kgo a little ahead: it fetches the
// next batch while the caller handles the last; this path fetches on
// demand). A seek costs about 7 times less time and 8 times less memory
// here: kgo drops what it had read ahead, waits for the fetch in flight and
// its source loop to pick up the new offset. The decision is to keep this
// path, for three reasons:
//
//   - Seeks are common: every range that does not start where a cached
//     client stopped (first ranges, retries, ranges of several readers of
//     one partition) is one.
//   - Exactness: kgo does not expose its fetch position, only the records it
//     returns. A range whose last offsets hold no record (compacted away,
//     aborted under read_committed) at the end of the log never sees a
//     record at or past its end, so it could not complete without a side
//     channel; here the position comes from the batches.
//   - Memory: a kgo consumer reads ahead in the background, so every idle
//     cached client would hold a buffered fetch (and keep fetching unless
//     paused); here an idle client holds at most the batch past its end.
//
// The price is what this package does itself instead of kgo: leader
// following, epoch fencing and truncation detection (above), and follower
// fetching, which is not done.
//
// # Lifecycle
//
// A consumer released with an error is closed, never reused.
// Idle consumers are closed after Config.IdleTimeout by a janitor goroutine
// owned by the Cache; beyond Config.Capacity open clients, the least
// recently used idle consumers are closed. A leased consumer is never closed
// under its holder, except by Close once its context expires. Close stops
// the janitor and closes every client; it is safe to call twice.
package cache
