package plugin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// Summary describes what one input did, reported when it closes.
type Summary struct {
	Records int64         // records emitted
	Bytes   int64         // value bytes emitted
	Ranges  int64         // ranges completed (read and acknowledged)
	Elapsed time.Duration // from Connect to Close
	Cache   cache.Stats   // the consumer cache's counters at close
}

// String formats the summary as one log line.
func (s Summary) String() string {
	secs := s.Elapsed.Seconds()
	var mbps, rps float64
	if secs > 0 {
		mbps = float64(s.Bytes) / 1e6 / secs
		rps = float64(s.Records) / secs
	}
	return fmt.Sprintf("%d records (%.1f MB of values) in %d ranges in %s: %.1f MB/s, %.0f records/s; cache: %d continuations, %d seeks, %d new clients, %d evictions, %d invalidations",
		s.Records, float64(s.Bytes)/1e6, s.Ranges, s.Elapsed.Round(time.Millisecond), mbps, rps,
		s.Cache.Continuations, s.Cache.Seeks, s.Cache.NewClients, s.Cache.EvictionsIdle+s.Cache.EvictionsCapacity, s.Cache.Invalidations)
}

// Options change how Register builds inputs.
type Options struct {
	// OnClose, if set, is called with each input's summary when it closes.
	OnClose func(Summary)
	// OnFailure, if set, is called when an input that stopped on an error
	// (data loss, a missing topic in a bounded run) closes. The global
	// environment's registration records it for Err.
	OnFailure func(error)
}

var failure struct {
	mu  sync.Mutex // guards err
	err error
}

// Err returns the first error that stopped a kafka_batched_ranges input of
// the global environment in this process (data loss, a missing topic in a
// bounded run), or nil, once that input has closed. The connect
// binary exits non-zero when it is set, so a bounded run that stopped early
// never looks like success.
func Err() error {
	failure.mu.Lock()
	defer failure.mu.Unlock()
	return failure.err
}

func recordFailure(err error) {
	failure.mu.Lock()
	defer failure.mu.Unlock()
	if failure.err == nil {
		failure.err = err
	}
}

func init() {
	if err := Register(service.GlobalEnvironment(), Options{OnFailure: recordFailure}); err != nil {
		panic(err)
	}
}

// Register adds the kafka_batched_ranges input to env.
func Register(env *service.Environment, opts Options) error {
	return env.RegisterBatchInput(InputName, Spec(), func(pc *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
		conf, err := ParseConfig(pc)
		if err != nil {
			return nil, err
		}
		return newInput(conf, mgr.Logger(), opts), nil
	})
}

// input is the kafka_batched_ranges BatchInput. Connect starts two
// goroutines, the scheduler and the committer, and the scheduler starts one
// reader goroutine per range in flight; all stop through shut and are waited
// for by Close.
type input struct {
	conf Config
	log  *service.Logger
	opts Options

	mu        sync.Mutex // guards the fields down to the blank line
	connected bool
	planner   *ranges.Planner
	tracker   *ranges.Tracker
	inflight  int                       // ranges holding a max_in_flight slot (see scheduler.go)
	reading   int                       // ranges still being read
	parts     map[ranges.Key]*partition // every partition being planned
	fatal     error                     // the error that stopped the input
	lastWarn  map[string]time.Time      // rate limit of repeated warnings
	skip      func(k ranges.Key) bool   // planner filter (ordered mode)

	replay   []*emitted // nacked batches due for another delivery, oldest first
	unacked  int        // batches emitted and not yet acknowledged (replays included)
	readOver bool       // batches is closed: nothing new will be read

	cluster   *cluster
	cache     *cache.Cache
	batches   chan *emitted // reader -> ReadBatch; closed once no reader is left and nothing more will be read
	replayed  chan struct{} // buffered 1: a batch was queued for replay or acknowledged
	wake      chan struct{} // buffered 1: a range finished reading, was acknowledged or released
	commitNow chan struct{} // buffered 1: every slot is held by ranges waiting for a commit
	building  chan struct{} // semaphore: readers building a batch or holding one for ReadBatch
	shut      *shutdown.Signaller
	wg        sync.WaitGroup // the scheduler and the committer
	started   time.Time

	records, bytes, done atomic.Int64
	closeOnce            sync.Once
	closeErr             error
	connectFailures      int // consecutive failed Connect calls (Benthos calls Connect from one goroutine)
}

