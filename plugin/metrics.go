package plugin

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Metric names: every metric the input registers, through Benthos' metrics
// API (so any exporter serves them). Counters end in _total as Prometheus
// expects. The timer, like Benthos' own, is in nanoseconds and ends in _ns
// (plugin/promexport exports it as a summary of nanoseconds, or a histogram
// of seconds under the same name). Labels have bounded values (topics and
// partitions read, fixed states and events).
const (
	metricLag             = "kafka_batched_ranges_lag"                   // gauge {topic, partition}
	metricRecords         = "kafka_batched_ranges_records_total"         // counter {topic}
	metricBytes           = "kafka_batched_ranges_bytes_total"           // counter {topic}
	metricRanges          = "kafka_batched_ranges_ranges_total"          // counter {state: planned, read, acked, replayed}
	metricRangesInFlight  = "kafka_batched_ranges_ranges_in_flight"      // gauge
	metricRangeRead       = "kafka_batched_ranges_range_read_ns"         // timer, nanoseconds
	metricCommits         = "kafka_batched_ranges_commits_total"         // counter {result: ok, failed}
	metricCache           = "kafka_batched_ranges_cache_total"           // counter {event: continuation, seek, new_client, new_cursor, fetch, eviction, invalidation, refused, lane_opened, lane_fetch}
	metricCacheCursors    = "kafka_batched_ranges_cache_cursors"         // gauge
	metricCacheLanes      = "kafka_batched_ranges_cache_lanes"           // gauge: backlog lanes (fetch connections of their own to distant brokers) open now
	metricOwnedPartitions = "kafka_batched_ranges_owned_partitions"      // gauge
	metricLostOffsets     = "kafka_batched_ranges_lost_offsets_total"    // counter {topic, partition}
	metricStaleAcks       = "kafka_batched_ranges_stale_acks_total"      // counter: acks, nacks and replays of partition incarnations that were over, dropped
	metricDropped         = "kafka_batched_ranges_dropped_records_total" // counter {topic}: rejected records dropped (auto_replay_nacks: false)
	// The lag again, under the names Redpanda Connect's inputs give it, so
	// a dashboard or alert made for them shows it: its redpanda input's
	// redpanda_lag, its kafka_franz input's kafka_lag.
	metricRedpandaLag = "redpanda_lag" // gauge {topic, partition}
	metricKafkaLag    = "kafka_lag"    // gauge {topic, partition}
)

// observer implements engine.Observer with Benthos metrics.
type observer struct {
	lag            *service.MetricGauge
	lagAliases     []*service.MetricGauge // the lag under Redpanda Connect's names
	seen           sync.Map               // ranges.Key: partitions whose series exist
	records, bytes *service.MetricCounter
	ranges         *service.MetricCounter
	inFlight       *service.MetricGauge
	readTime       *service.MetricTimer
	commits        *service.MetricCounter
	cache          *service.MetricCounter
	cacheCursors   *service.MetricGauge
	cacheLanes     *service.MetricGauge
	// cacheStats, if set, returns the consumer cache's counters now, for
	// the lanes (the engine's cache events do not carry them). lanes is
	// what CacheEvents last saw of them. Both are the engine's reporter
	// goroutine's (CacheEvents).
	cacheStats func() cache.Stats
	lanes      cache.Stats
	owned      *service.MetricGauge
	lost       *service.MetricCounter
	stale      *service.MetricCounter
	dropped    *service.MetricCounter
}

func newObserver(m *service.Metrics) *observer {
	o := &observer{
		lag:          m.NewGauge(metricLag, "topic", "partition"),
		lagAliases:   []*service.MetricGauge{m.NewGauge(metricRedpandaLag, "topic", "partition"), m.NewGauge(metricKafkaLag, "topic", "partition")},
		records:      m.NewCounter(metricRecords, "topic"),
		bytes:        m.NewCounter(metricBytes, "topic"),
		ranges:       m.NewCounter(metricRanges, "state"),
		inFlight:     m.NewGauge(metricRangesInFlight),
		readTime:     m.NewTimer(metricRangeRead),
		commits:      m.NewCounter(metricCommits, "result"),
		cache:        m.NewCounter(metricCache, "event"),
		cacheCursors: m.NewGauge(metricCacheCursors),
		cacheLanes:   m.NewGauge(metricCacheLanes),
		owned:        m.NewGauge(metricOwnedPartitions),
		lost:         m.NewCounter(metricLostOffsets, "topic", "partition"),
		stale:        m.NewCounter(metricStaleAcks),
		dropped:      m.NewCounter(metricDropped, "topic"),
	}
	// The series of the fixed label values exist from the start, at 0, so
	// that an alert on increase(...{result="failed"}) has a series to watch
	// before the first failure. Those of a partition from its first lag
	// (partitionSeries). Benthos adds labels of its own to every metric, so
	// a series, even one without labels here, exists only once set.
	o.stale.Incr(0)
	for _, state := range []string{"planned", "read", "acked", "replayed"} {
		o.ranges.Incr(0, state)
	}
	for _, result := range []string{"ok", "failed"} {
		o.commits.Incr(0, result)
	}
	o.cache.Incr(0, "refused") // a bug: alert on any increase
	for _, event := range []string{"lane_opened", "lane_fetch"} {
		o.cache.Incr(0, event) // distant reading, 0 while every broker is near
	}
	o.cacheLanes.Set(0)
	return o
}

