package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/group"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// Engine reads the configured partitions as planned ranges and hands their
// records out as batches. Create it with New, start it with Start, take
// batches with Next, and acknowledge each with (*Batch).Ack or Nack. Close
// stops it, waits for every goroutine it started and closes every client.
type Engine struct {
	cfg        Config
	log        Logger
	kafkaWarns *kafkaWarnLimit // rate limit of the franz-go clients' warnings
	obs        Observer

	// commitLock is held (a token in it) from taking the offsets to commit
	// until the commit is answered (commit, Revoked, the final commit), so
	// commits land in the order their offsets were taken. A channel, not a
	// mutex, so that waiting for it ends with the waiter's context
	// (lockCommits). Taken before mu, never under it.
	commitLock chan struct{}

	mu          sync.Mutex // guards the fields down to the blank line
	started     bool
	planner     *ranges.Planner
	tracker     *ranges.Tracker
	parts       map[ranges.Key]*partition // every partition being read: its current incarnation
	unlisted    map[ranges.Key]waiting    // partitions to read whose watermarks are not listed yet, with the incarnation they will start
	incs        uint64                    // incarnations handed out so far: the next is incs+1
	partRecords map[ranges.Key]*record    // the partition table: what is known of each partition across its incarnations (table.go)
	assigned    bool                      // with Membership: the group assigned partitions at least once
	inflight    int                       // ranges holding a max-in-flight slot
	reading     int                       // ranges still being read
	listNow     bool                      // partitions were assigned, or a reader saw its topic vanish: look before the next poll
	fatal       error                     // the error that stopped the engine
	lastWarn    map[string]time.Time      // rate limit of repeated warnings
	replay      []*Batch                  // nacked batches waiting for another delivery, by due time
	ends        []*Batch                  // with RangeEnds: end markers for Next, in the order their readers finished
	delivered   int                       // batches handed out by Next and not done (per partition: record.pending)
	drained     chan struct{}             // closed and replaced when a partition being drained has nothing handed out left (drain.go)
	readOver    bool                      // batches is closed: nothing new will be read
	startedAt   time.Time
	snapshot    map[ranges.Key]marks      // with Membership and StopAtEnd: every partition's end when the engine started (or first listed)
	unsnapped   map[ranges.Key]error      // with Membership and StopAtEnd: partitions whose end could not be listed yet, and why
	groupDone   bool                      // with Membership and StopAtEnd: the group committed every partition to its snapshot end
	member      *group.Member             // with Membership
	losses      map[ranges.Key][]lossSpan // lost spans not logged yet (SkipDataLoss)
	topicIDs    map[string][16]byte       // the ID of each topic as planned
	committer   committer                 // member, or offsets for pinned partitions; nil without a group

	stopScheduler context.CancelFunc // ends the scheduler's context (set by the scheduler; guarded by mu)

	patterns *topicPatterns // with RegexpTopics: the compiled topic entries; nil without
	found    discovery      // with RegexpTopics: the last match of the patterns (set by Start, then the scheduler's)

	// missing are the topic entries of a continuous run that named what did
	// not exist at start, and why, until it exists (set by Start, then the
	// scheduler's: missing.go).
	missing map[string]error

	baseCtx    context.Context    // parent of every partition's context; cancelled when the scheduler stops
	baseCancel context.CancelFunc // set by Start
	cluster    *cluster
	offsets    *group.Offsets // the group's offset store; nil without a group
	cache      *cache.Cache
	batches    chan *Batch   // readers -> Next; closed once no reader is left
	replayed   chan struct{} // buffered 1: a batch was queued for replay or finished
	wake       chan struct{} // buffered 1: the scheduler has something to do
	commitNow  chan struct{} // buffered 1: every slot waits for a commit
	building   chan struct{} // semaphore: readers running Prepare or holding a prepared batch
	shut       *shutdown.Signaller
	wg         sync.WaitGroup // the scheduler, the committer and the readers
	stopped    chan struct{}  // closed once wg is done (after Start), or at Close if never started

	records, bytes, ranges atomic.Int64
	lost                   atomic.Int64  // offsets lost and skipped (SkipDataLoss)
	dropped                atomic.Int64  // records of batches rejected and dropped (ReplayNacks off)
	stale                  atomic.Int64  // acks, nacks, replays and reader results of incarnations that were over, dropped
	staleSeen              int64         // stale as last reported to the observer (the report goroutine's own)
	finishOnce             sync.Once     // starts the finisher goroutine
	finishErr              error         // the finisher's result; read after finishDone is closed
	finishDone             chan struct{} // closed once the finisher is done
}

// Summary describes what an engine did.
type Summary struct {
	Records int64         // records handed out for the first time
	Bytes   int64         // value bytes of those records
	Ranges  int64         // ranges completed (read and acknowledged)
	Lost    int64         // offsets lost and skipped (on_data_loss: skip)
	Stale   int64         // acknowledgements and replays of revoked, lost or recreated partitions, dropped
	Dropped int64         // records of batches the pipeline rejected, dropped without a replay (ReplayNacks off)
	Elapsed time.Duration // since Start
	Cache   cache.Stats   // the consumer cache's counters
}

