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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// cluster is the engine's administrative view of Kafka. It knows which
// partitions exist and their watermarks. Answers are kept per topic and per partition,
// so one failing topic or partition never hides the others.
type cluster struct {
	cl            *kgo.Client
	adm           *kadm.Client
	shared        bool // cl is a group member's (share): the member closes it
	seeds         []string
	readCommitted bool
	startMillis   int64 // > 0: list the first offset at or after it as marks.from
	stopMillis    int64 // > 0: end each partition before its first offset at or after it
}

// marks are a partition's watermarks. The log start offset and the end
// reading may go to (high watermark, or last stable offset under
// read_committed).
type marks struct {
	start, end int64
	high       int64 // the end as listed (high watermark or last stable offset); end may be a target below it
	from       int64 // the first offset at or after the start of a time window; -1 without one
}

func newCluster(cfg *Config, logOpts []kgo.Opt) (*cluster, error) {
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Seeds...)}, logOpts...)
	opts = append(opts, cfg.ClientOpts...)
	opts = append(opts, kgo.MetadataMinAge(listingMetadataMinAge))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", strings.Join(cfg.Seeds, ","), err)
	}
	c := &cluster{cl: cl, adm: kadm.NewClient(cl), seeds: cfg.Seeds, readCommitted: cfg.Fetch.ReadCommitted, stopMillis: cfg.StopMillis}
	if cfg.StartFrom == StartTimestamp {
		c.startMillis = cfg.StartMillis
	}
	return c, nil
}

// listingMetadataMinAge is the MetadataMinAge of the client that lists.
// kadm answers topic listings from metadata cached up to this age, so keep
// it short, and a deleted or recreated topic (a new topic ID) is seen at the
// next poll, not seconds later.
const listingMetadataMinAge = 100 * time.Millisecond

// share moves the listings to kcl, a group member's client, and closes the
// cluster's own. There is one client per process, so a member holds the
// connections of one franz-go group consumer. The member closes kcl.
func (c *cluster) share(kcl *kgo.Client) {
	c.cl.Close()
	c.cl, c.adm, c.shared = kcl, kadm.NewClient(kcl), true
}

func (c *cluster) close() {
	if !c.shared {
		c.cl.Close()
	}
}

// resolve returns the partitions the topic entries select, sorted, and per
// topic the error that kept it out. That is errMissing wrapped for a topic
// or a listed partition that does not exist. err is set only when nothing could be
// listed at all. It lists through kadm, whose metadata requests retry at most
// three times, so a start fails fast on a cluster it cannot reach. A
// refresh lists with relist.
func (c *cluster) resolve(ctx context.Context, specs []TopicSpec) (keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error, err error) {
	if len(specs) == 0 { // no names would list every topic
		return nil, map[string][16]byte{}, map[string]error{}, nil
	}
	names := specNames(specs)
	details, err := c.adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list topics %v from seed brokers %s: %w", names, strings.Join(c.seeds, ","), err)
	}
	keys, ids, topicErrs = selectTopics(specs, details)
	return keys, ids, topicErrs, nil
}

// relist is resolve for a refresh, every poll_interval. It lists with
// listTopics, one Metadata request that retries as the refresh's offset
// listings do.
func (c *cluster) relist(ctx context.Context, specs []TopicSpec) (keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error, err error) {
	if len(specs) == 0 { // no names would list every topic
		return nil, map[string][16]byte{}, map[string]error{}, nil
	}
	names := specNames(specs)
	topics, err := c.listTopics(ctx, names)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list topics %v from seed brokers %s: %w", names, strings.Join(c.seeds, ","), err)
	}
	keys, ids, topicErrs = selectListed(specs, topics)
	return keys, ids, topicErrs, nil
}

// specNames returns the topic names of specs.
func specNames(specs []TopicSpec) []string {
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return names
}

// listedTopic is what a topic listing says of one topic. That is its ID, its
// error, and its partitions, sorted.
type listedTopic struct {
	id         [16]byte
	err        error
	partitions []int32
}

// listTopics asks the cluster for the metadata of names in one Metadata
// request through the client (which keeps its metadata cache current from
// the answer, as for kadm's listing) and returns each topic's ID, error and
// partitions. A refresh lists its topics every poll_interval, caught up or
// not. kadm's ListTopics copied every partition's details out of the
// client's cache and into a map of its own each time, which at 1,000 idle
// partitions was a third of what the read allocated. An authorization error
// of a topic fails the listing, as kadm's does.
func (c *cluster) listTopics(ctx context.Context, names []string) (map[string]listedTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]listedTopic, len(resp.Topics))
	for _, t := range resp.Topics {
		terr := kerr.ErrorForCode(t.ErrorCode)
		switch terr {
		case kerr.ClusterAuthorizationFailed, kerr.TopicAuthorizationFailed:
			return nil, &kadm.AuthError{Err: terr}
		}
		if t.Topic == nil {
			continue
		}
		ps := make([]int32, len(t.Partitions))
		for i, p := range t.Partitions {
			ps[i] = p.Partition
		}
		slices.Sort(ps)
		out[*t.Topic] = listedTopic{id: t.TopicID, err: terr, partitions: ps}
	}
	return out, nil
}

