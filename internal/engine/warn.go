package engine

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Repeated log lines. A failure retried every poll interval, or a warning of
// each of many partitions, is logged at most once per lineEvery per key
// (warn, infoEvery). franz-go's warnings are limited per client and message
// (kafkaLogger). So an outage gives a clear line per partition and not a
// flood.

// lineEvery is how often a line of one key may be logged.
const lineEvery = 10 * time.Second

// lineLimit is when the line of each key was last logged, shared by the
// engine's warnings and every franz-go client it creates (a new listing
// client per Start attempt included), so the limit holds across them. Its
// keys name partitions and topics that come and go, so the keys of lines
// last logged more than lineEvery ago, which are due again whether they are
// kept or not, are forgotten (at most once per lineEvery).
type lineLimit struct {
	mu     sync.Mutex           // guards last and pruned
	last   map[string]time.Time // by key
	pruned time.Time            // when last was last pruned
}

func newLineLimit() *lineLimit {
	return &lineLimit{last: map[string]time.Time{}}
}

// due reports whether the line of key may be logged now, at most once per
// lineEvery, and records it.
func (l *lineLimit) due(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if last, ok := l.last[key]; ok && now.Sub(last) < lineEvery {
		return false
	}
	l.last[key] = now
	if now.Sub(l.pruned) >= lineEvery {
		for k, at := range l.last {
			if now.Sub(at) >= lineEvery {
				delete(l.last, k)
			}
		}
		l.pruned = now
	}
	return true
}

// limitedLog is the engine's Logger (Config.Hooks.Logger) with the limit of its
// repeated lines, shared by every owner of the engine's state and its
// franz-go clients. Set by New, never changed.
type limitedLog struct {
	Logger
	lines    *lineLimit  // the rate limit of repeated lines; its own lock
	stopping func() bool // the engine stops (Engine.stopping): warnRetry logs at DEBUG
}

// warn logs a warning, at most once per lineEvery per key.
func (l limitedLog) warn(key, format string, args ...any) {
	if l.lines.due(key) {
		l.Warnf(format, args...)
	}
}

// warnRetry logs a failure that is retried, as warn does, unless it is the
// engine's own stop or a cancelled context cutting the attempt short. That
// is a normal stop or a handover, logged at DEBUG (a normal stop logs nothing at
// WARN or above).
func (l limitedLog) warnRetry(ctx context.Context, key string, err error, format string, args ...any) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || l.stopping() {
		l.Debugf(format, args...)
		return
	}
	l.warn(key, format, args...)
}

// infoEvery logs an info line, at most once per lineEvery per key.
func (l limitedLog) infoEvery(key, format string, args ...any) {
	if l.lines.due(key) {
		l.Infof(format, args...)
	}
}
