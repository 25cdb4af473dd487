package cache

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// repeat returns n copies of a.
func repeat[T any](a T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = a
	}
	return out
}

// TestDistanceRule walks the rule that judges a broker distant or near
// (brokerRTT, the package's Distance) through sequences of answers: only
// rttSamples (6) quiet answers at LaneMinRTT or more with no fast one make a
// broker distant (an answer is quiet when it took LaneMinRTT and 8 times
// the local delay measured around it more); one fast answer makes it
// near, during a measure or
// after; the least answer decides, not the last or the first; a failed or
// busy measure keeps the verdict; a broker judged distant is made near
// only by an answer under 3/4 of LaneMinRTT (hysteresis).
func TestDistanceRule(t *testing.T) {
	const minRTT = 2 * time.Millisecond
	type answer struct {
		took  time.Duration
		local time.Duration // the process's own delay around it
	}
	slow := answer{5 * time.Millisecond, 50 * time.Microsecond}    // quiet, over LaneMinRTT
	busy := answer{40 * time.Millisecond, 5 * time.Millisecond}    // slowed by a busy machine: 40 < 2 + 8 × 5
	rare := answer{3 * time.Millisecond, 200 * time.Microsecond}   // 3 < 2 + 8 × 0.2: not quiet enough
	fast := answer{300 * time.Microsecond, 10 * time.Microsecond}  // under LaneMinRTT
	edge := answer{1800 * time.Microsecond, 10 * time.Microsecond} // under LaneMinRTT, over 3/4 of it
	far := answer{60 * time.Millisecond, 3 * time.Millisecond}     // a distant broker on a busy machine: 60 > 2 + 8 × 3
	tests := []struct {
		name    string
		distant bool          // the verdict before the measure
		answers []answer      // the measure's answers, in order
		failed  bool          // the measure ended with a failed request and no answer
		want    bool          // the verdict after it
		decided bool          // the measure has its verdict
		again   time.Duration // when the next measure is due, after the end
	}{
		{name: "quiet slow answers", answers: repeat(slow, rttSamples), want: true, decided: true, again: rttFresh},
		{name: "one slow answer", answers: []answer{slow}, want: false, again: rttRetry},
		{name: "five slow answers (the docs say six make a broker distant)", answers: repeat(slow, 5), want: false, again: rttRetry},
		{name: "a slow first answer, then a fast one", answers: []answer{slow, fast}, want: false, decided: true, again: rttFresh},
		{name: "a fast answer among slow ones", answers: []answer{slow, slow, fast, slow}, want: false, decided: true, again: rttFresh},
		{name: "slow answers of a busy machine", answers: repeat(busy, rttProbeMax), want: false, again: rttRetry},
		{name: "busy answers keep a distant verdict", distant: true, answers: repeat(busy, rttProbeMax), want: true, again: rttRetry},
		{name: "answers slow by little more than their local delay", answers: repeat(rare, rttProbeMax), want: false, again: rttRetry},
		{name: "a distant broker on a busy machine", answers: append([]answer{busy}, repeat(far, rttSamples)...), want: true, decided: true, again: rttFresh},
		{name: "a failed probe judges nothing", failed: true, want: false, again: laneRetry},
		{name: "a failed probe keeps a distant verdict", distant: true, failed: true, want: true, again: laneRetry},
		{name: "a near answer after a distant verdict", distant: true, answers: []answer{fast}, want: false, decided: true, again: rttFresh},
		{name: "hysteresis: an answer just under LaneMinRTT keeps a distant broker distant", distant: true, answers: repeat(edge, rttProbeMax), want: true, again: rttRetry},
		{name: "an answer just under LaneMinRTT makes an unjudged broker near", answers: []answer{edge}, want: false, decided: true, again: rttFresh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &brokerRTT{distant: tt.distant, judged: tt.distant}
			start := time.Now()
			r.start(start)
			least := time.Duration(0)
			for _, a := range tt.answers {
				r.note(a.took, minRTT, a.local)
				if least == 0 || a.took < least {
					least = a.took
				}
			}
			assert.Equal(t, tt.decided, r.decided(), "decided after %v", tt.answers)
			assert.Equal(t, least, r.least, "the least answer")
			end := start.Add(time.Second)
			r.conclude(end, tt.failed)
			assert.Equal(t, tt.want, r.distant, "distant after %v (was %v)", tt.answers, tt.distant)
			from := end
			if tt.decided {
				from = start
			}
			assert.Equal(t, from.Add(tt.again), r.again, "the next measure")
		})
	}

	// A fetch's answer between measures proves a distant broker near, and
	// a slow one proves nothing.
	r := &brokerRTT{distant: true, judged: true}
	r.note(50*time.Millisecond, minRTT, -1)
	assert.True(t, r.distant, "a slow fetch answer")
	assert.Zero(t, r.quiet, "a fetch answer counted towards distant")
	r.note(fast.took, minRTT, -1)
	assert.False(t, r.distant, "a fast fetch answer")
}

