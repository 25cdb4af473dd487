package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/logs"
)

// Config configures a Cache. Seeds (or Client) is required. Zero values
// elsewhere take the defaults documented on each field.
type Config struct {
	// Client is the franz-go client every cursor reads through. The cache
	// does not close it. When nil, the cache creates one from Seeds and
	// ClientOpts and closes it in Close.
	Client *kgo.Client
	// Seeds are the bootstrap brokers (host:port) of the client the cache
	// creates when Client is nil.
	Seeds []string
	// ClientOpts are extra franz-go options of every client the cache
	// creates (client ID, TLS dialer, SASL, ...), after the cache's own.
	// That is the client's, and each backlog lane's (FetchConnections).
	ClientOpts []kgo.Opt
	// Capacity is the most idle cursors that keep buffered records (fetched
	// past the end of their last range), followers of a partition's tail
	// aside (IdleBufferBytes bounds those). Beyond it the least recently
	// used idle cursors drop theirs, keep their position (and its leader
	// epoch), and fetch again when next leased. Zero keeps no records past a
	// range's end.
	Capacity int
	// IdleTimeout forgets a cursor that has been idle (neither leased nor
	// following its partition's tail) this long. Zero or less disables idle
	// eviction.
	IdleTimeout time.Duration
	// IdleBufferBytes bounds the records that idle cursors keep, over all of
	// them, followers included, decoded (RecordBytes) and as fetched,
	// checked at every release and after every fetch answer. Beyond it the
	// least recently used idle cursors drop theirs and fetch again, from the
	// same position, when next leased. Zero takes the default, 32 MiB.
	// Negative keeps nothing. See the package doc for the whole memory
	// bound.
	IdleBufferBytes int64
	// ReadCommitted makes fetches use the read_committed isolation level.
	// Records of aborted transactions are dropped.
	ReadCommitted bool
	// FetchMaxBytes is the fetch response size limit (Kafka fetch.max.bytes).
	// Default 50 MiB.
	FetchMaxBytes int32
	// FetchMaxPartitionBytes is the per-partition fetch limit (Kafka
	// max.partition.fetch.bytes). Default 1 MiB.
	FetchMaxPartitionBytes int32
	// FetchMaxWait is how long the broker may hold a fetch that has no data
	// yet (Kafka fetch.max.wait.ms). Default 500ms.
	FetchMaxWait time.Duration
	// FetchMinBytes is how many bytes the broker waits for, up to
	// FetchMaxWait (Kafka fetch.min.bytes). Default 1.
	FetchMinBytes int32
	// Rack is the client's rack (Kafka client.rack, KIP-392). A broker with
	// a rack-aware replica selector may point fetches at a replica in that
	// rack. Empty fetches from leaders only.
	Rack string
	// FetchConnections is the most fetch connections the cache opens to one
	// broker. They are the shared client's (the broker's loop, which
	// long-polls caught-up partitions) and up to FetchConnections-1 backlog
	// lanes. Each lane is a client of its own (ClientOpts). It fetches for
	// leased cursors with records known to exist ahead of them, in rounds
	// that never wait, to a broker whose measured round trip is LaneMinRTT
	// or more (lanes.go). Zero takes the default, 4. 1 opens no lane.
	FetchConnections int
	// LanePartitionBytes is the per-partition limit of a fetch on a lane.
	// A lane fetches only offsets known to exist for ranges with a backlog,
	// so each round trip brings this much of each range. Measured through a
	// 50 ms proxy, with 1 partition of 1 KiB records, 1 MiB read 196 MB/s
	// and 4 MiB read 310 MB/s (before the lanes opened together; 8 MiB
	// gained a sixth more at 100 ms since). Zero takes the larger of
	// DefaultLanePartitionBytes and FetchMaxPartitionBytes.
	LanePartitionBytes int32
	// RoundBytes is what a broker's connection asks of the partitions
	// its leased cursors read, in all, at the least: each asks the larger
	// of FetchMaxPartitionBytes and RoundBytes / the partitions its leased
	// cursors read, and no more than what is left of its range (roundAsk).
	// A round carries one cursor of a partition, so the ranges of a
	// one-partition backfill take turns, a round each, and at 1 MiB each
	// brought a quarter of what 4 MiB does (1 partition of 1 KiB records on
	// the local broker: 4 MiB read 895-945 MB/s against 760-850, and fewer
	// ranges read ahead at once: peak RSS about half). With more partitions
	// read than RoundBytes / FetchMaxPartitionBytes it changes nothing.
	// Zero asks FetchMaxPartitionBytes of each.
	RoundBytes int32
	// LaneMinRTT is the round trip to a broker, measured by the cache, from
	// which leased cursors with a backlog fetch on lanes (FetchConnections).
	// A broker is distant once 6 answers came this late and 8 times the
	// process's own delay around them more, none sooner (distance.go).
	// Zero takes the
	// default, 2ms. Negative opens lanes to any broker (for tests on
	// loopback).
	LaneMinRTT time.Duration
	// OnHigh, if set, is called whenever a fetch shows a partition's end
	// (high watermark, or last stable offset under read_committed) moved
	// past what the cache last saw. It is called from the fetch loop, outside
	// every lock of the cache. It must not block.
	OnHigh func(topic string, partition int32, high int64)
	// Logger takes the cache's lines. Once per broker it logs its measured
	// round trip and whether reads with a backlog use more fetch connections
	// (lanes). It logs a later change of that verdict at debug level. Nil
	// logs nothing.
	Logger logs.Logger
}

