package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTailer writes a file that does not exist when the tailer starts, in pieces that split
// lines, and expects every complete line once, in order, soon after its newline is written.
func TestTailer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.lines")
	var (
		mu    sync.Mutex
		lines []string
		lags  []time.Duration
		wrote time.Time
	)
	tl := newTailer(path, func(line []byte, seen time.Time) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, string(line))
		lags = append(lags, seen.Sub(wrote))
	})
	defer tl.Close()
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	for _, piece := range []string{"one\ntw", "o\n", "thr", "ee\nfour\nfive"} {
		mu.Lock()
		wrote = time.Now()
		mu.Unlock()
		_, err := f.WriteString(piece)
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond)
	}
	tl.Close()
	tl.Close()
	assert.Equal(t, []string{"one", "two", "three", "four"}, lines)
	for _, l := range lags {
		assert.Less(t, l, 20*time.Millisecond, "line seen after its write")
	}
}