// listedDetails is a kadm listing as listTopics returns one.
func listedDetails(details kadm.TopicDetails) map[string]listedTopic {
	out := make(map[string]listedTopic, len(details))
	for name, d := range details {
		out[name] = listedTopic{id: d.ID, err: d.Err, partitions: slices.Sorted(maps.Keys(d.Partitions))}
	}
	return out
}

// selectTopics returns what resolve does, from a kadm listing of the topics.
func selectTopics(specs []TopicSpec, details kadm.TopicDetails) (keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error) {
	return selectListed(specs, listedDetails(details))
}

// selectListed returns what resolve does, from a listing of the topics.
func selectListed(specs []TopicSpec, listed map[string]listedTopic) (keys []ranges.Key, ids map[string][16]byte, topicErrs map[string]error) {
	topicErrs = map[string]error{}
	ids = map[string][16]byte{}
	for _, s := range specs {
		d, ok := listed[s.Name]
		if !ok || errors.Is(d.err, kerr.UnknownTopicOrPartition) {
			topicErrs[s.Name] = fmt.Errorf("topics: topic %q %w", s.Name, errMissing)
			continue
		}
		if errors.Is(d.err, kerr.InvalidTopicException) {
			// A name Kafka cannot give a topic (a pattern without
			// regexp_topics, say) never exists. It is isolated like a
			// missing topic, so the others are read.
			topicErrs[s.Name] = fmt.Errorf("topics: topic %q is not a name Kafka can give a topic, so it %w (a pattern needs regexp_topics: true): %v", s.Name, errMissing, d.err)
			continue
		}
		if d.err != nil {
			topicErrs[s.Name] = fmt.Errorf("topic %q: %w", s.Name, d.err)
			continue
		}
		ids[s.Name] = d.id
		if s.Partitions == nil {
			for _, p := range d.partitions {
				keys = append(keys, ranges.Key{Topic: s.Name, Partition: p})
			}
			continue
		}
		var missing []string
		for _, p := range s.Partitions {
			if _, ok := slices.BinarySearch(d.partitions, p); !ok {
				missing = append(missing, fmt.Sprint(p))
				continue
			}
			keys = append(keys, ranges.Key{Topic: s.Name, Partition: p})
		}
		if len(missing) > 0 {
			topicErrs[s.Name] = fmt.Errorf("topics: topic %q partition %s %w (the topic has %d partitions)", s.Name, strings.Join(missing, ","), errMissing, len(d.partitions))
		}
	}
	if !slices.IsSortedFunc(keys, ranges.Key.Compare) {
		slices.SortFunc(keys, ranges.Key.Compare)
	}
	return keys, ids, topicErrs
}

// watermarks lists the start and end offsets of keys. A partition whose
// offsets could not be listed (no leader, an error from its broker) is in
// errs with the reason. err is set only when nothing could be listed.
//
// The listings (start, end, and a time window's offsets) go at once, not one
// after another. Kafka answers a ListOffsets request for either kind of
// offset, never both for one partition, so each is a request of its own, and
// a start waits for the slowest of them instead of their sum.
func (c *cluster) watermarks(ctx context.Context, keys []ranges.Key) (out map[ranges.Key]marks, errs map[ranges.Key]error, err error) {
	topics := topicNames(keys)
	adm := c.adm
	starts := &offsetListing{what: "start offset", failed: fmt.Sprintf("list start offsets of %v", topics),
		list: func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topics...) }}
	ends := &offsetListing{what: "end offset", failed: fmt.Sprintf("list end offsets of %v", topics),
		list: func() (kadm.ListedOffsets, error) {
			if c.readCommitted {
				return adm.ListCommittedOffsets(ctx, topics...)
			}
			return adm.ListEndOffsets(ctx, topics...)
		}}
	all := []*offsetListing{starts, ends}
	var from, stop *offsetListing
	if c.startMillis > 0 {
		from = &offsetListing{what: "offset at the window's start", failed: fmt.Sprintf("list offsets of %v at %d ms", topics, c.startMillis),
			list: func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, c.startMillis, topics...) }}
		all = append(all, from)
	}
	if c.stopMillis > 0 {
		stop = &offsetListing{what: "offset at the window's stop", failed: fmt.Sprintf("list offsets of %v at %d ms", topics, c.stopMillis),
			list: func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, c.stopMillis, topics...) }}
		all = append(all, stop)
	}
	var wg sync.WaitGroup
	for _, o := range all {
		wg.Go(func() {
			lo, err := o.list()
			o.l, o.err = newListing(o.what, lo, err)
		})
	}
	wg.Wait()
	for _, o := range all {
		if o.err != nil {
			return nil, nil, fmt.Errorf("%s: %w", o.failed, o.err)
		}
	}
	out, errs = combineMarks(keys, starts.l, ends.l, from.listing(), stop.listing())
	return out, errs, nil
}

