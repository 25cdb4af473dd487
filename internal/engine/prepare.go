package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// plan is what Start learned before starting anything.
// starter is what Start lists and creates before anything runs, from the
// configuration alone. That is the plan (prepare), the group member
// (newMember) and the cursor cache (newCursorCache).
type starter struct {
	cfg      *Config
	log      limitedLog
	patterns *topicPatterns
	kafka    *clients // every client gets its reachability hooks (clients.opts)
}

type plan struct {
	keys      []ranges.Key         // partitions to read now (none with Membership: they come assigned)
	all       []ranges.Key         // every partition the topics had
	marks     map[ranges.Key]marks // their watermarks; a key without is retried
	markErrs  map[ranges.Key]error // why a key has no watermarks yet
	committed map[ranges.Key]int64 // the group's offsets, where they count
	snapshot  map[ranges.Key]marks // with Membership and StopAtEnd: the end of every partition that could be listed
	unsnapped map[ranges.Key]error // and why the others could not
	offsets   *group.Offsets       // the group's offset store, or nil
	ids       map[string][16]byte  // every topic's ID
	found     discovery            // with RegexpTopics: the topics matched
	missing   map[string]error     // topic entries naming what does not exist (a continuous run, or SkipMissingTopics), and why
	fatal     error                // a config mistake found at start: stop at once
	// founding says that, with Membership and start_from latest or
	// timestamp, the group had no committed offset and no member when Start looked
	// (group.Member.Founding), before this process joined.
	founding bool
}

// prepare lists what Start needs. An error is worth retrying.
func (s starter) prepare(ctx context.Context, cl *cluster) (plan, error) {
	var p plan
	if s.cfg.Group.Name != "" {
		p.offsets = group.NewOffsets(cl.adm, s.cfg.Group.Name)
	}
	var r resolved
	var err error
	if s.patterns != nil {
		r, p.found, err = cl.discover(ctx, s.patterns, nil)
	} else {
		r.keys, r.ids, r.topicErrs, err = cl.resolve(ctx, s.cfg.Topics)
	}
	if err != nil {
		return p, err
	}
	keys, ids, topicErrs := r.keys, r.ids, r.topicErrs
	if s.patterns != nil && len(p.found.matched) == 0 && s.cfg.StopAtEnd {
		p.fatal = fmt.Errorf("topics: no topic matches %s, so this bounded run has nothing to read", s.patterns)
		return p, nil
	}
	p.ids, p.all = ids, keys
	if len(topicErrs) > 0 {
		err := joinTopicErrs(topicErrs)
		switch {
		case !allMissing(topicErrs):
			return p, err
		case s.cfg.StopAtEnd && !s.cfg.SkipMissingTopics:
			// A bounded run has nothing to wait for. A missing topic or
			// partition is a mistake in the config, not a passing state.
			p.fatal = err
			return p, nil
		}
		// A continuous run reads the rest and waits for what is missing.
		// A bounded one told so reads the rest.
		p.missing = topicErrs
	}
	if p.offsets != nil && !s.cfg.Group.Membership {
		if p.fatal, err = s.checkNoMembers(ctx, p.offsets); err != nil || p.fatal != nil {
			return p, err
		}
	}
	if len(keys) == 0 {
		return p, nil
	}
	if s.cfg.Group.Membership && s.cfg.Group.ResetOffsets {
		if err := s.resetGroup(ctx, p.offsets, keys); err != nil {
			return p, err
		}
	}
	wm, wmErrs, err := cl.watermarks(ctx, keys)
	if err != nil {
		return p, err
	}
	if s.cfg.Group.Membership {
		if s.cfg.StopAtEnd {
			// A partition without a leader now is snapshotted once it can
			// be listed. The others are read meanwhile.
			p.snapshot, p.unsnapped = wm, wmErrs
		}
		return p, nil
	}
	p.keys, p.marks, p.markErrs = keys, wm, wmErrs
	p.committed = map[ranges.Key]int64{}
	if p.offsets != nil && !s.cfg.Group.ResetOffsets {
		var cErrs map[ranges.Key]error
		p.committed, cErrs, err = p.offsets.Committed(ctx, keys)
		if err == nil && len(cErrs) > 0 {
			// Without its committed offset a partition would start at the
			// wrong place. Retry the whole start.
			err = joinKeyErrs(cErrs)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// resetGroup starts a replay of a group (reset_offsets with membership).
// When the group has no live members, it deletes the group's committed
// offsets of the topics' partitions, so each partition starts at start_from
// once, and every handover after that resumes from what the group committed
// in this replay (and a bounded replay is judged by this replay's commits).
// When the group has live members, a replay (or another run) is in progress.
// The member joins it and resumes from the group's offsets.
func (s starter) resetGroup(ctx context.Context, offsets *group.Offsets, keys []ranges.Key) error {
	members, err := offsets.Members(ctx)
	if err != nil {
		return err
	}
	if len(members) > 0 {
		s.log.Infof("reset_offsets: group %q has %d live members (%s), so its replay is under way: joining it and resuming from the group's offsets", s.cfg.Group.Name, len(members), strings.Join(members, ", "))
		return nil
	}
	if err := offsets.Delete(ctx, keys); err != nil {
		return fmt.Errorf("reset_offsets: %w", err)
	}
	s.log.Infof("reset_offsets: deleted group %q's committed offsets of %d partitions of %s; each partition starts at start_from, and handovers resume from what this replay commits", s.cfg.Group.Name, len(keys), topicList(s.cfg.Topics))
	return nil
}

// modeString says where reading starts and stops, for the start line.
func (c *Config) modeString() string {
	from := [...]string{"earliest", "latest", "committed", "timestamp"}[c.StartFrom]
	if c.StartFrom == StartTimestamp {
		from += " " + time.UnixMilli(c.StartMillis).UTC().Format(time.RFC3339Nano)
	}
	stop := "never"
	switch {
	case c.StopMillis > 0:
		stop = "timestamp " + time.UnixMilli(c.StopMillis).UTC().Format(time.RFC3339Nano)
	case c.StopAtEnd:
		stop = "end"
	}
	return "start_from " + from + ", stop_at " + stop
}

// checkNoMembers returns a stopping error if the group has live members.
// Commits from outside a group (pinned partitions) are rejected while it
// has. An error is worth retrying.
func (s starter) checkNoMembers(ctx context.Context, offsets *group.Offsets) (fatal, err error) {
	members, err := offsets.Members(ctx)
	if err != nil || len(members) == 0 {
		return nil, err
	}
	return fmt.Errorf("consumer_group %q has %d live members (%s): this input commits the offsets of pinned partitions (name:partitions) from outside the group, which the group coordinator rejects while it has members; name the topics whole to join the group, or use another group",
		s.cfg.Group.Name, len(members), strings.Join(members, ", ")), nil
}
