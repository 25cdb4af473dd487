package tests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLeaderlessPartitionsDoNotStopTheOthers runs a 3-node cluster, topics of replication
// factor 1 spread over its brokers, and SIGKILLs one broker for about 25s, so the partitions it
// led have no leader (issue 15, defects 10 and 11). One outage serves three runs of the
// compiled binary:
//
//   - slots: a bounded run of 6 partitions with max_in_flight 4, a quarter read when the broker
//     dies: the 4 healthy partitions are read to their end while it is down (defect 11: the
//     failing partitions' ranges took every slot), and the run ends with nothing missing once
//     it is back.
//   - continuous: a run caught up when the broker dies keeps delivering the records produced to
//     the healthy partitions while it is down, early and late in the outage (defect 10: listing
//     the watermarks failed as a whole on the leaderless partitions' shard error).
//   - bounded: a stop_at: end run started while partitions have no leader delivers the healthy
//     partitions while the broker is down (defect 10: Connect failed on the shard error), and
//     once it is back reads the rest and ends with nothing missing.
func TestLeaderlessPartitionsDoNotStopTheOthers(t *testing.T) {
	t.Parallel()
	const (
		partitions  = 6
		slotsPer    = 3000 // records a partition of the slots topic
		contPer     = 1000 // records a partition of the listing topic before the outage
		duringPer   = 500  // records produced to each healthy partition early in the outage
		laterPer    = 100  // and later in it
		laterAt     = 12 * time.Second
		minOutage   = 20 * time.Second
		maxOutage   = 30 * time.Second
		runDeadline = 4 * time.Minute
	)
	c := newOwnCluster(t, 3)
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(100*time.Millisecond)))
	slotsTopic := c.createTopic(t, adm, partitions, 1)
	listTopic := c.createTopic(t, adm, partitions, 1)
	// Small producer batches and fetches: the cached clients cannot hold a partition's records,
	// so the readers fetch during the outage.
	slotsProd := c.produce(t, slotsTopic, c.records(slotsTopic, partitions, 0, slotsPer), 4096)
	listProd := c.produce(t, listTopic, c.records(listTopic, partitions, 0, contPer), 1<<20)

	// The continuous run, caught up before the outage.
	contDir := t.TempDir()
	contOut := filepath.Join(contDir, "out.jsonl")
	contCfg := writeRunConfig(t, contDir, inputConfig{
		"seed_brokers":      c.addrs(),
		"topics":            []string{listTopic},
		"start_from":        "earliest",
		"max_range_records": 500,
		"poll_interval":     "200ms",
	}, contOut, withLeanPipeline(2, ""))
	cont := startConnect(t, runDeadline, nil, "run", contCfg)
	if !cont.waitFor(60*time.Second, func() bool { return completeLines(contOut) >= partitions*contPer }) {
		res := cont.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("the continuous run did not catch up within 60s (%d of %d records)\n%s", completeLines(contOut), partitions*contPer, res)
	}

	// The slots run: a slow pipeline, a quarter read when the broker is killed.
	slotsDir := t.TempDir()
	slotsOut := filepath.Join(slotsDir, "out.jsonl")
	slotsCfg := writeRunConfig(t, slotsDir, inputConfig{
		"seed_brokers":              c.addrs(),
		"topics":                    []string{slotsTopic},
		"start_from":                "earliest",
		"stop_at":                   "end",
		"max_range_records":         250,
		"max_in_flight":             4,
		"fetch_max_partition_bytes": 16384,
	}, slotsOut, withLeanPipeline(2, sleepMillisPerRecord))
	slots := startConnect(t, runDeadline, nil, "run", slotsCfg)
	if !slots.waitFor(60*time.Second, func() bool { return completeLines(slotsOut) >= partitions*slotsPer/4 }) {
		res := slots.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("a quarter of the slots run was not written within 60s (%d lines)\n%s", completeLines(slotsOut), res)
	}

	// Kill the broker that leads partition 0 of the slots topic.
	leaders, err := c.leaders(t.Context(), adm, slotsTopic)
	require.NoError(t, err)
	victim := leaders[0]
	deadSlots := c.partitionsLedBy(t, adm, slotsTopic, victim)
	deadList := c.partitionsLedBy(t, adm, listTopic, victim)
	require.NotEmptyf(t, deadList, "broker %d leads no partition of %s (leaders %v)", victim, listTopic, leaders)
	require.Lessf(t, len(deadSlots), partitions, "broker %d leads every partition of %s", victim, slotsTopic)
	killedAt := time.Now()
	c.node(victim).kill(t)
	slotsAtKill := completeLines(slotsOut)
	c.waitLeaderless(t, adm, slotsTopic, deadSlots, 20*time.Second)
	c.waitLeaderless(t, adm, listTopic, deadList, 20*time.Second)
	leaderlessAfter := time.Since(killedAt)

	// While partitions have no leader: new records on the healthy ones, and a bounded run.
	healthyList := without(partitions, deadList)
	during := c.produce(t, listTopic, c.records(listTopic, partitions, contPer, contPer+duringPer, healthyList...), 1<<20)
	mergeProduced(listProd, during)
	boundWant := produced{} // what the bounded run reads: everything produced before it started
	mergeProduced(boundWant, listProd)
	boundDir := t.TempDir()
	boundOut := filepath.Join(boundDir, "out.jsonl")
	boundCfg := writeRunConfig(t, boundDir, inputConfig{
		"seed_brokers":      c.addrs(),
		"topics":            []string{listTopic},
		"start_from":        "earliest",
		"stop_at":           "end",
		"max_range_records": 500,
		"poll_interval":     "200ms",
	}, boundOut, withLeanPipeline(2, ""))
	bound := startConnect(t, runDeadline, nil, "run", boundCfg)

	healthySlots := without(partitions, deadSlots)
	slotsHealthy := offsetsOf(only(slotsProd, healthySlots...))
	listHealthy := offsetsOf(only(listProd, healthyList...))
	var contDone, boundDone, slotsDone, laterDone bool
	waitUntil(laterAt-time.Since(killedAt), 250*time.Millisecond, func() bool {
		contDone = contDone || hasAll(t, contOut, listHealthy)
		boundDone = boundDone || hasAll(t, boundOut, listHealthy)
		slotsDone = slotsDone || hasAll(t, slotsOut, slotsHealthy)
		return contDone && boundDone && slotsDone
	})
	// Later in the outage the continuous run still delivers what the healthy partitions get.
	time.Sleep(laterAt - time.Since(killedAt))
	later := c.produce(t, listTopic, c.records(listTopic, partitions, contPer+duringPer, contPer+duringPer+laterPer, healthyList...), 1<<20)
	mergeProduced(listProd, later)
	waitUntil(maxOutage-time.Since(killedAt), 250*time.Millisecond, func() bool {
		contDone = contDone || hasAll(t, contOut, listHealthy)
		boundDone = boundDone || hasAll(t, boundOut, listHealthy)
		slotsDone = slotsDone || hasAll(t, slotsOut, slotsHealthy)
		laterDone = laterDone || hasAll(t, contOut, offsetsOf(later))
		return contDone && boundDone && slotsDone && laterDone && time.Since(killedAt) >= minOutage
	})
	outage := time.Since(killedAt)
	slotsDuring := completeLines(slotsOut) - slotsAtKill
	startTook := c.node(victim).start(t)
	t.Logf("broker %d killed (partitions %v of %s, %v of %s): leaderless after %s, down for %s, start took %s; "+
		"%d lines of the slots run written while it was down; healthy partitions read while it was down: continuous %v (later records %v), bounded %v, slots %v",
		victim, deadSlots, slotsTopic, deadList, listTopic, leaderlessAfter.Round(time.Millisecond), outage.Round(time.Millisecond),
		startTook.Round(time.Millisecond), slotsDuring, contDone, laterDone, boundDone, slotsDone)
	assert.Truef(t, contDone, "the continuous run did not deliver the %d records produced to the healthy partitions %v while partitions %v had no leader",
		during.count(), healthyList, deadList)
	assert.Truef(t, laterDone, "the continuous run did not deliver the %d records produced to the healthy partitions %v %s after partitions %v lost their leader",
		later.count(), healthyList, laterAt, deadList)
	assert.Truef(t, boundDone, "the bounded run started while partitions %v had no leader did not deliver the healthy partitions %v (%d records) while the broker was down",
		deadList, healthyList, wantCount(listHealthy))
	assert.Truef(t, slotsDone, "the slots run did not read the healthy partitions %v (%d records) while the broker was down",
		healthySlots, wantCount(slotsHealthy))

	// Once the broker is back, the bounded runs end with nothing missing.
	for _, run := range []struct {
		name    string
		rc      *runningConnect
		out     string
		want    produced
		mayHave produced // produced after the run started: in its snapshot if its start was slow
	}{{"slots", slots, slotsOut, slotsProd, nil}, {"bounded", bound, boundOut, boundWant, later}} {
		res, exited := waitExit(run.rc, 90*time.Second)
		require.Truef(t, exited, "the %s run did not end within 90s after the broker came back\n%s", run.name, res)
		requireExitZero(t, res)
		require.Emptyf(t, matchingLines(res.Stdout+res.Stderr, inputStopped), "the %s run's input stopped on an error\n%s", run.name, res)
		dups := requireAtLeastOnce(t, offsetsOf(run.want), withoutOffsets(readOutput(t, run.out), run.mayHave))
		t.Logf("%s run: exit 0 in %s, %d records, %d duplicates", run.name, res.Duration.Round(time.Millisecond), run.want.count(), dups)
	}

	// And the continuous run reads the records of every partition, old and new.
	after := c.produce(t, listTopic, c.records(listTopic, partitions, contPer+duringPer+laterPer, contPer+duringPer+laterPer+100), 1<<20)
	mergeProduced(listProd, after)
	if !cont.waitFor(60*time.Second, func() bool { return hasAll(t, contOut, offsetsOf(listProd)) }) {
		res := cont.stop(syscall.SIGTERM, 30*time.Second)
		t.Fatalf("the continuous run did not deliver every record within 60s after the broker came back\n%s", res)
	}
	res := cont.stop(syscall.SIGTERM, 30*time.Second)
	require.Emptyf(t, matchingLines(res.Stdout+res.Stderr, inputStopped), "the continuous run's input stopped on an error\n%s", res)
	dups := requireAtLeastOnce(t, offsetsOf(listProd), readOutput(t, contOut))
	t.Logf("continuous run: %d records, %d duplicates", listProd.count(), dups)
}

