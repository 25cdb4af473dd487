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
//
// Its state is split by owner (doc.go, "State and locks"). The owners are
// the configuration (Engine's own fields), the log (log), the clients (kafka),
// the partition table (parts, table.go), the scheduler (sched,
// scheduler.go), the group's side (group, commit.go), delivery to Next
// (out, batch.go) and observation (stats, observe.go). Each owner's
// behaviour is its own methods. Engine's methods are its API and the
// events that span owners, each calling the owners' methods under mu.
//
// One lock, mu, guards what several owners share, as each type's doc says.
// It is one lock because what it guards changes together. A dropped
// incarnation ends its record, frees its slots and moves the progress
// counts at once. Nothing is called under it that calls back into the
// engine or out of it. So Config.Hooks.Prepare, the Observer and the group
// member's callbacks are never called under it. The consumer cache's methods do not call back
// while their own lock is held. The commit lock (groupState.token) is taken
// before mu, never under it. reach and the line limit have locks of their
// own, taken under mu or not, never the other way round.
type Engine struct {
	// Set by New, never changed.
	cfg      Config
	log      limitedLog // the Logger, with the limit of repeated lines (warn.go); its franz-go clients log through it too
	obs      Observer
	patterns *topicPatterns // with RegexpTopics: the compiled topic entries; nil without

	mu      sync.Mutex // guards started, fatal and the parts of the engine that say so
	started bool       // Start succeeded
	fatal   error      // the error that stopped the engine

	kafka clients     // the clients and what they are told
	parts partTable   // the partition table, with the planner and the tracker
	sched scheduler   // ranges planned and read
	group groupState  // the engine's side of its consumer group: commits, membership
	out   delivery    // batches to Next, replays, end markers
	stats observation // counters and progress

	// The engine's goroutines (its own rules).
	shut       *shutdown.Signaller
	wg         sync.WaitGroup // the scheduler, the reporter, the committer and the readers
	stopped    chan struct{}  // closed once wg is done (after Start), or at Close if never started
	finishOnce sync.Once      // starts the finisher goroutine
	finishErr  error          // the finisher's result; read after finishDone is closed
	finishDone chan struct{}  // closed once the finisher is done
}

// clients are the engine's Kafka clients and what they are told. cluster
// and cache are set by Start before any goroutine starts, then only read.
// reach has its own lock (the clients' hooks call it). topicIDs is guarded
// by Engine.mu.
type clients struct {
	cluster *cluster     // the listings' (and with Membership the member's) client
	cache   *cache.Cache // the cursors
	reach   reach        // whether any broker answers (reach.go)
	// topicIDs is the ID of each topic as planned, the one record of it.
	// The cache's and the group member's copies (SetTopicID) are told of
	// each new one (installLocked, joinGroup, refreshTopics).
	topicIDs map[string][16]byte
}

// Summary describes what an engine did.
type Summary struct {
	Acked   int64         // records the pipeline acknowledged (of incarnations still current when it did)
	Done    int64         // offsets acknowledged (committed or committable), of every incarnation
	Total   int64         // offsets planned to read so far, of every incarnation: Total-Done were not acknowledged
	Bounded bool          // a bounded run (StopAtEnd)
	Ended   bool          // with Bounded: it read to its end and every batch handed out was done
	Records int64         // records handed out for the first time
	Bytes   int64         // value bytes of those records
	Ranges  int64         // ranges completed (read and acknowledged)
	Lost    int64         // offsets lost and skipped (on_data_loss: skip)
	Stale   int64         // acknowledgements and replays of revoked, lost or recreated partitions, dropped
	Dropped int64         // records of batches the pipeline rejected, dropped without a replay (ReplayNacks off)
	Elapsed time.Duration // since Start
	// FirstOut and LastOut are when Next handed out the first and the
	// latest batch for the first time, since Start (0 if none). They are a
	// reader's own measure of how long its records took to come, as a consumer
	// times its first and last record.
	FirstOut, LastOut time.Duration
	Cache             cache.Stats // the consumer cache's counters
}

