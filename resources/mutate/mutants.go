package main

// mutants are the injected bugs: each an exact string of one file (found
// exactly once) and what replaces it. Bugs this project had or nearly had,
// and the classic ones of its state machines: an off-by-one in a frontier
// or a commit, an incarnation comparison dropped, a count skipped on a stop
// path, a queue not cleared on a revival.
var mutants = []mutant{
	// internal/engine
	{
		name: "wait-incarnation",
		file: "internal/engine/refresh.go",
		desc: "startWaitingLocked drops its incarnation check: a stale listing answer starts a newer wait",
		old:  "if cur := e.parts.peek(k); cur.state != stateWaiting || cur.wait.inc != w.inc {",
		new:  "if cur := e.parts.peek(k); cur.state != stateWaiting {",
	},
	{
		name: "gone-keeps-committed",
		file: "internal/engine/table.go",
		desc: "partTable.topicGone keeps the deleted topic's committed offsets",
		old:  "r.existed, r.committed, r.cut, r.recreated = false, -1, cut{}, true",
		new:  "r.existed, r.cut, r.recreated = false, cut{}, true",
	},
	{
		name: "span-off-by-one",
		file: "internal/engine/emit.go",
		desc: "a batch's span ends at its last record, not after it (off by one in the frontier)",
		old:  "end := recs[len(recs)-1].Offset + 1",
		new:  "end := recs[len(recs)-1].Offset",
	},
	{
		name: "held-off-by-one",
		file: "internal/engine/commit.go",
		desc: "a commit frees the slots of ranges ending below the committed offset only, not at it",
		old:  "if end <= p.committed {",
		new:  "if end < p.committed {",
	},
	{
		name: "refused-commit-applied",
		file: "internal/engine/commit.go",
		desc: "a commit the coordinator refused counts as committed: it is never sent again",
		old:  "if p := owner[k]; failed[k] == nil && e.parts.cur(k) == p {",
		new:  "if p := owner[k]; e.parts.cur(k) == p {",
	},
	{
		name: "replay-drop-uncounted",
		file: "internal/engine/batch.go",
		desc: "a replay dropped with its incarnation stays counted as handed out (stop path)",
		old:  "e.staleLocked(b.st, \"replay of \"+b.Span.String())\n\t\te.finishedLocked(b)\n",
		new:  "e.staleLocked(b.st, \"replay of \"+b.Span.String())\n",
	},
	{
		name: "drop-keeps-held-slots",
		file: "internal/engine/table.go",
		desc: "dropping an incarnation frees the slots of its open ranges, not of those waiting for a commit (stop path)",
		old:  "e.sched.inflight -= len(p.open) - p.released + len(p.held)",
		new:  "e.sched.inflight -= len(p.open) - p.released",
	},
	{
		name: "drain-nack-replayed",
		file: "internal/engine/batch.go",
		desc: "a batch rejected while its partition drains is queued for a replay",
		old:  "stale := !e.parts.current(b.st) || b.st.part.draining // revoked",
		new:  "stale := !e.parts.current(b.st) // revoked",
	},
	{
		name: "drain-hands-out",
		file: "internal/engine/batch.go",
		desc: "Next hands out batches of a partition being drained",
		old:  "if !e.parts.current(b.st) || b.st.part.draining || e.fatal != nil {",
		new:  "if !e.parts.current(b.st) || e.fatal != nil {",
	},
	{
		name: "lost-commits",
		file: "internal/engine/membership.go",
		desc: "a lost session commits its acknowledged frontier",
		old:  "\te.release(keys, false)\n\te.logOwned(\"lost\", keys)",
		new:  "\tif offsets := e.release(keys, true); len(offsets) > 0 {\n\t\t_, _ = e.coord.committer.Commit(context.Background(), offsets)\n\t}\n\te.logOwned(\"lost\", keys)",
	},
	{
		name: "truncation-skips-range",
		file: "internal/engine/scheduler.go",
		desc: "offsets deleted under a reader: the rest of its range is skipped as lost, existing offsets too",
		old:  "to := min(logStart, r.End)",
		new:  "to := r.End",
	},
	{
		name: "group-new-empty-group",
		file: "internal/engine/start.go",
		desc: "a group without any offset counts every partition as new to it: start_from latest reads from the first offset",
		old:  "return !committed && len(l.Topics) > 0",
		new:  "return !committed",
	},

	{
		name: "pinned-new-to-group",
		file: "internal/engine/start.go",
		desc: "a pinned partition not listable at the start is taken for new to the group: start_from latest reads it from the first offset, where one listed at the start starts at its end",
		old:  "if !e.cfg.Group.Membership || from != fromConfig ||",
		new:  "if from != fromConfig ||",
	},
	{
		name: "founders-ignored",
		file: "internal/engine/start.go",
		desc: "a founder of a group takes a partition another founder did not commit yet for new to the group: start_from latest reads it from the first offset (issue 43, defect 7)",
		old:  "\tif e.coord.founding {",
		new:  "\tif false && e.coord.founding {",
	},
	{
		name: "explicit-beats-committed",
		file: "internal/engine/start.go",
		desc: "an explicit start offset wins over the group's committed offset (issue 43, defect 3)",
		old:  "if c := e.parts.peek(k).committed; c >= 0 && from != fromNewTopic {",
		new:  "if c := e.parts.peek(k).committed; c >= 0 && from != fromNewTopic && func() bool { _, x := e.cfg.explicitStart(k); return !x }() {",
	},
	{
		name: "explicit-after-recreate",
		file: "internal/engine/start.go",
		desc: "a topic deleted and created again starts at its topics entry's offset, which was the old topic's",
		old:  "(from != fromFirst || e.parts.peek(k).recreated)",
		new:  "from != fromFirst",
	},
	// internal/cache
	{
		name: "revive-keeps-queue",
		file: "internal/cache/loop.go",
		desc: "a leadership error revives a cursor without dropping what it fetched from the old leader",
		old:  "\t\tcur.leaderChanged()\n\t\tc.dropQueueLocked(cur)\n\t\t_ = c.transitionLocked(cur, evRevive, nil)",
		new:  "\t\tcur.leaderChanged()\n\t\t_ = c.transitionLocked(cur, evRevive, nil)",
	},
	{
		name: "release-keeps-queue",
		file: "internal/cache/cache.go",
		desc: "a released cursor whose fetch ahead met a leadership error keeps the old leader's answers",
		old:  "\tcur.err = nil\n\tcur.leaderChanged()\n\tc.dropQueueLocked(cur)\n",
		new:  "\tcur.err = nil\n\tcur.leaderChanged()\n",
	},
	{
		name: "validate-off-by-one",
		file: "internal/cache/read.go",
		desc: "a leadership error after reading from epoch 0 does not ask for validation (lastEpoch > 0)",
		old:  "if cur.lastEpoch >= 0 {\n\t\tcur.validate = true",
		new:  "if cur.lastEpoch > 0 {\n\t\tcur.validate = true",
	},
	{
		name: "unread-before-it-reads",
		file: "internal/engine/scheduler.go",
		desc: "a partition not known to read (new, or failing) gets maxUnreadRanges ranges at once, not one",
		old:  "\tif p.reads {\n\t\treturn maxUnreadRanges\n\t}\n\treturn 1\n",
		new:  "\treturn maxUnreadRanges\n",
	},
	{
		name: "near-reads-many",
		file: "internal/engine/scheduler.go",
		desc: "a partition of a near broker starts many ranges before their first records: they are only read ahead, in memory",
		old:  "\t\tdistant := lease.Distant()\n",
		new:  "\t\tdistant := true\n",
	},
	{
		name: "one-unread-range",
		file: "internal/engine/scheduler.go",
		desc: "a reading partition's next range starts only once the last one read: a distant backlog is read one round trip at a time",
		old:  "const maxUnreadRanges = 16",
		new:  "const maxUnreadRanges = 1",
	},
	{
		name: "trim-forgets-validate",
		file: "internal/cache/read.go",
		desc: "dropping a cursor's buffered records forgets its pending validation",
		old:  "\tcur.fetched = cur.next\n\tcur.stalls = 0\n",
		new:  "\tcur.fetched = cur.next\n\tcur.validate = false\n\tcur.stalls = 0\n",
	},
	{
		name: "stale-answer-queued",
		file: "internal/cache/loop.go",
		desc: "the fetch loop queues an answer to a position the cursor left (generation check dropped)",
		old:  "if cur.gen != s.gen || cur.gone() {",
		new:  "if cur.gone() {",
	},
	{
		name: "follower-bytes-uncounted",
		file: "internal/cache/loop.go",
		desc: "what a follower (or a cursor being revived) queues is not counted in the idle bytes",
		old:  "\tcur.fetchAt = fetchAt\n\tif cur.listed() {",
		new:  "\tcur.fetchAt = fetchAt\n\tif cur.state == stateIdle {",
	},
	// Written from the docs' promises (issue 52), not from the code's lines:
	// "max_in_flight: the most ranges in flight at once" and "a range keeps
	// its max_in_flight slot until a commit covers it, so a crash re-reads at
	// most max_in_flight × max_range_records records".
	{
		name: "launch-past-max-in-flight",
		file: "internal/engine/scheduler.go",
		desc: "a range starts while every max_in_flight slot is taken (one more range in flight than configured)",
		old:  "func (e *Engine) launchOneLocked() *rangeState {\n\tif e.sched.inflight >= e.cfg.MaxInFlight {",
		new:  "func (e *Engine) launchOneLocked() *rangeState {\n\tif e.sched.inflight > e.cfg.MaxInFlight {",
	},
	{
		name: "ack-frees-slot",
		file: "internal/engine/emit.go",
		desc: "an acknowledged range gives its slot back before a commit covers it: a crash re-reads more than max_in_flight ranges",
		old:  "\tif e.coord.committer == nil {\n\t\te.sched.inflight--",
		new:  "\tif e.coord.committer != nil || e.coord.committer == nil {\n\t\te.sched.inflight--",
	},
	{
		name: "no-commit-when-slots-full",
		file: "internal/engine/emit.go",
		desc: "with every slot held by acknowledged ranges nothing commits before commit_period: the read stalls for a commit period",
		old:  "\tif e.sched.inflight >= e.cfg.MaxInFlight {\n\t\te.coord.commitSoon()",
		new:  "\tif e.sched.inflight > e.cfg.MaxInFlight {\n\t\te.coord.commitSoon()",
	},
}
