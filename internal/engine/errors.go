package engine

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/kerrs"
)

var (
	// ErrEnd is returned by Next once nothing more will be read and every
	// batch handed out is done. That is after the last range with
	// StopAtEnd, or after an error stopped the engine (see Err).
	ErrEnd = errors.New("end of input")
	// ErrNotStarted is returned by Next before Start succeeded.
	ErrNotStarted = errors.New("engine not started")
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("engine closed")
	// errMissing is wrapped by the errors of topics and partitions that do
	// not exist.
	errMissing = errors.New("does not exist")
	// errTransition is wrapped by the error that stops the engine when a
	// partition's record is asked for a transition the partition table does
	// not allow (partTable.apply). It is a bug, never data to skip.
	errTransition = errors.New("internal error: transition not allowed by the partition table")
)

// permanent reports errors that retrying cannot fix. They are the cache's
// permanent errors (data that no longer exists, a truncated log, a topic
// recreated under the reader, a batch that cannot be decoded), refusals of
// access from any request (internal/kerrs' one list, of authorisation and
// SASL authentication) and CORRUPT_MESSAGE. They stop the engine with an error
// naming topic, partition and offsets. Everything else (network,
// leadership, coordinator, a broker restarting) is retried with backoff and
// logged.
func permanent(err error) bool {
	return cache.Permanent(err) || kerrs.Permanent(err, kerr.CorruptMessage)
}

// vanished reports errors saying that the topic or partition is not on the
// cluster (any more), or is a new topic of the same name. The engine then
// lists the topics again. A topic that is really gone is handled as deleted
// (with the exact span that was not read). One that is still there (brokers answer so briefly after a topic is
// created) is retried.
func vanished(err error) bool {
	return errors.Is(err, cache.ErrUnknownPartition) ||
		errors.Is(err, cache.ErrTopicRecreated) ||
		errors.Is(err, kerr.UnknownTopicOrPartition) ||
		errors.Is(err, kerr.UnknownTopicID)
}

// Permanent reports whether retrying cannot fix err, an error of Start or
// of the cluster. Those are refusals of access control (authorisation, SASL)
// and the cache's permanent errors. The plugin uses it to stop a bounded run that
// cannot start instead of retrying it for ever.
func Permanent(err error) bool { return permanent(err) }
