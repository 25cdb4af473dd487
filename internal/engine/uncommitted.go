package engine

import (
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// With start_from committed a partition is read only from the group's
// committed offset (Kafka's auto.offset.reset=none): one the group has no
// offset for is not read. It is checked once per incarnation (at start, at
// each assignment, when it appears) and, if skipped, remembered in its
// record (stateUncommitted) so listings do not start it as new; a
// revocation or its topic's deletion forgets it.

// skipUncommittedLocked reports whether partition k, about to start with
// origin from, is not read because start_from is committed and the group
// has no offset for it (from fromNewTopic, the offset the group has is the
// deleted topic's), and if so records it.
func (e *Engine) skipUncommittedLocked(k ranges.Key, from origin) bool {
	if e.cfg.StartFrom != StartCommitted {
		return false
	}
	if _, explicit := e.explicitStartLocked(k, from); explicit {
		return false // it starts where its topics entry says
	}
	if e.parts.peek(k).committed >= 0 && from != fromNewTopic {
		return false
	}
	e.transitionLocked(k, evSkipped, change{})
	return true
}

// warnUncommitted logs the one warning of a start, an assignment or a
// listing that skipped keys.
func (e *Engine) warnUncommitted(keys []ranges.Key) {
	if len(keys) == 0 {
		return
	}
	named, all := keySummary(keys)
	e.log.Warnf("No committed offset in group %q for %s; not reading them (start_from: committed): commit offsets for them, or use start_from earliest or latest", e.cfg.Group.Name, named)
	if !all {
		e.log.Debugf("Not read for want of a committed offset in group %q: %s", e.cfg.Group.Name, allKeys(keys))
	}
}
