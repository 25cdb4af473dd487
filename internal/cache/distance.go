package cache

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Distance decides whether a broker is far enough for lanes (lanes.go) and
// for a partition's ranges to start at once (Lease.Distant). An answer
// never comes back sooner than the round trip to the broker. But a busy
// machine makes it come back later. That is another process on the CPU, or
// every P of this one busy. Then Go polls the network only every 10 ms or
// so, and every answer of a broker on loopback waits as long. Under -race
// we measured 40 µs quiet and 20 to 150 ms with the CPU saturated by
// goroutines. So
// a fast answer proves a broker near, and a slow one proves nothing by
// itself. It counts towards distant only by what is left of it past
// LaneMinRTT once the process's own delays around it are taken out, many
// times over, and only rttSamples such answers, with no fast one in the
// measure, make a broker distant.
//
// A measure (broker.probe) sends a metadata request without topics
// (answered at once) every rttSpacing, without waiting for the answers
// before, up to rttProbeMax. A broker far away answers them as far apart
// as they were sent. Answers that come together (under half rttSpacing
// apart) waited together, behind a stall of the broker process or of the
// connection, and count only towards near (bunched). So one stall slows
// one answer that counts, as when they went one after the other, each
// once the one before was answered, and a broker 100 ms away is judged in
// 250 ms, not 600. It sends them on the shared client's connection for
// everything but fetches, which holds no long poll. Around each one it times how late
// a goroutine woken by the network poller runs (wakeGauge, before and
// after). That is the local delay. An answer that took
// LaneMinRTT and rttLocalShare times its local delay more counts (a quiet
// answer). On a quiet machine the gauge takes tens of µs, so 2.5 ms
// counts. With every P busy it takes milliseconds, and so does each of the
// four or so wakes an answer waits for, so none counts. It ends at the
// first answer under the near bound (near), after rttSamples quiet
// answers (distant), or inconclusive (a busy machine, a failed request).
// Then the broker keeps its verdict (near until one is reached) and is
// measured again rttRetry later, laneRetry after a failed request. Every fetch answered
// by the broker is an answer too (its loop's and its lanes'), which can only
// prove it near. The verdict holds until the next conclusive measure,
// rttFresh after the last, or until an answer proves the broker near. A
// broker judged distant is proved near only by an answer under
// rttNearShare of LaneMinRTT. This hysteresis keeps one whose round trip
// hovers at LaneMinRTT from flipping with every measure.

const (
	// rttSamples is how many quiet probe answers, and none under the
	// near bound, make a broker distant.
	rttSamples = 6
	// rttSpacing is the time between the starts of two probe requests of
	// a measure. rttSamples quiet answers span 125 ms at least, and come
	// as far apart as they were sent. At 50 ms apart and one after the
	// other, each once the one before was answered, a measure of a broker
	// 50 ms away took 365 ms, a quarter of a 410 MB read from it.
	rttSpacing = 25 * time.Millisecond
	// rttProbeMax bounds the probe requests of one measure.
	rttProbeMax = 16
	// rttLocalShare: a probe answer is quiet when it took LaneMinRTT and
	// rttLocalShare times its local delay (the gauge's wakes before and
	// after it) more.
	rttLocalShare = 8
	// rttNearShare is the share of LaneMinRTT (in quarters) under which
	// an answer proves a broker judged distant near again.
	rttNearShare = 3
	// rttFresh is how long a conclusive measure holds. The next lane
	// decision after it measures again.
	rttFresh = 5 * time.Minute
	// rttRetry is how long after an inconclusive measure (a busy machine)
	// the broker is measured again.
	rttRetry = 250 * time.Millisecond
)

// brokerRTT is what the cache knows of the round trip to one broker. It
// holds its verdict and the current (or last) measure.
type brokerRTT struct {
	distant bool          // the verdict: the last conclusive measure said distant, and no answer since proved it near
	judged  bool          // a measure concluded, or an answer proved it near
	least   time.Duration // the least time any answer took since from (0: none)
	quiet   int           // this measure's quiet probe answers
	near    bool          // an answer since from proved the broker near
	answers int           // this measure's probe answers
	from    time.Time     // when this measure started (zero: none yet)
	again   time.Time     // the next measure starts at or after this
	probing bool          // a probe goroutine runs
}

// nearBelow is the time under which an answer proves r's broker near. It is
// minRTT, or rttNearShare quarters of it while judged distant.
func (r *brokerRTT) nearBelow(minRTT time.Duration) time.Duration {
	if r.distant {
		return minRTT * rttNearShare / 4
	}
	return minRTT
}

// note takes an answer of the broker that took took (a round trip at
// least) into r. Local is the process's own delay measured around it
// (probe answers only). It is negative for a fetch's, which can only prove
// the broker near.
func (r *brokerRTT) note(took, minRTT, local time.Duration) {
	if r.least == 0 || took < r.least {
		r.least = took
	}
	switch {
	case took < r.nearBelow(minRTT):
		r.near, r.distant, r.judged = true, false, true
	case local >= 0 && took-minRTT >= rttLocalShare*local:
		r.quiet++
	}
}

