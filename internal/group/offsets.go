// Package group is the consumer group as the engine sees it. The offsets the
// group has committed (Offsets, also the commits of pinned partitions from
// outside the group), and membership (Member): joining through franz-go's
// group management, assignment and revocation events for a Handler, commits
// fenced by the member's generation, and retries that keep the member's
// partitions while its coordinator moves. A member runs Kafka's classic
// group protocol or, with kgo.ServerSideBalancer among its options, the
// consumer protocol (KIP-848: the broker assigns, commits are fenced by the
// member epoch). Join checks that the cluster serves the one asked for and
// never lets franz-go fall back to classic silently. A classic member's
// commits and its leave do not wait behind a rebalance's join, which franz-go
// holds them for (commit.go: they go around it, as the coordinator allows).
// The engine never talks to the group coordinator itself.
package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Offsets reads and commits one group's offsets through an admin client that
// the caller owns.
type Offsets struct {
	adm   *kadm.Client
	group string
}

// NewOffsets returns the offset store of group, using adm for its requests.
func NewOffsets(adm *kadm.Client, group string) *Offsets {
	return &Offsets{adm: adm, group: group}
}

// Group returns the group's name.
func (o *Offsets) Group() string { return o.group }

// Committed returns the group's committed offsets for keys: the next offset
// to read of each partition the group committed. Partitions without a commit
// are absent. A group that never committed gives an empty map. An error for
// one partition is returned in errs and leaves the others usable.
func (o *Offsets) Committed(ctx context.Context, keys []ranges.Key) (offsets map[ranges.Key]int64, errs map[ranges.Key]error, err error) {
	l, errs, err := o.CommittedMetadata(ctx, keys)
	return l.Offsets, errs, err
}

// Listing is the group's committed offsets of some partitions
// (CommittedMetadata).
type Listing struct {
	Offsets  map[ranges.Key]int64  // as Committed
	Metadata map[ranges.Key]string // the metadata committed with each offset, where not empty
	Topics   map[string]bool       // every topic the group has an offset for, of any partition
}

// CommittedMetadata returns the group's committed offsets for keys, as
// Committed does, with their metadata and the topics the group has offsets for.
func (o *Offsets) CommittedMetadata(ctx context.Context, keys []ranges.Key) (l Listing, errs map[ranges.Key]error, err error) {
	resps, err := o.adm.FetchOffsets(ctx, o.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return Listing{Offsets: map[ranges.Key]int64{}}, nil, nil
	}
	if err != nil {
		return l, nil, fmt.Errorf("fetch committed offsets of group %q: %w", o.group, err)
	}
	resps.Each(func(r kadm.OffsetResponse) {
		if r.Err == nil && r.At >= 0 {
			if l.Topics == nil {
				l.Topics = map[string]bool{}
			}
			l.Topics[r.Topic] = true
		}
	})
	offsets := map[ranges.Key]int64{}
	var meta map[ranges.Key]string
	for _, k := range keys {
		r, ok := resps.Lookup(k.Topic, k.Partition)
		if !ok {
			continue
		}
		if r.Err != nil {
			if errs == nil {
				errs = map[ranges.Key]error{}
			}
			errs[k] = fmt.Errorf("committed offset of %s in group %q: %w", k, o.group, r.Err)
			continue
		}
		if r.At >= 0 {
			offsets[k] = r.At
			if r.Metadata != "" {
				if meta == nil {
					meta = map[ranges.Key]string{}
				}
				meta[k] = r.Metadata
			}
		}
	}
	l.Offsets, l.Metadata = offsets, meta
	return l, errs, nil
}

// Commit writes offsets to the group. Each is the next offset to read of its
// partition. A partition the broker rejects is in errs with the reason, and
// the others are committed. err is set when the request as a whole failed.
func (o *Offsets) Commit(ctx context.Context, offsets map[ranges.Key]int64) (errs map[ranges.Key]error, err error) {
	if len(offsets) == 0 {
		return nil, nil
	}
	os := make(kadm.Offsets)
	for k, at := range offsets {
		os.Add(kadm.Offset{Topic: k.Topic, Partition: k.Partition, At: at, LeaderEpoch: -1})
	}
	resps, err := o.adm.CommitOffsets(ctx, o.group, os)
	if err != nil {
		return nil, fmt.Errorf("commit to group %q: %w", o.group, err)
	}
	for k := range offsets {
		r, ok := resps.Lookup(k.Topic, k.Partition)
		switch {
		case !ok:
			err = fmt.Errorf("commit %s to group %q: partition missing from the answer", k, o.group)
		case r.Err != nil:
			err = fmt.Errorf("commit %s to group %q: %w", k, o.group, r.Err)
		default:
			continue
		}
		if errs == nil {
			errs = map[ranges.Key]error{}
		}
		errs[k] = err
	}
	return errs, nil
}

// Members returns the client IDs and hosts of the group's live members, or
// none for a group that does not exist or is empty. Offsets committed from
// outside the group (as Commit does) are rejected while it has members.
func (o *Offsets) Members(ctx context.Context) ([]string, error) {
	described, err := o.adm.DescribeGroups(ctx, o.group)
	if err != nil {
		return nil, fmt.Errorf("describe group %q: %w", o.group, err)
	}
	d, ok := described[o.group]
	if !ok || errors.Is(d.Err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if d.Err != nil {
		return nil, fmt.Errorf("describe group %q: %w", o.group, d.Err)
	}
	var out []string
	for _, m := range d.Members {
		out = append(out, m.ClientID+"@"+m.ClientHost)
	}
	return out, nil
}

// Delete deletes the group's committed offsets of keys, so they start where
// a reader starts without one. The group coordinator refuses it
// (GROUP_SUBSCRIBED_TO_TOPIC) for topics that live members consume. A group
// that does not exist has nothing to delete.
func (o *Offsets) Delete(ctx context.Context, keys []ranges.Key) error {
	set := make(kadm.TopicsSet)
	for _, k := range keys {
		set.Add(k.Topic, k.Partition)
	}
	resps, err := o.adm.DeleteOffsets(ctx, o.group, set)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete committed offsets of group %q: %w", o.group, err)
	}
	var errs []error
	resps.EachError(func(t string, p int32, err error) {
		errs = append(errs, fmt.Errorf("delete committed offset of %s/%d in group %q: %w", t, p, o.group, err))
	})
	return errors.Join(errs...)
}
