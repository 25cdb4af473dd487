package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/internal/cache"
	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// Summary describes what one input did, reported when it closes.
type Summary = engine.Summary

// Progress is one progress report of a bounded read (Options.OnProgress):
// offsets acknowledged of the offsets to read, records delivered, and the
// rate and time left. Its String is the logged line.
type Progress = engine.Progress

// Options change how Register builds inputs. Each environment an input is
// registered in has its own, so two programs (or two streams) never share a
// failure.
type Options struct {
	// OnClose, if set, is called with each input's summary when it closes.
	OnClose func(Summary)
	// OnProgress, if set, receives each progress report of a bounded read
	// (every progress_interval), as logged.
	OnProgress func(Progress)
	// OnFailure, if set, is called when an input that stopped on an error
	// (data loss, a missing topic in a bounded run, a permanent error from
	// the cluster, a failed final commit) closes, and when a bounded run
	// closes before its end (ErrStoppedBeforeEnd: a signal, or the stream
	// ended by something else). Benthos ends a stream whose input ended
	// without an error of its own, so this is how a host program learns
	// that a run did not read everything: the connect binary exits 1, or 3
	// for ErrStoppedBeforeEnd.
	OnFailure func(error)
}

// ErrStoppedBeforeEnd is wrapped by the failure a bounded run (stop_at: end
// or a time window) reports when it closes before it read and had
// acknowledged every offset up to its end, with how many were not. What it
// acknowledged is committed (with a group), so running it again resumes.
var ErrStoppedBeforeEnd = errors.New("bounded run stopped before its end")

// init registers the input in Benthos' global environment with no options,
// so a blank import of this package adds it to any Benthos-based binary.
// Stopping errors are then logged at error level. A program that must exit
// non-zero on them runs RunCLI (as cmd/connect does), or registers the input
// in its own environment with Options.OnFailure.
func init() {
	if err := Register(service.GlobalEnvironment(), Options{}); err != nil {
		panic(err)
	}
}

// Register adds the kafka_batched_ranges input to env.
func Register(env *service.Environment, opts Options) error {
	return env.RegisterBatchInput(InputName, Spec(), func(pc *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
		mgr.Logger().Infof("%s input %s", InputName, Version)
		conf, err := ParseConfig(pc)
		if err != nil {
			return nil, err
		}
		if conf.Share.Group != "" {
			return newShareInput(conf, mgr, opts)
		}
		return newInput(conf, mgr, opts)
	})
}

// input adapts the engine to Benthos' BatchInput. Connect starts it,
// ReadBatch turns its batches into messages and acknowledgements into Ack or
// Nack, Close stops it and reports the summary and any stopping error.
type input struct {
	conf Config
	eng  *engine.Engine
	log  *service.Logger
	opts Options

	msgs     messages  // builds the messages of replayed batches, as the readers do
	batching *batching // cuts ranges into batches by the batching policy; nil without one
	keys     *keyOrder // ordering: key: hands out batches of one key bucket each; nil otherwise
	archives *archives // hands ranges out as archives (archive mode); nil in record mode
	// Benthos calls Connect from one goroutine. These are Connect's own.
	connectFailures  int       // consecutive failed Connect calls
	unfixable        int       // consecutive failed Connect calls that retrying cannot fix
	unreachableTries int       // consecutive Connect calls of a started engine that found no broker answering
	firstAttempt     time.Time // of Connect, for start_timeout
	startErr         error     // why a bounded run gave up starting; reported by Close
	reportOnce       sync.Once
}

func newInput(conf Config, res *service.Resources, opts Options) (*input, error) {
	log := res.Logger()
	warnInsecure(log, conf.Security)
	hc := newHeaderCollisions(log)
	ec := conf.engineConfig(log, hc)
	obs := newObserver(res.Metrics())
	ec.Hooks.Observer = obs
	ec.Hooks.OnProgress = opts.OnProgress
	eng, err := engine.New(ec)
	if err != nil {
		return nil, err
	}
	obs.cacheStats = func() cache.Stats { return eng.Summary().Cache } // before Start, which starts the reporter
	in := &input{conf: conf, eng: eng, log: log, opts: opts, msgs: conf.messages(hc)}
	if conf.Ordering == orderingKey {
		in.keys = newKeyOrder(conf, res, conf.messages(hc))
		return in, nil
	}
	if in.batching, err = newBatching(conf.Batching, res, conf.messages(hc), conf.Ordered); err != nil {
		return nil, err
	}
	in.archives = newArchives(conf.archiver(), log)
	return in, nil
}

