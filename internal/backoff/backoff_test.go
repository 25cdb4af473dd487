package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWait(t *testing.T) {
	start := time.Now()
	require.NoError(t, Wait(t.Context(), 20*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start = time.Now()
	require.ErrorIs(t, Wait(ctx, time.Hour), context.Canceled)
	assert.Less(t, time.Since(start), time.Second, "Wait ignored its cancelled context")
}

func TestDouble(t *testing.T) {
	for _, tc := range []struct{ d, ceiling, want time.Duration }{
		{100 * time.Millisecond, 10 * time.Second, 200 * time.Millisecond},
		{6 * time.Second, 10 * time.Second, 10 * time.Second},
		{10 * time.Second, 10 * time.Second, 10 * time.Second},
	} {
		assert.Equal(t, tc.want, Double(tc.d, tc.ceiling), "Double(%s, %s)", tc.d, tc.ceiling)
	}
}