// String formats the summary as one log line. Sizes and rates are in units
// that suit them (humanBytes, humanCount), and counts are plain numbers.
func (s Summary) String() string {
	secs := s.Elapsed.Seconds()
	var bps, rps float64
	if secs > 0 {
		bps = float64(s.Bytes) / secs
		rps = float64(s.Records) / secs
	}
	line := fmt.Sprintf("%d records acknowledged of %d handed out (%s of values) in %d ranges in %s: %s/s, %s records/s; cache: %d continuations, %d seeks, %d new cursors, %d fetches, %d evictions, %d invalidations, %d lost offsets",
		s.Acked, s.Records, humanBytes(float64(s.Bytes)), s.Ranges, s.Elapsed.Round(time.Millisecond), humanBytes(bps), humanCount(rps),
		s.Cache.Continuations, s.Cache.Seeks, s.Cache.NewCursors, s.Cache.Fetches, s.Cache.EvictionsIdle+s.Cache.EvictionsCapacity, s.Cache.Invalidations, s.Lost) + dropped(s.Dropped)
	if s.Records > 0 {
		line += fmt.Sprintf("; batches handed out from %s to %s after the start", s.FirstOut.Round(time.Millisecond), s.LastOut.Round(time.Millisecond))
	}
	if s.Bounded && !s.Ended {
		line += "; " + s.Unfinished()
	}
	return line
}

// Unfinished says what a bounded run that did not reach its end left, as in
// "stopped before the end: N of M offsets not acknowledged".
func (s Summary) Unfinished() string {
	return fmt.Sprintf("stopped before the end: %d of %d offsets not acknowledged", s.Total-s.Done, s.Total)
}

// dropped is the summary's note of rejected records dropped, if any.
func dropped(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d rejected records dropped (auto_replay_nacks: false)", n)
}

// New checks cfg and returns an engine that is not started yet.
func New(cfg Config) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	obs := cfg.Hooks.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	e := &Engine{
		patterns:   newTopicPatterns(&cfg),
		cfg:        cfg,
		log:        limitedLog{Logger: cfg.Hooks.Logger, lines: newLineLimit()},
		obs:        obs,
		sched:      scheduler{wake: make(chan struct{}, 1)},
		group:      groupState{name: cfg.Group.Name, now: make(chan struct{}, 1), token: make(chan struct{}, 1)},
		out:        delivery{wake: make(chan struct{}, 1), building: make(chan struct{}, runtime.GOMAXPROCS(0))},
		shut:       shutdown.NewSignaller(),
		stopped:    make(chan struct{}),
		finishDone: make(chan struct{}),
	}
	e.log.stopping = e.stopping
	e.out.pause.group, e.out.pause.log = cfg.Group.Name, e.log
	e.parts.cfg = &e.cfg
	return e, nil
}

// committer commits offsets to the group. It commits through the member
// (fenced by its generation) or, for pinned partitions, from outside the group.
type committer interface {
	Commit(ctx context.Context, offsets map[ranges.Key]int64) (errs map[ranges.Key]error, err error)
}

