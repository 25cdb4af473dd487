// Package logs is how the Benthos-free packages (internal/engine,
// internal/share) report what they do: the one Logger they log through, and
// the convention their Observers follow. The plugin hands them Benthos'
// *service.Logger, which implements Logger and Tracer; tests hand them
// nothing (Discard) or a recorder of their own.
//
// # Loggers
//
// A Logger has the four levels every package uses. A package that has
// lines below debug (franz-go's own debug log: every request, connection
// and SASL step) asks whether its Logger is also a Tracer, and leaves them
// out when it is not. A nil Logger in a package's config means Discard.
// Messages follow the repository's rules: a line starts with a capital
// letter when it stands alone ("Reading ... as a member of share group
// g"), an error is logged or returned, never both, and no line holds a
// secret.
//
// # Observers
//
// A package that has counts for metrics takes an Observer in its config
// (engine.Observer, share.Observer), under the field name Observer. Every
// such interface follows one convention:
//
//   - its methods are named for what happened, in the past tense
//     (Delivered, Committed, Acquired, LockExpired), and take the topic
//     first, then the partition when the event has one, then the counts (of
//     records unless the name says otherwise, as int64);
//   - they are called from the package's own goroutines, or from the
//     goroutine of the caller that made the event happen (its Next, Ack or
//     Close), and from franz-go's callback goroutines where a broker's answer
//     is the event, never under a lock of the package;
//   - they must be cheap, must not block, and must be safe for concurrent
//     use: the package does not wait for them;
//   - a nil Observer in the config means a nop one (an unexported
//     nopObserver of the package); counts the package also returns (such as
//     share.Stats) do not depend on the Observer.
//
// The plugin implements each with Benthos' metrics API (plugin/metrics.go,
// plugin/share_metrics.go).
package logs

import "strings"

// Logger is what a Benthos-free package logs through. Benthos'
// *service.Logger implements it.
type Logger interface {
	Debugf(format string, args ...any)
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Tracer is a Logger that also logs below debug. Benthos' *service.Logger
// is one. A package asks for lines below debug (franz-go's debug log) only
// from a Logger that is a Tracer.
type Tracer interface {
	Tracef(format string, args ...any)
}

// Discard is the Logger that logs nothing: the default of a nil Logger. A
// package may check for it to skip building lines nobody reads.
type Discard struct{}

func (Discard) Debugf(string, ...any) {}
func (Discard) Infof(string, ...any)  {}
func (Discard) Warnf(string, ...any)  {}
func (Discard) Errorf(string, ...any) {}

// WithPrefix returns a Logger that writes prefix before every line of l,
// such as "Member 2 of 4: ". Lines below debug are not forwarded: the
// result is not a Tracer.
func WithPrefix(l Logger, prefix string) Logger {
	if prefix == "" {
		return l
	}
	return prefixed{l, strings.ReplaceAll(prefix, "%", "%%")}
}

// prefixed is WithPrefix's Logger; prefix is escaped for a format string.
type prefixed struct {
	l      Logger
	prefix string
}

func (p prefixed) Debugf(f string, a ...any) { p.l.Debugf(p.prefix+f, a...) }
func (p prefixed) Infof(f string, a ...any)  { p.l.Infof(p.prefix+f, a...) }
func (p prefixed) Warnf(f string, a ...any)  { p.l.Warnf(p.prefix+f, a...) }
func (p prefixed) Errorf(f string, a ...any) { p.l.Errorf(p.prefix+f, a...) }
