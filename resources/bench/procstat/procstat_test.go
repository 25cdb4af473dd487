package procstat

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHexAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0100007F:2384", "127.0.0.1:9092"},
		{"00000000000000000000000000000000:0050", "[::]:80"},
		{"0000000000000000FFFF00000100007F:2384", "127.0.0.1:9092"}, // v4-mapped
		{"00000000000000000000000001000000:1F90", "[::1]:8080"},
	} {
		got, err := parseHexAddr(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equalf(t, tc.want, got.String(), "parseHexAddr(%q)", tc.in)
	}
	for _, bad := range []string{"", "0100007F", "01007F:2384", "zz00007F:2384", "0100007F:zzzzz"} {
		_, err := parseHexAddr(bad)
		assert.Errorf(t, err, "parseHexAddr(%q)", bad)
	}
}

// TestConnsToOwnSockets opens connections from this process to a listener of its own and
// counts them back.
func TestConnsToOwnSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	port := netip.MustParseAddrPort(ln.Addr().String()).Port()
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
	}
	// The accepted ends have local port = port and a remote ephemeral port, so only the three
	// dialled ends have remote port = port.
	total, byRemote, err := ConnsTo(os.Getpid(), map[uint16]bool{port: true})
	require.NoError(t, err)
	assert.Equal(t, 3, total)
	assert.Equal(t, map[string]int{"127.0.0.1:" + strconv.Itoa(int(port)): 3}, byRemote)
}

// TestCPUTime spins until getrusage says this process used 200ms more CPU, and expects
// CPUTime to agree within its 10ms ticks (plus what the two reads themselves cost).
func TestCPUTime(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	require.NoError(t, err)
	r0 := rusage(t)
	for rusage(t)-r0 < 200*time.Millisecond {
	}
	after, err := CPUTime(os.Getpid())
	require.NoError(t, err)
	assert.InDelta(t, float64(200*time.Millisecond), float64(after-before), float64(50*time.Millisecond))
}

func rusage(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