// Start lists the selected partitions and their watermarks, decides where
// each starts, and starts reading. With Membership it joins the group and
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
	// The first listing goes through a client of its own, whose requests
	// fail fast on a TLS or SASL mistake. A group member's client retries
	// such a connection (group.New), so it is created once the listing
	// reached the cluster, and the listings and the cursors move to it.
	cl, err := newCluster(&e.cfg, e.kafka.opts(e.log, "cursor"))
	if err != nil {
		return err
	}
	s := starter{cfg: &e.cfg, log: e.log, patterns: e.patterns, kafka: &e.kafka}
	var onHigh func(string, int32, int64)
	if !e.cfg.StopAtEnd {
		onHigh = e.onHigh
	}
	var c *cache.Cache
	if !e.cfg.Group.Membership {
		// The cursors read through the listing's client. The cache
		// measures the round trip to the topics' leaders while their
		// partitions are listed (cache.Measure), so a distant broker's
		// backlog opens its lanes with its first records. A member's
		// cache measures them as it joins (cache.Learn).
		if c, err = s.newCursorCache(cl, onHigh); err != nil {
			cl.close()
			return err
		}
		if e.patterns == nil {
			for _, name := range specNames(e.cfg.Topics) {
				c.Measure(name)
			}
		}
	}
	p, err := s.prepare(ctx, cl)
	if err != nil {
		closeCache(ctx, c)
		cl.close()
		return err
	}
	var m *group.Member
	if e.cfg.Group.Membership {
		if m, err = s.newMember(ctx, p, (*handler)(e)); err != nil {
			cl.close()
			return err
		}
		cl.share(m.Client())
		if p.offsets != nil {
			p.offsets = group.NewOffsets(cl.adm, e.cfg.Group.Name)
		}
		if e.cfg.StartFrom == StartLatest || e.cfg.StartFrom == StartTimestamp {
			if p.founding, err = m.Founding(ctx); err != nil {
				closeMember(ctx, m)
				cl.close()
				return err
			}
		}
	}
	if c == nil {
		if c, err = s.newCursorCache(cl, onHigh); err != nil {
			closeMember(ctx, m)
			cl.close()
			return err
		}
	}

	e.mu.Lock()
	if e.shut.IsSoftStopSignalled() {
		// Close ran while this Start was listing. Start nothing.
		e.mu.Unlock()
		_ = c.Close(ctx)
		closeMember(ctx, m)
		cl.close()
		return ErrClosed
	}
	e.started = true
	e.installLocked(p, cl, c)
	losses, skipped, reading := e.startPartitionsLocked(p)
	e.mu.Unlock()

	if e.patterns != nil && p.fatal == nil {
		e.patterns.logMatched(e.log, e.sched.found.names(), &e.cfg)
	}
	if e.cfg.Group.Membership && p.fatal == nil {
		// Before joining, since the group may assign partitions at once.
		e.log.Infof("Joining group %q for %s from %s (%s); partitions are read as the group assigns them",
			e.cfg.Group.Name, topicList(e.cfg.Topics), strings.Join(e.cfg.Seeds, ","), e.cfg.modeString())
	}
	if m != nil {
		// The cursors learn the topics' leaders, and open their fetch
		// connections, while the member joins. A broker's requests wait
		// while a connection to it opens (franz-go opens them one
		// request at a time), so opening it while an assignment's
		// partitions are listed would hold up their listings.
		for _, name := range topicNames(p.all) {
			c.Learn(name)
		}
		e.joinGroup(m)
	}
	s.report(p, losses, skipped, reading, e.fail)
	// The scheduler, the reporter and the committer.
	e.wg.Add(2)
	go e.schedule()
	go (&reporter{e: e}).run()
	if e.group.committer != nil {
		e.wg.Add(1)
		go e.commitLoop()
	}
	go func() {
		e.wg.Wait()
		close(e.stopped)
	}()
	return nil
}

// newCursorCache creates the consumer cache the readers' cursors live in.
// onHigh (nil in a bounded run) hears of each fetch's high watermark.
func (s starter) newCursorCache(cl *cluster, onHigh func(string, int32, int64)) (*cache.Cache, error) {
	ccfg := cache.Config{
		// The cursors read through the listings' client (cluster, or the
		// group member's with Membership). That is one client, not two. A
		// cursor's fetches go on that client's fetch connection, its
		// metadata and listings on the other, and listings (ListOffsets,
		// Metadata) are answered at once, never held like a fetch's long
		// poll, so a cursor learning its leader waits behind no held
		// request.
		Client:                 cl.cl,
		Capacity:               s.cfg.Fetch.CacheCapacity,
		IdleTimeout:            s.cfg.Fetch.CacheIdleTimeout,
		ReadCommitted:          s.cfg.Fetch.ReadCommitted,
		FetchMaxBytes:          s.cfg.Fetch.MaxBytes,
		FetchMaxPartitionBytes: s.cfg.Fetch.MaxPartitionBytes,
		RoundBytes:             s.cfg.Fetch.RoundBytes,
		FetchMaxWait:           s.cfg.Fetch.MaxWait,
		FetchMinBytes:          s.cfg.Fetch.MinBytes,
		Rack:                   s.cfg.Fetch.RackID,
		FetchConnections:       s.cfg.Fetch.Connections,
		// Each broker's measured round trip and whether its backlog reads
		// use more connections, once per broker.
		Logger: s.log.Logger,
		// Options of the clients the cache creates, its backlog lanes'.
		ClientOpts: append(s.kafka.opts(s.log, "lane"), s.cfg.ClientOpts...),
	}
	ccfg.OnHigh = onHigh
	return cache.New(ccfg)
}

