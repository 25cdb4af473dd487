//go:build linux

package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// blackholed returns a loopback address whose connections never complete: a
// socket listening with a backlog of 0 whose accept queue is filled by
// connections nobody accepts, so the kernel drops further SYNs and a dial
// waits until its timeout.
func blackholed(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	_, err = net.DialTimeout("tcp", addr, 200*time.Millisecond)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "%s is not blackholed: a dial got %v", addr, err)
	return addr
}

// TestTCPConnectTimeout checks that tcp.connect_timeout reaches the dialer
// of the input's clients (ClientOpts): a client pinging a blackholed broker
// fails with a dial timeout after about connect_timeout, with and without
// TLS, long before franz-go's default 10s dial timeout would.
func TestTCPConnectTimeout(t *testing.T) {
	addr := blackholed(t)
	for _, extra := range []string{"", "tls: { enabled: true }\n"} {
		c, err := parseYAML(t, "seed_brokers: [ \""+addr+"\" ]\ntopics: [ t ]\ntcp:\n  connect_timeout: 300ms\n"+extra)
		require.NoError(t, err)
		assert.Equal(t, 300*time.Millisecond, c.Security.TCP.ConnectTimeout)
		cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.SeedBrokers(addr))...)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		start := time.Now()
		err = cl.Ping(ctx)
		took := time.Since(start)
		cancel()
		cl.Close()
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "Ping of a blackholed broker (%q): %v, want a dial timeout", extra, err)
		assert.Less(t, took, security.DefaultConnectTimeout/2, "the dial (%q) took %s: connect_timeout 300ms not honoured", extra, took)
	}
}

// TestParseTCP checks the tcp block: defaults (franz-go's dial timeout,
// Go's keep-alive), values set, and errors naming the field and value.
func TestParseTCP(t *testing.T) {
	const base = "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"
	c, err := parseYAML(t, base)
	require.NoError(t, err)
	assert.Equal(t, defaultTCP, c.Security.TCP)

	c, err = parseYAML(t, base+"tcp:\n  connect_timeout: 0s\n  keep_alive: { idle: 1m, interval: 5s, count: 3 }\n")
	require.NoError(t, err)
	assert.Equal(t, security.TCP{ConnectTimeout: 0, KeepAlive: net.KeepAliveConfig{Enable: true, Idle: time.Minute, Interval: 5 * time.Second, Count: 3}}, c.Security.TCP)

	for _, tc := range []struct{ yaml, want string }{
		{"tcp: { connect_timeout: soon }\n", `tcp.connect_timeout must be a duration such as 1s, 500ms or 1m30s, got "soon"`},
		{"tcp: { connect_timeout: -1s }\n", `tcp.connect_timeout must be >= 0, got "-1s"`},
		{"tcp: { keep_alive: { idle: 0s } }\n", `tcp.keep_alive.idle must be > 0, got "0s"`},
		{"tcp: { keep_alive: { interval: x } }\n", `tcp.keep_alive.interval must be a duration such as 1s, 500ms or 1m30s, got "x"`},
		{"tcp: { keep_alive: { count: 0 } }\n", `tcp.keep_alive.count must be > 0, got 0`},
	} {
		_, err := parseYAML(t, base+tc.yaml)
		require.Error(t, err, "ParseConfig(%q)", tc.yaml)
		assert.Equal(t, tc.want, err.Error(), "ParseConfig(%q)", tc.yaml)
		assert.Contains(t, lintInput(t, "kafka_batched_ranges:\n"+indent(base+tc.yaml)), tc.want, "lint of %q", tc.yaml)
	}
}
