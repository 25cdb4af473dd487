package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupWaitLineNamesNoPartitionsOwned: a bounded group run that waits
// for the group before it owns any partition (its first JoinGroup is slow)
// does not say "This member's partitions are read" (defect 12's last point),
// nor judges the group's commits before it was assigned partitions once.
func TestGroupWaitLineNamesNoPartitionsOwned(t *testing.T) {
	c := newKafka(t, 2, 100, "t")
	joined := make(chan struct{})
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { <-joined }) // the first join waits; later ones run at once
		return nil, nil, false
	})
	e, log := newEngine(t, c, func(cfg *Config) {
		cfg.Topics = []TopicSpec{{Name: "t"}}
		cfg.Group = "g"
		cfg.Membership = true
		cfg.StopAtEnd = true
	})
	time.Sleep(time.Second) // twenty poll intervals before the first assignment
	close(joined)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got, err := drain(ctx, e)
	require.ErrorIs(t, err, ErrEnd)
	assert.Equal(t, map[string]int{"t/0": 100, "t/1": 100}, got)
	before, _, _ := strings.Cut(log.String(), "assigned")
	assert.NotContains(t, before, "This member's partitions are read", "said before the member owned any partition")
	assert.NotContains(t, before, "waiting for other members", "said before the member owned any partition")
}