// leaning reports whether r's measure, under way, leans to distant: half
// the quiet answers a verdict needs, and none under the near bound. The
// broker's lanes open ahead of the verdict then (broker.openLanes).
func (r *brokerRTT) leaning() bool {
	return r.probing && !r.near && r.quiet >= rttSamples/2
}

// decided reports whether r's measure has its verdict.
func (r *brokerRTT) decided() bool { return r.near || r.quiet >= rttSamples }

// start begins a new measure at now. The verdict stands meanwhile.
func (r *brokerRTT) start(now time.Time) {
	r.least, r.quiet, r.near, r.answers = 0, 0, false, 0
	r.from, r.probing = now, true
}

// conclude ends r's measure at now. It gives a verdict if it has one. Else
// the old verdict stands and the broker is measured again sooner. failed
// says no request was answered.
func (r *brokerRTT) conclude(now time.Time, failed bool) {
	r.probing = false
	switch {
	case r.near:
		r.distant, r.judged = false, true
		r.again = r.from.Add(rttFresh)
	case r.quiet >= rttSamples:
		r.distant, r.judged = true, true
		r.again = r.from.Add(rttFresh)
	case failed:
		r.again = now.Add(laneRetry)
	default:
		r.again = now.Add(rttRetry)
	}
}

// noteRTT takes took, the time a fetch answered by the broker took, into
// its measured round trip. An answer under the near bound proves it near.
func (b *broker) noteRTT(took time.Duration) {
	if b.rtt != nil {
		b.rtt.note(took, b.c.cfg.LaneMinRTT, -1)
	}
}

// distantLocked reports whether broker id is distant (broker.distant). A
// broker the cache has not met is not, unless LaneMinRTT is negative.
func (c *Cache) distantLocked(id int32) bool {
	if b := c.brokers[id]; b != nil {
		return b.distant()
	}
	return c.cfg.FetchConnections > 1 && c.cfg.LaneMinRTT < 0
}

// distant reports whether the broker is distant. That needs more than one
// fetch connection allowed, and LaneMinRTT negative (any broker) or the
// broker judged distant (brokerRTT). A broker not measured yet is not.
func (b *broker) distant() bool {
	if b.c.cfg.FetchConnections <= 1 {
		return false
	}
	if b.c.cfg.LaneMinRTT < 0 {
		return true
	}
	return b.rtt != nil && b.rtt.distant
}

// measure starts a measure of the broker's round trip if none runs and its
// last one is due again. With none yet it starts one at once.
func (b *broker) measure() {
	c := b.c
	if c.cfg.LaneMinRTT < 0 || c.closed || c.cl == nil && c.onMeasure == nil {
		return
	}
	if b.rtt == nil {
		b.rtt = &brokerRTT{}
	}
	if now := time.Now(); !b.rtt.probing && !now.Before(b.rtt.again) {
		b.rtt.start(now)
		if c.onMeasure != nil {
			c.onMeasure(b, b.rtt)
			return
		}
		c.workers.Add(1)
		go b.probe(b.rtt)
	}
}

// probe measures the round trip to the broker (the package's Distance). It
// sends a probe request every rttSpacing, without waiting for the answers
// of those before, until the measure is decided, rttProbeMax were sent, or
// one failed. Then, if lanes are open to the broker, its loop's laneable
// cursors move onto them.
func (b *broker) probe(r *brokerRTT) {
	c := b.c
	defer c.workers.Done()
	g := newWakeGauge()
	defer g.close()
	ctx, cancel := context.WithCancel(c.ctx)
	var sending sync.WaitGroup
	answers := make(chan probeAnswer, rttProbeMax)
	tick := time.NewTimer(0)
	sent, waiting := 0, 0
	var last time.Time // when the last answer came
	done, failed := false, false
	for !done {
		next := tick.C
		if sent == rttProbeMax {
			if waiting == 0 {
				break
			}
			next = nil
		}
		select {
		case <-next:
			sent++
			waiting++
			sending.Go(func() {
				before := g.wake()
				took, err := c.probeOnce(ctx, b.id)
				came := time.Now()
				answers <- probeAnswer{took: took, local: before + g.wake(), came: came, err: err}
			})
			tick.Reset(rttSpacing)
		case a := <-answers:
			waiting--
			// Answers that come together waited together: behind a
			// stall of the broker or of the connection, not the
			// distance, which spaces them as their requests were.
			bunched := !last.IsZero() && a.came.Sub(last) < rttSpacing/2
			if a.err == nil {
				last = a.came
			}
			c.mu.Lock()
			done, failed = b.probed(r, a.took, a.local, bunched, a.err)
			c.mu.Unlock()
		case <-c.ctx.Done():
			done = true
		}
	}
	tick.Stop()
	cancel()
	sending.Wait()
	c.mu.Lock()
	tell := b.measured(r, failed)
	c.mu.Unlock()
	tell()
}

