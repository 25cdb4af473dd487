package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// cluster is the engine's administrative view of Kafka: which partitions
// exist and their watermarks. Answers are kept per topic and per partition,
// so one failing topic or partition never hides the others.
type cluster struct {
	cl            *kgo.Client
	adm           *kadm.Client
	seeds         []string
	readCommitted bool
	startMillis   int64 // > 0: list the first offset at or after it as marks.from
	stopMillis    int64 // > 0: end each partition before its first offset at or after it
}

// marks are a partition's watermarks: the log start offset and the end
// reading may go to (high watermark, or last stable offset under
// read_committed).
type marks struct {
	start, end int64
	high       int64 // the end as listed (high watermark or last stable offset); end may be a target below it
	from       int64 // the first offset at or after the start of a time window; -1 without one
}

func newCluster(cfg *Config) (*cluster, error) {
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Seeds...)}, cfg.ClientOpts...)
	// kadm answers topic listings from metadata cached up to this age: keep
	// it short, so a deleted or recreated topic (a new topic ID) is seen at
	// the next poll, not seconds later.
	opts = append(opts, kgo.MetadataMinAge(100*time.Millisecond))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", strings.Join(cfg.Seeds, ","), err)
	}
	c := &cluster{cl: cl, adm: kadm.NewClient(cl), seeds: cfg.Seeds, readCommitted: cfg.ReadCommitted, stopMillis: cfg.StopMillis}
	if cfg.StartFrom == StartTimestamp {
		c.startMillis = cfg.StartMillis
	}
	return c, nil
}

func (c *cluster) close() { c.cl.Close() }

// resolve returns the partitions the topic entries select, sorted, and per
// topic the error that kept it out: errMissing wrapped for a topic or a listed
// partition that does not exist. err is set only when nothing could be
// listed at all.
func (c *cluster) resolve(ctx context.Context, specs []TopicSpec) (keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error, err error) {
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	details, err := c.adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list topics %v from seed brokers %s: %w", names, strings.Join(c.seeds, ","), err)
	}
	topicErrs = map[string]error{}
	ids = map[string][16]byte{}
	for _, s := range specs {
		d, ok := details[s.Name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			topicErrs[s.Name] = fmt.Errorf("topics: topic %q %w", s.Name, errMissing)
			continue
		}
		if d.Err != nil {
			topicErrs[s.Name] = fmt.Errorf("topic %q: %w", s.Name, d.Err)
			continue
		}
		ids[s.Name] = d.ID
		if s.Partitions == nil {
			for p := range d.Partitions {
				keys = append(keys, ranges.Key{Topic: s.Name, Partition: p})
			}
			continue
		}
		var missing []string
		for _, p := range s.Partitions {
			if _, ok := d.Partitions[p]; !ok {
				missing = append(missing, fmt.Sprint(p))
				continue
			}
			keys = append(keys, ranges.Key{Topic: s.Name, Partition: p})
		}
		if len(missing) > 0 {
			topicErrs[s.Name] = fmt.Errorf("topics: topic %q partition %s %w (the topic has %d partitions)", s.Name, strings.Join(missing, ","), errMissing, len(d.Partitions))
		}
	}
	slices.SortFunc(keys, ranges.Key.Compare)
	return keys, ids, topicErrs, nil
}

// watermarks lists the start and end offsets of keys. A partition whose
// offsets could not be listed (no leader, an error from its broker) is in
// errs with the reason; err is set only when nothing could be listed.
func (c *cluster) watermarks(ctx context.Context, keys []ranges.Key) (out map[ranges.Key]marks, errs map[ranges.Key]error, err error) {
	topics := topicNames(keys)
	starts, err := c.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	var ends kadm.ListedOffsets
	if c.readCommitted {
		ends, err = c.adm.ListCommittedOffsets(ctx, topics...)
	} else {
		ends, err = c.adm.ListEndOffsets(ctx, topics...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	var from, stop kadm.ListedOffsets
	if c.startMillis > 0 {
		if from, err = c.adm.ListOffsetsAfterMilli(ctx, c.startMillis, topics...); err != nil {
			return nil, nil, fmt.Errorf("list offsets of %v at %d ms: %w", topics, c.startMillis, err)
		}
	}
	if c.stopMillis > 0 {
		if stop, err = c.adm.ListOffsetsAfterMilli(ctx, c.stopMillis, topics...); err != nil {
			return nil, nil, fmt.Errorf("list offsets of %v at %d ms: %w", topics, c.stopMillis, err)
		}
	}
	out = make(map[ranges.Key]marks, len(keys))
	errs = map[ranges.Key]error{}
	for _, k := range keys {
		s, okS := starts.Lookup(k.Topic, k.Partition)
		e, okE := ends.Lookup(k.Topic, k.Partition)
		switch {
		case !okS || !okE:
			errs[k] = fmt.Errorf("watermarks of %s: partition missing from the broker's answer", k)
		case s.Err != nil:
			errs[k] = fmt.Errorf("start offset of %s: %w", k, s.Err)
		case e.Err != nil:
			errs[k] = fmt.Errorf("end offset of %s: %w", k, e.Err)
		case s.Offset < 0 || e.Offset < s.Offset:
			errs[k] = fmt.Errorf("watermarks of %s: broker answered start %d, end %d", k, s.Offset, e.Offset)
		default:
			m := marks{start: s.Offset, end: e.Offset, high: e.Offset, from: -1}
			if err := windowed(&m, k, from, stop); err != nil {
				errs[k] = err
				continue
			}
			out[k] = m
		}
	}
	return out, errs, nil
}

// windowed applies a time window's offsets to m: from is where the window
// starts, and the end is cut at the first offset at or after its stop. A
// partition without such offsets lists the end offset (kadm), which leaves m
// as it is.
func windowed(m *marks, k ranges.Key, from, stop kadm.ListedOffsets) error {
	if from != nil {
		o, ok := from.Lookup(k.Topic, k.Partition)
		switch {
		case !ok:
			return fmt.Errorf("offset of %s at the window's start: partition missing from the broker's answer", k)
		case o.Err != nil:
			return fmt.Errorf("offset of %s at the window's start: %w", k, o.Err)
		}
		m.from = min(max(o.Offset, m.start), m.end)
	}
	if stop != nil {
		o, ok := stop.Lookup(k.Topic, k.Partition)
		switch {
		case !ok:
			return fmt.Errorf("offset of %s at the window's stop: partition missing from the broker's answer", k)
		case o.Err != nil:
			return fmt.Errorf("offset of %s at the window's stop: %w", k, o.Err)
		}
		m.end = max(min(o.Offset, m.end), m.start)
	}
	return nil
}

func topicNames(keys []ranges.Key) []string {
	var names []string
	for _, k := range keys {
		if !slices.Contains(names, k.Topic) {
			names = append(names, k.Topic)
		}
	}
	return names
}
