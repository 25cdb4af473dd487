package engine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Cut ranges shared by the group (AlignRanges, StopAtEnd and Membership).
// A bounded aligned run cuts a partition's last range at its snapshot end,
// inside a block, and each member snapshots when it starts. Two members
// could plan ranges of one start with different ends ([100,150) and
// [100,200)), and if the shorter batch, handed out by a member that was
// then revoked, is written last, its file replaces the longer one. So the
// group keeps one end per cut range. The member commits the offset at a cut
// range's start with the metadata "kbr-cut:<end>" (metaCommitter with cutMetadata), and a
// member that starts the partition at that offset (an assignment, a re-run)
// plans the same range first, then goes on to its own end. What a member
// cut is kept from launch (or from the group's metadata when it starts a
// partition) in its record (record.cut) until
// another cut replaces it or its topic is gone. It is
// sent with every commit of the range's start, and a commit is due when a
// cut range was launched since the partition's last commit (incarnation.cutUnsent).
// A lost session commits nothing. A handover then can still plan another
// end.

// cut is a range cut short at an end inside its block.
type cut struct{ from, to int64 }

// cutPrefix starts the commit metadata of an offset that starts a cut
// range.
const cutPrefix = "kbr-cut:"

// sharesCuts reports whether cut ranges are shared through the group.
func (c *Config) sharesCuts() bool {
	return c.AlignRanges && c.StopAtEnd && c.Group.Membership
}

// launchedCut records that range r was launched, if it is cut short
// (ranges lie on blocks, so only a range ending at the planned end inside a
// block is), so that the commit of its start carries its end.
func (t *partTable) launchedCut(p *incarnation, r ranges.Range) {
	if !t.cfg.sharesCuts() || r.End%t.cfg.MaxRangeRecords == 0 {
		return
	}
	t.setCut(r.Key(), cut{from: r.Start, to: r.End})
	p.cutUnsent = true
}

// adoptCuts records the cuts named by the group's commit metadata of the
// partitions about to start.
func (t *partTable) adoptCuts(committed map[ranges.Key]int64, meta map[ranges.Key]string) {
	for k, m := range meta {
		c, ok := committed[k]
		if !ok || !strings.HasPrefix(m, cutPrefix) {
			continue
		}
		if to, err := strconv.ParseInt(strings.TrimPrefix(m, cutPrefix), 10, 64); err == nil && to > c {
			t.setCut(k, cut{from: c, to: to})
		}
	}
}

// cutEnd returns where the first range of k, starting at start, must
// end because the group (or this member, in an earlier incarnation) cut a
// range there, and whether it must.
func (t *partTable) cutEnd(k ranges.Key, start int64) (int64, bool) {
	if !t.cfg.sharesCuts() {
		return 0, false
	}
	c := t.peek(k).cut
	return c.to, c.from == start && c.to > start
}

// sendAgain marks what the failed part of commit c carried (all of it if
// err is set, else the partitions in failed) as still to send with the next
// commit. That is the cuts (cuts.go) and the acknowledged offsets above the
// frontier (acked.go).
func (t *partTable) sendAgain(c commitTake, failed map[ranges.Key]error, err error) {
	for k, p := range c.owner {
		if err == nil && failed[k] == nil {
			continue
		}
		if t.cfg.sharesCuts() && t.peek(k).cut.to > 0 {
			p.cutUnsent = true
		}
		if slices.Contains(c.ackedSent, p) {
			p.ackedUnsent = true
		}
	}
}

// metaCommitter adds metadata to the member's commits: meta sets it on the
// request franz-go is about to send (group.PreCommitContext), under mu.
// The cut metadata (cutMetadata) and the acknowledged offsets above a
// commit (ackedMetadata) go this way.
type metaCommitter struct {
	committer
	mu   *sync.Mutex // Engine.mu
	meta func(*kmsg.OffsetCommitRequest)
}

func (c metaCommitter) Commit(ctx context.Context, offsets map[ranges.Key]int64) (map[ranges.Key]error, error) {
	return c.committer.Commit(group.PreCommitContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.meta(req)
		return nil
	}), offsets)
}

// setCommitMetadata sets the metadata of each partition of req to what
// meta returns for its key and offset ("" leaves it unset).
func setCommitMetadata(req *kmsg.OffsetCommitRequest, meta func(k ranges.Key, offset int64) string) {
	for i := range req.Topics {
		rt := &req.Topics[i]
		for j := range rt.Partitions {
			p := &rt.Partitions[j]
			if m := meta(ranges.Key{Topic: rt.Topic, Partition: p.Partition}, p.Offset); m != "" {
				p.Metadata = kmsg.StringPtr(m)
			}
		}
	}
}

// cutMetadata sets the metadata of every committed offset that starts a cut
// range (group.PreCommitContext). The member calls it just before sending.
func (t *partTable) cutMetadata(req *kmsg.OffsetCommitRequest) {
	setCommitMetadata(req, func(k ranges.Key, offset int64) string {
		if c := t.peek(k).cut; c.to > c.from && c.from == offset {
			return cutPrefix + strconv.FormatInt(c.to, 10)
		}
		return ""
	})
}