// installLocked sets up what a started engine reads with. That is the
// clients, the planner and tracker, the partition table as Start listed it, the topics'
// IDs.
func (e *Engine) installLocked(p plan, cl *cluster, c *cache.Cache) {
	e.kafka.cluster, e.group.offsets, e.kafka.cache = cl, p.offsets, c
	// Partitions resume from the group's committed offsets, except without
	// membership under reset_offsets (its partitions are fixed). With
	// membership the replay resets the group's offsets once, when it starts
	// (resetGroup), and every assignment after that resumes from what the
	// group committed since.
	e.group.resumes = p.offsets != nil && (!e.cfg.Group.ResetOffsets || e.cfg.Group.Membership)
	if p.offsets != nil {
		e.group.committer = p.offsets // a nil *group.Offsets would make a non-nil interface
	}
	e.parts.planner = ranges.NewPlanner(e.cfg.MaxRangeRecords)
	e.parts.tracker = ranges.NewTracker()
	if e.cfg.AlignRanges {
		// A bounded run's ends are targets. Its last range is cut there.
		// A continuous run's ends grow. A block waits until it is complete.
		mode := ranges.WholeBlocks
		if e.cfg.StopAtEnd {
			mode = ranges.CutAtEnd
		}
		e.parts.planner = ranges.NewAlignedPlanner(e.cfg.MaxRangeRecords, mode)
		e.parts.tracker = ranges.NewWholeRangeTracker()
	}
	e.parts.listedAtStart(p)
	e.parts.founding = p.founding
	e.kafka.topicIDs = p.ids
	if e.kafka.topicIDs == nil {
		e.kafka.topicIDs = map[string][16]byte{}
	}
	e.sched.found = p.found
	if !e.cfg.StopAtEnd {
		e.sched.missing = p.missing // waited for
	}
	for name, id := range e.kafka.topicIDs {
		c.SetTopicID(name, id)
	}
	e.out.batches = make(chan *Batch)
	e.stats.startedAt = time.Now()
	e.sched.baseCtx, e.sched.baseCancel = context.WithCancel(context.Background())
}

// startPartitionsLocked starts (or queues for their watermarks) the
// partitions Start listed to read now. It returns the committed offsets
// that can no longer be read, the partitions start_from committed leaves
// unread, and what the start log line says.
func (e *Engine) startPartitionsLocked(p plan) (losses []error, skipped []ranges.Key, reading startSummary) {
	defer e.kafka.holdRounds(len(p.keys))()
	for _, k := range p.keys {
		m, ok := p.marks[k]
		if !ok {
			e.failLocked(e.parts.transition(k, evQueued, change{from: fromConfig}))
			continue
		}
		if skip, err := e.parts.skipUncommitted(k, fromConfig); skip {
			e.failLocked(err) // a transition the table refused
			skipped = append(skipped, k)
			continue
		}
		if err := e.addPartitionLocked(k, m, fromConfig, e.parts.nextInc()); err != nil {
			losses = append(losses, err)
		}
	}
	for _, k := range p.keys {
		reading.note(&e.parts, e.log, k, fromConfig)
	}
	reading.unlisted = len(p.markErrs)
	return losses, skipped, reading
}

// holdRounds holds the cursors' fetch rounds (cache.Hold) while n
// partitions start, so that each broker's first round fetches them all. It
// returns the release.
func (c *clients) holdRounds(n int) func() {
	if n < 2 || c.cache == nil {
		return func() {}
	}
	return c.cache.Hold()
}

// newMember creates the group member (Membership), not joined yet. Its
// client is the one the listings and the cursors share from then on
// (internal/cache/doc.go says a member holds the connections of one
// franz-go group consumer).
func (s starter) newMember(ctx context.Context, p plan, h group.Handler) (*group.Member, error) {
	names := make([]string, len(s.cfg.Topics))
	for i, t := range s.cfg.Topics {
		names[i] = t.Name
	}
	if s.patterns != nil {
		names = p.found.names() // more are added as they match
	}
	return group.New(ctx, group.MemberConfig{
		Seeds: s.cfg.Seeds, ClientOpts: slices.Concat(s.kafka.opts(s.log, "group"), s.cfg.ClientOpts), Group: s.cfg.Group.Name,
		Topics: names,
		GroupOpts: append([]kgo.Opt{
			// The group's leader sees partitions added to the topics when
			// it refreshes metadata, and then rebalances them in.
			kgo.MetadataMaxAge(max(5*time.Second, s.cfg.PollInterval)),
			// The listings' (newCluster).
			kgo.MetadataMinAge(listingMetadataMinAge),
		}, s.cfg.Group.Opts...),
		Joining: func(protocol, assignor string) {
			s.log.Infof("Group %q: this member runs the %s group protocol%s", s.cfg.Group.Name, protocol, strings.TrimRight(" "+assignor, " "))
		},
	}, h)
}