// Stats counts what the cache did since it was created.
type Stats struct {
	NewClients        int64 // franz-go clients created (at most one per cache)
	NewCursors        int64 // cursors created
	Continuations     int64 // reads that started where the cursor's last read ended
	Seeks             int64 // reads of a cached cursor that had to move its position
	EvictionsIdle     int64 // idle cursors forgotten after IdleTimeout
	EvictionsCapacity int64 // idle cursors that dropped their records because Capacity was exceeded
	Invalidations     int64 // cursors forgotten because they were released with an error
	Fetches           int64 // fetch requests sent (one per broker per round)
	ReplicaFetches    int64 // partition fetches sent to a preferred read replica, not the leader
	Metadata          int64 // metadata requests sent (one per topic and look, shared by the cursors that need it)
	DialledAhead      int64 // fetch connections opened by an empty fetch while a start lists (Learn)
	Refused           int64 // cursor state changes the cache refused, each a bug reported by ErrInternal
	LanesOpened       int64 // backlog lanes opened, each a fetch connection of its own (FetchConnections)
	LaneFetches       int64 // fetch requests sent on lanes (counted in Fetches too)
	Lanes             int64 // backlog lanes open now
	Open              int64 // cursors now (idle, following and leased)
	Leased            int64 // cursors leased now
	Following         int64 // idle cursors long-polling their partition's tail now
	Kept              int64 // bytes idle cursors keep now, as retained (bounded by IdleBufferBytes)
}

