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
// Lifecycle: a consumer released with an error is closed, never reused.
// Idle consumers are closed after Config.IdleTimeout by a janitor goroutine
// owned by the Cache; beyond Config.Capacity open clients, the least
// recently used idle consumers are closed. A leased consumer is never closed
// under its holder, except by Close once its context expires. Close stops
// the janitor and closes every client; it is safe to call twice.
package cache
