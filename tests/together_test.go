package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file split one backfill between workers the way users do: N connect processes
// with one config (a consumer group, stop_at: end, the defaults otherwise) started at once. The
// group's first rebalances move partitions between them at the start; a graceful rebalance
// delivers nothing twice, so together they write every record exactly once (issue 50, defect 3:
// two processes started at once wrote 20,000 of 50,000 records twice).

const (
	togetherPartitions = 4
	togetherPerPart    = 12_500 // 50,000 records: two ranges of the default max_range_records per partition
	// togetherSpread is how far apart the first and the last worker start: the first joins the
	// group alone (the test broker's group.initial.rebalance.delay.ms is 0) and is assigned every
	// partition, the others join within a second.
	togetherSpread = 900 * time.Millisecond
)

// togetherPace makes the pipeline write about 500 records a second per thread (a sleep of 2 ms
// per record before each batch's first message), as a slow output does: a batch of a whole range
// (10,000 records) then takes 20 s, twice the default revoke_drain_timeout, so a worker that
// handed a batch out before its partition moved cannot drain it in time.
const togetherPace = `${! if batch_index() == 0 { "%vms".format(batch_size() * 2) } else { "0s" } }`

// togetherInput is a bounded group read of topic with the input's defaults, as a user writes it
// to split a backfill.
func togetherInput(topic, group string) inputConfig {
	in := baseInput(topic)
	in["consumer_group"] = group
	in["stop_at"] = "end"
	return in
}

// settledLine matches the log line of a worker whose first assignment settled.
var settledLine = regexp.MustCompile(`the assignment settled [^;]*`)

// TestWorkersStartedTogetherDeliverEachRecordOnce starts 2 and 4 connect processes within a second
// on one group backfill of 4 partitions x 12,500 records (and 2 under the consumer group protocol,
// KIP-848, whose members learn of a join on the broker's 5 s heartbeat), through a pipeline that
// takes 2 ms per record: each ends with exit 0, together they write every record exactly once (no
// duplicate, none lost), and the group committed every partition to its end. Before the settle,
// the first worker took every partition, handed out whole ranges, and the workers that joined read
// again what its pipeline had not acknowledged within revoke_drain_timeout (20,000 records a run).
func TestWorkersStartedTogetherDeliverEachRecordOnce(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	for _, tc := range []struct {
		workers  int
		protocol string // group_protocol
	}{{2, "classic"}, {4, "classic"}, {2, "consumer"}} {
		n := tc.workers
		t.Run(fmt.Sprintf("%d workers %s", n, tc.protocol), func(t *testing.T) {
			topic := createTopic(t, togetherPartitions)
			prod := produceSpread(t, topic, seqPartitions(togetherPartitions), togetherPerPart, "together")
			group, adm := newGroup(t)

			dir := t.TempDir()
			var ms []member
			for i := range n {
				if i > 0 {
					time.Sleep(togetherSpread / time.Duration(n-1))
				}
				out := filepath.Join(dir, fmt.Sprintf("out-%d.jsonl", i))
				in := togetherInput(topic, group)
				in["group_protocol"] = tc.protocol
				cfg := writeRunConfig(t, dir, in, out, withLeanPipeline(2, togetherPace))
				ms = append(ms, member{rc: startConnect(t, 4*time.Minute, nil, "run", cfg), out: out})
			}
			var recs []outRecord
			for i, m := range ms {
				res, exited := waitExit(m.rc, 3*time.Minute)
				require.Truef(t, exited, "worker %d did not end\n%s", i, res)
				requireExitZero(t, res)
				log := res.Stdout + res.Stderr
				mine := readOutput(t, m.out)
				recs = append(recs, mine...)
				assert.NotContainsf(t, log, "not acknowledged within revoke_drain_timeout", "worker %d handed over batches it had not drained", i)
				t.Logf("worker %d wrote %d records; %s", i, len(mine), settledLine.FindString(log))
			}
			requireExactlyOnce(t, offsetsOf(prod), recs)
			requireCommitted(t, adm, group, topic, endOffsets(t, topic))
		})
	}
}