// Cache leases partition-pinned cursors. Its methods are safe for concurrent
// use.
type Cache struct {
	cfg   Config
	cl    *kgo.Client
	ownCl bool // cl was created by New: Close closes it

	mu       sync.Mutex            // guards the cursors' shared fields and everything below
	idle     idleList              // the idle cursors and what they keep (idle.go)
	locating int                   // revivals in their first try to learn the leader (see loop.build)
	holds    int                   // Hold calls not yet released: the loops build no round meanwhile
	ids      map[string][16]byte   // topic IDs the caller expects (SetTopicID)
	byKey    map[key][]*cursor     // every cursor, per partition
	brokers  map[int32]*broker     // per broker: its fetch loop, lanes and round trip (broker.go)
	laneErr  error                 // a lane's client could not be created: no lane opens
	open     int                   // cursors
	leased   int                   // cursors currently leased
	pinned   int64                 // bytes of the fetch responses whose answers leased cursors queue uncopied (sharedResp)
	holders  map[*cursor]struct{}  // the leased cursors (see loop.build: who may want data)
	closed   bool                  // set by Close
	noLeft   chan struct{}         // closed by the last Release after Close (nil before Close)
	metas    map[string]*metaFetch // the latest metadata request per topic
	refused  map[key]error         // per partition, a transition transitionLocked refused, for its next Acquire
	// onRevive, if set (by tests only), is called instead of starting a
	// revival goroutine. The state machine is then driven without a broker.
	onRevive func(cur *cursor)
	// onLane and onMeasure, if set (by tests only), are called instead of
	// starting a lane's goroutine (with the lane just opened) and a
	// measure's probe goroutine (with its broker and measure). The lanes'
	// decisions are then driven without a broker (lanes_model_test.go).
	onLane    func(ln *lane)
	onMeasure func(b *broker, r *brokerRTT)

	counts counters // what Stats counts, changed without the lock

	ctx     context.Context    // the loops' and revivals' context: cancelled by Close
	cancel  context.CancelFunc // cancels ctx
	workers sync.WaitGroup     // the janitor, loops and revivals
	stop    chan struct{}      // closed by Close: stops the janitor
	once    sync.Once
}

// counters are what Stats counts since the cache was created, each
// changed without Cache.mu.
type counters struct {
	newCursors, continuations, seeks           atomic.Int64
	idleEvictions, capEvictions, invalidations atomic.Int64
	fetches, replicaFetches, metaRequests      atomic.Int64
	refusals                                   atomic.Int64 // transitions refused (refuseLocked)
	dialledAhead                               atomic.Int64 // fetch connections opened ahead (dialAhead)
	lanesOpened, laneFetches                   atomic.Int64
}

type key struct {
	topic     string
	partition int32
}

// emptyCache returns a cache of cfg (defaults applied) with its maps, its
// stop channel and its idle list, and no client.
func emptyCache(cfg Config) *Cache {
	c := &Cache{
		cfg:     cfg,
		byKey:   map[key][]*cursor{},
		holders: map[*cursor]struct{}{},
		brokers: map[int32]*broker{},
		metas:   map[string]*metaFetch{},
		stop:    make(chan struct{}),
	}
	c.idle = newIdleList(c)
	return c
}

// New returns a cache and starts its janitor goroutine, which Close stops.
func New(cfg Config) (*Cache, error) {
	if cfg.Client == nil && len(cfg.Seeds) == 0 {
		return nil, errors.New("consumer cache: no seed brokers")
	}
	if cfg.Capacity < 0 {
		return nil, fmt.Errorf("consumer cache: capacity must be >= 0, got %d", cfg.Capacity)
	}
	c := emptyCache(cfg.withDefaults())
	c.cl = cfg.Client
	if c.cl == nil {
		// franz-go answers metadata requests from what it fetched up to
		// MetadataMinAge ago. Keep it short, so a cursor that saw a
		// leadership error learns the new leader at once.
		opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Seeds...), kgo.MetadataMinAge(100 * time.Millisecond)}, cfg.ClientOpts...)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, fmt.Errorf("consumer cache: new client: %w", err)
		}
		c.cl, c.ownCl = cl, true
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.workers.Add(1)
	go c.janitor()
	return c, nil
}

// withDefaults returns cfg with the defaults documented on its fields.
func (cfg Config) withDefaults() Config {
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 50 << 20
	}
	if cfg.FetchMaxPartitionBytes <= 0 {
		cfg.FetchMaxPartitionBytes = 1 << 20
	}
	if cfg.IdleBufferBytes == 0 {
		cfg.IdleBufferBytes = 32 << 20
	}
	if cfg.FetchMaxWait <= 0 {
		cfg.FetchMaxWait = 500 * time.Millisecond
	}
	if cfg.FetchMinBytes <= 0 {
		cfg.FetchMinBytes = 1
	}
	if cfg.FetchConnections <= 0 {
		cfg.FetchConnections = DefaultFetchConnections
	}
	if cfg.LanePartitionBytes <= 0 {
		cfg.LanePartitionBytes = max(DefaultLanePartitionBytes, cfg.FetchMaxPartitionBytes)
	}
	if cfg.LaneMinRTT == 0 {
		cfg.LaneMinRTT = defaultLaneMinRTT
	}
	if cfg.Logger == nil {
		cfg.Logger = logs.Discard{}
	}
	return cfg
}

