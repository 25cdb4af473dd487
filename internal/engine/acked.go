package engine

import (
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Acknowledged offsets above a commit (not with AlignRanges, whose commits
// carry cut ranges and move by whole ranges). A partition's commit is its
// frontier, the first offset not acknowledged. Batches acknowledged out of
// order (unordered reads, ordering: key) leave acknowledged offsets above
// it, which a crash or a handover would read again. So every commit carries
// them in its metadata, "kbr-acked:" and ranges.EncodeAcked's encoding
// (metaCommitter with ackedMetadata), bounded below the broker's offset.metadata.max.bytes
// (4 KiB by default). What does not fit is read again. A group listing keeps
// them in the partition's record (partTable.adoptAcked), and the incarnation
// that starts at that very offset takes them (takeAcked, startLocked). Its
// readers drop those records before they are emitted (incarnation.unacked),
// and the offsets are acknowledged with the batches' spans around them, or
// with the range's tail. Metadata it cannot read is taken as a plain offset.

// ackedPrefix starts the commit metadata of acknowledged offsets.
const ackedPrefix = "kbr-acked:"

// ackedMetadataBytes bounds that metadata. Kafka's default
// offset.metadata.max.bytes is 4096, and a commit whose metadata is larger
// is refused (OFFSET_METADATA_TOO_LARGE).
const ackedMetadataBytes = 4000

// ackedMetadata sets the metadata of every committed offset of a partition
// being read that has acknowledged offsets above it.
func (t *partTable) ackedMetadata(req *kmsg.OffsetCommitRequest) {
	setCommitMetadata(req, t.ackedAbove)
}

// ackedAbove returns the metadata of the offsets of k acknowledged at
// or above at, by the incarnation being read. It returns "" for none.
func (t *partTable) ackedAbove(k ranges.Key, at int64) string {
	p := t.cur(k)
	if p == nil || at < p.first {
		return ""
	}
	spans := t.tracker.AckedAbove(k)
	if f, ok := t.tracker.Frontier(k); ok && f > at {
		// Acknowledged since the commit's offset was taken.
		head := ranges.Range{Topic: k.Topic, Partition: k.Partition, Start: at, End: f}
		if len(spans) > 0 && spans[0].Start == f {
			head.End = spans[0].End
			spans = spans[1:]
		}
		spans = append([]ranges.Range{head}, spans...)
	}
	if len(spans) == 0 {
		return ""
	}
	enc := ranges.EncodeAcked(at, spans, ackedMetadataBytes-len(ackedPrefix))
	if enc == "" {
		return ""
	}
	return ackedPrefix + enc
}

// adoptAcked records, for each partition of the group's listing, the offsets
// its commit metadata says were acknowledged above the committed offset (none
// where there is no such metadata, or it cannot be read).
func (t *partTable) adoptAcked(committed map[ranges.Key]int64, meta map[ranges.Key]string) {
	for k, c := range committed {
		m, ok := strings.CutPrefix(meta[k], ackedPrefix)
		r := t.recs[k]
		if r == nil && !ok {
			continue
		}
		r = t.ensure(k)
		r.acked, r.ackedFrom = nil, -1
		if !ok {
			continue
		}
		if spans, err := ranges.DecodeAcked(k.Topic, k.Partition, c, m); err == nil {
			r.acked, r.ackedFrom = spans, c
		}
	}
}

// takeAcked returns the acknowledged spans of k recorded above offset from,
// for the incarnation that starts there, and forgets them. nil if none were
// recorded above that offset.
func (t *partTable) takeAcked(k ranges.Key, from int64) []ranges.Range {
	r := t.ensure(k)
	spans, at := r.acked, r.ackedFrom
	r.acked, r.ackedFrom = nil, -1
	if at != from {
		return nil
	}
	return spans
}

// unacked returns recs without the records the incarnation started with as
// acknowledged (preAcked). They were processed before the commit it started
// from. preAcked is set before the incarnation's readers start and never
// changes, so readers call this concurrently.
func (p *incarnation) unacked(recs []*kgo.Record) []*kgo.Record {
	if len(p.preAcked) == 0 || len(recs) == 0 {
		return recs
	}
	acked := func(o int64) bool {
		i := sort.Search(len(p.preAcked), func(i int) bool { return p.preAcked[i].End > o })
		return i < len(p.preAcked) && p.preAcked[i].Start <= o
	}
	if first, last := recs[0].Offset, recs[len(recs)-1].Offset; p.preAcked[len(p.preAcked)-1].End <= first || p.preAcked[0].Start > last {
		return recs
	}
	kept := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		if !acked(r.Offset) {
			kept = append(kept, r)
		}
	}
	return kept
}