// measure runs one measure of broker 0's round trip through cc and
// returns what it concluded.
func measure(t *testing.T, cc *Cache) brokerRTT {
	t.Helper()
	cc.mu.Lock()
	b := cc.brokerLocked(0)
	if r := b.rtt; r != nil {
		r.again = time.Time{} // due now
	}
	b.measure()
	cc.mu.Unlock()
	var got brokerRTT
	require.Eventually(t, func() bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		got = *b.rtt
		return !got.probing
	}, 20*time.Second, time.Millisecond, "the measure did not end")
	return got
}

// judge measures broker 0's round trip through cc until a measure judges
// it (a busy machine's measures may judge nothing), at most 10 times.
func judge(t *testing.T, cc *Cache) brokerRTT {
	t.Helper()
	var r brokerRTT
	for range 10 {
		if r = measure(t, cc); r.judged {
			break
		}
		t.Logf("a measure judged nothing: %d answers, least %s, %d quiet", r.answers, r.least, r.quiet)
	}
	return r
}

// delayAnswers makes c answer every request delay.Load() late (in its run
// loop, so one after the other: these tests send few), and fail the
// probes' requests (metadata without topics) while fail is set.
func delayAnswers(c *kfake.Cluster, delay *atomic.Int64, fail *atomic.Bool) {
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(time.Duration(delay.Load()))
		if m, ok := req.(*kmsg.MetadataRequest); ok && len(m.Topics) == 0 && fail != nil && fail.Load() {
			return nil, errors.New("probe refused"), true // kfake closes the connection
		}
		return nil, nil, false
	})
}

// TestLoopbackBrokerIsNearWithTheCPUSaturated (issue 50): with every P of
// the process busy (goroutines that never block, twice GOMAXPROCS of
// them), Go polls the network only every 10 ms or so, and every answer of
// kfake on loopback takes 20 to 150 ms: such answers are not quiet, so no
// measure makes the broker distant (the measure before took its least
// answer, one probe of three sent at once, and judged it 60 ms away).
// Once the CPU is free again, a measure judges it near.
func TestLoopbackBrokerIsNearWithTheCPUSaturated(t *testing.T) {
	c := newCluster(t, 1, 0)
	cc := newCache(t, c, nil)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for x := 0; !stop.Load(); x++ {
			}
		})
	}
	var judged []brokerRTT
	for range 2 {
		judged = append(judged, measure(t, cc))
	}
	stop.Store(true)
	wg.Wait()
	for i, r := range judged {
		t.Logf("measure %d with the CPU saturated: %d answers, least %s, %d quiet at LaneMinRTT or more, distant %v", i, r.answers, r.least, r.quiet, r.distant)
		assert.False(t, r.distant, "measure %d judged kfake on loopback distant with the CPU saturated", i)
	}
	r := judge(t, cc)
	t.Logf("measure with the CPU free: %d answers, least %s", r.answers, r.least)
	assert.False(t, r.distant, "kfake on loopback judged distant")
	assert.True(t, r.judged, "kfake on loopback not judged near with the CPU free")
}