// records returns records [from, to) of each partition of topic (all partitions, or only
// those listed), keys and values naming the partition and index.
func (c *ownCluster) records(topic string, partitions int32, from, to int, only ...int32) []*kgo.Record {
	pad := strings.Repeat("x", 80)
	var out []*kgo.Record
	for i := from; i < to; i++ {
		for p := range partitions {
			if len(only) > 0 && !slices.Contains(only, p) {
				continue
			}
			out = append(out, &kgo.Record{
				Topic:     topic,
				Partition: p,
				Key:       fmt.Appendf(nil, "k-%d-%d", p, i),
				Value:     fmt.Appendf(nil, "%d-%d-%s", p, i, pad),
			})
		}
	}
	return out
}

// produce writes records in producer batches of at most batchBytes and returns what the
// brokers acknowledged.
func (c *ownCluster) produce(t *testing.T, topic string, records []*kgo.Record, batchBytes int32) produced {
	t.Helper()
	cl := c.client(t, producerOpts(kgo.ProducerBatchMaxBytes(batchBytes))...)
	prod := produceAll(t, cl, records)
	require.Equalf(t, len(records), prod.count(), "records of %s acknowledged", topic)
	return prod
}

// without returns the partitions [0, partitions) not in ps.
func without(partitions int32, ps []int32) []int32 {
	var out []int32
	for p := range partitions {
		if !slices.Contains(ps, p) {
			out = append(out, p)
		}
	}
	return out
}

// hasAll reports whether the complete lines of the output file hold every offset in want.
func hasAll(t *testing.T, path string, want map[int32][]int64) bool {
	t.Helper()
	got := countOffsets(readCompleteLines(t, path, func(r outRecord) bool { return r.P.Valid && r.O.Valid }, "has no kafka_partition/kafka_offset"))
	for p, offs := range want {
		for _, o := range offs {
			if got[p][o] == 0 {
				return false
			}
		}
	}
	return true
}

// withoutOffsets returns recs without the records at offsets of p.
func withoutOffsets(recs []outRecord, p produced) []outRecord {
	var out []outRecord
	for _, r := range recs {
		if _, ok := p[int32(r.P.V)][r.O.V]; !ok {
			out = append(out, r)
		}
	}
	return out
}