// emitted is a batch on its way to ReadBatch. A nacked batch is delivered
// again, whole, until it is acknowledged.
type emitted struct {
	batch    service.MessageBatch // built by the reader when sent; handed out on the first delivery
	recs     []*kgo.Record        // the batch's records, rebuilt into messages for a replay
	r        ranges.Range
	ack      func() // the batch is done
	attempts int    // deliveries so far
}

func newInput(conf Config, log *service.Logger, opts Options) *input {
	return &input{
		conf:      conf,
		log:       log,
		opts:      opts,
		wake:      make(chan struct{}, 1),
		commitNow: make(chan struct{}, 1),
		building:  make(chan struct{}, runtime.GOMAXPROCS(0)),
		replayed:  make(chan struct{}, 1),
		shut:      shutdown.NewSignaller(),
	}
}

// clientOpts are the franz-go options every client of this input uses, the
// admin client and every cached consumer alike (TLS and SASL go here).
func (in *input) clientOpts() []kgo.Opt {
	return in.conf.ClientOpts()
}

// connectTimeout bounds the listing done by Connect, so an unreachable broker
// gives a clear error that Benthos retries with backoff.
const connectTimeout = 15 * time.Second

// Connect lists the selected partitions and their watermarks, decides where
// each starts, and starts reading.
func (in *input) Connect(ctx context.Context) error {
	in.mu.Lock()
	connected := in.connected
	in.mu.Unlock()
	if connected {
		return nil
	}
	if in.shut.IsSoftStopSignalled() {
		return service.ErrEndOfInput
	}

	cl, err := newCluster(in.conf, append([]kgo.Opt{kgo.SeedBrokers(in.conf.SeedBrokers...)}, in.clientOpts()...))
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	starts, ends, committed, fatal, err := in.plan(cctx, cl)
	if errors.Is(err, errMissing) && in.conf.StopAt == stopEnd {
		// A bounded run has nothing to wait for: a missing topic or
		// partition is a mistake in the config, not a passing state.
		fatal, err = err, nil
	}
	if err != nil {
		cl.close()
		// Benthos retries Connect at most a second apart; back off further
		// so an unreachable cluster gives a line every few seconds, not a
		// flood.
		in.connectFailures++
		wait := min(time.Duration(1<<min(in.connectFailures-1, 4))*time.Second, 10*time.Second)
		return service.NewErrBackOff(security.Explain(err, in.conf.Security, in.conf.SeedBrokers), wait)
	}
	in.connectFailures = 0
	c, err := cache.New(cache.Config{
		Seeds:                  in.conf.SeedBrokers,
		ClientOpts:             in.clientOpts(),
		Capacity:               in.conf.CacheCapacity,
		IdleTimeout:            in.conf.CacheIdleTimeout,
		ReadCommitted:          in.conf.ReadCommitted,
		FetchMaxBytes:          in.conf.FetchMaxBytes,
		FetchMaxPartitionBytes: in.conf.FetchMaxPartitionBytes,
	})
	if err != nil {
		cl.close()
		return err
	}

	planner := ranges.NewPlanner(in.conf.MaxRangeRecords)
	tracker := ranges.NewTracker()
	parts := map[ranges.Key]*partition{}
	for k, start := range starts {
		if err := planner.Add(k, start, ends[k]); err != nil {
			cl.close()
			_ = c.Close(ctx)
			return fmt.Errorf("plan %s: %w", k, err)
		}
		if err := tracker.Start(k, start); err != nil {
			cl.close()
			_ = c.Close(ctx)
			return fmt.Errorf("track %s: %w", k, err)
		}
		c, ok := committed[k]
		if !ok {
			c = -1
		}
		parts[k] = newPartition(start, c)
	}

	in.mu.Lock()
	in.connected = true
	in.cluster, in.cache = cl, c
	in.planner, in.tracker, in.parts = planner, tracker, parts
	in.lastWarn = map[string]time.Time{}
	in.skip = func(k ranges.Key) bool { return in.conf.Ordered && len(in.parts[k].open) > 0 }
	in.batches = make(chan *emitted)
	in.started = time.Now()
	in.mu.Unlock()

	if fatal != nil {
		in.fail(fatal)
	} else {
		in.log.Infof("Reading %d partitions of %s from %s (start_from %s, stop_at %s, %d offsets to read now)",
			len(starts), topicList(in.conf.Topics), strings.Join(in.conf.SeedBrokers, ","), in.conf.StartFrom, in.conf.StopAt, pendingTotal(planner))
	}
	in.wg.Add(1)
	go in.schedule()
	if in.conf.ConsumerGroup != "" {
		in.wg.Add(1)
		go in.commitLoop()
	}
	return nil
}