// String formats the summary as one log line: sizes and rates in units that
// suit them (humanBytes, humanCount), counts as plain numbers.
func (s Summary) String() string {
	secs := s.Elapsed.Seconds()
	var bps, rps float64
	if secs > 0 {
		bps = float64(s.Bytes) / secs
		rps = float64(s.Records) / secs
	}
	return fmt.Sprintf("%d records (%s of values) in %d ranges in %s: %s/s, %s records/s; cache: %d continuations, %d seeks, %d new cursors, %d fetches, %d evictions, %d invalidations, %d lost offsets",
		s.Records, humanBytes(float64(s.Bytes)), s.Ranges, s.Elapsed.Round(time.Millisecond), humanBytes(bps), humanCount(rps),
		s.Cache.Continuations, s.Cache.Seeks, s.Cache.NewCursors, s.Cache.Fetches, s.Cache.EvictionsIdle+s.Cache.EvictionsCapacity, s.Cache.Invalidations, s.Lost) + dropped(s.Dropped)
}

// dropped is the summary's note of rejected records dropped, if any.
func dropped(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d rejected records dropped (auto_replay_nacks: false)", n)
}

// Batch is a slice of one range's records on its way through the pipeline.
// Exactly one of Ack, or Nack until it is acknowledged, finishes it; both are
// safe to call more than once and from any goroutine. A batch belongs to one
// incarnation of its partition (Incarnation): once that is over (revoked,
// lost, its topic deleted or recreated), its Ack and Nack are dropped and
// counted, and a nacked batch is not delivered again.
type Batch struct {
	Records  []*kgo.Record
	High     int64        // the partition's high watermark at the fetch that returned Records (also under read_committed): a record's lag is High - Offset - 1
	Range    ranges.Range // the range the batch belongs to
	Span     ranges.Range // the offsets the batch covers: [first record, last record + 1), or with AlignRanges the whole range
	Attempts int          // deliveries so far, counting this one
	Prepared any          // Config.Prepare's result, for the first delivery only
	// RangeEnd marks an end marker (Config.RangeEnds): no records, no span;
	// Range and Incarnation say which range's reader is done. Its Ack and
	// Nack do nothing.
	RangeEnd bool

	e    *Engine
	st   *rangeState // its range, and through it the incarnation
	done atomic.Bool
	due  time.Time // when a nacked batch is delivered again
}

// Incarnation returns the incarnation of its partition the batch belongs to:
// a number unique within the engine, new each time the partition is
// assigned, lost and assigned again, or its topic recreated.
func (b *Batch) Incarnation() uint64 { return b.st.part.inc }

// Split cuts the batch before its record i (0 < i < len(Records); it
// panics otherwise) and returns the second part as a batch of its own: b
// keeps Records[:i] and its span up to the offset after Records[i-1], the
// new batch the rest of the records and of the span. Each part is then
// finished on its own (Ack, Nack: a rejected part is replayed alone), and
// the engine waits for both, so a commit never passes a part that is not
// acknowledged. Prepared stays with b. Split a batch only before finishing
// it, from the goroutine that took it from Next; never an end marker.
func (b *Batch) Split(i int) *Batch {
	if b.RangeEnd || i <= 0 || i >= len(b.Records) {
		panic(fmt.Sprintf("split of a batch of %d records of %s before record %d", len(b.Records), b.Range, i))
	}
	cut := b.Records[i-1].Offset + 1
	n := len(b.Records)
	tail := &Batch{
		Records:  b.Records[i:n:n],
		Range:    b.Range,
		Span:     ranges.Range{Topic: b.Span.Topic, Partition: b.Span.Partition, Start: cut, End: b.Span.End},
		Attempts: b.Attempts,
		High:     b.High,
		e:        b.e,
		st:       b.st,
	}
	b.Records = b.Records[:i:i]
	b.Span.End = cut
	b.e.mu.Lock()
	b.e.handedOutLocked(tail) // Next ends only once this part is done too
	b.e.mu.Unlock()
	return tail
}

// Done reports whether the batch is finished: acknowledged, rejected without
// a replay to come, or dropped (its incarnation ended, or it was rejected
// while the engine stopped). A rejected batch waiting for its replay is not
// done.
func (b *Batch) Done() bool { return b.done.Load() }

// New checks cfg and returns an engine that is not started yet.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	return &Engine{
		patterns:   newTopicPatterns(&cfg),
		cfg:        cfg,
		log:        cfg.Logger,
		kafkaWarns: newKafkaWarnLimit(),
		obs:        obs,
		wake:       make(chan struct{}, 1),
		commitNow:  make(chan struct{}, 1),
		commitLock: make(chan struct{}, 1),
		replayed:   make(chan struct{}, 1),
		building:   make(chan struct{}, runtime.GOMAXPROCS(0)),
		shut:       shutdown.NewSignaller(),
		lastWarn:   map[string]time.Time{},
		stopped:    make(chan struct{}),
		finishDone: make(chan struct{}),
	}, nil
}

// committer commits offsets to the group: through the member (fenced by its
// generation) or, for pinned partitions, from outside the group.
type committer interface {
	Commit(ctx context.Context, offsets map[ranges.Key]int64) (errs map[ranges.Key]error, err error)
}

