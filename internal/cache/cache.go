package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a Cache. Seeds is required; zero values elsewhere take
// the defaults documented on each field.
type Config struct {
	// Seeds are the bootstrap brokers (host:port) of every client.
	Seeds []string
	// ClientOpts are extra franz-go options applied to every client (client
	// ID, TLS dialer, SASL, ...), after the cache's own.
	ClientOpts []kgo.Opt
	// Capacity is the soft limit on open clients. Beyond it the least
	// recently used idle clients are closed; leased clients are never closed
	// to honour it. Zero means no caching: every client is closed on release.
	Capacity int
	// IdleTimeout closes a client that has been idle this long. Zero or less
	// disables idle eviction.
	IdleTimeout time.Duration
	// IdleBufferBytes bounds the records that idle clients keep, over all of
	// them, for the range that starts where their last one ended (the batch
	// straddling the end, and the next one): sized by RecordBytes. Beyond it
	// the least recently used idle clients drop theirs and fetch again, from
	// the same position, when next leased. Zero takes the default, 32 MiB;
	// negative keeps nothing.
	IdleBufferBytes int64
	// ReadCommitted makes fetches use the read_committed isolation level:
	// records of aborted transactions are dropped.
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
}

// Stats counts what the cache did since it was created.
type Stats struct {
	NewClients        int64 // clients created
	Continuations     int64 // reads that started where the client's last read ended
	Seeks             int64 // reads of a cached client that had to move its position
	EvictionsIdle     int64 // idle clients closed after IdleTimeout
	EvictionsCapacity int64 // idle clients closed because Capacity was exceeded
	Invalidations     int64 // clients closed because they were released with an error
	Open              int64 // clients open now (idle and leased)
	Leased            int64 // clients leased now
	Kept              int64 // RecordBytes of the records idle clients keep now (bounded by IdleBufferBytes)
}

// Cache leases partition-pinned franz-go clients. Its methods are safe for
// concurrent use.
type Cache struct {
	cfg Config

	mu      sync.Mutex             // guards idle, lru, open, leased, closed, all, ids, idleBuf
	idleBuf int64                  // RecordBytes of the records idle consumers keep
	ids     map[string][16]byte    // topic IDs the caller expects (SetTopicID)
	idle    map[key][]*consumer    // idle consumers per partition, most recently used last
	lru     *list.List             // idle consumers, most recently used at the front
	all     map[*consumer]struct{} // every open consumer, leased or idle
	open    int                    // len(all)
	leased  int                    // consumers currently leased
	closed  bool                   // set by Close
	noLeft  chan struct{}          // closed by the last Release after Close (nil before Close)

	newClients, continuations, seeks           atomic.Int64
	idleEvictions, capEvictions, invalidations atomic.Int64

	stop    chan struct{} // closed by Close: stops the janitor
	stopped chan struct{} // closed by the janitor when it returns
	once    sync.Once
}

type key struct {
	topic     string
	partition int32
}

// New returns a cache and starts its janitor goroutine, which Close stops.
func New(cfg Config) (*Cache, error) {
	if len(cfg.Seeds) == 0 {
		return nil, errors.New("consumer cache: no seed brokers")
	}
	if cfg.Capacity < 0 {
		return nil, fmt.Errorf("consumer cache: capacity must be >= 0, got %d", cfg.Capacity)
	}
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
	c := &Cache{
		cfg:     cfg,
		idle:    map[key][]*consumer{},
		lru:     list.New(),
		all:     map[*consumer]struct{}{},
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go c.janitor()
	return c, nil
}

// Acquire leases a client that reads only topic/partition. Among idle
// clients of that partition it prefers one whose position is start (so the
// read continues without a seek), then the most recently used one; with none
// idle it creates a new client (connections are opened on first use). The
// lease must be released exactly once.
func (c *Cache) Acquire(ctx context.Context, topic string, partition int32, start int64) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := key{topic, partition}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if cons := c.takeIdleLocked(k, start); cons != nil {
		c.leased++
		c.mu.Unlock()
		return &Lease{c: c, cons: cons}, nil
	}
	c.mu.Unlock()

	opts := append([]kgo.Opt{kgo.SeedBrokers(c.cfg.Seeds...)}, c.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new client for %s/%d: %w", topic, partition, err)
	}
	cons := newConsumer(cl, topic, partition)

	c.mu.Lock()
	cons.topicID = c.ids[topic] // a new client checks it against the broker's
	if c.closed {
		c.mu.Unlock()
		cl.Close()
		return nil, ErrClosed
	}
	c.all[cons] = struct{}{}
	c.open++
	c.leased++
	evicted := c.evictCapacityLocked()
	c.mu.Unlock()
	c.newClients.Add(1)
	closeAll(evicted)
	return &Lease{c: c, cons: cons}, nil
}