// MemoryBound returns the most bytes a cache with cfg (defaults applied)
// holds, as the package doc's memory bound states it, for a cluster of
// brokers brokers, at most leases leases held at once, and cursors cursors
// open (one per partition followed or read, plus one per range of a
// partition read in parallel with another):
//
//	brokers × 2 × FetchMaxBytes                  responses in flight on the brokers' loops
//	+ leases × LanePartitionBytes                responses in flight on lanes (FetchConnections > 1)
//	+ leases × 3 × PartBytes                     what leased cursors hold (PartBytes: the largest of FetchMaxPartitionBytes, RoundBytes and, with lanes, LanePartitionBytes)
//	+ FetchMaxBytes                              responses their answers share
//	+ IdleBufferBytes                            what idle cursors keep
//	+ cursors × 2 KiB + 1 MiB                    cursors, client, metadata
//	+ brokers × (FetchConnections-1) × 256 KiB   the lanes' clients
//
// Batches larger than the limits count at their size (Kafka returns a
// batch whole, KIP-74), and with compression a leased cursor's decoded
// batches count decompressed.
func (cfg Config) MemoryBound(brokers, leases, cursors int) int64 {
	cfg = cfg.withDefaults()
	var lanes int64
	partBytes := max(int64(cfg.FetchMaxPartitionBytes), int64(cfg.RoundBytes)) // a leased cursor alone in its round asks RoundBytes
	if cfg.FetchConnections > 1 {
		// A lane's round asks only for leased cursors, each in one round
		// at a time, for LanePartitionBytes each, and a leased cursor's
		// queued answers may be a lane's.
		lanes = int64(leases)*int64(cfg.LanePartitionBytes) +
			int64(brokers)*int64(cfg.FetchConnections-1)*laneOverhead
		partBytes = max(partBytes, int64(cfg.LanePartitionBytes))
	}
	return int64(brokers)*maxRounds*int64(cfg.FetchMaxBytes) +
		lanes +
		int64(leases)*(maxQueued+1)*partBytes +
		int64(cfg.FetchMaxBytes) +
		max(cfg.IdleBufferBytes, 0) +
		int64(cursors)*cursorOverhead + clientOverhead
}

// DefaultFetchConnections is Config.FetchConnections' default.
const DefaultFetchConnections = 4

// DefaultLanePartitionBytes is Config.LanePartitionBytes' default (or
// FetchMaxPartitionBytes, if larger). A range of 10,000 records of 1 KiB
// (the input's default) takes two round trips on a lane at 8 MiB, three at
// 4 MiB: through a 100 ms proxy, 1 partition, archive mode, 370 MB/s
// against 308-316 in-process, 4.5x a tuned consumer against 3.9x (50 ms:
// 442 against 416). It doubles the lanes' part of the memory bound.
const DefaultLanePartitionBytes = 8 << 20

// DefaultRoundBytes is what the input asks of a broker's rounds in all, at
// the least (Config.RoundBytes), with fetch_max_partition_bytes at its
// default: 4 MiB of one partition read, 1 MiB each of four or more.
const DefaultRoundBytes = 4 << 20

// cursorOverhead is about what an open cursor costs without records. That
// is the cursor, its place in the cache's maps, lists and its loop's round
// (1.4 KiB per follower measured at 1,000 partitions). clientOverhead is
// what the client with its connections and metadata costs.
// laneOverhead is a lane's client with its connection, without its
// responses (45 KiB measured, kgo v1.22.3).
const (
	cursorOverhead = 2 << 10
	clientOverhead = 1 << 20
	laneOverhead   = 256 << 10
)