// Start lists the selected partitions and their watermarks, decides where
// each starts, and starts reading; with Membership it joins the group and
// reads the partitions the group assigns. An error means nothing was started
// and Start may be called again (after a backoff). Once Start succeeded,
// further calls do nothing.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if started {
		return nil
	}
	if e.shut.IsSoftStopSignalled() {
		return ErrClosed
	}
	cl, err := newCluster(&e.cfg, e.kafkaLogOpt("cursor")) // the listings and the cursors share it
	if err != nil {
		return err
	}
	p, err := e.prepare(ctx, cl)
	if err != nil {
		cl.close()
		return err
	}
	ccfg := cache.Config{
		// The cursors read through the listings' client (cluster): one
		// client per broker set, not two. A cursor's fetches go on that
		// client's fetch connection, its metadata and listings on the
		// other, and listings (ListOffsets, Metadata) are answered at once,
		// never held like a fetch's long poll, so a cursor learning its
		// leader waits behind no held request.
		Client:                 cl.cl,
		Capacity:               e.cfg.CacheCapacity,
		IdleTimeout:            e.cfg.CacheIdleTimeout,
		ReadCommitted:          e.cfg.ReadCommitted,
		FetchMaxBytes:          e.cfg.FetchMaxBytes,
		FetchMaxPartitionBytes: e.cfg.FetchMaxPartitionBytes,
		FetchMaxWait:           e.cfg.FetchMaxWait,
		FetchMinBytes:          e.cfg.FetchMinBytes,
		Rack:                   e.cfg.RackID,
	}
	if !e.cfg.StopAtEnd {
		ccfg.OnHigh = e.onHigh
	}
	c, err := cache.New(ccfg)
	if err != nil {
		cl.close()
		return err
	}

	e.mu.Lock()
	if e.shut.IsSoftStopSignalled() {
		// Close ran while this Start was listing: start nothing.
		e.mu.Unlock()
		_ = c.Close(ctx)
		cl.close()
		return ErrClosed
	}
	e.started = true
	e.cluster, e.offsets, e.cache = cl, p.offsets, c
	if p.offsets != nil {
		e.committer = p.offsets // a nil *group.Offsets would make a non-nil interface
	}
	e.planner = ranges.NewPlanner(e.cfg.MaxRangeRecords)
	e.tracker = ranges.NewTracker()
	if e.cfg.AlignRanges {
		// A bounded run's ends are targets: its last range is cut there.
		// A continuous run's ends grow: a block waits until it is complete.
		mode := ranges.WholeBlocks
		if e.cfg.StopAtEnd {
			mode = ranges.CutAtEnd
		}
		e.planner = ranges.NewAlignedPlanner(e.cfg.MaxRangeRecords, mode)
		e.tracker = ranges.NewWholeRangeTracker()
	}
	e.parts = map[ranges.Key]*partition{}
	e.unlisted = map[ranges.Key]waiting{}
	e.listedAtStartLocked(p)
	e.snapshot, e.unsnapped = p.snapshot, p.unsnapped
	e.topicIDs = p.ids
	if e.topicIDs == nil {
		e.topicIDs = map[string][16]byte{}
	}
	e.found = p.found
	if !e.cfg.StopAtEnd {
		e.missing = p.missing // waited for
	}
	for name, id := range e.topicIDs {
		c.SetTopicID(name, id)
	}
	e.batches = make(chan *Batch)
	e.startedAt = time.Now()
	e.baseCtx, e.baseCancel = context.WithCancel(context.Background())
	var losses []error
	var skipped []ranges.Key
	for _, k := range p.keys {
		m, ok := p.marks[k]
		if !ok {
			e.waitLocked(k, fromConfig)
			continue
		}
		if e.skipUncommittedLocked(k, fromConfig) {
			skipped = append(skipped, k)
			continue
		}
		if err := e.addPartitionLocked(k, m, fromConfig, e.nextIncLocked()); err != nil {
			losses = append(losses, err)
		}
	}
	var reading startSummary
	for _, k := range p.keys {
		e.noteStartLocked(&reading, k, fromConfig)
	}
	reading.unlisted = len(p.markErrs)
	e.mu.Unlock()

	if e.patterns != nil && p.fatal == nil {
		e.logMatched()
	}
	if e.cfg.Membership && p.fatal == nil {
		// Before joining: the group may assign partitions at once.
		e.log.Infof("Joining group %q for %s from %s (%s); partitions are read as the group assigns them",
			e.cfg.Group, topicList(e.cfg.Topics), strings.Join(e.cfg.Seeds, ","), e.modeString())
	}
	if e.cfg.Membership {
		// Partitions come with assignments, from now on.
		names := make([]string, len(e.cfg.Topics))
		for i, t := range e.cfg.Topics {
			names[i] = t.Name
		}
		if e.patterns != nil {
			names = p.found.names() // more are added as they match
		}
		m, err := group.Join(group.MemberConfig{
			Seeds: e.cfg.Seeds, ClientOpts: slices.Concat(e.kafkaLogOpt("group"), e.cfg.ClientOpts), Group: e.cfg.Group,
			Topics: names,
			// The group's leader sees partitions added to the topics when
			// it refreshes metadata, and then rebalances them in.
			GroupOpts: append([]kgo.Opt{kgo.MetadataMaxAge(max(5*time.Second, e.cfg.PollInterval))}, e.cfg.GroupOpts...),
		}, (*handler)(e))
		if err != nil {
			e.mu.Lock()
			e.baseCancel()
			e.started = false
			e.mu.Unlock()
			_ = c.Close(ctx)
			cl.close()
			return err
		}
		var mc committer = m
		if e.sharesCuts() {
			mc = cutCommitter{committer: m, e: e}
		}
		e.mu.Lock()
		e.member, e.committer = m, mc
		for name, id := range e.topicIDs {
			m.SetTopicID(name, id)
		}
		if e.cfg.wrapCommitter != nil {
			e.committer = e.cfg.wrapCommitter(mc)
		}
		e.mu.Unlock()
	}

	switch {
	case p.fatal != nil:
		e.fail(p.fatal)
	case len(losses) > 0:
		e.fail(errors.Join(losses...))
	case e.cfg.Membership: // logged before joining
	default:
		e.log.Infof("Reading %s from %s (%s): %s",
			reading.partitions(), strings.Join(e.cfg.Seeds, ","), e.modeString(), reading.detail())
		for _, k := range sortedKeys(p.markErrs) {
			e.log.Warnf("Partition %s is not readable yet, retrying every %s: %v", k, e.cfg.PollInterval, p.markErrs[k])
		}
		e.warnUncommitted(skipped)
	}
	e.warnMissing(p.missing)
	if e.cfg.ResetOffsets && !e.cfg.Membership {
		e.log.Infof("reset_offsets: every partition starts at start_from, whatever group %q committed", e.cfg.Group)
	}
	e.wg.Add(2)
	go e.schedule()
	go e.report()
	if e.committer != nil {
		e.wg.Add(1)
		go e.commitLoop()
	}
	go func() {
		e.wg.Wait()
		close(e.stopped)
	}()
	return nil
}

