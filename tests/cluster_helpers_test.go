package tests

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Kafka cluster of the test's own: several KRaft nodes (each a combined broker and controller,
// every one a voter) run by resources/kafka.sh on loopback, for the tests that need partitions
// on different brokers (a partition whose only replica is on a killed broker has no leader).
// kafka.sh puts node i in rack rack-<i> with the rack-aware replica selector, so a reader with
// rack_id rack-<i> fetches from node i's replica (follower fetching, KIP-392).

const (
	// ownClusterFirstPort is the PLAINTEXT port of node 1 of the first slot; node n of slot i
	// listens on ownClusterFirstPort + ownClusterSlotPorts*i + 2(n-1), its controller on the
	// port after it. The ports lie above the ownBroker slots (19192-19223).
	ownClusterFirstPort = 19292
	ownClusterSlotPorts = 16 // up to 8 nodes a slot
	ownClusterSlots     = 4
)

// ownCluster is a cluster of ownBroker nodes in a slot (a directory under os.TempDir() and a
// block of ports) that the test holds an exclusive lock on, as newOwnBroker does for one broker.
type ownCluster struct {
	home  string
	nodes []*ownBroker // node i+1 is nodes[i]
}

// newOwnCluster takes a free cluster slot, kills whatever nodes an earlier run left in it and
// wipes their state, starts n nodes (concurrently: a node comes up only once a majority of the
// voters runs) and waits until every node answers. The cleanup kills the nodes (a test cluster
// has nothing worth a clean shutdown) and, when the test passed, wipes their state.
func newOwnCluster(t *testing.T, n int) *ownCluster {
	t.Helper()
	require.LessOrEqual(t, n, ownClusterSlotPorts/2, "nodes in a cluster slot")
	libs := sharedKafkaLibs(t)
	root := filepath.Join(os.TempDir(), "kbr-own-clusters")
	require.NoError(t, os.MkdirAll(root, 0o755))
	// Every slot may be taken by tests running in parallel (of this run, or of another checkout):
	// wait for one to free up rather than fail.
	for wait := time.Now().Add(slotWait); ; time.Sleep(time.Second) {
		for slot := range ownClusterSlots {
			first := ownClusterFirstPort + ownClusterSlotPorts*slot
			c := &ownCluster{home: filepath.Join(root, strconv.Itoa(first))}
			require.NoError(t, os.MkdirAll(c.home, 0o755))
			lock, err := os.OpenFile(filepath.Join(c.home, ".slot.lock"), os.O_CREATE|os.O_RDWR, 0o644)
			require.NoError(t, err)
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				lock.Close()
				continue // another test holds this slot
			}
			id := clusterID(t)
			var voters []string
			for i := range n {
				voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, first+2*i+1))
			}
			for i := range n {
				b := &ownBroker{port: first + 2*i}
				b.ctrlPort = b.port + 1
				b.home = filepath.Join(c.home, "node-"+strconv.Itoa(i+1))
				b.env = []string{
					"KBR_KAFKA_NODE_ID=" + strconv.Itoa(i+1),
					"KBR_KAFKA_VOTERS=" + strings.Join(voters, ","),
					"KBR_KAFKA_CLUSTER_ID=" + id,
					"KBR_KAFKA_INTERNAL_RF=" + strconv.Itoa(min(n, 3)),
					"KBR_KAFKA_HEAP_MIN=256m",
					"KBR_KAFKA_HEAP_MAX=256m",
				}
				require.NoError(t, os.MkdirAll(b.home, 0o755))
				require.NoError(t, linkKafkaLibs(b.home, libs))
				c.nodes = append(c.nodes, b)
			}
			// Nodes still running here belong to a test binary that died: kill them, forget their
			// topics (the state is formatted again with this run's cluster id).
			if err := c.each(context.Background(), "kill", "reset"); err != nil {
				lock.Close()
				t.Fatalf("cluster in %s: %v", c.home, err)
			}
			busy := false
			for _, b := range c.nodes {
				busy = busy || portInUse(b.port) || portInUse(b.ctrlPort)
			}
			if busy {
				lock.Close() // something else listens here
				continue
			}
			t.Cleanup(func() {
				defer lock.Close()
				ctx, cancel := contextTimeout(ownBrokerScriptTimeout)
				defer cancel()
				if err := c.each(ctx, "kill"); err != nil {
					t.Errorf("cluster in %s: %v", c.home, err)
				}
				if t.Failed() {
					for i, b := range c.nodes {
						out, _ := b.script(ctx, "logs")
						t.Logf("node %d (%s) logs (state kept in %s):\n%s", i+1, b.addr(), b.home, tail(out, 8<<10))
					}
					return
				}
				if err := c.each(ctx, "reset"); err != nil {
					t.Logf("cluster in %s: %v", c.home, err)
				}
			})
			began := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), ownBrokerScriptTimeout)
			defer cancel()
			require.NoError(t, c.each(ctx, "start"))
			t.Logf("cluster of %d nodes %s started in %s", n, strings.Join(c.addrs(), ","), time.Since(began).Round(time.Millisecond))
			return c
		}
		if time.Now().After(wait) {
			break
		}
	}
	t.Fatalf("no free cluster slot among ports %d-%d", ownClusterFirstPort, ownClusterFirstPort+ownClusterSlotPorts*ownClusterSlots-1)
	return nil
}