// Acquire leases a cursor of topic/partition. Among idle cursors of that
// partition it prefers one whose position is start (so the read continues
// without a seek, with the records it fetched past its last range), then
// the most recently used one that does not follow the partition's tail
// (the follower is taken only for a read at its position). With none it
// creates one (cursors share the cache's client, whose connections are
// pooled per broker). The lease must be released exactly once.
func (c *Cache) Acquire(ctx context.Context, topic string, partition int32, start int64) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := key{topic, partition}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if err := c.refused[k]; err != nil {
		delete(c.refused, k)
		return nil, fmt.Errorf("acquire %s/%d: %w", topic, partition, err)
	}
	cur := c.takeIdleLocked(k, start)
	if cur == nil {
		cur = c.newCursorLocked(k)
	}
	if err := c.transitionLocked(cur, evLease, nil); err != nil {
		return nil, fmt.Errorf("acquire %s/%d: %w", topic, partition, err)
	}
	return &Lease{c: c, cur: cur}, nil
}

func (c *Cache) newCursorLocked(k key) *cursor {
	cur := newCursor(k.topic, k.partition)
	cur.topicID = c.ids[k.topic] // checked against the broker's
	c.byKey[k] = append(c.byKey[k], cur)
	c.open++
	c.counts.newCursors.Add(1)
	return cur
}

// takeIdleLocked returns the best idle cursor of k for a read starting at
// start (leasable), or nil. It takes one at start. Of those it takes first
// one that detected a truncation there, which another cursor at start would
// hide (TestCursorModelWalk found a failed cursor taken before it). Then it
// takes one that keeps another error for this lease, else the most recently
// used.
func (c *Cache) takeIdleLocked(k key, start int64) *cursor {
	var at, pick *cursor
	for _, cur := range c.byKey[k] {
		if !cur.leasable(start) {
			continue
		}
		if cur.next == start {
			switch {
			case cur.state == stateTruncated:
				return cur // only this cursor knows of it
			case cur.holdsErr() && (at == nil || !at.holdsErr()):
				at = cur // failed: a new cursor would meet it again, but it says why now
			case at == nil:
				at = cur
			}
			continue
		}
		if pick == nil || cur.lastUsed.After(pick.lastUsed) {
			pick = cur
		}
	}
	if at != nil {
		return at
	}
	return pick
}

// kickLoopsLocked wakes every fetch loop, lanes included.
func (c *Cache) kickLoopsLocked() {
	for _, b := range c.brokers {
		b.kick()
	}
}

// RecordBytes is what a fetched record holds in memory, roughly: its key,
// value and headers plus the record's own fields.
func RecordBytes(r *kgo.Record) int64 {
	n := int64(len(r.Key)+len(r.Value)) + recordOverhead
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return n
}

// ownRecords moves the records an idle cursor keeps into memory of their
// own. That is one slab for the records and one buffer for their keys,
// values and headers. Decoded, they point into their fetch's buffer (or decompressed
// batch), and kgo allocates a batch's records in one slab, so a single kept
// record would pin all of those, which RecordBytes does not count. The copy
// is of what is kept, once per release.
func ownRecords(recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Value)
		}
	}
	data := make([]byte, 0, n)
	own := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		i := len(data)
		data = append(data, b...)
		return data[i:len(data):len(data)]
	}
	slab := make([]kgo.Record, len(recs))
	for i, r := range recs {
		slab[i] = *r
		o := &slab[i]
		o.Key, o.Value = own(r.Key), own(r.Value)
		if len(r.Headers) > 0 {
			o.Headers = make([]kgo.RecordHeader, len(r.Headers))
			for j, h := range r.Headers {
				o.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: own(h.Value)}
			}
		}
		recs[i] = o
	}
}

// recordOverhead is the size of a kgo.Record and its pointer, for RecordBytes.
const recordOverhead = 200