// TestDistantBrokerIsDistant: a broker whose answers all come 10 ms late is
// judged distant after rttSamples of them, and a lease of its partition
// says so (Lease.Distant); with the CPU saturated too, it is never judged
// near (its answers are no faster than 10 ms).
func TestDistantBrokerIsDistant(t *testing.T) {
	c := newCluster(t, 1, 10)
	var delay atomic.Int64
	delay.Store(int64(10 * time.Millisecond))
	delayAnswers(c, &delay, nil)
	cc := newCache(t, c, nil)
	r := judge(t, cc)
	t.Logf("%d answers, least %s, %d quiet", r.answers, r.least, r.quiet)
	require.True(t, r.distant, "a broker answering 10 ms late judged near")
	assert.GreaterOrEqual(t, r.least, 10*time.Millisecond)
	assert.Equal(t, rttSamples, r.quiet, "quiet probe answers")

	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	defer l.Release(nil)
	assert.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
	assert.True(t, l.Distant(), "a lease of a distant broker's partition")
	cc.mu.Lock()
	assert.True(t, cc.brokers[0].lanesOpen(), "no lanes to a distant broker")
	cc.mu.Unlock()
}

// TestOneSlowProbeAnswerKeepsABrokerNear: the first answer of a measure
// comes 10 ms late (a pause of the broker, a busy moment that the gauge
// missed), the others at once: the least answer decides, so the broker is
// near (the measure before sent three probes at once, which all waited
// behind the first, and judged it distant).
func TestOneSlowProbeAnswerKeepsABrokerNear(t *testing.T) {
	c := newCluster(t, 1, 0)
	var probes atomic.Int64
	c.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if len(req.(*kmsg.MetadataRequest).Topics) == 0 && probes.Add(1) == 1 {
			time.Sleep(10 * time.Millisecond)
		}
		return nil, nil, false
	})
	cc := newCache(t, c, nil)
	r := judge(t, cc)
	t.Logf("%d answers, least %s, %d quiet", r.answers, r.least, r.quiet)
	assert.False(t, r.distant, "one slow answer made the broker distant")
	assert.True(t, r.judged, "the broker not judged near")
	assert.Less(t, r.least, defaultLaneMinRTT, "the least answer")
}

// TestFailedProbeJudgesNothing: a measure whose probe fails (the broker
// closes the connection) judges nothing: a broker not judged yet stays
// near, one judged distant stays distant, and the next measure comes
// laneRetry later.
func TestFailedProbeJudgesNothing(t *testing.T) {
	for _, distant := range []bool{false, true} {
		t.Run(fmt.Sprintf("distant=%v", distant), func(t *testing.T) {
			c := newCluster(t, 1, 0)
			var delay atomic.Int64
			var fail atomic.Bool
			delay.Store(int64(10 * time.Millisecond))
			delayAnswers(c, &delay, &fail)
			cc := newCache(t, c, nil)
			if distant {
				require.True(t, judge(t, cc).distant, "a broker answering 10 ms late")
			}
			fail.Store(true)
			before := time.Now()
			r := measure(t, cc)
			t.Logf("%d answers, least %s, %d quiet, next measure in %s", r.answers, r.least, r.quiet, time.Until(r.again))
			assert.Zero(t, r.answers, "answers of a failing probe")
			assert.Equal(t, distant, r.distant, "the verdict after a failed probe")
			assert.Equal(t, distant, r.judged, "judged after a failed probe")
			assert.False(t, r.again.Before(before.Add(laneRetry)), "the next measure after a failed probe comes in %s", r.again.Sub(before))
		})
	}
}

