package engine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// A start of many partitions (a wide topic, a group assignment) logs one
// INFO line that sums up what is read. It gives partitions per topic, where
// they start by kind, and how much there is to read. What each partition does
// (its start offset, why, its end) goes to DEBUG.

// startKind says why a partition starts where it does.
type startKind int

const (
	startCommitted startKind = iota // at the group's committed offset
	startEarliest                   // start_from earliest
	startLatest                     // start_from latest
	startStamp                      // start_from timestamp
	startFirst                      // at its first offset: created after the engine started
	startRecreated                  // at its first offset: its topic was recreated
	startGroupNew                   // at its first offset: new to the group
	startExplicit                   // at the offset its topics entry names
	numStartKinds
)

// String is how the summary line names the partitions of a kind.
func (k startKind) String() string {
	return [...]string{
		startCommitted: "from committed offsets",
		startEarliest:  "from earliest",
		startLatest:    "from latest",
		startStamp:     "from start_timestamp",
		startFirst:     "from their first offset (created after the start)",
		startRecreated: "from their first offset (topic recreated)",
		startGroupNew:  "from their first offset (new to the group)",
		startExplicit:  "from the offsets their topics entries name",
	}[k]
}

// why is how a DEBUG line says why one partition starts where it does.
func (k startKind) why() string {
	return [...]string{
		startCommitted: "the group's committed offset",
		startEarliest:  "start_from earliest",
		startLatest:    "start_from latest",
		startStamp:     "start_from timestamp",
		startFirst:     "its first offset: created after the start",
		startRecreated: "its first offset: its topic was recreated",
		startGroupNew:  "its first offset: new to the group, which has offsets of other partitions",
		startExplicit:  "the offset its topics entry names",
	}[k]
}

// startSummary counts the partitions a start (or an assignment) began to
// read.
type startSummary struct {
	n        int            // partitions started
	byTopic  map[string]int // of them, per topic
	byKind   [numStartKinds]int
	atEnd    int   // of them, with nothing to read now (empty, caught up, or done)
	pending  int64 // offsets to read now, over all of them
	unlisted int   // partitions that could not be listed yet (retried)
}

// note adds partition k, just added with origin from, to s and
// logs at DEBUG where it starts and why.
func (s *startSummary) note(t *partTable, log Logger, k ranges.Key, from origin) {
	p := t.cur(k)
	if p == nil {
		return
	}
	kind := t.startKind(k, p, from)
	next, end, _ := t.planner.Position(k)
	pending := t.planner.Pending(k)
	if s.byTopic == nil {
		s.byTopic = map[string]int{}
	}
	s.n++
	s.byTopic[k.Topic]++
	s.byKind[kind]++
	s.pending += pending
	if pending == 0 {
		s.atEnd++
	}
	log.Debugf("Reading partition %s from offset %d (%s), end %d: %d offsets to read now (incarnation %d)", k, next, kind.why(), end, pending, p.inc)
}

// startKind says why partition p, added with origin from, starts where it
// does.
func (t *partTable) startKind(k ranges.Key, p *incarnation, from origin) startKind {
	switch {
	case p.committed >= 0:
		return startCommitted
	}
	if _, explicit := t.explicitStart(k, from); explicit {
		return startExplicit
	}
	switch {
	case from == fromFirst:
		return startFirst
	case from == fromNewTopic:
		return startRecreated
	case from == fromGroupNew:
		return startGroupNew
	}
	switch t.cfg.StartFrom {
	case StartLatest:
		return startLatest
	case StartTimestamp:
		return startStamp
	default:
		return startEarliest
	}
}

// partitions is "300 partitions (orders: 200, payments: 100)".
func (s *startSummary) partitions() string {
	topics := make([]string, 0, len(s.byTopic))
	for _, t := range slices.Sorted(maps.Keys(s.byTopic)) {
		topics = append(topics, t+": "+strconv.Itoa(s.byTopic[t]))
	}
	if len(topics) == 0 {
		return plural(s.n, "partition")
	}
	return plural(s.n, "partition") + " (" + strings.Join(topics, ", ") + ")"
}

// detail is "120 from committed offsets, 180 from earliest; 40 at their end
// now; 1234000 offsets to read now". It names the kinds that occur, in a
// fixed order.
func (s *startSummary) detail() string {
	var kinds []string
	for k, n := range s.byKind {
		if n > 0 {
			kinds = append(kinds, strconv.Itoa(n)+" "+startKind(k).String())
		}
	}
	var parts []string
	if len(kinds) > 0 {
		parts = append(parts, strings.Join(kinds, ", "))
	}
	if s.atEnd > 0 {
		parts = append(parts, fmt.Sprintf("%d with nothing to read now", s.atEnd))
	}
	if s.unlisted > 0 {
		parts = append(parts, fmt.Sprintf("%s not readable yet (retried)", plural(s.unlisted, "partition")))
	}
	parts = append(parts, fmt.Sprintf("%d offsets to read now", s.pending))
	return strings.Join(parts, "; ")
}

// plural is "1 partition" or "n partitions".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// manyKeys is the most partitions an INFO line names one by one. Beyond
// it the line counts them per topic and DEBUG names them.
const manyKeys = 16

// keySummary names keys for an INFO line. It names them one by one if they
// are few (keyList), otherwise counted per topic ("orders: 200, payments: 100").
// The second result is false when keys were counted, not named.
func keySummary(keys []ranges.Key) (string, bool) {
	if len(keys) <= manyKeys {
		return keyList(keys), true
	}
	n := map[string]int{}
	for _, k := range keys {
		n[k.Topic]++
	}
	topics := make([]string, 0, len(n))
	for _, t := range slices.Sorted(maps.Keys(n)) {
		topics = append(topics, t+": "+strconv.Itoa(n[t]))
	}
	return strings.Join(topics, ", "), false
}

// allKeys names every key, for DEBUG lines (keyList shortens).
func allKeys(keys []ranges.Key) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.String()
	}
	return strings.Join(names, ", ")
}