// clusterID returns a random KRaft cluster id (a base64url UUID, as kafka-storage random-uuid
// prints) that kafka-storage format does not mistake for an option.
func clusterID(t *testing.T) string {
	t.Helper()
	for {
		var b [16]byte
		_, err := rand.Read(b[:])
		require.NoError(t, err)
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// each runs kafka.sh cmds, one after the other, on every node concurrently; the error names
// every node whose command failed.
func (c *ownCluster) each(ctx context.Context, cmds ...string) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, b := range c.nodes {
		wg.Go(func() {
			for _, cmd := range cmds {
				if out, err := b.script(ctx, cmd); err != nil {
					errs[i] = fmt.Errorf("kafka.sh %s on node %d (%s): %w\n%s", cmd, i+1, b.addr(), err, tail(out, 8<<10))
					return
				}
			}
		})
	}
	wg.Wait()
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "\n"))
	}
	return nil
}

// addrs returns the bootstrap list: every node's PLAINTEXT address.
func (c *ownCluster) addrs() []string {
	var out []string
	for _, b := range c.nodes {
		out = append(out, b.addr())
	}
	return out
}

// node returns node id (1-based, the node.id of the broker).
func (c *ownCluster) node(id int32) *ownBroker { return c.nodes[id-1] }

// client returns a client of the cluster, closed when the test ends.
func (c *ownCluster) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addrs()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates a topic with partitions of rf replicas each and waits until every
// partition has a leader; it goes with the cluster's state.
func (c *ownCluster) createTopic(t *testing.T, adm *kadm.Client, partitions int32, rf int16) string {
	t.Helper()
	topic := uniqueName(t, "kbr")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, rf, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error(), "create topic %s (rf %d) on %v", topic, rf, c.addrs())
	require.Truef(t, waitUntil(30*time.Second, 200*time.Millisecond, func() bool {
		leaders, err := c.leaders(ctx, adm, topic)
		return err == nil && len(leaders) == int(partitions) && !containsLeader(leaders, -1)
	}), "the partitions of %s have no leaders 30s after it was created", topic)
	return topic
}

// leaders returns the leader's node id of every partition of topic (-1: no leader).
func (c *ownCluster) leaders(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int32, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	d, ok := td[topic]
	if !ok {
		return nil, fmt.Errorf("topic %s missing from the metadata", topic)
	}
	if d.Err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, d.Err)
	}
	out := map[int32]int32{}
	for p, pd := range d.Partitions {
		out[p] = pd.Leader
	}
	return out, nil
}

// partitionsLedBy returns the partitions of topic whose leader is node id, sorted.
func (c *ownCluster) partitionsLedBy(t *testing.T, adm *kadm.Client, topic string, id int32) []int32 {
	t.Helper()
	leaders, err := c.leaders(t.Context(), adm, topic)
	require.NoError(t, err)
	var out []int32
	for p := range int32(len(leaders)) {
		if leaders[p] == id {
			out = append(out, p)
		}
	}
	return out
}

// waitLeaderless waits until the partitions ps of topic have no leader (after their only
// replica's broker was killed and the controller fenced it).
func (c *ownCluster) waitLeaderless(t *testing.T, adm *kadm.Client, topic string, ps []int32, timeout time.Duration) {
	t.Helper()
	var last map[int32]int32
	ok := waitUntil(timeout, 100*time.Millisecond, func() bool {
		leaders, err := c.leaders(t.Context(), adm, topic)
		if err != nil {
			return false
		}
		last = leaders
		for _, p := range ps {
			if leaders[p] != -1 {
				return false
			}
		}
		return true
	})
	require.Truef(t, ok, "partitions %v of %s still have leaders %v after %s", ps, topic, last, timeout)
}

func containsLeader(leaders map[int32]int32, id int32) bool {
	for _, l := range leaders {
		if l == id {
			return true
		}
	}
	return false
}

// kill SIGKILLs the broker (kafka.sh kill waits until it is gone).
func (b *ownBroker) kill(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ownBrokerScriptTimeout)
	defer cancel()
	out, err := b.script(ctx, "kill")
	require.NoErrorf(t, err, "kafka.sh kill of %s:\n%s", b.addr(), out)
	require.Falsef(t, portInUse(b.port), "%s still accepts connections after kafka.sh kill", b.addr())
	t.Logf("broker %s killed", b.addr())
}