// forgetLocked removes an unleased cursor from the cache (evForget). It
// takes it out of its loop and off the idle list, and drops its records. A leased cursor is
// forgotten when released (evDiscard).
func (c *Cache) forgetLocked(cur *cursor) {
	if cur.gone() {
		return
	}
	_ = c.transitionLocked(cur, evForget, nil)
}

func (c *Cache) release(cur *cursor, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.counts.invalidations.Add(1)
		_ = c.transitionLocked(cur, evDiscard, nil)
	case c.closed:
		_ = c.transitionLocked(cur, evDiscard, nil)
	default:
		c.dropStaleErrLocked(cur)
		ownRecords(cur.buf)
		f := c.followerLocked(key{cur.topic, cur.partition})
		switch {
		case cur.err != nil:
			// What its fetch ahead saw, an error of the data, stays for
			// its next lease. It follows nothing meanwhile.
			_ = c.transitionLocked(cur, evReleaseFailed, cur.err)
		case f != nil && f.next == cur.next:
			// The partition's follower waits where this one stopped. This
			// one, with the records it fetched past its range, takes its
			// place.
			c.forgetLocked(f)
			_ = c.transitionLocked(cur, evReleaseFollow, nil)
		case cur.follows() && (f == nil || f.next < cur.next):
			// It followed the tail before its lease and is further on.
			if f != nil {
				_ = c.transitionLocked(f, evUnfollow, nil)
			}
			_ = c.transitionLocked(cur, evReleaseFollow, nil)
		default:
			_ = c.transitionLocked(cur, evRelease, nil)
		}
		c.idle.trim()
	}
	if c.closed && c.leased == 0 && c.noLeft != nil {
		close(c.noLeft)
		c.noLeft = nil
	}
}

// dropStaleErrLocked clears what a fetch ahead of a released cursor's range
// saw, if it only means the leader must be learnt again. A leased follower
// keeps fetching past its range, and when the range completes from the
// queue its holder never takes that error. Kept, it would stop the cursor
// for good (a loop skips cursors with an error) and fail the next range on
// a healthy cluster. The cursor is handled as the loop handles an idle one.
// It validates its position before its next fetch, and relearns its leader
// (the loop already forgot it) when it next joins a loop. Errors that are
// the data's (a truncation, an offset out of range, an authorisation
// failure) stay for the next lease.
func (c *Cache) dropStaleErrLocked(cur *cursor) {
	if cur.err == nil {
		return
	}
	var fe *fetchError
	if !errors.As(cur.err, &fe) || fe.part != nil && !isLeaderErr(fe.err) {
		return
	}
	cur.err = nil
	cur.leaderChanged()
	c.dropQueueLocked(cur)
}

// dropQueueLocked drops the fetched batches that cur, a cursor without a
// holder, has not decoded, after a leadership or request error. They came
// from the old leader, and the truncation check covers only the decoded
// position (fetched, with the epoch of the last decoded batch). The new
// leader is asked from that validated position instead. What an idle
// cursor kept of them leaves keptBytes and idleList.bytes.
func (c *Cache) dropQueueLocked(cur *cursor) {
	if cur.listed() {
		c.idle.keep(cur, -cur.queueBytes)
	}
	cur.resetQueueLocked(cur.fetched)
	c.idle.recount(cur)
	c.idle.freed()
}

// janitor forgets cursors idle longer than IdleTimeout until Close.
func (c *Cache) janitor() {
	defer c.workers.Done()
	if c.cfg.IdleTimeout <= 0 {
		<-c.stop
		return
	}
	tick := min(max(c.cfg.IdleTimeout/4, time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.evictIdle(now)
		}
	}
}

func (c *Cache) evictIdle(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.idle.lru.Back(); el != nil; {
		cur := el.Value.(*cursor)
		el = el.Prev()
		if now.Sub(cur.lastUsed) < c.cfg.IdleTimeout {
			break
		}
		if !cur.evictable() {
			// It follows the tail (not idle), or holds a truncation its
			// revival detected for its next lease. A new cursor has no
			// epoch and would read on past it.
			continue
		}
		_ = c.transitionLocked(cur, evEvict, nil)
	}
}

