package ranges

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors returned (wrapped) by Planner and Tracker. Check them with
// errors.Is.
var (
	// ErrUnknownPartition means the key was never added (or was removed).
	ErrUnknownPartition = errors.New("unknown partition")
	// ErrEndMovedBack means SetEnd asked for an end below the offsets that
	// were already planned.
	ErrEndMovedBack = errors.New("end moved back")
	// ErrNotPlanned means an ack names a range that is not exactly one
	// outstanding planned range (or was already acked).
	ErrNotPlanned = errors.New("range not planned")
	// ErrInvalidRange means an offset or range is malformed: negative,
	// inverted, empty where a non-empty range is required, or not
	// contiguous with the ranges before it.
	ErrInvalidRange = errors.New("invalid range")
)

// Key identifies a partition.
type Key struct {
	Topic     string
	Partition int32
}

// String returns the key as "topic/partition", for example "orders/3".
func (k Key) String() string {
	return k.Topic + "/" + strconv.FormatInt(int64(k.Partition), 10)
}

// Compare orders keys by topic, then by partition: it returns -1, 0 or +1
// as k sorts before, with or after o (for slices.SortFunc).
func (k Key) Compare(o Key) int {
	switch {
	case k.Topic < o.Topic:
		return -1
	case k.Topic > o.Topic:
		return 1
	case k.Partition < o.Partition:
		return -1
	case k.Partition > o.Partition:
		return 1
	}
	return 0
}

// Range is the half-open offset range [Start, End) of one partition: it holds
// the offsets Start through End-1.
type Range struct {
	Topic     string
	Partition int32
	Start     int64
	End       int64
}

// Key returns the partition the range belongs to.
func (r Range) Key() Key {
	return Key{Topic: r.Topic, Partition: r.Partition}
}

// Len returns the number of offsets in the range, End-Start.
func (r Range) Len() int64 {
	return r.End - r.Start
}

// String returns the range as "topic/partition[start,end)", for example
// "orders/3[100,200)".
func (r Range) String() string {
	return fmt.Sprintf("%s/%d[%d,%d)", r.Topic, r.Partition, r.Start, r.End)
}