// plan is what Start learned before starting anything.
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
}

// prepare lists what Start needs. An error is worth retrying.
func (e *Engine) prepare(ctx context.Context, cl *cluster) (plan, error) {
	var p plan
	if e.cfg.Group != "" {
		p.offsets = group.NewOffsets(cl.adm, e.cfg.Group)
	}
	var r resolved
	var err error
	if e.patterns != nil {
		r, p.found, err = cl.discover(ctx, e.patterns, nil)
	} else {
		r.keys, r.ids, r.topicErrs, err = cl.resolve(ctx, e.cfg.Topics)
	}
	if err != nil {
		return p, err
	}
	keys, ids, topicErrs := r.keys, r.ids, r.topicErrs
	if e.patterns != nil && len(p.found.matched) == 0 && e.cfg.StopAtEnd {
		p.fatal = fmt.Errorf("topics: no topic matches %s, so this bounded run has nothing to read", e.patterns)
		return p, nil
	}
	p.ids, p.all = ids, keys
	if len(topicErrs) > 0 {
		err := joinTopicErrs(topicErrs)
		switch {
		case !allMissing(topicErrs):
			return p, err
		case e.cfg.StopAtEnd && !e.cfg.SkipMissingTopics:
			// A bounded run has nothing to wait for: a missing topic or
			// partition is a mistake in the config, not a passing state.
			p.fatal = err
			return p, nil
		}
		// A continuous run reads the rest and waits for what is missing;
		// a bounded one told so reads the rest.
		p.missing = topicErrs
	}
	if p.offsets != nil && !e.cfg.Membership {
		// Commits from outside a group are rejected while it has members.
		members, err := p.offsets.Members(ctx)
		if err != nil {
			return p, err
		}
		if len(members) > 0 {
			p.fatal = fmt.Errorf("consumer_group %q has %d live members (%s): this input commits the offsets of pinned partitions (name:partitions) from outside the group, which the group coordinator rejects while it has members; name the topics whole to join the group, or use another group",
				e.cfg.Group, len(members), strings.Join(members, ", "))
			return p, nil
		}
	}
	if len(keys) == 0 {
		return p, nil
	}
	if e.cfg.Membership && e.cfg.ResetOffsets {
		if err := e.resetGroup(ctx, p.offsets, keys); err != nil {
			return p, err
		}
	}
	wm, wmErrs, err := cl.watermarks(ctx, keys)
	if err != nil {
		return p, err
	}
	if e.cfg.Membership {
		if e.cfg.StopAtEnd {
			// A partition without a leader now is snapshotted once it can
			// be listed; the others are read meanwhile.
			p.snapshot, p.unsnapped = wm, wmErrs
		}
		return p, nil
	}
	p.keys, p.marks, p.markErrs = keys, wm, wmErrs
	p.committed = map[ranges.Key]int64{}
	if p.offsets != nil && !e.cfg.ResetOffsets {
		var cErrs map[ranges.Key]error
		p.committed, cErrs, err = p.offsets.Committed(ctx, keys)
		if err == nil && len(cErrs) > 0 {
			// Without its committed offset a partition would start at the
			// wrong place: retry the whole start.
			err = joinKeyErrs(cErrs)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// origin says where a partition starts when it has no committed offset to
// resume from.
type origin int

const (
	// fromConfig: where start_from says; the partition existed when the
	// engine started.
	fromConfig origin = iota
	// fromFirst: at its first offset; the partition was created after the
	// engine started (Flink and Spark do the same), so every record of it
	// is new.
	fromFirst
	// fromNewTopic: at its first offset, and the group's committed offset
	// is ignored: it belongs to the topic of the same name that was
	// deleted.
	fromNewTopic
	// fromGroupNew: at its first offset; the partition existed when the
	// engine started but is new to the group (groupNewLocked).
	fromGroupNew
)

// waiting is a partition to read whose watermarks are not listed yet.
type waiting struct {
	inc  uint64 // the incarnation it will start as
	from origin
}

// nextIncLocked returns a new incarnation number.
func (e *Engine) nextIncLocked() uint64 {
	e.incs++
	return e.incs
}

// waitLocked queues k to be listed and read as a new incarnation.
func (e *Engine) waitLocked(k ranges.Key, from origin) {
	e.unlisted[k] = waiting{inc: e.nextIncLocked(), from: from}
}

// addPartitionLocked starts incarnation inc of partition k, with watermarks
// m: it is read from the group's committed offset if there is one (and the
// origin allows it), otherwise from where the origin says. A committed
// offset that can no longer be read is returned as data loss and k is not
// added; one at or past an end that is a target (a snapshot end, a time
// window's stop offset) means k is done, not truncated.
func (e *Engine) addPartitionLocked(k ranges.Key, m marks, from origin, inc uint64) error {
	start := m.start
	if from == fromConfig {
		switch e.cfg.StartFrom {
		case StartLatest:
			start = m.end
		case StartTimestamp:
			start = max(m.from, m.start)
		}
	}
	committed := int64(-1)
	if c := e.peekLocked(k).committed; c >= 0 && from != fromNewTopic {
		committed = c
		switch {
		case c < m.start && e.cfg.SkipDataLoss:
			e.loseLocked(k, c, m.start, fmt.Sprintf("were deleted before they were read (group %q had committed offset %d)", e.cfg.Group, c))
			c = m.start
		case c < m.start:
			return fmt.Errorf("%s: group %q committed offset %d but the log now starts at %d: offsets [%d, %d) were deleted before they were read", k, e.cfg.Group, c, m.start, c, m.start)
		case c > m.high && e.cfg.ReadCommitted:
			// Above the last stable offset: an open transaction, or a
			// commit by a read_uncommitted consumer. Valid: wait until
			// the last stable offset passes it.
			e.log.Infof("Partition %s: group %q committed offset %d is above the last stable offset %d; waiting for open transactions to end", k, e.cfg.Group, c, m.high)
			m.end = max(m.end, c)
		case c > m.high:
			return fmt.Errorf("%s: group %q committed offset %d is past the partition's end %d: the log was truncated or the topic recreated", k, e.cfg.Group, c, m.high)
		}
		// At or past a target end (c > m.end): nothing is left to read.
		start = c
	}
	end := max(start, m.end)
	planEnd := end
	if to, ok := e.cutEndLocked(k, start); ok {
		// The group cut the range from start there: plan the same range
		// first, then the rest (launch extends the end).
		planEnd, end = to, max(end, to)
	}
	if err := e.planner.Add(k, start, planEnd); err != nil {
		return fmt.Errorf("plan %s: %w", k, err)
	}
	if err := e.tracker.Start(k, start); err != nil {
		e.planner.Remove(k)
		return fmt.Errorf("track %s: %w", k, err)
	}
	ctx, cancel := context.WithCancel(e.baseCtx)
	e.parts[k] = &partition{inc: inc, open: map[int64]*rangeState{}, first: start, began: time.Now(), emitFrom: start, extendTo: end, committed: committed, ctx: ctx, cancel: cancel}
	e.watchLocked(k)
	return nil
}

// resumes reports whether partitions resume from the group's committed
// offsets. Without membership, reset_offsets ignores them for the whole run
// (its partitions are fixed); with membership the replay resets the group's
// offsets once, when it starts (resetGroup), and every assignment after that
// resumes from what the group committed since.
func (e *Engine) resumes() bool {
	return e.offsets != nil && (!e.cfg.ResetOffsets || e.cfg.Membership)
}

// resetGroup starts a replay of a group (reset_offsets with membership):
// when the group has no live members, it deletes the group's committed
// offsets of the topics' partitions, so each partition starts at start_from
// once, and every handover after that resumes from what the group committed
// in this replay (and a bounded replay is judged by this replay's commits).
// When the group has live members, a replay (or another run) is in progress:
// the member joins it and resumes from the group's offsets.
func (e *Engine) resetGroup(ctx context.Context, offsets *group.Offsets, keys []ranges.Key) error {
	members, err := offsets.Members(ctx)
	if err != nil {
		return err
	}
	if len(members) > 0 {
		e.log.Infof("reset_offsets: group %q has %d live members (%s), so its replay is under way: joining it and resuming from the group's offsets", e.cfg.Group, len(members), strings.Join(members, ", "))
		return nil
	}
	if err := offsets.Delete(ctx, keys); err != nil {
		return fmt.Errorf("reset_offsets: %w", err)
	}
	e.log.Infof("reset_offsets: deleted group %q's committed offsets of %d partitions of %s; each partition starts at start_from, and handovers resume from what this replay commits", e.cfg.Group, len(keys), topicList(e.cfg.Topics))
	return nil
}

func (e *Engine) modeString() string {
	from := [...]string{"earliest", "latest", "committed", "timestamp"}[e.cfg.StartFrom]
	if e.cfg.StartFrom == StartTimestamp {
		from += " " + time.UnixMilli(e.cfg.StartMillis).UTC().Format(time.RFC3339Nano)
	}
	stop := "never"
	switch {
	case e.cfg.StopMillis > 0:
		stop = "timestamp " + time.UnixMilli(e.cfg.StopMillis).UTC().Format(time.RFC3339Nano)
	case e.cfg.StopAtEnd:
		stop = "end"
	}
	return "start_from " + from + ", stop_at " + stop
}

// Next returns the next batch: a nacked batch whose replay is due, or a new
// batch of some range. It returns ErrEnd once nothing more will be read and
// every batch handed out is done, ErrNotStarted before Start, and ctx's
// error when ctx ends first.
func (e *Engine) Next(ctx context.Context) (*Batch, error) {
	for {
		e.mu.Lock()
		if !e.started {
			e.mu.Unlock()
			return nil, ErrNotStarted
		}
		if len(e.ends) > 0 {
			b := e.ends[0]
			e.ends[0] = nil
			e.ends = e.ends[1:]
			e.mu.Unlock()
			return b, nil
		}
		var wait time.Duration
		if e.dropStaleReplaysLocked() {
			e.signal() // in ordered mode a new incarnation may have waited for them
		}
		if len(e.replay) > 0 {
			b := e.replay[0]
			if wait = time.Until(b.due); wait <= 0 {
				e.replay = e.replay[1:]
				e.mu.Unlock()
				b.Attempts++
				e.obs.RangeReplayed(b.Range)
				return b, nil
			}
		}
		if e.readOver && e.delivered == 0 {
			e.mu.Unlock()
			return nil, ErrEnd
		}
		ch := e.batches
		if e.readOver {
			ch = nil // wait for acknowledgements and replays only
		}
		e.mu.Unlock()

		var due <-chan time.Time
		var timer *time.Timer
		if wait > 0 {
			timer = time.NewTimer(wait)
			due = timer.C
		}
		b, ok, err := e.await(ctx, ch, due)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, err
		}
		if b != nil {
			return b, nil
		}
		if !ok {
			e.mu.Lock()
			e.readOver = true
			e.mu.Unlock()
		}
	}
}

// await waits for a new batch on ch, a replay signal, the next replay's due
// time or the end of ctx. ok is false when ch was closed.
func (e *Engine) await(ctx context.Context, ch <-chan *Batch, due <-chan time.Time) (b *Batch, ok bool, err error) {
	select {
	case b, ok := <-ch:
		if !ok {
			return nil, false, nil
		}
		e.mu.Lock()
		if !e.currentLocked(b.st) || b.st.part.draining {
			// Sent as its incarnation ended or its partition was
			// revoked (the reader's send raced its cancellation): never handed out, the next owner reads
			// it. Dropped, not counted, like a reader's result.
			e.log.Debugf("Dropped the batch %s: incarnation %d of %s is over", b.Span, b.st.part.inc, b.st.r.Key())
			e.mu.Unlock()
			b.done.Store(true)
			b.Prepared = nil
			return nil, true, nil
		}
		e.handedOutLocked(b)
		e.mu.Unlock()
		b.Attempts = 1
		return b, true, nil
	case <-e.replayed:
	case <-due:
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
	return nil, true, nil
}

// Ack finishes the batch: its offsets count as processed and, once every
// offset before them is too, are committed.
func (b *Batch) Ack() { b.ack(true) }

// ack is Ack; it reports whether the acknowledgement was dropped as stale,
// and counts it as such only if count is set.
func (b *Batch) ack(count bool) bool {
	if b.RangeEnd || b.done.Swap(true) {
		return false
	}
	return b.e.batchDone(b, true, count)
}

// AckAll acknowledges bs as one acknowledgement of the pipeline (the
// engine batches that one batch of the caller's carries: Split parts, or
// several batches cut into one): each as by Ack, but if they belong to an
// incarnation that is over, the dropped acknowledgement counts once as
// stale, not once per batch.
func AckAll(bs []*Batch) {
	counted := false
	for _, b := range bs {
		counted = b.ack(!counted) || counted
	}
}

// NackAll rejects bs as one rejection of the pipeline: each as by Nack,
// but if they belong to an incarnation that is over, the dropped rejection
// counts once as stale.
func NackAll(bs []*Batch, err error) {
	counted := false
	for _, b := range bs {
		counted = b.nack(err, !counted) || counted
	}
}

// Nack reports that the pipeline rejected the batch. With ReplayNacks it is
// delivered again, whole, after a delay that grows with each attempt; without
// it (Benthos' contract: the messages are dropped) it counts as acknowledged.
// Once the engine is stopping, or its partition is revoked (being drained or
// gone), a nacked batch is dropped unacknowledged, so it is never committed
// and the next run or owner reads it again.
func (b *Batch) Nack(err error) { b.nack(err, true) }

// nack is Nack; it reports whether the rejection was dropped as stale, and
// counts it as such only if count is set.
func (b *Batch) nack(err error, count bool) bool {
	e := b.e
	if b.RangeEnd {
		return false
	}
	if !e.cfg.ReplayNacks {
		if b.done.Load() {
			return false
		}
		// Dropped, as Benthos' contract says: counted and said, at most
		// once per 10 seconds.
		n := e.dropped.Add(int64(len(b.Records)))
		e.obs.Dropped(b.Range.Topic, int64(len(b.Records)))
		e.warn("dropped", "Batch of %d records of %s rejected (%v) and dropped (auto_replay_nacks: false); %d rejected records dropped so far",
			len(b.Records), b.Range, err, n)
		return b.ack(count)
	}
	if b.done.Load() {
		return false
	}
	if e.stopping() {
		return !b.done.Swap(true) && e.batchDone(b, false, count)
	}
	e.mu.Lock()
	stale := !e.currentLocked(b.st) || b.st.part.draining // revoked: the next owner reads it
	e.mu.Unlock()
	if stale {
		return !b.done.Swap(true) && e.batchDone(b, false, count) // counted as stale there
	}
	wait := min(time.Duration(b.Attempts)*100*time.Millisecond, 5*time.Second)
	e.warn("nack", "Batch of %d records of %s rejected (%v); delivering it again in %s", len(b.Records), b.Range, err, wait)
	e.mu.Lock()
	b.due = time.Now().Add(wait)
	i := len(e.replay)
	for i > 0 && e.replay[i-1].due.After(b.due) {
		i--
	}
	e.replay = append(e.replay, nil)
	copy(e.replay[i+1:], e.replay[i:])
	e.replay[i] = b
	e.mu.Unlock()
	e.signalReplay()
	return false
}

// batchDone takes a finished batch out of the count Next waits for and, if
// acked, records its offsets with the tracker. One of an incarnation that is
// over is dropped, and counted as stale if count is set; it reports whether
// it was.
func (e *Engine) batchDone(b *Batch, acked, count bool) (stale bool) {
	e.mu.Lock()
	e.finishedLocked(b)
	complete := false
	switch {
	case !e.currentLocked(b.st):
		stale = true
		what := "rejection of "
		if acked {
			what = "acknowledgement of "
		}
		if count {
			e.staleLocked(b.st, what+b.Span.String())
		}
	case acked:
		complete = e.ackLocked(b.st, b.Span)
	}
	e.mu.Unlock()
	if complete {
		e.obs.RangeAcked(b.Range)
	}
	if b.st.ackSig != nil {
		select {
		case b.st.ackSig <- struct{}{}:
		default:
		}
	}
	e.signalReplay()
	e.signal()
	return stale
}

// handedOutLocked counts b as handed out by Next and not done.
func (e *Engine) handedOutLocked(b *Batch) {
	e.delivered++
	e.recordLocked(b.Range.Key()).pending++
	b.st.part.pending++
}

// finishedLocked uncounts b, handed out and now done.
func (e *Engine) finishedLocked(b *Batch) {
	e.delivered--
	e.recordLocked(b.Range.Key()).pending--
	b.st.part.pending--
	e.drainWakeLocked(b.st.part)
}

// dropStaleReplaysLocked drops the queued replays of incarnations that are
// over (revoked, lost, their topic deleted or recreated: the next owner
// reads them) or being drained (drain.go), wherever they are in the queue,
// and reports whether it dropped any.
func (e *Engine) dropStaleReplaysLocked() bool {
	kept := e.replay[:0]
	for _, b := range e.replay {
		if e.currentLocked(b.st) && !b.st.part.draining {
			kept = append(kept, b)
			continue
		}
		e.staleLocked(b.st, "replay of "+b.Span.String())
		e.finishedLocked(b)
		b.done.Store(true)
	}
	dropped := len(kept) < len(e.replay)
	clear(e.replay[len(kept):])
	e.replay = kept
	return dropped
}

func (e *Engine) stopping() bool {
	if e.shut.IsSoftStopSignalled() {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fatal != nil
}

// Err returns the error that stopped the engine (data loss, a missing topic
// in a bounded run, a permanent error from the cluster, a failed final
// commit), or nil.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fatal
}

// Summary returns what the engine did so far.
func (e *Engine) Summary() Summary {
	e.mu.Lock()
	startedAt, c := e.startedAt, e.cache
	e.mu.Unlock()
	s := Summary{Records: e.records.Load(), Bytes: e.bytes.Load(), Ranges: e.ranges.Load(), Lost: e.lost.Load(), Stale: e.stale.Load(), Dropped: e.dropped.Load()}
	if !startedAt.IsZero() {
		s.Elapsed = time.Since(startedAt)
	}
	if c != nil {
		s.Cache = c.Stats()
	}
	return s
}

// fail stops the engine with err: nothing more is planned or read, what was
// acknowledged is committed, and Next ends once the batches handed out are
// done.
func (e *Engine) fail(err error) {
	e.mu.Lock()
	e.failLocked(err)
	e.mu.Unlock()
}

func (e *Engine) failLocked(err error) {
	if e.fatal != nil {
		return
	}
	e.fatal = err
	e.log.Errorf("Input stopped: %v", err)
	if e.stopScheduler != nil {
		e.stopScheduler() // a refresh in progress returns at once
	}
	e.signal()
	e.signalReplay()
}

// warn logs a warning, at most once per 10 seconds per key, so an outage
// gives a clear line per partition and not a flood.
func (e *Engine) warn(key, format string, args ...any) {
	if e.due(key) {
		e.log.Warnf(format, args...)
	}
}

// warnRetry logs a failure that is retried, as warn does, unless it is the
// engine's own stop or a cancelled context cutting the attempt short: that is
// a normal stop or a handover, logged at DEBUG (a normal stop logs nothing at
// WARN or above).
func (e *Engine) warnRetry(ctx context.Context, key string, err error, format string, args ...any) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || e.stopping() {
		e.log.Debugf(format, args...)
		return
	}
	e.warn(key, format, args...)
}

// infoEvery logs an info line, at most once per 10 seconds per key.
func (e *Engine) infoEvery(key, format string, args ...any) {
	if e.due(key) {
		e.log.Infof(format, args...)
	}
}

// due reports whether the line of key may be logged now (at most once per
// 10 seconds), and records it.
func (e *Engine) due(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	last, seen := e.lastWarn[key]
	now := time.Now()
	if seen && now.Sub(last) < 10*time.Second {
		return false
	}
	e.lastWarn[key] = now
	return true
}

// finishTimeout bounds the final commit and the release of the clients,
// whatever the contexts of Close.
const finishTimeout = 30 * time.Second

// Close stops planning and reading and waits, as long as ctx allows, for
// every goroutine the engine started, the final commit of the acknowledged
// progress, leaving the group and closing every client. That work runs on
// the finisher goroutine (started by the first Close, done within
// finishTimeout once the readers stopped), so Close returns when ctx ends
// and the work goes on: if ctx ends while readers still run, Close closes
// the consumer cache's clients so readers blocked on the network return, but
// keeps the group member and the cluster client for the final commit, which
// then commits what was acknowledged in the meantime; calling Close again
// waits again, and returns the result. Safe to call concurrently and more
// than once.
func (e *Engine) Close(ctx context.Context) error {
	e.shut.TriggerSoftStop()
	e.signalReplay()
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if !started {
		return nil // Start now returns ErrClosed
	}
	e.finishOnce.Do(func() { go e.finishWhenStopped() })
	select {
	case <-e.finishDone:
		return e.finishErr
	case <-ctx.Done():
	}
	select {
	case <-e.stopped:
		return fmt.Errorf("close: final commit and leaving the group still running: %w", ctx.Err())
	default:
	}
	if err := e.cache.Close(ctx); err != nil { // ctx has ended: leased clients are closed under their readers
		return fmt.Errorf("close: readers still running, their clients closed: %w", err)
	}
	return fmt.Errorf("close: readers still running: %w", ctx.Err())
}

// finishWhenStopped is the finisher goroutine: once every goroutine has
// stopped, the final commit, then the clients. e.finishDone is its stopped
// signal; finishTimeout bounds it once the readers stopped.
func (e *Engine) finishWhenStopped() {
	defer close(e.finishDone)
	<-e.stopped
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	defer cancel()
	e.finishErr = e.finish(ctx)
}

// finish runs once every goroutine has stopped: the final commit, then the
// clients.
func (e *Engine) finish(ctx context.Context) error {
	var errs []error
	if err := e.finalCommit(ctx); err != nil {
		err = fmt.Errorf("final commit of acknowledged offsets to group %q failed, the next run will read them again: %w", e.cfg.Group, err)
		e.log.Errorf("%v", err)
		e.mu.Lock()
		if e.fatal == nil {
			e.fatal = err
		}
		e.mu.Unlock()
		errs = append(errs, err)
	}
	if err := e.releaseClients(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// releaseClients leaves the group (its revocation commits nothing new after
// the final commit), closes the consumer cache (and with it every cached
// client) and the cluster client.
func (e *Engine) releaseClients(ctx context.Context) error {
	var errs []error
	e.mu.Lock()
	m := e.member
	e.mu.Unlock()
	if m != nil {
		if err := m.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.cache.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close consumer cache: %w", err))
	}
	e.cluster.close()
	return errors.Join(errs...)
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) signalReplay() {
	select {
	case e.replayed <- struct{}{}:
	default:
	}
}

func topicList(ts []TopicSpec) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

func allMissing(errs map[string]error) bool {
	for _, err := range errs {
		if !errors.Is(err, errMissing) {
			return false
		}
	}
	return true
}

// joinTopicErrs joins per-topic errors in topic order, so messages are
// stable.
func joinTopicErrs(m map[string]error) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(m)) {
		errs = append(errs, m[name])
	}
	return errors.Join(errs...)
}

// joinKeyErrs joins per-partition errors in partition order.
func joinKeyErrs(m map[ranges.Key]error) error {
	var errs []error
	for _, k := range sortedKeys(m) {
		errs = append(errs, m[k])
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[ranges.Key]V) []ranges.Key {
	return slices.SortedFunc(maps.Keys(m), ranges.Key.Compare)
}