// offsetListing is one of the listings of watermarks. It holds what it
// lists, the call that lists it, and its answer once listed.
type offsetListing struct {
	what   string // what is listed, for a partition's error: "start offset"
	failed string // what failed, for the error of the whole listing
	list   func() (kadm.ListedOffsets, error)
	l      listing
	err    error
}

// listing returns o's answer, or nil if o is nil (a listing not asked for).
func (o *offsetListing) listing() *listing {
	if o == nil {
		return nil
	}
	return &o.l
}

// listing is the answer to one kadm offset listing (ListStartOffsets,
// ListEndOffsets, ...). It holds the offsets listed, and the partitions
// whose part of the request failed as a whole, with the reason.
type listing struct {
	what    string // what was listed, for errors: "start offset"
	offsets kadm.ListedOffsets
	failed  map[ranges.Key]error
}

// newListing takes a kadm offset listing's result. kadm sends one request
// per leader broker and answers every partition it could list together with
// a *kadm.ShardErrors for the requests that failed (a partition without a
// leader, a broker that is down). Those requests' partitions are kept with
// their shard's error, and the rest is usable. err is returned only when
// nothing was listed, when every shard failed, or for another error.
func newListing(what string, lo kadm.ListedOffsets, err error) (listing, error) {
	l := listing{what: what, offsets: lo}
	if err == nil {
		return l, nil
	}
	var se *kadm.ShardErrors
	if !errors.As(err, &se) || se.AllFailed {
		return l, err
	}
	l.failed = map[ranges.Key]error{}
	for _, shard := range se.Errs {
		req, ok := shard.Req.(*kmsg.ListOffsetsRequest)
		if !ok {
			continue // not a listing of offsets: its partitions are missing from the answer
		}
		serr := shard.Err
		if shard.Broker.NodeID >= 0 {
			serr = fmt.Errorf("broker %d (%s:%d): %w", shard.Broker.NodeID, shard.Broker.Host, shard.Broker.Port, shard.Err)
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				l.failed[ranges.Key{Topic: rt.Topic, Partition: rp.Partition}] = serr
			}
		}
	}
	return l, nil
}

// offset returns the offset listed for k, or why there is none.
func (l *listing) offset(k ranges.Key) (int64, error) {
	if err, ok := l.failed[k]; ok {
		return 0, fmt.Errorf("%s of %s: %w", l.what, k, err)
	}
	o, ok := l.offsets.Lookup(k.Topic, k.Partition)
	switch {
	case !ok:
		return 0, fmt.Errorf("%s of %s: partition missing from the broker's answer", l.what, k)
	case o.Err != nil:
		return 0, fmt.Errorf("%s of %s: %w", l.what, k, o.Err)
	}
	return o.Offset, nil
}

// combineMarks builds the watermarks of keys from the listings (from and
// stop are nil without a time window). A partition missing from a listing,
// or with an error in one, is in errs and not in out.
func combineMarks(keys []ranges.Key, starts, ends listing, from, stop *listing) (out map[ranges.Key]marks, errs map[ranges.Key]error) {
	out = make(map[ranges.Key]marks, len(keys))
	errs = map[ranges.Key]error{}
	for _, k := range keys {
		s, err := starts.offset(k)
		if err != nil {
			errs[k] = err
			continue
		}
		e, err := ends.offset(k)
		if err != nil {
			errs[k] = err
			continue
		}
		if s < 0 || e < s {
			errs[k] = fmt.Errorf("watermarks of %s: broker answered start %d, end %d", k, s, e)
			continue
		}
		m := marks{start: s, end: e, high: e, from: -1}
		if err := windowed(&m, k, from, stop); err != nil {
			errs[k] = err
			continue
		}
		out[k] = m
	}
	return out, errs
}

// windowed applies a time window's offsets to m. from is where the window
// starts, and the end is cut at the first offset at or after its stop. A
// partition without such offsets lists the end offset (kadm), which leaves m
// as it is.
func windowed(m *marks, k ranges.Key, from, stop *listing) error {
	if from != nil {
		o, err := from.offset(k)
		if err != nil {
			return err
		}
		m.from = min(max(o, m.start), m.end)
	}
	if stop != nil {
		o, err := stop.offset(k)
		if err != nil {
			return err
		}
		m.end = max(min(o, m.end), m.start)
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
