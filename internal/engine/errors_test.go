package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestPermanentErrorsStop: errors retrying cannot fix stop the engine at once
// with the range and offset; retriable ones are retried and logged.
func TestPermanentErrorsStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int16
		want error
	}{
		{"authorization", kerr.TopicAuthorizationFailed.Code, kerr.TopicAuthorizationFailed},
		{"corrupt message", kerr.CorruptMessage.Code, kerr.CorruptMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKafka(t, 2, 300, "t")
			fetchError(c, "t", 1, tc.code, func() bool { return true })
			e, _ := newEngine(t, c, func(cfg *Config) {
				cfg.Topics = []TopicSpec{{Name: "t"}}
				cfg.StopAtEnd = true
			})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := drain(ctx, e)
			require.ErrorIs(t, err, ErrEnd)
			require.ErrorIs(t, e.Err(), tc.want)
			assert.Regexp(t, `^read t/1\[\d+,\d+\) at offset \d+: `, e.Err().Error(), "the error names the range and offset")
		})
	}
	t.Run("retriable", func(t *testing.T) {
		c := newKafka(t, 2, 300, "t")
		// Longer than the cache's own retries (1.5s), so the engine retries.
		until := time.Now().Add(2500 * time.Millisecond)
		fetchError(c, "t", 1, kerr.NotLeaderForPartition.Code, func() bool { return time.Now().Before(until) })
		e, log := newEngine(t, c, func(cfg *Config) {
			cfg.Topics = []TopicSpec{{Name: "t"}}
			cfg.StopAtEnd = true
		})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		got, err := drain(ctx, e)
		require.ErrorIs(t, err, ErrEnd)
		require.NoError(t, e.Err())
		assert.Equal(t, map[string]int{"t/0": 300, "t/1": 300}, got)
		assert.Contains(t, log.String(), "(attempt 1)", "the retry is logged with its attempt")
	})
}