// probeAnswer is what one probe request of a measure brought: the time its
// answer took, the local delay around it (wakeGauge), when it came, or the
// request's error.
type probeAnswer struct {
	took, local time.Duration
	came        time.Time
	err         error
}

// probed takes the answer to one probe request of r, the broker's measure
// under way, into it. That is the time it took and the local delay around
// it, or the request's error. A bunched answer (one that came with the
// answer before it) can only prove the broker near. It reports whether the
// measure is over (a failed request, a verdict, the cache closed), and
// failed. A request failed before any was answered. Under Cache.mu.
func (b *broker) probed(r *brokerRTT, took, local time.Duration, bunched bool, err error) (done, failed bool) {
	if err != nil {
		return true, r.answers == 0
	}
	r.answers++
	if bunched {
		local = -1
	}
	r.note(took, b.c.cfg.LaneMinRTT, local)
	b.openLanes() // ahead of the verdict, if the measure leans to distant
	return r.decided() || b.c.closed, false
}

// measured ends r, the broker's measure, failed or not (probed). Its
// verdict, if it reached one, stands, and the broker's loop's laneable
// cursors move onto its lanes if they are open. It returns what logs the
// verdict, outside Cache.mu. Under Cache.mu.
func (b *broker) measured(r *brokerRTT, failed bool) func() {
	r.conclude(time.Now(), failed)
	b.spread()
	return b.verdictLine()
}

// verdictLine returns what logs the broker's verdict, outside Cache.mu. It
// logs at info level the first time a measure judges the broker, and at
// debug level when a later measure changes the verdict. Else it logs
// nothing.
func (b *broker) verdictLine() func() {
	r, cfg := b.rtt, b.c.cfg
	if !r.judged || b.told && b.toldFar == r.distant {
		return func() {}
	}
	logf := cfg.Logger.Infof
	if b.told {
		logf = cfg.Logger.Debugf
	}
	b.told, b.toldFar = true, r.distant
	distant, id, addr, least := r.distant, b.id, b.addr, r.least.Round(10*time.Microsecond)
	if addr == "" {
		addr = "an address not known yet"
	}
	return func() {
		if distant {
			logf("Broker %d at %s: round trip %s measured, distant (%s or more): reads with a backlog use up to %d more fetch connections to it (lanes)",
				id, addr, least, cfg.LaneMinRTT, cfg.FetchConnections-1)
			return
		}
		logf("Broker %d at %s: round trip %s measured, near (under %s): reads use its one fetch connection",
			id, addr, least, cfg.LaneMinRTT)
	}
}

// probeOnce sends one probe request to broker id (metadata without
// topics, where nil would be every topic) and returns how long its answer
// took.
func (c *Cache) probeOnce(ctx context.Context, id int32) (time.Duration, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	ctx, cancel := context.WithTimeout(ctx, metaTimeout)
	defer cancel()
	start := time.Now()
	_, err := c.cl.Broker(int(id)).Request(ctx, req)
	return time.Since(start), err
}

// wakeGauge times how late a goroutine woken by the network poller runs,
// from a write to a pipe until the goroutine blocked reading it runs
// again. Every answer of a broker waits for that too, on top of its round
// trip. It is tens of µs on a quiet machine, and tens of ms with every P
// busy. Its goroutine ends with close.
type wakeGauge struct {
	mu   sync.Mutex // one wake at a time: the probes of a measure overlap
	r, w *os.File
	woke chan time.Time // the reader's time after each byte
	done chan struct{}  // closed when the reader ends
}

// newWakeGauge starts a gauge. nil (a pipe could not be made) reports
// every wake as slow (a minute), so no answer counts as quiet.
func newWakeGauge() *wakeGauge {
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	g := &wakeGauge{r: r, w: w, woke: make(chan time.Time, 1), done: make(chan struct{})}
	go g.read()
	return g
}

func (g *wakeGauge) read() {
	defer close(g.done)
	b := make([]byte, 1)
	for {
		if _, err := g.r.Read(b); err != nil {
			return // closed
		}
		g.woke <- time.Now()
	}
}

// wake returns how long the reader took to run after a write.
func (g *wakeGauge) wake() time.Duration {
	if g == nil {
		return time.Minute
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	start := time.Now()
	if _, err := g.w.Write([]byte{0}); err != nil {
		return time.Minute
	}
	return min((<-g.woke).Sub(start), time.Minute)
}

// close ends the gauge and waits for its goroutine.
func (g *wakeGauge) close() {
	if g == nil {
		return
	}
	_ = g.w.Close()
	<-g.done
	_ = g.r.Close()
}
