// Package ranges plans which Kafka offsets to read next and decides which
// offset is safe to commit once reads are acknowledged.
//
// # Ranges
//
// A [Range] is the half-open offset range [Start, End) of one partition: it
// holds the offsets Start, Start+1, ..., End-1 and End-Start of them. An empty
// range (Start == End) is never planned. Offsets are plain int64 values and a
// partition is identified by a [Key] (topic and partition number), so the
// package depends on nothing but the standard library.
//
// # Fair planning
//
// A [Planner] knows, for every partition, the next offset it has not planned
// yet and the end it may plan up to (a high watermark or last stable offset,
// raised over time with [Planner.SetEnd]). [Planner.Next] cuts at most
// maxRecords offsets from one partition and advances that partition's next
// offset to the range's End, so every offset is planned exactly once and the
// ranges of one partition come in increasing order. Partitions are served
// round-robin in a fixed order (topic, then partition number) starting after
// the partition served last: a partition with a large backlog gets one range
// per turn, like every other partition with something pending, and cannot
// starve the others. A skip function lets the caller pass over partitions it
// cannot serve right now, for example because ordered mode allows only one
// range in flight per partition.
//
// # Contiguous acknowledgement and the commit frontier
//
// Planned ranges are read and acknowledged concurrently, so acks arrive in any
// order. A [Tracker] registers every planned range with [Tracker.Add] and
// records its acknowledgement with [Tracker.Ack]. Per partition it keeps the
// frontier: the end of the longest contiguous run of acknowledged ranges that
// begins at the partition's start offset. With ranges [0,10), [10,20) and
// [20,30) planned, acking [20,30) and then [0,10) moves the frontier from 0 to
// 10; it reaches 30 only once [10,20) is acked too.
//
// The frontier never decreases and never passes an offset that has not been
// acknowledged, which makes it the only offset that is ever committed: a
// restart resumes at the frontier and re-reads whatever was acked beyond a
// gap, but never skips an unacknowledged record.
//
// # Aligned ranges
//
// A Planner made with [NewAlignedPlanner] cuts each partition into blocks
// [k·N, (k+1)·N) of N = maxRecords offsets, and every range is the part of
// one block from the partition's next offset on, so a partition's ranges
// depend on its offsets alone, not on when or how often it was planned. With
// [CutAtEnd] the last range is cut at the partition's end (a bounded read's
// snapshot end: the same end plans the same ranges); with [WholeBlocks] a
// block is planned only once the end reached it (a continuous read's growing
// high watermark). A Tracker made with [NewWholeRangeTracker] keeps its
// frontier on range ends. Together they make a restart from the frontier plan
// the ranges of the run before it again, offset for offset: what a range
// wrote can be overwritten whole, which is how file and object sinks get
// exactly-once output.
//
// Neither Planner nor Tracker is safe for concurrent use; the caller
// serialises access, typically under one mutex.
package ranges