// plan lists partitions and watermarks and returns each partition's start
// and end offsets and the group's committed offsets. fatal reports data
// that can never be read (committed offsets below the log start or past
// the end); err is a failure worth retrying.
func (in *input) plan(ctx context.Context, cl *cluster) (starts, ends, committed map[ranges.Key]int64, fatal, err error) {
	keys, err := cl.resolve(ctx, in.conf.Topics)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	wm, err := cl.watermarks(ctx, keys)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	committed = map[ranges.Key]int64{}
	if in.conf.ConsumerGroup != "" {
		if committed, err = cl.committed(ctx, keys); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	starts = make(map[ranges.Key]int64, len(keys))
	ends = make(map[ranges.Key]int64, len(keys))
	var fatals []error
	for _, k := range keys {
		m := wm[k]
		start := m.start
		switch in.conf.StartFrom {
		case startLatest:
			start = m.end
		case startCommitted:
			if c, ok := committed[k]; ok {
				switch {
				case c < m.start:
					fatals = append(fatals, fmt.Errorf("%s: group %q committed offset %d but the log now starts at %d: offsets [%d, %d) were deleted before they were read", k, in.conf.ConsumerGroup, c, m.start, c, m.start))
					continue // neither read nor committed: the group keeps its offset
				case c > m.end:
					fatals = append(fatals, fmt.Errorf("%s: group %q committed offset %d is past the partition's end %d: the log was truncated or the topic recreated", k, in.conf.ConsumerGroup, c, m.end))
					continue
				default:
					start = c
				}
			}
		}
		starts[k], ends[k] = start, max(start, m.end)
	}
	return starts, ends, committed, errors.Join(fatals...), nil
}

// ReadBatch returns the next batch of some range, or a rejected batch due
// for replay. It returns service.ErrEndOfInput once nothing more will be read
// and every batch is acknowledged: with stop_at: end after the last range, or
// after an error stopped the input.
func (in *input) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	in.mu.Lock()
	ch := in.batches
	in.mu.Unlock()
	if ch == nil {
		return nil, nil, service.ErrNotConnected
	}
	for {
		in.mu.Lock()
		if len(in.replay) > 0 {
			e := in.replay[0]
			in.replay = in.replay[1:]
			in.mu.Unlock()
			return in.deliver(e)
		}
		over, unacked := in.readOver, in.unacked
		in.mu.Unlock()
		if over && unacked == 0 {
			return nil, nil, service.ErrEndOfInput
		}
		if over {
			ch = nil // wait for acks and replays only
		}
		select {
		case e, ok := <-ch:
			if !ok {
				in.mu.Lock()
				in.readOver = true
				in.mu.Unlock()
				continue
			}
			return in.deliver(e)
		case <-in.replayed:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// deliver hands e to Benthos. On a nack with auto_replay_nacks the batch
// is queued for another delivery after a backoff; without it the nack
// counts as an acknowledgement (Benthos' contract: the messages are
// dropped).
func (in *input) deliver(e *emitted) (service.MessageBatch, service.AckFunc, error) {
	e.attempts++
	var once atomic.Bool
	ack := func(_ context.Context, err error) error {
		if once.Swap(true) {
			return nil
		}
		if err == nil || !in.conf.AutoReplayNacks {
			in.mu.Lock()
			in.unacked--
			in.mu.Unlock()
			e.ack()
			in.signalReplay()
			return nil
		}
		wait := min(time.Duration(e.attempts)*100*time.Millisecond, 5*time.Second)
		in.warn("nack", "Batch of %d messages of %s rejected (%v); delivering it again in %s", len(e.recs), e.r, err, wait)
		time.AfterFunc(wait, func() {
			in.mu.Lock()
			in.replay = append(in.replay, e)
			in.mu.Unlock()
			in.signalReplay()
		})
		return nil
	}
	if e.attempts == 1 {
		batch := e.batch
		e.batch = nil // processors may mutate it; a replay rebuilds from recs
		return batch, ack, nil
	}
	batch := newBatch(e.recs, e.r)
	return batch, ack, nil
}

func (in *input) signalReplay() {
	select {
	case in.replayed <- struct{}{}:
	default:
	}
}

// fail stops the input with err: nothing more is planned or read, what was
// acknowledged is committed, ReadBatch ends the input and the process exits
// non-zero.
func (in *input) fail(err error) {
	in.mu.Lock()
	in.failLocked(err)
	in.mu.Unlock()
}

func (in *input) failLocked(err error) {
	if in.fatal != nil {
		return
	}
	in.fatal = err
	in.log.Errorf("Input stopped: %v", err)
	in.signal()
}

// warn logs a warning, at most once per 10 seconds per key, so a broker
// outage gives a clear line per partition and not a flood.
func (in *input) warn(key, format string, args ...any) {
	in.mu.Lock()
	last, seen := in.lastWarn[key]
	now := time.Now()
	if seen && now.Sub(last) < 10*time.Second {
		in.mu.Unlock()
		return
	}
	in.lastWarn[key] = now
	in.mu.Unlock()
	in.log.Warnf(format, args...)
}

// Close stops planning and reading, waits for the goroutines, commits the
// acknowledged frontier one last time, and closes every client. Safe to call
// twice.
func (in *input) Close(ctx context.Context) error {
	in.closeOnce.Do(func() { in.closeErr = in.close(ctx) })
	return in.closeErr
}

func (in *input) close(ctx context.Context) error {
	in.shut.TriggerSoftStop()
	in.mu.Lock()
	connected := in.connected
	in.mu.Unlock()
	if !connected {
		return nil
	}
	stopped := make(chan struct{})
	go func() {
		in.wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		return fmt.Errorf("close: goroutines still running: %w", ctx.Err())
	}

	var errs []error
	if err := in.finalCommit(ctx); err != nil {
		// Benthos drops Close's error, so report it here: the progress of
		// this run is not stored and the process must not look successful.
		err = fmt.Errorf("final commit of acknowledged offsets to group %q failed, the next run will read them again: %w", in.conf.ConsumerGroup, err)
		in.log.Errorf("%v", err)
		in.mu.Lock()
		if in.fatal == nil {
			in.fatal = err
		}
		in.mu.Unlock()
		errs = append(errs, err)
	}
	if err := in.cache.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close consumer cache: %w", err))
	}
	in.cluster.close()

	sum := in.summary()
	in.log.Infof("Closed: %s", sum)
	if in.opts.OnClose != nil {
		in.opts.OnClose(sum)
	}
	in.mu.Lock()
	fatal := in.fatal
	in.mu.Unlock()
	if fatal != nil && in.opts.OnFailure != nil {
		in.opts.OnFailure(fatal)
	}
	return errors.Join(errs...)
}

func (in *input) summary() Summary {
	in.mu.Lock()
	started := in.started
	in.mu.Unlock()
	return Summary{
		Records: in.records.Load(),
		Bytes:   in.bytes.Load(),
		Ranges:  in.done.Load(),
		Elapsed: time.Since(started),
		Cache:   in.cache.Stats(),
	}
}

// isFatal reports errors that retrying cannot fix: data that no longer
// exists, a topic recreated under the reader. A missing partition is retried
// (brokers answer so while starting up).
func isFatal(err error) bool {
	return errors.Is(err, cache.ErrOffsetOutOfRange) || errors.Is(err, cache.ErrTopicRecreated)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func topicList(ts []TopicSpec) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

func pendingTotal(p *ranges.Planner) int64 {
	var n int64
	for _, k := range p.Keys() {
		n += p.Pending(k)
	}
	return n
}
