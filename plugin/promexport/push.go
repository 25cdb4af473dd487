package promexport

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// pusher pushes a registry to a Prometheus Push Gateway: every interval from
// a goroutine of its own (when the interval is > 0), and once more on close.
// The goroutine is its only user until it has stopped. close then pushes.
type pusher struct {
	p        *push.Pusher
	url      string
	interval time.Duration
	log      *service.Logger // may be nil

	stop    context.CancelFunc // stops the goroutine, and aborts a push under way
	ctx     context.Context    // cancelled by stop
	stopped chan struct{}      // closed when the goroutine has returned
}

// newPusher returns a pusher for o's push fields (o.pushURL set), started.
func newPusher(reg prometheus.Gatherer, o options, log *service.Logger) *pusher {
	p := push.New(o.pushURL, o.pushJob).Gatherer(reg)
	if o.pushUsername != "" || o.pushPassword != "" {
		p = p.BasicAuth(o.pushUsername, o.pushPassword)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ps := &pusher{p: p, url: o.pushURL, interval: o.pushInterval, log: log, stop: cancel, ctx: ctx, stopped: make(chan struct{})}
	if ps.interval > 0 {
		go ps.loop()
	} else {
		close(ps.stopped)
	}
	return ps
}

// loop pushes every interval until stopped. A failure is logged when pushes
// start failing and a recovery when they work again, not every push.
func (ps *pusher) loop() {
	defer close(ps.stopped)
	t := time.NewTicker(ps.interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ps.ctx.Done():
			return
		case <-t.C:
		}
		err := ps.push(ps.ctx)
		switch {
		case ps.ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			if ps.log != nil {
				ps.log.Warnf("%v; trying again every %v", err, ps.interval)
			}
		case err == nil && failing:
			failing = false
			if ps.log != nil {
				ps.log.Infof("push metrics to %s: works again", ps.url)
			}
		}
	}
}

// push pushes once, within pushTimeout.
func (ps *pusher) push(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	if err := ps.p.PushContext(ctx); err != nil {
		return fmt.Errorf("push metrics to %s: %w", ps.url, err)
	}
	return nil
}

// close stops the periodic pushes, waits for the goroutine (or ctx) and
// pushes a last time. It is called once.
func (ps *pusher) close(ctx context.Context) error {
	ps.stop()
	select {
	case <-ps.stopped:
	case <-ctx.Done():
		return fmt.Errorf("push metrics to %s: %w", ps.url, ctx.Err())
	}
	return ps.push(ctx)
}
