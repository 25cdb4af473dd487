// Package procstat reads what a running Linux process costs from /proc: its TCP connections
// (socket inodes from /proc/<pid>/fd matched to /proc/<pid>/net/tcp and tcp6) and its CPU time
// (utime + stime from /proc/<pid>/stat). The latency and connections benchmarks in
// resources/bench and the connection test in tests/ use it, so both count the same way.
package procstat

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports (the kernel reports in these units whatever its internal HZ is).
const clockTicks = 100

// Conn is one TCP socket the process holds open.
type Conn struct {
	Local, Remote netip.AddrPort
	// State is the kernel's TCP state name (ESTABLISHED, SYN_SENT, CLOSE_WAIT, ...).
	State string
}

// tcpStates maps the hex state column of /proc/net/tcp to its name (include/net/tcp_states.h).
var tcpStates = map[string]string{
	"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
	"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}

// TCPConns returns the TCP sockets (IPv4 and IPv6) among the open file descriptors of process
// pid, listening sockets left out.
func TCPConns(pid int) ([]Conn, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	var out []Conn
	for _, name := range []string{"tcp", "tcp6"} {
		conns, err := parseNetTCP(filepath.Join("/proc", strconv.Itoa(pid), "net", name), inodes)
		if err != nil {
			return nil, err
		}
		out = append(out, conns...)
	}
	return out, nil
}

// ConnsTo returns how many of pid's TCP connections have a remote port in ports, per remote
// address (ip:port), and their total. Connections still being set up or torn down count: they
// hold a descriptor and, at the broker, a connection slot.
func ConnsTo(pid int, ports map[uint16]bool) (total int, byRemote map[string]int, err error) {
	conns, err := TCPConns(pid)
	if err != nil {
		return 0, nil, err
	}
	byRemote = map[string]int{}
	for _, c := range conns {
		if ports[c.Remote.Port()] {
			total++
			byRemote[c.Remote.String()]++
		}
	}
	return total, byRemote, nil
}

// socketInodes returns the inodes of the sockets among pid's open descriptors.
func socketInodes(pid int) (map[string]bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return inodes, nil
}

// parseNetTCP returns the non-listening sockets of a /proc/net/tcp{,6} table whose inode is in
// inodes.
func parseNetTCP(path string, inodes map[string]bool) ([]Conn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Conn
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !inodes[fs[9]] {
			continue
		}
		state := tcpStates[fs[3]]
		if state == "LISTEN" {
			continue
		}
		local, err := parseHexAddr(fs[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		remote, err := parseHexAddr(fs[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, Conn{Local: local, Remote: remote, State: state})
	}
	return out, sc.Err()
}

// parseHexAddr parses "0100007F:2384" (IPv4) or a 32-digit IPv6 address and a port, as the
// kernel prints them: the address as 32-bit words in host (little-endian) byte order.
func parseHexAddr(s string) (netip.AddrPort, error) {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q without a port", s)
	}
	b, err := hex.DecodeString(host)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad host", s)
	}
	for i := 0; i < len(b); i += 4 { // each 32-bit word is little-endian
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad port", s)
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr.Unmap(), uint16(p)), nil
}

// CPUTime returns the user plus system CPU time process pid has used so far, all its threads
// included.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields are counted
	// from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fs := strings.Fields(string(b[i+1:]))
	// fs[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fs)+2)
	}
	utime, err := strconv.ParseInt(fs[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat utime: %w", pid, err)
	}
	stime, err := strconv.ParseInt(fs[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat stime: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// CPUPercent measures process pid's CPU use over window, as a percentage of one core.
func CPUPercent(pid int, window time.Duration) (float64, error) {
	before, err := CPUTime(pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(window)
	after, err := CPUTime(pid)
	if err != nil {
		return 0, err
	}
	return 100 * float64(after-before) / float64(time.Since(start)), nil
}