// closeCache closes c, if any, for a Start that failed.
func closeCache(ctx context.Context, c *cache.Cache) {
	if c != nil {
		_ = c.Close(ctx)
	}
}

// closeMember closes a member that never joined, if any.
func closeMember(ctx context.Context, m *group.Member) {
	if m != nil {
		_ = m.Close(ctx)
	}
}

// joinGroup joins the group (Membership) through m. Partitions come with
// assignments from now on.
func (e *Engine) joinGroup(m *group.Member) {
	var mc committer = m
	switch {
	case e.cfg.sharesCuts():
		mc = metaCommitter{committer: m, mu: &e.mu, meta: e.parts.cutMetadata}
	case !e.cfg.AlignRanges:
		mc = metaCommitter{committer: m, mu: &e.mu, meta: e.parts.ackedMetadata}
	}
	e.mu.Lock()
	e.group.member, e.group.committer = m, mc
	for name, id := range e.kafka.topicIDs {
		m.SetTopicID(name, id)
	}
	if e.cfg.Group.wrapCommitter != nil {
		e.group.committer = e.cfg.Group.wrapCommitter(mc)
	}
	e.mu.Unlock()
	m.Join()
}

// report stops the engine (fail) on a mistake Start found, or logs what it
// reads.
func (s starter) report(p plan, losses []error, skipped []ranges.Key, reading startSummary, fail func(error)) {
	switch {
	case p.fatal != nil:
		fail(p.fatal)
	case len(losses) > 0:
		fail(errors.Join(losses...))
	case s.cfg.Group.Membership: // logged before joining
	default:
		s.log.Infof("Reading %s from %s (%s): %s",
			reading.partitions(), strings.Join(s.cfg.Seeds, ","), s.cfg.modeString(), reading.detail())
		for _, k := range sortedKeys(p.markErrs) {
			s.log.Warnf("Partition %s is not readable yet, retrying every %s: %v", k, s.cfg.PollInterval, p.markErrs[k])
		}
		s.log.warnUncommitted(s.cfg.Group.Name, skipped)
	}
	s.log.warnMissing(s.cfg, p.missing)
	if s.cfg.Group.ResetOffsets && !s.cfg.Group.Membership {
		s.log.Infof("reset_offsets: every partition starts at start_from, whatever group %q committed", s.cfg.Group.Name)
	}
}

// Summary returns what the engine did so far.
func (e *Engine) Summary() Summary {
	e.mu.Lock()
	startedAt, c := e.stats.startedAt, e.kafka.cache
	e.mu.Unlock()
	s := Summary{Acked: e.stats.acked.Load(), Records: e.stats.records.Load(), Bytes: e.stats.bytes.Load(), Ranges: e.stats.ranges.Load(), Lost: e.stats.lost.Load(), Stale: e.stats.stale.Load(), Dropped: e.stats.dropped.Load()}
	if !startedAt.IsZero() {
		s.Elapsed = time.Since(startedAt)
		if f := e.stats.firstOut.Load(); f != 0 {
			s.FirstOut = time.Unix(0, f).Sub(startedAt)
			s.LastOut = time.Unix(0, e.stats.lastOut.Load()).Sub(startedAt)
		}
		p := e.Progress()
		s.Done, s.Total = p.Done, p.Total
	}
	e.mu.Lock()
	s.Bounded = e.cfg.StopAtEnd
	s.Ended = e.sched.reachedEnd && e.parts.nPending == 0 && e.fatal == nil
	e.mu.Unlock()
	if c != nil {
		s.Cache = c.Stats()
	}
	return s
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