// engineConfig translates the validated plugin config.
func (c Config) engineConfig(log *service.Logger, hc *headerCollisions) engine.Config {
	topics := make([]engine.TopicSpec, len(c.Topics))
	for i, t := range c.Topics {
		topics[i] = engine.TopicSpec{Name: t.Name, Partitions: t.Partitions, Offsets: t.Offsets}
	}
	from := map[string]engine.StartFrom{
		startEarliest:  engine.StartEarliest,
		startLatest:    engine.StartLatest,
		startCommitted: engine.StartCommitted,
		startTimestamp: engine.StartTimestamp,
	}[c.StartFrom]
	msgs := c.messages(hc)
	// Messages are built by the readers, in parallel, just before
	// ReadBatch takes them. In archive mode, the archives (plugin/archive.go),
	// in streaming mode as soon as the records are read.
	prepare := func(b *engine.Batch) any { return msgs.batch(b.Records, b.Range, b.High) }
	arch := c.archiver()
	if arch != nil {
		prepare = arch.prepare
	}
	return engine.Config{
		Seeds:              c.SeedBrokers,
		ClientOpts:         c.ClientOpts(),
		Topics:             topics,
		RegexpTopics:       c.RegexpTopics,
		ExcludeTopics:      c.ExcludeTopics,
		MetadataMaxAge:     c.MetadataMaxAge,
		StartFrom:          from,
		StopAtEnd:          c.StopAt == stopEnd || c.StopAt == stopTimestamp,
		StartMillis:        c.Policy.StartMillis,
		StopMillis:         c.Policy.StopMillis,
		SkipDataLoss:       c.Policy.SkipDataLoss,
		UnreachableTimeout: c.Policy.UnreachableTimeout,
		SkipMissingTopics:  c.Policy.SkipMissingTopics,
		MaxRangeRecords:    c.MaxRangeRecords,
		MaxInFlight:        c.MaxInFlight,
		PollInterval:       c.PollInterval,
		Ordered:            c.Ordered,
		AlignRanges:        c.AlignRanges,
		ReplayNacks:        c.AutoReplayNacks,
		RangeEnds:          (!c.Batching.IsNoop() && c.Ordering != orderingKey) || arch.streaming(), // batching and archives cut what is left of a range at its end
		Group: engine.GroupConfig{
			Name:               c.ConsumerGroup,
			Membership:         c.membership(),
			Opts:               c.Group.groupOpts(),
			RevokeDrainTimeout: c.Group.RevokeDrain,
			Settle:             c.settle(),
			ResetOffsets:       c.Group.ResetOffsets,
			CommitPeriod:       c.CommitPeriod,
		},
		Fetch: engine.FetchConfig{
			CacheCapacity:     c.CacheCapacity,
			CacheIdleTimeout:  c.CacheIdleTimeout,
			ReadCommitted:     c.ReadCommitted,
			MaxBytes:          c.FetchMaxBytes,
			MaxPartitionBytes: c.FetchMaxPartitionBytes,
			RoundBytes:        c.roundBytes(),
			MaxWait:           c.FetchMaxWait,
			MinBytes:          c.FetchMinBytes,
			Connections:       c.FetchConnections,
			RackID:            c.RackID,
		},
		Hooks: engine.Hooks{
			Logger:           log,
			ProgressInterval: c.ProgressInterval,
			Prepare:          prepare,
			PrepareEarly:     arch.streaming(), // the readers copy each batch into its range's archive as it is read, and release its values
		},
	}
}

// messages returns how the input builds its messages, reporting headers
// named like its metadata keys to hc.
func (c Config) messages(hc *headerCollisions) messages {
	return messages{rangeMeta: c.RangeMetadata, lagMeta: c.LagMetadata, bare: c.BareRecords, headers: hc}
}

// connectTimeout bounds the listing done by Connect, so an unreachable broker
// gives a clear error that Benthos retries with backoff.
const connectTimeout = 15 * time.Second

// unfixableAttempts is how many consecutive attempts fail on an error that
// retrying cannot fix before a bounded run stops: two, a second apart, so a
// broker still loading its credentials when the run starts is not taken for
// a wrong password.
const unfixableAttempts = 2