// takeIdleLocked removes and returns the best idle consumer of k for a read
// starting at start, or nil.
func (c *Cache) takeIdleLocked(k key, start int64) *consumer {
	idle := c.idle[k]
	if len(idle) == 0 {
		return nil
	}
	pick := len(idle) - 1 // most recently used
	for i := len(idle) - 1; i >= 0; i-- {
		if idle[i].next == start {
			pick = i
			break
		}
	}
	cons := idle[pick]
	c.removeIdleLocked(cons)
	return cons
}

// trimIdleBuffersLocked drops the kept records of the least recently used
// idle consumers while they keep more than IdleBufferBytes. A consumer that
// drops them keeps its position and fetches them again when next leased.
func (c *Cache) trimIdleBuffersLocked() {
	budget := max(c.cfg.IdleBufferBytes, 0)
	for el := c.lru.Back(); el != nil && c.idleBuf > budget; el = el.Prev() {
		cons := el.Value.(*consumer)
		if cons.bufBytes == 0 {
			continue
		}
		c.idleBuf -= cons.bufBytes
		cons.bufBytes = 0
		cons.seek(cons.next)
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

// recordOverhead is the size of a kgo.Record and its pointer, for RecordBytes.
const recordOverhead = 200

func (c *Cache) removeIdleLocked(cons *consumer) {
	c.idleBuf -= cons.bufBytes
	cons.bufBytes = 0
	k := key{cons.topic, cons.partition}
	idle := c.idle[k]
	for i, o := range idle {
		if o == cons {
			idle = append(idle[:i], idle[i+1:]...)
			break
		}
	}
	if len(idle) == 0 {
		delete(c.idle, k)
	} else {
		c.idle[k] = idle
	}
	c.lru.Remove(cons.elem)
	cons.elem = nil
}

// evictCapacityLocked removes least recently used idle consumers while more
// than Capacity are open, and returns them for closing outside the lock.
func (c *Cache) evictCapacityLocked() []*consumer {
	var out []*consumer
	for c.open > c.cfg.Capacity && c.lru.Len() > 0 {
		cons := c.lru.Back().Value.(*consumer)
		c.removeIdleLocked(cons)
		c.forgetLocked(cons)
		c.capEvictions.Add(1)
		out = append(out, cons)
	}
	return out
}

func (c *Cache) forgetLocked(cons *consumer) {
	delete(c.all, cons)
	c.open--
}

func (c *Cache) release(cons *consumer, err error) {
	c.mu.Lock()
	c.leased--
	var toClose []*consumer
	switch {
	case err != nil:
		c.invalidations.Add(1)
		c.forgetLocked(cons)
		toClose = append(toClose, cons)
	case c.closed:
		c.forgetLocked(cons)
		toClose = append(toClose, cons)
	default:
		cons.lastUsed = time.Now()
		k := key{cons.topic, cons.partition}
		c.idle[k] = append(c.idle[k], cons)
		cons.elem = c.lru.PushFront(cons)
		cons.bufBytes = 0
		for _, r := range cons.buf {
			cons.bufBytes += RecordBytes(r)
		}
		c.idleBuf += cons.bufBytes
		c.trimIdleBuffersLocked()
		toClose = c.evictCapacityLocked()
	}
	if c.closed && c.leased == 0 && c.noLeft != nil {
		close(c.noLeft)
		c.noLeft = nil
	}
	c.mu.Unlock()
	closeAll(toClose)
}

// janitor closes consumers idle longer than IdleTimeout until Close.
func (c *Cache) janitor() {
	defer close(c.stopped)
	if c.cfg.IdleTimeout <= 0 {
		<-c.stop
		return
	}
	tick := c.cfg.IdleTimeout / 4
	if tick > time.Second {
		tick = time.Second
	}
	if tick < time.Millisecond {
		tick = time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			closeAll(c.evictIdle(now))
		}
	}
}

func (c *Cache) evictIdle(now time.Time) []*consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*consumer
	for c.lru.Len() > 0 {
		cons := c.lru.Back().Value.(*consumer)
		if now.Sub(cons.lastUsed) < c.cfg.IdleTimeout {
			break
		}
		c.removeIdleLocked(cons)
		c.forgetLocked(cons)
		c.idleEvictions.Add(1)
		out = append(out, cons)
	}
	return out
}