// SetTopicID tells the cache which topic ID the caller planned topic with.
// Every cursor compares it with the ID the broker reports when it loads
// metadata and fails with ErrTopicRecreated on a mismatch, so a topic that
// was deleted and created again is noticed even by a cursor created after
// the change. Idle cursors of a topic whose ID changed are forgotten.
func (c *Cache) SetTopicID(topic string, id [16]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string][16]byte{}
	}
	old, had := c.ids[topic]
	c.ids[topic] = id
	if !had || old == id {
		return
	}
	for k, all := range c.byKey {
		if k.topic != topic {
			continue
		}
		for _, cur := range append([]*cursor(nil), all...) {
			if !cur.leased() {
				c.forgetLocked(cur)
			}
		}
	}
}

// Drop forgets the idle cursors of topic/partition, for example when the
// partition was revoked from this process. They would only hold buffered
// records, and follow the partition's tail, until the idle timeout. Leased
// cursors are forgotten when released.
func (c *Cache) Drop(topic string, partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cur := range append([]*cursor(nil), c.byKey[key{topic, partition}]...) {
		if !cur.leased() {
			c.forgetLocked(cur)
		}
	}
}

// Hold keeps every fetch loop from sending its next round until the
// returned release is called (safe to call more than once). Rounds in
// flight go on. A caller that starts many partitions at once (Watch for
// each, as the engine does at a start or an assignment) holds the loops
// meanwhile, so the first round of each broker takes them all. A round
// sent with the first few would make the others wait until the broker
// answered it, since a broker answers a connection's requests one at a
// time. Holds nest. Reads of other partitions wait for the last release,
// so hold only while starting, never across a call that may block.
func (c *Cache) Hold() (release func()) {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.holds--; c.holds == 0 {
			c.kickLoopsLocked()
		}
	})
}

// Watch makes the partition's cursor at offset follow the partition's tail.
// While it is idle, it stays in its broker's fetch loop, long-polled, and
// keeps what arrives for the next lease at offset. Each fetch that shows
// the end moved is reported to Config.OnHigh. There is at most one such
// follower per partition. An earlier one elsewhere stops following. Watch
// creates the cursor if no idle one is at offset, and does nothing if one
// already follows there or the partition's cursor at offset is leased. An
// idle cursor at offset that keeps an error for its next lease (failed,
// truncated) is not made to follow, and no new follower reads past it.
func (c *Cache) Watch(topic string, partition int32, offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || offset < 0 {
		return
	}
	k := key{topic, partition}
	var at *cursor
	held := false
	for _, cur := range c.byKey[k] {
		switch {
		case cur.leased():
			// Its position is its holder's (read without the lock). A
			// lease at offset that reads on is not followed here.
		case cur.next != offset:
		case cur.follower():
			return
		case cur.state == stateIdle:
			at = cur
		case cur.holdsErr():
			held = true
		}
	}
	if f := c.followerLocked(k); f != nil {
		_ = c.transitionLocked(f, evUnfollow, nil)
	}
	if held && at == nil {
		// The cursor at offset keeps an error for the lease there. It
		// follows nothing, and a new follower would read past it.
		return
	}
	if at == nil {
		at = c.newCursorLocked(k)
		at.started = true
		at.seekLocked(offset)
	}
	_ = c.transitionLocked(at, evFollow, nil)
}

// Following reports whether the partition has a follower (Watch) in a fetch
// loop now. That loop's fetches report the partition's end (Config.OnHigh)
// as soon as it moves, so its watermarks need not be listed to see new
// records. A follower that saw an error, or is learning its leader again,
// does not count.
func (c *Cache) Following(topic string, partition int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.followerLocked(key{topic, partition})
	return f != nil && f.state == stateFollowing && f.loop != nil && f.err == nil
}

// followerLocked returns the partition's follower (following, or
// relearning its leader), or nil.
func (c *Cache) followerLocked(k key) *cursor {
	for _, cur := range c.byKey[k] {
		if cur.follower() {
			return cur
		}
	}
	return nil
}