func partitionLabel(k ranges.Key) string { return strconv.FormatInt(int64(k.Partition), 10) }

func (o *observer) RangePlanned(ranges.Range) { o.ranges.Incr(1, "planned") }
func (o *observer) RangeRead(_ ranges.Range, d time.Duration) {
	o.ranges.Incr(1, "read")
	o.readTime.Timing(d.Nanoseconds())
}
func (o *observer) RangeAcked(ranges.Range)    { o.ranges.Incr(1, "acked") }
func (o *observer) RangeReplayed(ranges.Range) { o.ranges.Incr(1, "replayed") }
func (o *observer) Delivered(topic string, records, bytes int64) {
	o.records.Incr(records, topic)
	o.bytes.Incr(bytes, topic)
}
func (o *observer) Committed(ok bool) {
	if ok {
		o.commits.Incr(1, "ok")
	} else {
		o.commits.Incr(1, "failed")
	}
}
func (o *observer) Lag(k ranges.Key, lag int64) {
	o.partitionSeries(k)
	o.setLag(k, lag)
}

// setLag sets the partition's lag, under every name.
func (o *observer) setLag(k ranges.Key, lag int64) {
	p := partitionLabel(k)
	o.lag.Set(lag, k.Topic, p)
	for _, g := range o.lagAliases {
		g.Set(lag, k.Topic, p)
	}
}

// partitionSeries makes the counters of a partition, and of its topic,
// exist at 0 the first time the partition's lag is reported.
func (o *observer) partitionSeries(k ranges.Key) {
	if _, seen := o.seen.LoadOrStore(k, true); seen {
		return
	}
	o.lost.Incr(0, k.Topic, partitionLabel(k))
	o.dropped.Incr(0, k.Topic)
}

// PartitionGone zeroes the partition's lag. Benthos' API cannot remove a
// series, and a stale value would look like lag this process still has.
func (o *observer) PartitionGone(k ranges.Key) { o.setLag(k, 0) }
func (o *observer) InFlight(n int)             { o.inFlight.Set(int64(n)) }
func (o *observer) Owned(n int)                { o.owned.Set(int64(n)) }
func (o *observer) CacheEvents(events map[string]int64, open int64) {
	for event, n := range events {
		if n > 0 {
			o.cache.Incr(n, event)
		}
	}
	o.cacheCursors.Set(open)
	if o.cacheStats != nil {
		s := o.cacheStats()
		for event, n := range laneEvents(o.lanes, s) {
			if n > 0 {
				o.cache.Incr(n, event)
			}
		}
		o.cacheLanes.Set(s.Lanes)
		o.lanes = s
	}
}

// laneEvents are the lane events of the consumer cache from prev to cur:
// lanes opened (each a fetch connection of its own to a distant broker,
// fetch_connections) and fetches sent on them.
func laneEvents(prev, cur cache.Stats) map[string]int64 {
	return map[string]int64{
		"lane_opened": cur.LanesOpened - prev.LanesOpened,
		"lane_fetch":  cur.LaneFetches - prev.LaneFetches,
	}
}

// lanesNote is what the closing summary adds about the lanes of s: how
// many opened and how many fetches they carried (none: every broker was
// near, or the backlog small, or fetch_connections 1).
func lanesNote(s cache.Stats) string {
	return fmt.Sprintf("; %d backlog lanes opened, %d fetches on them", s.LanesOpened, s.LaneFetches)
}

func (o *observer) Stale(n int64)                     { o.stale.Incr(n) }
func (o *observer) LostOffsets(k ranges.Key, n int64) { o.lost.Incr(n, k.Topic, partitionLabel(k)) }
func (o *observer) Dropped(topic string, n int64)     { o.dropped.Incr(n, topic) }
