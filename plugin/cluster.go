package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// errMissing is wrapped by resolve's errors for topics and partitions that
// do not exist.
var errMissing = errors.New("does not exist")

// cluster is the input's administrative view of Kafka: which partitions
// exist, their watermarks, and the consumer group's committed offsets. It is
// the single place that commits, so fencing by group generation lands here.
type cluster struct {
	cl            *kgo.Client
	adm           *kadm.Client
	seeds         []string
	group         string
	readCommitted bool
}

// marks are a partition's watermarks: the log start offset and the end
// reading may go to (high watermark, or last stable offset under
// read_committed).
type marks struct {
	start, end int64
}

func newCluster(conf Config, opts []kgo.Opt) (*cluster, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", strings.Join(conf.SeedBrokers, ","), err)
	}
	return &cluster{
		cl:            cl,
		adm:           kadm.NewClient(cl),
		seeds:         conf.SeedBrokers,
		group:         conf.ConsumerGroup,
		readCommitted: conf.ReadCommitted,
	}, nil
}

func (c *cluster) close() { c.cl.Close() }

// resolve returns the partitions the topic entries select, sorted. A topic or
// an explicitly listed partition that does not exist is an error naming it.
func (c *cluster) resolve(ctx context.Context, specs []TopicSpec) ([]ranges.Key, error) {
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	details, err := c.adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list topics %v from seed brokers %s: %w", names, strings.Join(c.seeds, ","), err)
	}
	var keys []ranges.Key
	var errs []error
	for _, s := range specs {
		d, ok := details[s.Name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("%s: topic %q %w", fieldTopics, s.Name, errMissing))
			continue
		}
		if d.Err != nil {
			errs = append(errs, fmt.Errorf("%s: topic %q: %w", fieldTopics, s.Name, d.Err))
			continue
		}
		if s.Partitions == nil {
			for p := range d.Partitions {
				keys = append(keys, ranges.Key{Topic: s.Name, Partition: p})
			}
			continue
		}
		for _, p := range s.Partitions {
			if _, ok := d.Partitions[p]; !ok {
				errs = append(errs, fmt.Errorf("%s: topic %q partition %d %w (the topic has %d partitions)", fieldTopics, s.Name, p, errMissing, len(d.Partitions)))
				continue
			}
			keys = append(keys, ranges.Key{Topic: s.Name, Partition: p})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(keys, compareKeys)
	return keys, nil
}

func compareKeys(a, b ranges.Key) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// watermarks lists the start and end offsets of keys.
func (c *cluster) watermarks(ctx context.Context, keys []ranges.Key) (map[ranges.Key]marks, error) {
	topics := topicNames(keys)
	starts, err := c.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	var ends kadm.ListedOffsets
	if c.readCommitted {
		ends, err = c.adm.ListCommittedOffsets(ctx, topics...)
	} else {
		ends, err = c.adm.ListEndOffsets(ctx, topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	out := make(map[ranges.Key]marks, len(keys))
	var errs []error
	for _, k := range keys {
		s, okS := starts.Lookup(k.Topic, k.Partition)
		e, okE := ends.Lookup(k.Topic, k.Partition)
		switch {
		case !okS || !okE:
			errs = append(errs, fmt.Errorf("watermarks of %s: partition missing from the broker's answer", k))
		case s.Err != nil:
			errs = append(errs, fmt.Errorf("start offset of %s: %w", k, s.Err))
		case e.Err != nil:
			errs = append(errs, fmt.Errorf("end offset of %s: %w", k, e.Err))
		case s.Offset < 0 || e.Offset < s.Offset:
			errs = append(errs, fmt.Errorf("watermarks of %s: broker answered start %d, end %d", k, s.Offset, e.Offset))
		default:
			out[k] = marks{start: s.Offset, end: e.Offset}
		}
	}
	return out, errors.Join(errs...)
}

// committed returns the group's committed offsets for keys; partitions
// without a commit are absent.
func (c *cluster) committed(ctx context.Context, keys []ranges.Key) (map[ranges.Key]int64, error) {
	resps, err := c.adm.FetchOffsets(ctx, c.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[ranges.Key]int64{}, nil // a group that never committed
	}
	if err != nil {
		return nil, fmt.Errorf("fetch committed offsets of group %q: %w", c.group, err)
	}
	out := map[ranges.Key]int64{}
	var errs []error
	for _, k := range keys {
		r, ok := resps.Lookup(k.Topic, k.Partition)
		if !ok {
			continue
		}
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("committed offset of %s in group %q: %w", k, c.group, r.Err))
			continue
		}
		if r.At >= 0 {
			out[k] = r.At
		}
	}
	return out, errors.Join(errs...)
}

// commit writes offsets to the consumer group. Each offset is the next offset
// to read: a partition's contiguous acknowledged frontier.
func (c *cluster) commit(ctx context.Context, offsets map[ranges.Key]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	os := make(kadm.Offsets)
	for k, at := range offsets {
		os.Add(kadm.Offset{Topic: k.Topic, Partition: k.Partition, At: at, LeaderEpoch: -1})
	}
	resps, err := c.adm.CommitOffsets(ctx, c.group, os)
	if err != nil {
		return fmt.Errorf("commit to group %q: %w", c.group, err)
	}
	if err := resps.Error(); err != nil {
		return fmt.Errorf("commit to group %q: %w", c.group, err)
	}
	return nil
}

func topicNames(keys []ranges.Key) []string {
	var names []string
	for _, k := range keys {
		if len(names) == 0 || names[len(names)-1] != k.Topic {
			if !slices.Contains(names, k.Topic) {
				names = append(names, k.Topic)
			}
		}
	}
	return names
}
