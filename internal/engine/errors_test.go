package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/kerrs"
)

// TestPermanent: the engine stops on the one list of refusals of access
// (internal/kerrs), the cache's permanent errors and CORRUPT_MESSAGE, and
// retries the rest; Permanent, which the plugin asks, says the same.
func TestPermanent(t *testing.T) {
	for _, err := range kerrs.DeniedErrors() {
		assert.Truef(t, permanent(err), "permanent(%v): a refusal of access", err)
		assert.Truef(t, permanent(fmt.Errorf("listing: %w", err)), "permanent(wrapped %v)", err)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kerr.CorruptMessage, true},
		{cache.ErrCorrupt, true},
		{cache.ErrTopicRecreated, true},
		{&cache.OffsetOutOfRangeError{Topic: "t", Offset: 5, LogStart: 10}, true},
		{kerr.NotLeaderForPartition, false},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.CoordinatorNotAvailable, false},
		{kerr.RequestTimedOut, false},
		{errors.New("dial tcp: connection refused"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		assert.Equalf(t, c.want, permanent(c.err), "permanent(%v)", c.err)
		assert.Equalf(t, c.want, Permanent(c.err), "Permanent(%v)", c.err)
	}
}
