// Package backoff holds how this project waits between retries: delays that
// double up to a ceiling, and a wait that ends early when its context does.
// The cache (leadership retries), the engine (reader retries, the final
// commit) and the plugin (Connect) all retry through it, so every retry in the
// project grows and stops the same way.
package backoff

import (
	"context"
	"time"
)

// Wait waits for d, or until ctx ends, in which case it returns ctx's error.
func Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Double returns the delay after d: twice d, at most ceiling.
func Double(d, ceiling time.Duration) time.Duration {
	return min(2*d, ceiling)
}