// TestNearReadAfterADistantVerdict: a broker judged distant whose fetch
// answers come fast again (the network healed, a closer replica took
// over) is near from the first such answer: leases of its partitions are
// no longer distant and no lane opens to it, without waiting for the next
// measure.
func TestNearReadAfterADistantVerdict(t *testing.T) {
	c := newCluster(t, 1, 0)
	produceN(t, c, 0, 100, 1000, kgo.ProducerBatchMaxBytes(1500)) // a record a batch
	var delay atomic.Int64
	delay.Store(int64(10 * time.Millisecond))
	delayAnswers(c, &delay, nil)
	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxPartitionBytes, cfg.LanePartitionBytes = 256, 256 }) // a batch a fetch, on a lane too
	require.True(t, judge(t, cc).distant, "a broker answering 10 ms late")

	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, seq(0, 20), readRange(t, l, 0, 20))
	require.True(t, l.Distant(), "a lease of a broker answering 10 ms late")
	delay.Store(0)
	assert.Equal(t, seq(20, 100), readRange(t, l, 20, 100))
	assert.False(t, l.Distant(), "a lease after fetches answered at once")
	l.Release(nil)
	st := cc.Stats()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	r := cc.brokers[0].rtt
	t.Logf("least %s, judged %v, distant %v; stats %+v", r.least, r.judged, r.distant, st)
	assert.False(t, cc.brokers[0].lanesOpen(), "lanes to a near broker")
	assert.Less(t, r.least, defaultLaneMinRTT*rttNearShare/4, "the least answer")
}

// lineLog is a logs.Logger that keeps its lines, per level.
type lineLog struct {
	mu    sync.Mutex
	lines map[string][]string
}

func (g *lineLog) add(level, format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lines == nil {
		g.lines = map[string][]string{}
	}
	g.lines[level] = append(g.lines[level], fmt.Sprintf(format, args...))
}

func (g *lineLog) Debugf(f string, a ...any) { g.add("debug", f, a...) }
func (g *lineLog) Infof(f string, a ...any)  { g.add("info", f, a...) }
func (g *lineLog) Warnf(f string, a ...any)  { g.add("warn", f, a...) }
func (g *lineLog) Errorf(f string, a ...any) { g.add("error", f, a...) }

func (g *lineLog) at(level string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.lines[level]...)
}

// TestBrokerVerdictIsLoggedOnce (issue 54): the first measure that judges
// a broker logs, at info level, its round trip and whether reads with a
// backlog use more fetch connections (lanes); later measures that agree
// log nothing, and one that changes the verdict logs at debug level.
func TestBrokerVerdictIsLoggedOnce(t *testing.T) {
	c := newCluster(t, 1, 10)
	var delay atomic.Int64
	delay.Store(int64(10 * time.Millisecond))
	delayAnswers(c, &delay, nil)
	var log lineLog
	cc := newCache(t, c, func(cfg *Config) { cfg.Logger = &log })
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, seq(0, 10), readRange(t, l, 0, 10)) // learns the broker's address
	l.Release(nil)

	for range 2 {
		require.True(t, judge(t, cc).distant, "a broker answering 10 ms late judged near")
	}
	require.Eventually(t, func() bool { return len(log.at("info")) > 0 }, 5*time.Second, time.Millisecond, "no line about the distant broker")
	info := log.at("info")
	require.Len(t, info, 1, "lines about the broker: %q", info)
	assert.Regexp(t, `^Broker 0 at 127\.0\.0\.1:\d+: round trip [0-9.]+ms measured, distant \(2ms or more\): reads with a backlog use up to 3 more fetch connections to it \(lanes\)$`, info[0])
	assert.Empty(t, log.at("debug"))

	delay.Store(0)
	require.False(t, judge(t, cc).distant, "a broker answering at once judged distant")
	require.Eventually(t, func() bool { return len(log.at("debug")) > 0 }, 5*time.Second, time.Millisecond, "no line about the verdict's change")
	assert.Len(t, log.at("info"), 1, "lines at info level")
	assert.Regexp(t, `^Broker 0 at 127\.0\.0\.1:\d+: round trip [0-9.µm]+s measured, near \(under 2ms\): reads use its one fetch connection$`, log.at("debug")[0])
}

