package engine

import (
	"maps"
	"slices"
)

// Topic entries that name a topic, or partitions of one, that do not exist
// when the engine starts. A bounded run stops naming them, unless
// SkipMissingTopics says to read the rest without them. A continuous run
// reads the rest, warns once per entry, and keeps the entry in
// e.sched.missing. The scheduler's listings (refreshTopics, every poll
// interval) list the named topics anyway. The first one that shows what was
// missing logs it. Its partitions are then read from their first offsets.
// They are read as new partitions of a topic named whole (refresh), or, with
// Membership, once the group assigns them. The member subscribed to every
// named topic when it joined, and AddTopics makes it look at once.

// warnMissing logs, once at start, each topic entry that names what does not
// exist.
func (l limitedLog) warnMissing(cfg *Config, missing map[string]error) {
	for _, name := range slices.Sorted(maps.Keys(missing)) {
		err := missing[name]
		switch {
		case cfg.StopAtEnd:
			l.Warnf("%v; this bounded run reads the other topics and partitions without it (on_missing_topic: skip)", err)
		case cfg.Group.Membership:
			l.Warnf("%v; the other topics are read meanwhile, and its partitions from their first offsets once it is created and group %q assigns them (topics are listed every %s)", err, cfg.Group.Name, cfg.PollInterval)
		default:
			l.Warnf("%v; the other topics and partitions are read meanwhile, and this from its first offset once it exists (topics are listed every %s)", err, cfg.PollInterval)
		}
	}
}

// missingListed takes a listing of the topics (their IDs and errors). Each
// entry of e.sched.missing that the listing shows without an error now
// exists. It is logged and forgotten. It runs before the listing's IDs are taken.
func (rf *refresher) missingListed(ids map[string][16]byte, topicErrs map[string]error) {
	e := rf.e
	if len(e.sched.missing) == 0 {
		return
	}
	var appeared []string
	for _, name := range slices.Sorted(maps.Keys(e.sched.missing)) {
		if _, listed := ids[name]; !listed || topicErrs[name] != nil {
			continue
		}
		delete(e.sched.missing, name)
		appeared = append(appeared, name)
	}
	if len(appeared) == 0 {
		return
	}
	e.mu.Lock()
	m := e.group.member
	had := map[string]bool{} // the topic existed: partitions it lacked exist now
	for _, name := range appeared {
		_, had[name] = e.kafka.topicIDs[name]
	}
	e.mu.Unlock()
	for _, name := range appeared {
		switch {
		case m != nil:
			e.log.Infof("Topic %q exists now; group %q balances its partitions in, read from their first offsets where the group has no committed offset", name, e.cfg.Group.Name)
		case had[name]:
			e.log.Infof("Topic %q has every partition named in topics now; reading the new ones from their first offsets", name)
		default:
			e.log.Infof("Topic %q exists now; reading it from its first offset", name)
		}
	}
	if m != nil {
		m.AddTopics(appeared...) // subscribed already: makes the member look now
	}
}