// SetTopicID tells the cache which topic ID the caller planned topic with.
// Every client compares it with the ID the broker reports when it loads
// metadata and fails with ErrTopicRecreated on a mismatch, so a topic that
// was deleted and created again is noticed even by a client created after
// the change (with Capacity 0, after idle eviction, or after an error closed
// the last one). Idle clients of a topic whose ID changed are closed.
func (c *Cache) SetTopicID(topic string, id [16]byte) {
	c.mu.Lock()
	if c.ids == nil {
		c.ids = map[string][16]byte{}
	}
	old, had := c.ids[topic]
	c.ids[topic] = id
	var stale []*consumer
	if had && old != id {
		for k, idle := range c.idle {
			if k.topic == topic {
				stale = append(stale, idle...)
			}
		}
		for _, cons := range stale {
			c.removeIdleLocked(cons)
			c.forgetLocked(cons)
		}
	}
	c.mu.Unlock()
	closeAll(stale)
}

// Drop closes the idle clients of topic/partition, for example when the
// partition was revoked from this process: they would only hold
// connections and buffered records until the idle timeout. Leased clients
// are closed when released.
func (c *Cache) Drop(topic string, partition int32) {
	c.mu.Lock()
	idle := slices.Clone(c.idle[key{topic, partition}])
	for _, cons := range idle {
		c.removeIdleLocked(cons)
		c.forgetLocked(cons)
	}
	c.mu.Unlock()
	closeAll(idle)
}

// Stats returns the cache's counters and gauges.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	open, leased, kept := c.open, c.leased, c.idleBuf
	c.mu.Unlock()
	return Stats{
		NewClients:        c.newClients.Load(),
		Continuations:     c.continuations.Load(),
		Seeks:             c.seeks.Load(),
		EvictionsIdle:     c.idleEvictions.Load(),
		EvictionsCapacity: c.capEvictions.Load(),
		Invalidations:     c.invalidations.Load(),
		Open:              int64(open),
		Leased:            int64(leased),
		Kept:              kept,
	}
}

// Close stops the janitor and closes every idle client at once, then waits
// for leased clients to be released (each is closed on release). If ctx ends
// first, the still-leased clients are closed under their holders, whose reads
// then fail, and ctx's error is returned. Close is safe to call twice.
func (c *Cache) Close(ctx context.Context) error {
	c.once.Do(func() { close(c.stop) })
	<-c.stopped

	c.mu.Lock()
	c.closed = true
	var idle []*consumer
	for c.lru.Len() > 0 {
		cons := c.lru.Back().Value.(*consumer)
		c.removeIdleLocked(cons)
		c.forgetLocked(cons)
		idle = append(idle, cons)
	}
	var wait chan struct{}
	if c.leased > 0 {
		if c.noLeft == nil {
			c.noLeft = make(chan struct{})
		}
		wait = c.noLeft
	}
	c.mu.Unlock()
	closeAll(idle)

	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	var leased []*consumer
	for cons := range c.all {
		leased = append(leased, cons)
	}
	c.mu.Unlock()
	// Closing a kgo client under its holder makes the holder's request fail;
	// the holder's Release then forgets it. kgo's Close is safe to repeat.
	for _, cons := range leased {
		cons.cl.Close()
	}
	return ctx.Err()
}

func closeAll(cs []*consumer) {
	for _, cons := range cs {
		cons.cl.Close()
	}
}

// Lease is the exclusive use of one consumer. It is not safe for concurrent
// use; Release is safe to call twice (the second call does nothing).
type Lease struct {
	c        *Cache
	cons     *consumer
	released atomic.Bool
}

// Release hands the consumer back. With a nil error it is cached for the
// next range of its partition (or closed if over capacity or the cache is
// closed); with an error it is closed, so a client that saw a broken
// connection or a broker error is never reused.
func (l *Lease) Release(err error) {
	if l.released.Swap(true) {
		return
	}
	l.c.release(l.cons, err)
}
