package cache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestFollowingOnlyWhileAFollowerFetches: Following is true only while the
// partition's follower is in a fetch loop, whose answers report its end:
// not before Watch, not while the follower is leased, not after Drop, and
// not once its fetch failed (a follower at a deleted offset).
func TestFollowingOnlyWhileAFollowerFetches(t *testing.T) {
	c := newCluster(t, 2, 100)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 1, At: 40})
	resp, err := admin(t, c).DeleteRecords(t.Context(), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxWait = 50 * time.Millisecond })
	assert.False(t, cc.Following(topic, 0), "before Watch")
	cc.Watch(topic, 0, 100)
	require.Eventually(t, func() bool { return cc.Following(topic, 0) }, 5*time.Second, time.Millisecond, "after Watch")

	l, err := cc.Acquire(t.Context(), topic, 0, 100)
	require.NoError(t, err)
	assert.False(t, cc.Following(topic, 0), "while the follower is leased")
	l.Release(nil)
	require.Eventually(t, func() bool { return cc.Following(topic, 0) }, 5*time.Second, time.Millisecond, "released at the tail, it follows again")

	cc.Drop(topic, 0)
	assert.False(t, cc.Following(topic, 0), "after Drop")

	cc.Watch(topic, 1, 10) // below the log start offset, 40
	require.Eventually(t, func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		for _, cur := range cc.byKey[key{topic, 1}] {
			if cur.err != nil {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "the follower never fetched at 10")
	assert.False(t, cc.Following(topic, 1), "a follower whose fetch failed")
}
