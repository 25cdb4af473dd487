package engine

import (
	"maps"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// groupStall is what a bounded group run (Membership and StopAtEnd) whose
// own partitions are read saw of the partitions other members own: their
// committed offsets (-1: none) and since when they have not moved. It is
// the scheduler's own (checkGroupDone).
type groupStall struct {
	at    map[ranges.Key]int64
	since time.Time
}

// rejoinIfStalled is called while this member waits for other members to
// commit the partitions behind (each with its committed offset, -1 for
// none). When none of them moved for longer than a coordinator takes to
// drop a vanished member and rebalance (group.Member.Expiry), the member
// joins the group again, and again after each such period: were it the
// group's leader, its JoinGroup starts a rebalance that drops the members
// that do not join again. A coordinator does that by itself when a
// member's session ends; kfake does not for a member whose connection
// closed while its JoinGroup was held (it starts the session timer only
// once the answer is delivered, and the leader's SyncGroup stops the timer
// of members that never synced), and the run waited for ever (issue 34,
// finding 5). A follower's rejoin changes nothing.
func (e *Engine) rejoinIfStalled(behind map[ranges.Key]int64) {
	now := time.Now()
	if !maps.Equal(behind, e.stall.at) {
		e.stall = groupStall{at: behind, since: now}
		return
	}
	e.mu.Lock()
	m := e.member
	e.mu.Unlock()
	if m == nil {
		return
	}
	waited := now.Sub(e.stall.since)
	if waited <= m.Expiry() {
		return
	}
	e.stall.since = now
	e.log.Infof("Group %q: no commit of the %d partitions other members own (%s) for %s, longer than the session and rebalance timeouts; joining the group again, asking the group to rebalance in case a member that is gone still holds them",
		e.cfg.Group, len(behind), keyList(sortedKeys(behind)), waited.Round(time.Second))
	m.Rejoin()
}
