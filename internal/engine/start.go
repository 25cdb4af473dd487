package engine

import (
	"fmt"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Where an incarnation starts. A partition starts, first rule that
// applies, at the group's committed offset (unless its topic was recreated
// since), at the offset its topics entry names (`topic:partition:offset`),
// or where its origin says. The origin says start_from for one that existed
// when the engine started. It says its first offset for one created since,
// of a topic created again, or new to the group (groupNew). addPartitionLocked
// applies the rules and starts it (startLocked, table.go).

// origin says where a partition starts when it has no committed offset to
// resume from.
type origin int

const (
	// fromConfig: where start_from says. The partition existed when the
	// engine started.
	fromConfig origin = iota
	// fromFirst: at its first offset. The partition was created after the
	// engine started (Flink and Spark do the same), so every record of it
	// is new.
	fromFirst
	// fromNewTopic: at its first offset. The group's committed offset is
	// ignored, since it belongs to the topic of the same name that was
	// deleted.
	fromNewTopic
	// fromGroupNew: at its first offset. The partition existed when the
	// engine started but is new to the group (groupNew).
	fromGroupNew
)

// groupNew reports whether partition k, about to start with origin
// from at the group's listing l, is new to the group. It is new if three
// things hold. It existed when this process started (from is fromConfig).
// The group has no offset for it but has offsets (of any topic, so the group
// has been running). And start_from would start it elsewhere than its first
// offset (latest, timestamp). Then the group read before the partition (or
// its whole topic) was created, or its first owner died before committing
// it, so every record of it is new to the group. It is read from its first offset, like the partitions created
// after this process started, whichever member the group assigns it to.
// This has a cost. A long-standing topic added to a running group's topics
// is read from its first offset too. So is a partition that existed before
// the group but that no member committed (its first owner could not list
// it, or died before its first commit), when a member that started once the
// group had offsets or members is assigned it. The cost is duplicates, never
// a skip. A founder (it found the group without offsets and members at its
// start, partTable.founding) never takes a partition that existed then for
// new.
func (t *partTable) groupNew(k ranges.Key, from origin, l group.Listing) bool {
	if !t.cfg.Group.Membership || from != fromConfig || (t.cfg.StartFrom != StartLatest && t.cfg.StartFrom != StartTimestamp) {
		// Pinned partitions are not assigned by the group. One without an
		// offset starts where start_from says, listed at the start or
		// later alike.
		return false
	}
	if t.founding {
		// This process is one of the group's founders (it found the group
		// without offsets and without members when it started). The
		// partition existed when the group started, so it is not new to
		// it, whatever another founder committed since (a founder whose
		// listing came after another's first commit read its partitions
		// from their first offset).
		return false
	}
	if _, explicit := t.cfg.explicitStart(k); explicit {
		return false // it starts where its topics entry says
	}
	_, committed := l.Offsets[k]
	return !committed && len(l.Topics) > 0
}

// classifyWait decides, once per incarnation, whether waiting partition k
// is new to the group (groupNew), at the first listing of the group's
// offsets after it began to wait. It keeps the decision in its wait, since a
// later listing (once its watermarks could be listed) sees the group's
// offsets this member committed meanwhile for its other partitions, which
// say nothing of k. It returns k's wait as decided.
func (t *partTable) classifyWait(k ranges.Key, l group.Listing) waiting {
	r := t.peek(k)
	if r.state != stateWaiting || r.wait.classified {
		return r.wait
	}
	return t.classify(k, t.groupNew(k, r.wait.from, l))
}

// explicitStart returns the start offset k's topics entry names
// (`topic:partition:offset`), if it names one.
func (c *Config) explicitStart(k ranges.Key) (int64, bool) {
	for _, ts := range c.Topics {
		if ts.Name == k.Topic {
			if o, ok := ts.Offsets[k.Partition]; ok {
				return o, true
			}
		}
	}
	return 0, false
}

// explicitStart returns the offset k's topics entry starts it at, if
// it names one that applies to a partition starting with origin from. The
// offset applies to one listed at the start (fromConfig) or created after it
// (fromFirst, where the entry named a topic or partition that did not exist
// yet). It never applies to one of a topic deleted (and created again) while
// the engine ran (fromNewTopic, or a record marked recreated). Such a
// partition is read from its first offset, as the entry's offset was the
// deleted topic's. The group's committed offset, where
// there is one, wins over it (addPartitionLocked).
func (t *partTable) explicitStart(k ranges.Key, from origin) (int64, bool) {
	if from != fromConfig && (from != fromFirst || t.peek(k).recreated) {
		return 0, false
	}
	return t.cfg.explicitStart(k)
}

// addPartitionLocked starts incarnation inc of partition k, with watermarks
// m. It starts where the first rule that applies says. The rules, in order,
// are the group's committed offset (unless its topic was recreated since,
// fromNewTopic), the offset its topics entry names
// (`topic:partition:offset`, explicitStart), and where the origin says
// (start_from, or the first offset). A start that can
// no longer be read is returned as data loss and k is not added. One at or
// past an end that is a target (a snapshot end, a time window's stop
// offset) means k is done, not truncated.
func (e *Engine) addPartitionLocked(k ranges.Key, m marks, from origin, inc uint64) error {
	start := m.start
	committed := int64(-1)
	if c := e.parts.peek(k).committed; c >= 0 && from != fromNewTopic {
		committed = c
		switch {
		case c < m.start && e.cfg.SkipDataLoss:
			e.stats.lost.Add(e.parts.lost(k, c, m.start, fmt.Sprintf("were deleted before they were read (group %q had committed offset %d)", e.cfg.Group.Name, c)))
			c = m.start
		case c < m.start:
			return fmt.Errorf("%s: group %q committed offset %d but the log now starts at %d: offsets [%d, %d) were deleted before they were read", k, e.cfg.Group.Name, c, m.start, c, m.start)
		case c > m.high && e.cfg.Fetch.ReadCommitted:
			// Above the last stable offset, after an open transaction or
			// a commit by a read_uncommitted consumer. It is valid, so wait
			// until the last stable offset passes it.
			e.log.Infof("Partition %s: group %q committed offset %d is above the last stable offset %d; waiting for open transactions to end", k, e.cfg.Group.Name, c, m.high)
			m.end = max(m.end, c)
		case c > m.high:
			return fmt.Errorf("%s: group %q committed offset %d is past the partition's end %d: the log was truncated or the topic recreated", k, e.cfg.Group.Name, c, m.high)
		}
		// At or past a target end (c > m.end). Nothing is left to read.
		start = c
	} else if o, explicit := e.parts.explicitStart(k, from); explicit {
		switch {
		case o < m.start && e.cfg.SkipDataLoss:
			e.stats.lost.Add(e.parts.lost(k, o, m.start, fmt.Sprintf("were deleted before they were read (its topics entry starts it at %d)", o)))
		case o < m.start:
			return fmt.Errorf("%s: its topics entry starts it at offset %d but the log now starts at %d: offsets [%d, %d) no longer exist", k, o, m.start, o, m.start)
		case o > m.high:
			return fmt.Errorf("%s: its topics entry starts it at offset %d, past the partition's end %d", k, o, m.high)
		default:
			start = o
		}
	} else if from == fromConfig {
		switch e.cfg.StartFrom {
		case StartLatest:
			start = m.end
		case StartTimestamp:
			start = max(m.from, m.start)
		}
	}
	end := max(start, m.end)
	planEnd := end
	if to, ok := e.parts.cutEnd(k, start); ok {
		// The group cut the range from start there. Plan the same range
		// first, then the rest (launch extends the end).
		planEnd, end = to, max(end, to)
	}
	return e.startLocked(k, &incarnation{inc: inc, first: start, emitFrom: start, extendTo: end, committed: committed}, planEnd)
}
