package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// refresher is one refresh (run). That is the scheduler's look at the
// cluster, on a goroutine of its own, one at a time. It lists the topics (and matches the
// patterns again), the watermarks of the partitions read and waiting, the
// group's offsets of the partitions waiting and, in a bounded group run,
// whether the group is done. What it learns it applies through the engine's
// events (startWaitingLocked, startAddedLocked, extendEndsLocked,
// topicGone) under Engine.mu.
type refresher struct {
	e *Engine
}

// run is the scheduler's look at the cluster, every poll interval
// whatever the backlog, so new partitions and deleted or recreated topics are
// seen during a catch-up too. It lists the topics, starts the partitions
// waiting for their watermarks (assigned ones, ones whose listing failed,
// new partitions of whole topics in a continuous run), and in a continuous
// run moves every partition's end to its new end offset (listed, see
// listedKnown for the partitions whose cursor follows the tail). With a
// group in a bounded run it also checks whether the group is done.
func (rf *refresher) run(ctx context.Context) {
	e := rf.e
	e.mu.Lock()
	e.sched.listNow = false
	e.mu.Unlock()
	e.sched.refreshes++

	all, ok := rf.refreshTopics(ctx)
	if !ok {
		return
	}
	if e.cfg.Group.Membership && e.cfg.StopAtEnd {
		rf.checkGroupDone(ctx)
	}

	e.mu.Lock()
	known := e.parts.planner.Keys()
	waits := e.parts.waiting()
	unsnapped := e.parts.keysWhere(func(r *record) bool { return r.snapErr != nil })
	// New partitions of whole topics, in continuous runs only. A bounded run
	// reads what existed at start. A member's partitions come assigned.
	var added []ranges.Key
	if !e.cfg.StopAtEnd && !e.cfg.Group.Membership {
		for _, k := range all {
			if e.parts.stateOf(k) == stateIdle {
				added = append(added, k)
			}
		}
	}
	e.mu.Unlock()

	waitKeys := sortedKeys(waits)
	want := append(append(waitKeys, added...), unsnapped...)
	if !e.cfg.StopAtEnd {
		want = append(want, rf.listedKnown(known)...)
	}
	if len(want) == 0 {
		return
	}
	// The group's committed offsets and the watermarks are listed at once.
	// So a start (an assignment) waits for the slower of them, not their sum.
	var (
		listing group.Listing
		listed  bool
		wg      sync.WaitGroup
	)
	wg.Go(func() { listing, listed = rf.listWaitingOffsets(ctx, waitKeys) })
	var wmErrs map[ranges.Key]error
	listedAt := time.Now()
	wm, err := abandonable(ctx, func(ctx context.Context) (map[ranges.Key]marks, error) {
		var err error
		var wm map[ranges.Key]marks
		wm, wmErrs, err = e.kafka.cluster.watermarks(ctx, want)
		return wm, err
	})
	wg.Wait()
	if !listed {
		return
	}
	if err != nil {
		e.log.warnRetry(ctx, "refresh", err, "Listing watermarks failed, retrying in %s: %v", e.cfg.PollInterval, err)
		return
	}
	for _, k := range sortedKeys(wmErrs) {
		e.log.warnRetry(ctx, "watermarks:"+k.String(), wmErrs[k], "Listing the offsets of %s failed, retrying in %s: %v", k, e.cfg.PollInterval, wmErrs[k])
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range unsnapped {
		if m, ok := wm[k]; ok && e.parts.peek(k).snapErr != nil {
			e.parts.snapped(k, m)
			e.log.Infof("Partition %s can be listed now: this bounded run reads it to offset %d", k, m.end)
		}
	}
	if e.cfg.sharesCuts() {
		e.parts.adoptCuts(listing.Offsets, listing.Metadata)
	} else if !e.cfg.AlignRanges {
		e.parts.adoptAcked(listing.Offsets, listing.Metadata)
	}
	if !e.startWaitingLocked(waits, listing, wm) {
		return
	}
	var skipped []ranges.Key
	defer func() { e.log.warnUncommitted(e.cfg.Group.Name, skipped) }()
	if skipped, ok = e.startAddedLocked(added, wm); !ok {
		return
	}
	if !e.cfg.StopAtEnd {
		e.extendEndsLocked(known, wm, listedAt)
	}
}

// followedListEvery is how many refreshes pass between two listings of the
// watermarks of partitions whose cursor follows the tail (listedKnown).
const followedListEvery = 10

// listedKnown returns the partitions of known (read in a continuous run)
// whose watermarks this refresh lists. Those are the ones with no follower
// in a fetch loop (cache.Following), and those whose listed end is being checked
// (endBackAt). A follower's fetches report the partition's end as it moves
// (onHigh), and a follower whose fetch fails stops following, so the next
// refresh lists its partition. The rest are listed every
// followedListEvery refreshes, which also sees an end that moved back
// below a follower's position without failing its fetches. At 1,000
// caught-up partitions this is most of what an idle read costs.
func (rf *refresher) listedKnown(known []ranges.Key) []ranges.Key {
	e := rf.e
	if e.sched.refreshes%followedListEvery == 0 || e.kafka.cache == nil {
		return known
	}
	e.mu.Lock()
	var checking []ranges.Key
	for _, k := range known {
		if p := e.parts.cur(k); p != nil && !p.endBackAt.IsZero() {
			checking = append(checking, k)
		}
	}
	e.mu.Unlock()
	out := make([]ranges.Key, 0, len(known))
	for _, k := range known {
		if slices.Contains(checking, k) || !e.kafka.cache.Following(k.Topic, k.Partition) {
			out = append(out, k)
		}
	}
	return out
}

// listWaitingOffsets lists the group's committed offsets of the partitions
// waiting for their watermarks. Where a partition starts depends on the
// group's offset now (a previous owner committed it when the partition was
// revoked). It returns false when the listing failed.
func (rf *refresher) listWaitingOffsets(ctx context.Context, waitKeys []ranges.Key) (group.Listing, bool) {
	e := rf.e
	var listing group.Listing
	if len(waitKeys) > 0 && e.group.resumes {
		var cErrs map[ranges.Key]error
		var err error
		listing, cErrs, err = e.group.offsets.CommittedMetadata(ctx, waitKeys)
		if err == nil && len(cErrs) > 0 {
			err = joinKeyErrs(cErrs)
		}
		if err != nil {
			e.log.warnRetry(ctx, "refresh", err, "Listing the group's committed offsets failed, retrying in %s: %v", e.cfg.PollInterval, err)
			return listing, false
		}
	}
	return listing, true
}

// startAddedLocked starts the new partitions of whole topics that the
// listing found (added), from their first offset. It returns the ones
// start_from committed leaves unread, and false if one could not be
// started (the engine failed).
func (e *Engine) startAddedLocked(added []ranges.Key, wm map[ranges.Key]marks) (skipped []ranges.Key, ok bool) {
	defer e.kafka.holdRounds(len(added))()
	for _, k := range added {
		m, ok := wm[k]
		if !ok {
			continue
		}
		if skip, err := e.parts.skipUncommitted(k, fromFirst); skip {
			e.failLocked(err) // a transition the table refused
			skipped = append(skipped, k)
			continue
		}
		if err := e.addPartitionLocked(k, m, fromFirst, e.parts.nextInc()); err != nil {
			e.failLocked(fmt.Errorf("new partition: %w", err))
			return skipped, false
		}
		e.log.Infof("Partition %s appeared; reading it from offset %d", k, m.start)
	}
	return skipped, true
}

// refreshTopics lists the topics. A topic with a new ID was recreated, one
// that is missing was deleted (topicGone handles both). With RegexpTopics it
// lists the topics last matched, or, every MetadataMaxAge, every topic of
// the cluster to match the patterns again (patterns.go). It returns every
// partition the topics have, and false when nothing could be listed.
func (rf *refresher) refreshTopics(ctx context.Context) ([]ranges.Key, bool) {
	e := rf.e
	var ids map[string][16]byte
	var topicErrs map[string]error
	specs, held, discover := rf.patternTopicsDue()
	var found discovery
	all, err := abandonable(ctx, func(ctx context.Context) ([]ranges.Key, error) {
		var all []ranges.Key
		var err error
		if discover {
			var r resolved
			r, found, err = e.kafka.cluster.discover(ctx, e.patterns, held)
			ids, topicErrs = r.ids, r.topicErrs
			return r.keys, err
		}
		all, ids, topicErrs, err = e.kafka.cluster.relist(ctx, specs)
		return all, err
	})
	if err != nil {
		e.log.warnRetry(ctx, "refresh", err, "Listing topics failed, retrying in %s: %v", e.cfg.PollInterval, err)
		return nil, false
	}
	if discover {
		rf.adoptDiscovery(found)
	}
	rf.missingListed(ids, topicErrs)
	for _, name := range slices.Sorted(maps.Keys(ids)) {
		e.mu.Lock()
		old, known := e.kafka.topicIDs[name]
		e.mu.Unlock()
		if known && old != ids[name] && old != ([16]byte{}) && ids[name] != ([16]byte{}) {
			e.topicGone(name, nil) // recreated: what is left of the old one
		}
		e.mu.Lock()
		e.kafka.topicIDs[name] = ids[name]
		m := e.group.member
		e.mu.Unlock()
		if !known && m != nil && !e.cfg.StopAtEnd {
			// The topic's first listing. The group may have assigned its
			// partitions while an earlier listing still saw it missing,
			// which ended their wait (topicGone).
			owned := m.Owned(name)
			e.mu.Lock()
			// Partitions the group assigned to this member, of a topic the
			// listing shows to exist. Each that is neither read nor waiting
			// (its wait ended when an earlier listing saw the topic missing)
			// is assigned again.
			for _, k := range owned {
				if e.parts.stateOf(k) == stateIdle && e.fatal == nil {
					e.failLocked(e.parts.assigned(k))
					e.sched.lookSoon()
				}
			}
			e.mu.Unlock()
		}
		if !known || old != ids[name] {
			// The copies of the cursors and the member are told of a new ID.
			e.kafka.cache.SetTopicID(name, ids[name])
			if m != nil {
				m.SetTopicID(name, ids[name])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(topicErrs)) {
		if terr := topicErrs[name]; errors.Is(terr, errMissing) {
			e.topicGone(name, terr)
		} else {
			e.log.warnRetry(ctx, "refresh:"+name, terr, "Listing topic %q failed, retrying in %s: %v", name, e.cfg.PollInterval, terr)
		}
	}
	return all, true
}

// startWaitingLocked starts the partitions of waits that got watermarks, as
// the incarnations they were queued as. One revoked (or revoked and
// assigned again) while this refresh listed is left alone, since the committed offset
// listed for it may predate another member's commit. It returns false when
// it stopped the engine.
func (e *Engine) startWaitingLocked(waits map[ranges.Key]waiting, listing group.Listing, wm map[ranges.Key]marks) bool {
	var reading startSummary
	var skipped []ranges.Key
	defer func() { e.log.warnUncommitted(e.cfg.Group.Name, skipped) }()
	defer e.kafka.holdRounds(len(waits))()
	for _, k := range sortedKeys(waits) {
		w := waits[k]
		if cur := e.parts.peek(k); cur.state != stateWaiting || cur.wait.inc != w.inc {
			continue
		}
		if listing.Offsets != nil {
			c, ok := listing.Offsets[k]
			e.parts.groupListed(k, c, ok)
			w = e.parts.classifyWait(k, listing)
		}
		m, ok := wm[k]
		if !ok {
			continue
		}
		from := w.from
		if e.parts.snapshots {
			r := e.parts.peek(k)
			if r.snapErr != nil {
				continue // waits for its snapshot end
			}
			snap, ok := r.snap, r.snapped
			if !ok {
				e.log.Infof("Partition %s was created after this bounded run started; it is not read", k)
				e.failLocked(e.parts.transition(k, evReleased, change{}))
				continue
			}
			m.end = max(m.start, snap.end)
		}
		if skip, err := e.parts.skipUncommitted(k, from); skip {
			e.failLocked(err) // a transition the table refused
			skipped = append(skipped, k)
			continue
		}
		if err := e.addPartitionLocked(k, m, from, w.inc); err != nil {
			e.failLocked(e.parts.transition(k, evReleased, change{}))
			e.failLocked(err)
			return false
		}
		reading.note(&e.parts, e.log, k, from)
	}
	switch {
	case reading.n == 0:
	case e.cfg.Group.Membership:
		e.log.Infof("Reading %s assigned by group %q: %s", reading.partitions(), e.cfg.Group.Name, reading.detail())
	default:
		e.log.Infof("Reading %s that can be listed now: %s", reading.partitions(), reading.detail())
	}
	return true
}

// endBackConfirm is how long an end offset below the offsets already planned
// must persist before it counts as truncation.
const endBackConfirm = time.Second

// extendEndsLocked moves the end of every partition still read to its new
// end offset (continuous runs), listed from listedAt on. An end below offsets
// already planned is trusted only once listings for endBackConfirm say the
// same, or under read_committed is waited for (a group offset inside an
// open transaction). A listed end below the one a fetch reported after listedAt
// (onHigh) is older than it and left alone. Moving the end back would leave
// the records the fetch reported unplanned until the next listing, since
// their follower reported them already. The next listing checks it again.
func (e *Engine) extendEndsLocked(known []ranges.Key, wm map[ranges.Key]marks, listedAt time.Time) {
	for _, k := range known {
		m, ok := wm[k]
		if !ok {
			continue
		}
		p := e.parts.cur(k)
		if p == nil {
			continue
		}
		if _, end, _ := e.parts.planner.Position(k); m.end < end && p.highAt.After(listedAt) {
			continue
		}
		err := e.parts.planner.SetEnd(k, m.end)
		switch {
		case err == nil:
			p.endBackAt = time.Time{}
			e.parts.watch(k, e.kafka.cache) // again, in case its cursor was lost to an error
		case e.cfg.Fetch.ReadCommitted:
			// The last stable offset is below where reading was told to
			// start (a group offset inside an open transaction). Wait.
		case p.endBackAt.IsZero():
			p.endBackAt = time.Now()
			e.log.Warnf("Partition %s: the broker lists end offset %d, below offsets already planned; checking again", k, m.end)
		case time.Since(p.endBackAt) < endBackConfirm:
			// Listed again too soon to be sure. The topic may have been
			// recreated, and the topic listing that shows its new ID can
			// lag the offsets listing by the metadata cache's age.
		default:
			next, _, _ := e.parts.planner.Position(k)
			e.failLocked(fmt.Errorf("%s: the end offset moved back to %d, below offset %d already planned: the log was truncated (unclean leader election) and offsets [%d, %d) no longer exist as they were read: %w", k, m.end, next, m.end, next, err))
			return
		}
	}
}

// checkGroupDone asks, once this member's own partitions are read, whether
// the group committed every partition to the end snapshotted at start. It
// never says so before the group assigned this member partitions at least
// once. Until then the commits it sees are not this run's. It waits for
// other members' commits however long they take. A member whose pipeline
// holds a batch is live, and a member that vanished is dropped by the
// coordinator once its session ends, and its partitions assigned again.
func (rf *refresher) checkGroupDone(ctx context.Context) {
	e := rf.e
	e.mu.Lock()
	ready := e.parts.ownWorkDone(e.sched.readers) && !e.group.done && e.group.assigned
	keys := e.parts.keysWhere(func(r *record) bool { return r.snapped })
	unsnapped := e.parts.keysWhere(func(r *record) bool { return r.snapErr != nil })
	var why error
	if len(unsnapped) > 0 {
		why = e.parts.peek(unsnapped[0]).snapErr
	}
	e.mu.Unlock()
	if !ready {
		return
	}
	if len(unsnapped) > 0 {
		e.log.infoEvery("group-done", "Waiting for %d partitions to be listable (%s) before this bounded run can end: %v", len(unsnapped), keyList(unsnapped), why)
		return
	}
	committed, _, err := e.group.offsets.Committed(ctx, keys)
	if err != nil {
		e.log.warnRetry(ctx, "group-done", err, "Listing the group's committed offsets failed, retrying in %s: %v", e.cfg.PollInterval, err)
		return
	}
	var behind []string
	ownBehind := false
	e.mu.Lock()
	owns := e.parts.owned()
	for _, k := range keys {
		r := e.parts.peek(k)
		snap, still := r.snap, r.snapped
		if !still {
			continue // its topic was deleted meanwhile
		}
		c, ok := committed[k]
		// Under start_from committed nobody reads a partition the group
		// has no offset for. It is done as it is.
		uncommitted := !ok && e.cfg.StartFrom == StartCommitted
		if (ok && c < snap.end) || (!ok && snap.end > snap.start && !uncommitted) {
			if e.parts.cur(k) != nil {
				ownBehind = true // this member's own commit is due
			} else {
				behind = append(behind, k.String())
			}
		}
	}
	e.mu.Unlock()
	if ownBehind {
		e.group.commitSoon()
		return
	}
	if len(behind) > 0 {
		if owns == 0 { // not assigned yet, or its partitions were lost
			e.log.infoEvery("group-done", "This member owns no partitions; waiting for the group to commit %d more partitions to their end (%s)", len(behind), strings.Join(behind, ", "))
		} else {
			e.log.infoEvery("group-done", "This member's partitions are read; waiting for other members to commit %d more partitions to their end (%s)", len(behind), strings.Join(behind, ", "))
		}
		return
	}
	e.mu.Lock()
	e.group.groupDone()
	e.mu.Unlock()
	e.sched.signal()
}

// topicGone handles a topic that no longer exists (why is the listing's
// error) or was recreated (why is nil). Its partitions' incarnations end at
// once. Batches still in the pipeline are acknowledged into nothing (stale).
// A partition whose every planned offset was handed out is dropped with a
// warning. One with offsets never read is data loss. It stops the engine
// naming the span, or with SkipDataLoss the span is counted as lost. Its
// partitions leave a bounded run's snapshot. A recreated topic that this
// member still owns (or whose partitions are pinned or whole without a
// group) is read again from its first offset, as a new incarnation. So is
// one a listing saw deleted before it was created again, whose partitions
// the group still assigns to this member (franz-go keeps them assigned
// under the old topic ID, without a rebalance).
func (e *Engine) topicGone(name string, why error) {
	what := "was deleted"
	if why == nil {
		what = "was recreated"
	}
	var gone []ranges.Key
	defer func() {
		for _, k := range gone {
			if e.kafka.cache != nil { // none in the table's model walk
				e.kafka.cache.Drop(k.Topic, k.Partition)
			}
			e.obs.PartitionGone(k)
		}
	}()
	var owned []ranges.Key
	e.mu.Lock()
	m := e.group.member
	e.mu.Unlock()
	if m != nil && why == nil && !e.cfg.StopAtEnd {
		owned = m.Owned(name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() {
		// What the planner no longer had (dropped when a listing saw the
		// topic deleted) but the member still owns.
		for _, k := range owned {
			if !e.parts.stateOf(k).held() && e.fatal == nil {
				e.failLocked(e.parts.transition(k, evTopicBack, change{from: fromNewTopic}))
				e.sched.listNow = true
			}
		}
	}()
	for k, r := range e.parts.recs {
		if k.Topic == name && r.state == stateWaiting {
			e.failLocked(e.parts.transition(k, evReleased, change{}))
		}
	}
	if err := e.parts.topicGone(name); err != nil {
		e.failLocked(err)
	}
	for _, k := range e.parts.planner.Keys() {
		if k.Topic != name {
			continue
		}
		next, end, _ := e.parts.planner.Position(k)
		p := e.parts.cur(k)
		unread := min(next, end)
		for _, st := range p.open {
			// A range still read, or read with its last batch still on
			// its way to Next (emitted, the reader's, is final once
			// readDone is set under the lock). Next has not seen past sent,
			// and hands out nothing more once the engine stops or the
			// incarnation ends.
			if sent := st.sent.Load(); (!st.readDone || sent < st.emitted) && sent < unread {
				unread = sent
			}
		}
		switch {
		case unread < end && !e.cfg.SkipDataLoss:
			if why == nil {
				why = fmt.Errorf("topics: topic %q %s", name, what)
			}
			e.failLocked(fmt.Errorf("%s: %v: offsets [%d, %d) of partition %d were never read: data loss", k, why, unread, end, k.Partition))
			return
		case unread < end:
			e.stats.lost.Add(e.parts.lost(k, unread, end, "were never read: the topic "+what))
		default:
			e.log.Warnf("Topic %q %s; partition %d was read up to its end %d, so it is no longer read", name, what, k.Partition, end)
		}
		e.dropLocked(k, p)
		gone = append(gone, k)
		if why == nil && e.cfg.Group.Membership && !e.cfg.StopAtEnd { // a member reads only what it owns
			e.failLocked(e.parts.transition(k, evTopicBack, change{from: fromNewTopic}))
		}
	}
}

// watch makes a caught-up partition's cursor follow the partition's
// tail in a continuous read. Its broker's fetch loop long-polls it, and
// each fetch that shows new records reports the new end (onHigh). So they
// are planned and read within milliseconds of being written, not at the
// next listing. It is idempotent, since the cache keeps one follower per
// partition.
func (t *partTable) watch(k ranges.Key, c *cache.Cache) {
	if t.cfg.StopAtEnd || c == nil {
		return
	}
	next, _, ok := t.planner.Position(k)
	if !ok || t.planner.Ready(k) {
		return // more to plan: its reads find the new records
	}
	// Caught up, or (AlignRanges) its next block not complete yet. Follow
	// from the first offset not planned.
	c.Watch(k.Topic, k.Partition, next)
}

// onHigh is the cache's report that a fetch saw a partition's end at high
// (cache.Config.OnHigh). In a continuous read, the partition's planned end
// moves there, and the scheduler plans the new records at once. A report
// for a partition this engine does not read (any more) is ignored. One
// below the planned end changes nothing (ends move back only through a
// listing, where truncation is checked).
func (e *Engine) onHigh(topic string, partition int32, high int64) {
	k := ranges.Key{Topic: topic, Partition: partition}
	e.mu.Lock()
	wake := false
	if p := e.parts.cur(k); p != nil {
		if _, end, ok := e.parts.planner.Position(k); ok && high > end {
			wake = e.parts.planner.SetEnd(k, high) == nil
			if wake {
				p.highAt = time.Now()
			}
		}
	}
	e.mu.Unlock()
	if wake {
		e.sched.signal()
	}
}

// abandonable runs f and returns its result, or ctx's error as soon as ctx
// ends. A listing a broker holds does not hold up a stop. (franz-go waits
// for the answer of a request once it is written, whatever its context; the
// abandoned call ends with that answer, or when the client closes.) What
// f sets besides its result must be read only after a nil error.
func abandonable[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// adoptDiscovery takes the topics a refresh matched. Each new one is logged
// and, with Membership, added to the member's subscription (its partitions
// then come assigned). Without, the refresh reads its partitions as new
// partitions, from their first offsets.
func (rf *refresher) adoptDiscovery(d discovery) {
	e := rf.e
	var added []string
	for _, name := range d.names() {
		if _, known := e.sched.found.matched[name]; !known {
			added = append(added, name)
		}
	}
	e.sched.found = d
	if len(added) == 0 {
		return
	}
	e.mu.Lock()
	m := e.group.member
	e.mu.Unlock()
	for _, name := range added {
		if m != nil {
			e.log.Infof("Topic %q matches pattern %q; subscribing to it, so group %q balances its partitions in (read from their first offsets where the group has no committed offset)", name, d.matched[name], e.cfg.Group.Name)
		} else {
			e.log.Infof("Topic %q matches pattern %q; reading it from its first offset", name, d.matched[name])
		}
	}
	if m != nil {
		m.AddTopics(added...)
	}
}