// Connect lists the selected partitions and their watermarks, decides where
// each starts, and starts reading. A bounded run (stop_at: end or
// timestamp) that cannot start stops instead of being retried for ever: at
// once on an error retrying cannot fix (authentication, authorisation,
// TLS), after start_timeout on others. Connect then returns
// service.ErrEndOfInput and Close reports the error (Options.OnFailure). A
// continuous run is retried, as Benthos retries inputs.
func (in *input) Connect(ctx context.Context) error {
	bounded := in.conf.StopAt != stopNever
	limit := in.conf.Policy.StartTimeout
	if in.firstAttempt.IsZero() {
		in.firstAttempt = time.Now()
	}
	timeout := connectTimeout
	if bounded && limit > 0 {
		timeout = min(timeout, max(time.Until(in.firstAttempt.Add(limit)), 100*time.Millisecond))
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := in.eng.Start(cctx)
	switch {
	case err == nil:
		in.connectFailures, in.unfixable = 0, 0
		return in.connected()
	case errors.Is(err, engine.ErrClosed):
		return service.ErrEndOfInput
	case ctx.Err() != nil:
		return err // Benthos is stopping the input: not a failure of the run
	}
	in.connectFailures++
	short, cannotFix := in.explain(err)
	in.log.Debugf("Connect attempt %d of kafka_batched_ranges failed: %v", in.connectFailures, security.Explain(err, in.conf.Security, in.conf.SeedBrokers))
	if cannotFix {
		in.unfixable++
	} else {
		in.unfixable = 0
	}
	switch {
	case bounded && in.unfixable >= unfixableAttempts:
		return in.giveUp(fmt.Errorf("%w; retrying cannot fix this, so the bounded run (stop_at: %s) stops", short, in.conf.StopAt))
	case bounded && limit > 0 && time.Since(in.firstAttempt) >= limit && !cannotFix:
		return in.giveUp(fmt.Errorf("could not start within start_timeout (%s) of the first attempt, so the bounded run (stop_at: %s) stops: %w", limit, in.conf.StopAt, short))
	}
	if cannotFix {
		short = fmt.Errorf("%w; retrying cannot fix this: it fails until the configuration or the cluster changes", short)
	}
	// Benthos retries Connect at most a second apart. Back off further so
	// an unreachable cluster gives a line every few seconds, not a flood.
	wait := min(time.Duration(1<<min(in.connectFailures-1, 4))*time.Second, 10*time.Second)
	if bounded && limit > 0 && !cannotFix {
		wait = max(min(wait, time.Until(in.firstAttempt.Add(limit))), 0)
	}
	return service.NewErrBackOff(short, wait)
}

// connected is Connect of a started engine: nil once a broker answers,
// ErrEndOfInput once the engine stopped (a bounded run whose brokers did
// not answer for unreachable_timeout: Close reports why), and while the
// engine says no broker answers (its log says "reported not ready") an
// error Benthos retries, so the input is reported not connected (/ready
// answers 503) until the engine says one answers again. ReadBatch returns
// ErrNotConnected to get here (readErr). A run whose reading has ended
// (every batch handed out is done) goes on to its end meanwhile. ReadBatch
// then ends the input.
func (in *input) connected() error {
	if in.eng.Err() != nil {
		return service.ErrEndOfInput
	}
	err := in.eng.Reachable()
	if err == nil || in.eng.Ended() {
		in.unreachableTries = 0
		return nil
	}
	in.unreachableTries++
	return service.NewErrBackOff(err, min(time.Duration(in.unreachableTries)*time.Second, 5*time.Second))
}

// explain returns the error a failed Start is logged with, in one line: for
// a TLS or SASL failure the explanation of what to change (the client's own
// error is logged at DEBUG), and whether retrying cannot fix it.
func (in *input) explain(err error) (error, bool) {
	exp := security.Explain(err, in.conf.Security, in.conf.SeedBrokers)
	cannotFix := engine.Permanent(err)
	for _, kind := range []error{security.ErrAuthentication, security.ErrSASLMismatch, security.ErrUntrustedCertificate, security.ErrTLSMismatch, security.ErrClientCertificate} {
		if errors.Is(exp, kind) {
			cannotFix = true
			// Explain writes its explanation, then ": " and err.
			if short, ok := strings.CutSuffix(exp.Error(), ": "+err.Error()); ok {
				return &shortened{msg: short, err: exp}, true
			}
		}
	}
	return exp, cannotFix
}

// shortened is an explained error logged without the client's error. Its
// message is the explanation, and it unwraps to the whole error.
type shortened struct {
	msg string
	err error
}

func (e *shortened) Error() string { return e.msg }
func (e *shortened) Unwrap() error { return e.err }

// giveUp ends a bounded run that cannot start. It logs err and keeps it for
// Close to report, and returns what makes Benthos end the input.
func (in *input) giveUp(err error) error {
	in.startErr = err
	in.log.Errorf("Input stopped: %v", err)
	return service.ErrEndOfInput
}

// ReadBatch returns the next batch of some range, or a rejected batch due
// for replay. It returns service.ErrEndOfInput once nothing more will be read
// and every batch is acknowledged: with stop_at: end after the last range, or
// after an error stopped the input.
func (in *input) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if in.keys != nil {
		batch, ack, err := in.keys.read(ctx, in.eng)
		return batch, ack, readErr(err)
	}
	if in.archives != nil {
		batch, ack, err := in.archives.read(ctx, in.eng)
		return batch, ack, readErr(err)
	}
	if in.batching != nil {
		batch, ack, err := in.batching.read(ctx, in.eng)
		return batch, ack, readErr(err)
	}
	b, err := in.eng.Next(ctx)
	if err != nil {
		return nil, nil, readErr(err)
	}
	batch, ok := b.Prepared.(service.MessageBatch)
	b.Prepared = nil // processors may mutate it; a replay rebuilds from the records
	if !ok || b.Attempts > 1 {
		batch = in.msgs.batch(b.Records, b.Range, b.High)
	}
	var once atomic.Bool // this delivery's ack runs once
	return batch, func(_ context.Context, err error) error {
		if once.Swap(true) {
			return nil
		}
		if err != nil {
			b.Nack(err)
		} else {
			b.Ack()
		}
		return nil
	}, nil
}

