package tests

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/resources/bench/procstat"
)

// connsPartitions is the width at which TestConnectionsPerBroker counts: wider than the default
// consumer_cache.capacity (64), so a design with a client per cached partition shows.
const connsPartitions = 300

// TestConnectionsPerBroker runs the binary continuously as a group member on a 300-partition
// topic, waits until it has written every record (two per partition), and then counts the TCP
// connections the process holds to the brokers, from its own sockets (/proc/<pid>/fd socket
// inodes matched to /proc/<pid>/net/tcp and tcp6, remote port a broker's), every 400ms for 2s.
// The bound is what the design holds whatever the partitions and consumer_cache.capacity
// (the default and 400, more than the partitions, are both run): one franz-go client, the group
// member's, whose connections the cursors and the listings share (a fetch and a metadata
// connection per broker, the coordinator's group connection, the seed connection): 2 per broker
// plus 2, 4 at one broker, as a plain franz-go group consumer (6 when the cursors and listings
// had a client of their own, 8 with one each; internal/cache/doc.go). Before the cursor cache
// this was 133 (default capacity) and 605 (capacity 400) at one broker. Connections are what
// managed clusters cap per broker, and each one is a SASL login where SASL is on.
func TestConnectionsPerBroker(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopic(t, connsPartitions)
	const perPartition = 2
	var recs []*kgo.Record
	for p := range int32(connsPartitions) {
		for i := range perPartition {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)})
		}
	}
	want := produceAll(t, producer(t), recs).count()
	ports := brokerPorts(t)
	limit := 2*len(ports) + 2

	for _, tc := range []struct {
		name     string
		capacity int // 0: the default
	}{
		{name: "default capacity"},
		{name: "capacity 400", capacity: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group, _ := newGroup(t)
			in := baseInput(topic)
			in["consumer_group"] = group
			in["start_from"] = "earliest"
			if tc.capacity > 0 {
				in["consumer_cache"] = map[string]any{"capacity": tc.capacity}
			}
			rc, out := startRun(t, in, 1, "", leanMapping)
			defer rc.stop(syscall.SIGTERM, 30*time.Second)
			require.Truef(t, rc.waitFor(25*time.Second, func() bool { return completeLines(out) >= want }),
				"read %d of %d records in 25s", completeLines(out), want)
			require.False(t, rc.exited(), "connect exited while reading continuously")
			t.Logf("read %d records of %d partitions in %s", want, connsPartitions, time.Since(rc.start).Round(time.Millisecond))

			most, at := 0, map[string]int{}
			var detail []procstat.Conn
			for range 5 {
				total, byRemote, err := procstat.ConnsTo(rc.cmd.Process.Pid, ports)
				require.NoError(t, err)
				if total > most {
					most, at = total, byRemote
					detail, err = procstat.TCPConns(rc.cmd.Process.Pid)
					require.NoError(t, err)
				}
				time.Sleep(400 * time.Millisecond)
			}
			t.Logf("at most %d connections to the brokers (%v)", most, at)
			if most > limit {
				for _, c := range detail {
					if ports[c.Remote.Port()] {
						t.Logf("  %s -> %s %s", c.Local, c.Remote, c.State)
					}
				}
			}
			assert.LessOrEqualf(t, most, limit,
				"connections to the brokers (by remote address: %v); want at most %d: 2 per broker (%d brokers) plus 2 (the seed and the coordinator's group connection)",
				at, limit, len(ports))
		})
	}
}

// brokerPorts returns the listener ports of the brokers in the cluster's metadata.
func brokerPorts(t *testing.T) map[uint16]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	bs, err := newAdmin(t).ListBrokers(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, bs, "brokers in the metadata")
	ports := map[uint16]bool{}
	for _, b := range bs {
		ports[uint16(b.Port)] = true
	}
	return ports
}