// TestLongPollAnswersNeverMakeABrokerDistant (issue 52): which round trip
// decides distance. A caught-up follower's fetches are long polls the
// broker holds until FetchMaxWait (100 ms here): slow answers that measure
// the wait, not the round trip. The docs: "a slow answer counts only by
// what is left of it once the input's own delays are taken out", and only
// probes are timed so ("the first answer under 2 ms (a probe's, or any
// fetch's at any time) makes the broker near; 6 answers that took 2 ms and
// 8 times the input's own delay around them more ... make it distant").
// Here kfake on loopback holds the one probe of a measure for 1.5 s
// and then fails it, while the follower's long polls are answered, a
// dozen of them: the measure judges nothing, no long poll counted towards
// distant, and no lease of the partition is distant.
func TestLongPollAnswersNeverMakeABrokerDistant(t *testing.T) {
	c := newCluster(t, 1, 0) // empty: every fetch waits
	var probes atomic.Int64
	c.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if len(req.(*kmsg.MetadataRequest).Topics) > 0 {
			return nil, nil, false
		}
		probes.Add(1)
		c.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
		return nil, errors.New("probe refused"), true
	})
	cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxWait = 100 * time.Millisecond })
	cc.Watch(topic, 0, 0)
	require.Eventually(t, func() bool { return cc.Following(topic, 0) && cc.Stats().Fetches >= 2 }, 5*time.Second, time.Millisecond, "the follower does not long-poll")
	before := cc.Stats().Fetches
	r := measure(t, cc)
	polls := cc.Stats().Fetches - before
	t.Logf("long polls answered during the measure %d, probes %d; measure: %d answers, least %s, %d quiet, judged %v, distant %v", polls, probes.Load(), r.answers, r.least, r.quiet, r.judged, r.distant)
	require.GreaterOrEqual(t, polls, int64(rttSamples), "fewer long polls than a verdict needs answered during the measure: the test tests nothing")
	assert.Zero(t, r.answers, "probe answers")
	assert.Zero(t, r.quiet, "long-poll answers counted as quiet answers of the measure")
	assert.False(t, r.distant, "a broker on loopback judged distant from its long polls")
	l, err := cc.Acquire(t.Context(), topic, 0, 0)
	require.NoError(t, err)
	defer l.Release(nil)
	assert.False(t, l.Distant(), "a lease of a partition whose broker only long-polled")
}

// TestStalledBrokerIsNotDistant (issue 54): a measure sends a probe every
// rttSpacing without waiting for the answers before. The broker stalls
// 300 ms on the first: the probes sent meanwhile wait behind it, and their
// answers come together with it, having taken up to 275 ms each. Answers
// that come within rttSpacing/2 of the one before count only towards near
// (a distance spaces them as their requests were), so the answers after
// the stall, at once, judge the broker near. Counted as quiet, six of them
// would have judged it distant.
func TestStalledBrokerIsNotDistant(t *testing.T) {
	c := newCluster(t, 1, 0)
	var probes atomic.Int64
	c.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if len(req.(*kmsg.MetadataRequest).Topics) == 0 && probes.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond) // kfake's run loop: every request waits
		}
		return nil, nil, false
	})
	cc := newCache(t, c, nil)
	r := measure(t, cc)
	t.Logf("%d probes, %d answers, least %s, %d quiet, judged %v, distant %v", probes.Load(), r.answers, r.least, r.quiet, r.judged, r.distant)
	require.GreaterOrEqual(t, r.answers, 4, "answers: the stall held fewer probes than the test needs")
	assert.False(t, r.distant, "answers that waited together behind a stall made the broker distant")
	assert.True(t, r.judged, "the broker not judged near after the stall")
	assert.LessOrEqual(t, r.quiet, 1, "quiet answers: only the first of those that came together counts")
}
