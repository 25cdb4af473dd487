package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// tailer follows a file another process appends lines to and calls onLine with each complete
// line and the time it was read. It wakes on inotify events of the file's directory (so a
// line is seen well within a millisecond of its write) and every 10ms in case one was missed.
type tailer struct {
	path   string
	onLine func(line []byte, seen time.Time)
	stop   chan struct{} // closed by Close
	once   sync.Once     // closes stop
	done   chan struct{} // closed when the loop returned
	notify *os.File      // the inotify descriptor, nil when inotify is not available
}

// newTailer starts following path (which need not exist yet). onLine runs on the tailer's
// goroutine.
func newTailer(path string, onLine func(line []byte, seen time.Time)) *tailer {
	t := &tailer{path: path, onLine: onLine, stop: make(chan struct{}), done: make(chan struct{})}
	wake := make(chan struct{}, 1)
	if fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK); err == nil {
		if _, err := syscall.InotifyAddWatch(fd, filepath.Dir(path), syscall.IN_MODIFY|syscall.IN_CREATE); err == nil {
			// Non-blocking, so os.File reads through the runtime poller and Close unblocks them.
			t.notify = os.NewFile(uintptr(fd), "inotify")
			go func() {
				buf := make([]byte, 64<<10)
				for {
					if _, err := t.notify.Read(buf); err != nil {
						return
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}()
		} else {
			syscall.Close(fd)
		}
	}
	go t.loop(wake)
	return t
}

func (t *tailer) loop(wake <-chan struct{}) {
	defer close(t.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var (
		f       *os.File
		pending []byte
		buf     = make([]byte, 256<<10)
	)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		if f == nil {
			var err error
			if f, err = os.Open(t.path); err != nil {
				f = nil
			}
		}
		for f != nil {
			n, err := f.Read(buf)
			if n > 0 {
				now := time.Now()
				pending = append(pending, buf[:n]...)
				for {
					i := bytes.IndexByte(pending, '\n')
					if i < 0 {
						break
					}
					t.onLine(pending[:i], now)
					pending = pending[i+1:]
				}
			}
			if err != nil || n == 0 {
				if err != nil && !errors.Is(err, io.EOF) {
					f.Close()
					f = nil
				}
				break
			}
		}
		select {
		case <-t.stop:
			return
		case <-wake:
		case <-tick.C:
		}
	}
}

// Close stops the tailer and waits for its goroutine; it is safe twice.
func (t *tailer) Close() {
	t.once.Do(func() {
		close(t.stop)
		<-t.done
		if t.notify != nil {
			t.notify.Close()
		}
	})
}
