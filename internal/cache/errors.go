package cache

import (
	"errors"
	"fmt"

	"github.com/kbr/kafka_batched_ranges/internal/kerrs"
)

// The sentinels a caller checks with errors.Is. Permanent reports which of
// them (and which broker errors) retrying cannot fix. See the package doc
// for the whole contract.
var (
	// ErrClosed is returned by Acquire once Close has been called.
	ErrClosed = errors.New("consumer cache closed")
	// ErrOffsetOutOfRange is wrapped by *OffsetOutOfRangeError: the broker no
	// longer (or not yet) holds an offset a range needs. Permanent.
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrTopicRecreated is returned by Read when the topic's ID changed while
	// a consumer was reading it. The topic was deleted and created again.
	// Permanent.
	ErrTopicRecreated = errors.New("topic recreated")
	// ErrUnknownPartition is returned by Read when the cluster's metadata
	// says the topic or the partition does not exist. Permanent.
	ErrUnknownPartition = errors.New("unknown topic or partition")
	// ErrLogTruncated is wrapped by *LogTruncatedError: after a leader
	// change, the new leader's log no longer holds offsets that were read
	// from the old one (KIP-320 truncation detection). Permanent.
	ErrLogTruncated = errors.New("log truncated")
	// ErrCorrupt is returned by Read, with the topic, partition and offset,
	// when a record batch the range needs cannot be decompressed or
	// decoded. Every record before it was delivered. Permanent.
	ErrCorrupt = errors.New("corrupt record batch")
	// ErrInternal is wrapped by the error of a bug in the cache: a cursor
	// state change that its transition table does not allow (the message
	// names the partition, the state and the event). The cache refuses it,
	// and the partition's next Acquire returns it. Permanent: retrying
	// cannot fix the code.
	ErrInternal = errors.New("internal error")
)

// Permanent reports whether err, returned by Acquire or Read, is one that
// retrying (with a new client) cannot fix: data that no longer exists or
// never will (offset out of range, truncated log, recreated or unknown topic
// or partition), a corrupt batch, a refusal of access (the one list of
// internal/kerrs: authorisation, SASL authentication; returned at once,
// never retried), or a bug of the cache (ErrInternal). Every other error of
// the cache is retriable: network errors, broker errors, leadership that did
// not settle within Read's bounded retries. Context errors are neither: the
// caller stopped.
func Permanent(err error) bool {
	return kerrs.Permanent(err, ErrOffsetOutOfRange, ErrTopicRecreated, ErrUnknownPartition, ErrLogTruncated, ErrCorrupt, ErrInternal)
}

// OffsetOutOfRangeError reports offsets a range needs that the partition no
// longer holds (deleted by retention or compaction of whole segments) or does
// not hold (the log was truncated). It wraps ErrOffsetOutOfRange.
type OffsetOutOfRangeError struct {
	Topic     string
	Partition int32
	Offset    int64 // the offset that was asked for
	LogStart  int64 // the partition's first offset now (-1 if unknown)
	LogEnd    int64 // the partition's high watermark now (-1 if unknown)
}

func (e *OffsetOutOfRangeError) Error() string {
	if e.LogStart >= 0 && e.Offset < e.LogStart {
		return fmt.Sprintf("%s/%d: offsets [%d, %d) no longer exist (log start is now %d): data was deleted before it was read",
			e.Topic, e.Partition, e.Offset, e.LogStart, e.LogStart)
	}
	return fmt.Sprintf("%s/%d: offset %d is out of range (log start %d, high watermark %d)",
		e.Topic, e.Partition, e.Offset, e.LogStart, e.LogEnd)
}

// Unwrap makes errors.Is(err, ErrOffsetOutOfRange) true.
func (e *OffsetOutOfRangeError) Unwrap() error { return ErrOffsetOutOfRange }

// LogTruncatedError reports that the partition's new leader does not hold
// offsets [EndOffset, Fetched), which were read from its previous leader.
// The log was truncated (an unclean leader election), and records already
// read, or about to be, are not in the partition any more. It wraps
// ErrLogTruncated.
type LogTruncatedError struct {
	Topic     string
	Partition int32
	Epoch     int32 // the leader epoch of the last batch read
	EndOffset int64 // where the new leader's log ends for Epoch (or ends, when it does not know Epoch)
	Fetched   int64 // the offset up to which records were read
	Leader    int32 // the new leader's node ID
	NewEpoch  int32 // the new leader epoch
}

func (e *LogTruncatedError) Error() string {
	return fmt.Sprintf("%s/%d: log truncated: offsets [%d, %d) were read at leader epoch %d but the new leader (broker %d, epoch %d) does not hold them",
		e.Topic, e.Partition, e.EndOffset, e.Fetched, e.Epoch, e.Leader, e.NewEpoch)
}

// Unwrap makes errors.Is(err, ErrLogTruncated) true.
func (e *LogTruncatedError) Unwrap() error { return ErrLogTruncated }
