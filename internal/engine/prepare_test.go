package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestResetOffsetsOncePerReplay: reset_offsets with a group resets the
// group's offsets when the replay starts; a member joining the replay later
// resumes from what the first one committed. Before, every assignment
// restarted from start_from, and the member joining re-read the whole
// partition it took over.
func TestResetOffsetsOncePerReplay(t *testing.T) {
	c := newKafka(t, 2, 300, "t")
	adm := kadm.NewClient(kgoClient(t, c))
	commitAll(t, adm, "g", "t", 2, 300) // a previous run committed everything

	replay := func(cfg *Config) {
		memberConfig(kgo.CooperativeStickyBalancer())(cfg)
		cfg.Group.ResetOffsets = true
	}
	a, logA := newEngine(t, c, replay)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	stopA := drainInBackground(ctx, a)
	require.Eventually(t, func() bool {
		return committed(ctx, t, adm, "g", "t", 0) == 300 && committed(ctx, t, adm, "g", "t", 1) == 300 && a.Summary().Records == 600
	}, 20*time.Second, 20*time.Millisecond, "the replay did not read and commit everything again\n%s", logA)

	b, logB := newEngine(t, c, replay) // joins the replay under way
	stopB := drainInBackground(ctx, b)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.parts.nReading == 1
	}, 20*time.Second, 20*time.Millisecond, "no partition moved to the second member\n%s", logB)
	time.Sleep(500 * time.Millisecond) // let it read what it would
	stopB()
	stopA()
	assert.Zero(t, b.Summary().Records, "the member that joined the replay re-read its partition\n%s", logB)
	assert.Contains(t, logB.String(), "replay is under way")
}
