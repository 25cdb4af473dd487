package cache

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchLog records the fetch requests a kfake broker handles, in order:
// each one's MaxWaitMillis and the partitions in it.
type fetchLog struct {
	mu    sync.Mutex // guards waits and parts
	waits []int32
	parts [][]int32
}

func (f *fetchLog) add(req *kmsg.FetchRequest) int {
	var ps []int32
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			ps = append(ps, p.Partition)
		}
	}
	slices.Sort(ps)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, req.MaxWaitMillis)
	f.parts = append(f.parts, ps)
	return len(f.waits)
}

// firstLong returns the partitions of the first fetch that waited maxWait,
// and whether there was one.
func (f *fetchLog) firstLong(maxWait int32) ([]int32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, w := range f.waits {
		if w == maxWait {
			return f.parts[i], true
		}
	}
	return nil, false
}

// TestStartedPartitionsShareTheFirstLongPoll: partitions started together
// (what the engine does at a start or an assignment: Watch for each, one
// after the other, while their broker's loop already fetches the first
// ones) must all be in the first long poll of their broker. A broker answers
// a connection's requests one at a time, so a partition left out of the
// long poll in flight waits until that poll ends (FetchMaxWait, 500 ms by
// default) before its first fetch is even read; the partitions started
// later then wait behind the first ones' poll, round after round. Here the
// first fetch (partition 0's, started alone) is where partitions 1..7 are
// started, and the first long poll (MaxWaitMillis = FetchMaxWait) must hold
// all eight; a record written to partition 7 is then reported at once.
func TestStartedPartitionsShareTheFirstLongPoll(t *testing.T) {
	const partitions = 8
	c := newCluster(t, partitions, 0)
	var h highs
	const maxWait = time.Minute // a poll held until a record arrives
	cc := newCache(t, c, func(cfg *Config) {
		cfg.FetchMaxWait = maxWait
		cfg.OnHigh = h.on
	})
	var log fetchLog
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if log.add(kreq.(*kmsg.FetchRequest)) == 1 {
			for p := int32(1); p < partitions; p++ {
				cc.Watch(topic, p, 0)
			}
		}
		return nil, nil, false
	})
	cc.Watch(topic, 0, 0)

	var long []int32
	require.Eventually(t, func() bool {
		var ok bool
		long, ok = log.firstLong(int32(maxWait / time.Millisecond))
		return ok
	}, 10*time.Second, time.Millisecond, "no long poll was sent")
	assert.Equal(t, []int32{0, 1, 2, 3, 4, 5, 6, 7}, long,
		"the first long poll must fetch every partition started: the others wait behind it (fetches so far: %v, waits %v)", log.parts, log.waits)

	produceN(t, c, partitions-1, 1, 10)
	assert.Eventually(t, func() bool { return h.get(partitions-1) == 1 }, 15*time.Second, 5*time.Millisecond,
		"partition 7's record was not reported while the first long poll (FetchMaxWait %s) is held", maxWait)
}