// followLocked has cur, just made the follower (evFollow, evReleaseFollow),
// fetch everything from its broker's loop.
func (c *Cache) followLocked(cur *cursor) {
	cur.want = math.MaxInt64
	c.joinLoopLocked(cur)
}

// Stats returns the cache's counters and gauges.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	open, leased, kept, lanes := c.open, c.leased, c.idle.bytes, 0
	for _, b := range c.brokers {
		lanes += len(b.lanes)
	}
	following := 0
	for el := c.idle.lru.Front(); el != nil; el = el.Next() {
		if el.Value.(*cursor).follower() {
			following++
		}
	}
	c.mu.Unlock()
	clients := int64(0)
	if c.ownCl {
		clients = 1
	}
	return Stats{
		NewClients:        clients,
		NewCursors:        c.counts.newCursors.Load(),
		Continuations:     c.counts.continuations.Load(),
		Seeks:             c.counts.seeks.Load(),
		EvictionsIdle:     c.counts.idleEvictions.Load(),
		EvictionsCapacity: c.counts.capEvictions.Load(),
		Invalidations:     c.counts.invalidations.Load(),
		Fetches:           c.counts.fetches.Load(),
		ReplicaFetches:    c.counts.replicaFetches.Load(),
		Metadata:          c.counts.metaRequests.Load(),
		DialledAhead:      c.counts.dialledAhead.Load(),
		Refused:           c.counts.refusals.Load(),
		LanesOpened:       c.counts.lanesOpened.Load(),
		LaneFetches:       c.counts.laneFetches.Load(),
		Lanes:             int64(lanes),
		Open:              int64(open),
		Leased:            int64(leased),
		Following:         int64(following),
		Kept:              kept,
	}
}

// Close stops the janitor and the fetch loops and forgets every idle cursor
// at once, then waits for leased cursors to be released. If ctx ends first,
// the reads of still-leased cursors fail with ErrClosed, and ctx's error is
// returned. The client is closed if the cache created it. Close is safe to
// call twice.
func (c *Cache) Close(ctx context.Context) error {
	c.once.Do(func() { close(c.stop) })

	c.mu.Lock()
	c.closed = true
	for _, all := range c.byKey {
		for _, cur := range append([]*cursor(nil), all...) {
			if !cur.leased() {
				c.forgetLocked(cur)
			}
		}
	}
	var wait chan struct{}
	if c.leased > 0 {
		if c.noLeft == nil {
			c.noLeft = make(chan struct{})
		}
		wait = c.noLeft
	}
	c.mu.Unlock()

	var err error
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	// Stopping the loops fails every read still waiting for a fetch.
	c.cancel()
	c.mu.Lock()
	c.kickLoopsLocked()
	for _, all := range c.byKey {
		for _, cur := range all {
			cur.setErrLocked(ErrClosed)
		}
	}
	c.mu.Unlock()
	if err == nil {
		c.workers.Wait()
		if c.ownCl {
			c.cl.Close()
		}
	}
	return err
}

// Lease is the exclusive use of one cursor. It is not safe for concurrent
// use. Release is safe to call twice (the second call does nothing).
type Lease struct {
	c        *Cache
	cur      *cursor
	released atomic.Bool
}

// DecodedAhead returns how many records the lease's cursor decoded past
// the position its last Read reached. They came in the record batch that
// straddles the range's end, which Kafka returns whole. A range that
// continues there on this cursor delivers them without a fetch. One that
// starts there on another cursor decodes that batch again, and these are
// thrown away. The holder's own, between Read and Release.
func (l *Lease) DecodedAhead() int { return len(l.cur.buf) }

// Release hands the cursor back. With a nil error it is cached for the
// next range of its partition. With an error it is forgotten, so a position
// that saw a broken connection or a broker error is never reused.
func (l *Lease) Release(err error) {
	if l.released.Swap(true) {
		return
	}
	l.c.release(l.cur, err)
}