// resumeHint says where a run again of a bounded run stopped before its end
// starts: the group's committed offsets, or start_from without a group.
func (in *input) resumeHint() string {
	if in.conf.ConsumerGroup != "" {
		return fmt.Sprintf("run it again to resume from group %q's committed offsets", in.conf.ConsumerGroup)
	}
	return "nothing was committed (no consumer_group): a run again reads from start_from"
}

// readErr translates an error of the engine's Next into Benthos' contract.
func readErr(err error) error {
	switch {
	case errors.Is(err, engine.ErrNotStarted):
		return service.ErrNotConnected
	case errors.Is(err, engine.ErrEnd):
		return service.ErrEndOfInput
	case errors.Is(err, engine.ErrUnreachable):
		return service.ErrNotConnected // Connect waits for a broker (connected)
	}
	return err
}

// Close stops the engine, waiting for its goroutines and final commit as long
// as ctx allows, then reports the summary and any stopping error through
// Options (Benthos drops the error Close returns). Safe to call twice.
func (in *input) Close(ctx context.Context) error {
	err := in.eng.Close(ctx)
	in.reportOnce.Do(func() {
		if in.batching != nil {
			if berr := in.batching.close(ctx); berr != nil {
				in.log.Warnf("%v", berr)
			}
		}
		sum := in.eng.Summary()
		if sum.Bounded && !sum.Ended && in.eng.Err() == nil && in.startErr == nil {
			in.log.Warnf("Closed: %s; %s%s", sum, in.resumeHint(), lanesNote(sum.Cache))
		} else {
			in.log.Infof("Closed: %s%s", sum, lanesNote(sum.Cache))
		}
		if in.opts.OnClose != nil {
			in.opts.OnClose(sum)
		}
		failure := in.eng.Err()
		if failure == nil {
			failure = in.startErr
		}
		if failure == nil && err != nil {
			failure = fmt.Errorf("input did not close cleanly, acknowledged progress may not be committed: %w", err)
		}
		if failure == nil && sum.Bounded && !sum.Ended {
			failure = fmt.Errorf("%w: %s", ErrStoppedBeforeEnd, sum.Unfinished())
		}
		if failure != nil && in.opts.OnFailure != nil {
			in.opts.OnFailure(failure)
		}
	})
	return err
}

// roundBytes is what a fetch round asks of the ranges it reads in all, at
// the least (engine.FetchConfig.RoundBytes): with fetch_max_partition_bytes
// at its default value (written or not: Benthos fills in defaults), a
// broker's fetches ask 4 MiB of one partition being read, 2 MiB each of
// two, 1 MiB each of four or more. Any other value is what every range's
// fetch asks.
func (c Config) roundBytes() int32 {
	if c.FetchMaxPartitionBytes != defaultFetchMaxPartitionBytes {
		return 0
	}
	return cache.DefaultRoundBytes
}
