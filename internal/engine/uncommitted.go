package engine

import (
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// With start_from committed a partition is read only from the group's
// committed offset (Kafka's auto.offset.reset=none). One the group has no
// offset for is not read. It is checked once per incarnation (at start, at
// each assignment, when it appears) and, if skipped, remembered in its
// record (stateUncommitted) so listings do not start it as new. A
// revocation or its topic's deletion forgets it.

// skipUncommitted reports whether partition k, about to start with
// origin from, is not read because start_from is committed and the group
// has no offset for it (from fromNewTopic, the offset the group has is the
// deleted topic's), and if so records it.
func (t *partTable) skipUncommitted(k ranges.Key, from origin) (bool, error) {
	if t.cfg.StartFrom != StartCommitted {
		return false, nil
	}
	if _, explicit := t.explicitStart(k, from); explicit {
		return false, nil // it starts where its topics entry says
	}
	if t.peek(k).committed >= 0 && from != fromNewTopic {
		return false, nil
	}
	_, err := t.apply(k, evSkipped, change{})
	return true, err
}

// warnUncommitted logs the one warning of a start, an assignment or a
// listing that skipped keys.
func (l limitedLog) warnUncommitted(group string, keys []ranges.Key) {
	if len(keys) == 0 {
		return
	}
	named, all := keySummary(keys)
	l.Warnf("No committed offset in group %q for %s; not reading them (start_from: committed): commit offsets for them, or use start_from earliest or latest", group, named)
	if !all {
		l.Debugf("Not read for want of a committed offset in group %q: %s", group, allKeys(keys))
	}
}
