package tests

import (
	"fmt"
	"maps"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tests in this file check what the input does when the log under it changes shape: offsets
// deleted before they were read (on_data_loss: fail or skip), a topic deleted and recreated,
// compaction, transactions (committed, aborted, still open) and partitions added while it runs.

// TestDeleteRecordsAheadOfReaderOnDataLoss deletes records (DeleteRecords up to offset 3000) of
// a one-partition topic (4,000 records of 1 KiB) ahead of a slow bounded run with a consumer
// group (ordered, one range in flight, one pipeline thread draining about 1,000 records/s).
//
// on_data_loss: fail: the run exits non-zero within 30s, a log line names "<topic>/0" and the
// lost span "[A, 3000)", nothing of [A, 3000) was written, nothing twice, and the group did not
// commit past A.
//
// on_data_loss: skip: the run exits 0; exactly one warning
// `Data loss on <topic>/0: offsets [A, 3000) <reason>; skipping them (on_data_loss: skip)`;
// [0, A) and [3000, 4000) are written exactly once and nothing else; the summary line ends with
// ", 3000-A lost offsets"; kafka_batched_ranges_lost_offsets_total{topic,partition="0"} is
// 3000-A; the group committed 4000.
func TestDeleteRecordsAheadOfReaderOnDataLoss(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"fail", "skip"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			requireBroker(t)
			const (
				perPart  = 4000
				deleteAt = 3000
			)
			topic := createTopic(t, 1)
			producePadded(t, topic, 1, perPart)
			group, adm := newGroup(t)

			in := slowInput(topic, "end", 1)
			in["ordered"] = true
			in["consumer_group"] = group
			in["start_from"] = "earliest"
			in["commit_period"] = "200ms"
			in["on_data_loss"] = policy
			addr := freeLoopbackAddr(t)
			rc, out := startRun(t, in, 1, slowBatch, stopMapping, withPrometheus(addr))
			if !rc.waitFor(30*time.Second, func() bool { return completeLines(out) >= 100 }) {
				res := rc.stop(syscall.SIGTERM, 30*time.Second)
				t.Fatalf("%d of 100 records written within 30s\n%s", completeLines(out), res)
			}

			ctx, cancel := contextTimeout(30 * time.Second)
			defer cancel()
			del := kadm.Offsets{}
			del.Add(kadm.Offset{Topic: topic, Partition: 0, At: deleteAt})
			resp, err := adm.DeleteRecords(ctx, del)
			require.NoError(t, err)
			require.NoError(t, resp.Error())
			before := completeLines(out)
			require.Lessf(t, before, 2500, "the run read too fast for this test (%d records before the delete)", before)

			fams, exited := scrapeUntilExit(t, rc, addr, 60*time.Second)
			res := rc.stop(syscall.SIGTERM, 30*time.Second)
			require.Truef(t, exited, "the run did not end within 60s of deleting %s/0 up to %d", topic, deleteAt)
			log := res.Stdout + res.Stderr
			recs := readStopLines(t, out)
			requireNoDuplicates(t, recs)

			if policy == "fail" {
				require.NotEqualf(t, 0, res.ExitCode, "on_data_loss: fail: deleting %s/0 up to %d before it was read must fail the run", topic, deleteAt)
				var found *lostSpan
				for _, s := range lostSpans(log, topic) {
					if s.Partition == 0 && s.To == deleteAt && s.From < deleteAt {
						found = &s
						break
					}
				}
				require.NotNilf(t, found, "no log line names the lost span %s/0 ... [A, %d)", topic, deleteAt)
				require.Zerof(t, writtenIn(recs, topic, 0, found.From, deleteAt),
					"records of %s/0 in the span [%d, %d) reported lost were written", topic, found.From, deleteAt)
				fctx, fcancel := contextTimeout(30 * time.Second)
				defer fcancel()
				committed, err := fetchCommitted(fctx, adm, group, topic)
				require.NoError(t, err)
				require.LessOrEqualf(t, committed[0], found.From, "on_data_loss: fail committed past the start of the lost span")
				t.Logf("fail: exit %d, %d written (%d before the delete), lost span [%d, %d): %s", res.ExitCode, len(recs), before, found.From, deleteAt, found.Line)
				return
			}

			requireExitZero(t, res)
			spans := skippedSpans(t, log, topic)
			require.Lenf(t, spans, 1, "want exactly one warning matching %s", skipWarning(topic))
			sp := spans[0]
			require.Equal(t, int32(0), sp.Partition, "partition of the skipped span")
			require.Equalf(t, int64(deleteAt), sp.To, "end of the skipped span (the new log start): %s", sp.Line)
			require.Lessf(t, sp.From, int64(deleteAt), "start of the skipped span: %s", sp.Line)
			require.GreaterOrEqualf(t, sp.From, int64(before), "the span starts below what was written before the delete: %s", sp.Line)
			require.Regexpf(t, warnLevel, sp.Line, "the skip message is a warning")

			want := map[int32][]int64{}
			for o := int64(0); o < perPart; o++ {
				if o < sp.From || o >= deleteAt {
					want[0] = append(want[0], o)
				}
			}
			requireExactlyOnce(t, want, recs)
			lost := deleteAt - sp.From
			requireLostInSummary(t, log, lost)
			require.NotNil(t, fams, "/metrics never answered")
			v, ok := metricValue(fams, "kafka_batched_ranges_lost_offsets_total", map[string]string{"topic": topic, "partition": "0"})
			require.True(t, ok, "kafka_batched_ranges_lost_offsets_total{topic=%q,partition=\"0\"} missing", topic)
			require.Equal(t, float64(lost), v, "kafka_batched_ranges_lost_offsets_total")
			requireCommitted(t, adm, group, topic, map[int32]int64{0: perPart})
			t.Logf("skip: %d written (%d before the delete), skipped [%d, %d) = %d offsets: %s", len(recs), before, sp.From, deleteAt, lost, sp.Line)
		})
	}
}

// TestTopicRecreatedWhileReadingOnDataLoss deletes the only topic (2 partitions of 2,000 records
// of 1 KiB) of a slow continuous run (stop_at: never, consumer_cache capacity 0, ordered) once 200
// records are written, recreates it with the same name and partitions and produces 100 new
// records ("new-<i>") to each partition.
//
// on_data_loss: fail: the run exits non-zero within 30s, a log line names "<topic>/<p>" with the
// unread span "[A, 2000)" of a partition, and no old record of that span was written.
//
// on_data_loss: skip: every new record is written exactly once (read from offset 0 of the new
// topic) within 60s while the process runs; SIGTERM ends it with exit 0; each partition has
// exactly one warning `Data loss on <topic>/<p>: offsets [A, 2000) ...; skipping them
// (on_data_loss: skip)`, the old records written are exactly [0, A) of each partition, and the
// summary counts the sum of 2000-A.
func TestTopicRecreatedWhileReadingOnDataLoss(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"fail", "skip"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			requireBroker(t)
			const (
				partitions = 2
				perPart    = 2000
				// More new records than any reader's position in the old topic, so a
				// reader that kept its old position on the new topic would skip some.
				newPerPart = 1000
			)
			topic := createTopic(t, partitions)
			producePadded(t, topic, partitions, perPart)
			oldEnds := endOffsets(t, topic)
			adm := newAdmin(t)

			in := slowInput(topic, "never", partitions)
			in["ordered"] = true
			in["consumer_cache"] = map[string]any{"capacity": 0}
			in["on_data_loss"] = policy
			rc, out := startRun(t, in, 1, slowBatch, valueMapping)
			if !rc.waitFor(30*time.Second, func() bool { return completeLines(out) >= 200 }) {
				res := rc.stop(syscall.SIGTERM, 30*time.Second)
				t.Fatalf("%d of 200 records written within 30s\n%s", completeLines(out), res)
			}

			ctx, cancel := contextTimeout(60 * time.Second)
			defer cancel()
			dr, err := adm.DeleteTopics(ctx, topic)
			require.NoError(t, err)
			require.NoError(t, dr.Error())
			deleted := time.Now()
			before := completeLines(out)
			require.Lessf(t, before, perPart, "the run read too fast for this test (%d records before the delete)", before)
			require.Eventuallyf(t, func() bool {
				td, err := adm.ListTopics(ctx, topic)
				return err == nil && (!td.Has(topic) || td[topic].Err != nil)
			}, 20*time.Second, 100*time.Millisecond, "topic %s still listed after DeleteTopics", topic)
			recreateTopic(t, adm, topic, partitions)
			var fresh []*kgo.Record
			for i := range partitions * newPerPart {
				fresh = append(fresh, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(fmt.Sprintf("new-%d", i))})
			}
			newProd := produceAll(t, producer(t), fresh)
			require.Equal(t, partitions*newPerPart, newProd.count())

			isNew := func(l valueLine) bool { return strings.HasPrefix(l.V, "new-") }
			if policy == "fail" {
				res, exited := waitExit(rc, stopWithin)
				require.Truef(t, exited, "the run did not end within %s of deleting and recreating %s", stopWithin, topic)
				require.NotEqualf(t, 0, res.ExitCode, "on_data_loss: fail: %s was deleted with unread records", topic)
				lines := readValueLines(t, out)
				var found *lostSpan
				for _, s := range lostSpans(res.Stdout+res.Stderr, topic) {
					if end, ok := oldEnds[s.Partition]; ok && s.To == end && s.From < s.To {
						found = &s
						break
					}
				}
				require.NotNilf(t, found, "no log line names a partition of %s with its unread span [A, %v)", topic, oldEnds)
				for _, l := range lines {
					if !isNew(l) && int32(l.P.V) == found.Partition && l.O.V >= found.From && l.O.V < found.To {
						t.Fatalf("old record %s/%d@%d in the span [%d, %d) reported lost was written", l.T, l.P.V, l.O.V, found.From, found.To)
					}
				}
				t.Logf("fail: exit %d %s after the delete; %d lines written; %s", res.ExitCode, time.Since(deleted).Round(time.Millisecond), len(lines), found.Line)
				return
			}

			countNew := func() int {
				n := 0
				for _, l := range readValueLines(t, out) {
					if isNew(l) {
						n++
					}
				}
				return n
			}
			arrived := rc.waitFor(60*time.Second, func() bool { return countNew() >= newProd.count() })
			running := !rc.exited()
			res := rc.stop(syscall.SIGTERM, 30*time.Second)
			require.Truef(t, arrived, "%d of the %d records of the recreated topic written within 60s", countNew(), newProd.count())
			require.True(t, running, "the process exited after the topic was recreated")
			requireExitZero(t, res)

			log := res.Stdout + res.Stderr
			spans := skippedSpans(t, log, topic)
			require.Lenf(t, spans, partitions, "want exactly one warning per partition matching %s", skipWarning(topic))
			lines := readValueLines(t, out)
			var oldLines, newLines []valueLine
			for _, l := range lines {
				if isNew(l) {
					newLines = append(newLines, l)
				} else {
					oldLines = append(oldLines, l)
				}
			}
			requireExactlyOnce(t, offsetsOf(newProd), valueRecords(newLines))
			requireValuesMatch2(t, newProd, newLines)
			wantOld := map[int32][]int64{}
			var lost int64
			seen := map[int32]bool{}
			for _, sp := range spans {
				require.Falsef(t, seen[sp.Partition], "two warnings for partition %d", sp.Partition)
				seen[sp.Partition] = true
				require.Equalf(t, oldEnds[sp.Partition], sp.To, "end of the skipped span of partition %d: %s", sp.Partition, sp.Line)
				require.Lessf(t, sp.From, sp.To, "skipped span: %s", sp.Line)
				for o := int64(0); o < sp.From; o++ {
					wantOld[sp.Partition] = append(wantOld[sp.Partition], o)
				}
				lost += sp.To - sp.From
			}
			requireExactlyOnce(t, wantOld, valueRecords(oldLines))
			requireLostInSummary(t, log, lost)
			t.Logf("skip: %d old and %d new records written; %d offsets skipped: %v", len(oldLines), len(newLines), lost, spans)
		})
	}
}

// requireValuesMatch2 checks the value of every line against the produced record at its offset.
func requireValuesMatch2(t *testing.T, want produced, lines []valueLine) {
	t.Helper()
	for _, l := range lines {
		w, ok := want[int32(l.P.V)][l.O.V]
		require.Truef(t, ok, "unexpected record %d/%d %q", l.P.V, l.O.V, l.V)
		require.Equalf(t, string(w.Value), l.V, "value of %d/%d", l.P.V, l.O.V)
	}
}

// TestCompactedTopicBoundedRead produces 11 rounds of 100 records with 20 repeating keys to each
// of 2 partitions of a compacted topic (segment.ms 100, min.cleanable.dirty.ratio 0.01,
// delete.retention.ms 100, min.compaction.lag.ms 0), each round after segment.ms so it starts a
// new segment, and waits (up to 75s) until a plain kgo consumer sees offsets missing in every
// partition: the broker really compacted. Then a bounded run (ranges of 37 records, so most
// ranges start and end on removed offsets) must exit 0 and write no record twice, only offsets
// the plain consumer saw, each with its produced value, and the latest value of every key; no
// line may report data loss and the summary (if it counts) must count 0 lost offsets.
func TestCompactedTopicBoundedRead(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const (
		partitions = 2
		rounds     = 11
		perRound   = 100
		keys       = 20
	)
	topic := createTopicWithConfigs(t, partitions, map[string]string{
		"cleanup.policy":            "compact",
		"segment.ms":                "100",
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       "100",
		"min.compaction.lag.ms":     "0",
		"max.compaction.lag.ms":     "1000",
	})
	cl := producer(t)
	prod := produced{}
	for r := range rounds {
		var recs []*kgo.Record
		for p := range partitions {
			for i := range perRound {
				recs = append(recs, &kgo.Record{
					Topic:     topic,
					Partition: int32(p),
					Key:       []byte(fmt.Sprintf("k-%d", i%keys)),
					Value:     []byte(fmt.Sprintf("r%d-p%d-i%d", r, p, i)),
				})
			}
		}
		mergeProduced(prod, produceAll(t, cl, recs))
		time.Sleep(150 * time.Millisecond) // past segment.ms: the next round rolls a segment
	}
	ends := endOffsets(t, topic)
	// latest[p][key] is the offset of the key's last value in partition p.
	latest := map[int32]map[string]int64{}
	for p, m := range prod {
		latest[p] = map[string]int64{}
		for o, r := range m {
			if cur, ok := latest[p][r.Key]; !ok || o > cur {
				latest[p][r.Key] = o
			}
		}
	}

	var present map[int32]map[int64]bool
	start := time.Now()
	compacted := waitUntil(75*time.Second, 2*time.Second, func() bool {
		present = presentOffsets(t, topic, ends)
		for p, end := range ends {
			if int64(len(present[p])) >= end {
				return false
			}
		}
		return true
	})
	require.Truef(t, compacted, "the broker did not compact %s within 75s:%s", topic, describeGaps(present, ends))
	t.Logf("compacted after %s:%s", time.Since(start).Round(time.Second), describeGaps(present, ends))

	// The default policy (fail) must not stop on compaction gaps, and skip must not count them.
	for _, policy := range []string{"default", "skip"} {
		t.Run(policy, func(t *testing.T) {
			in := baseInput(topic)
			in["start_from"] = "earliest"
			in["stop_at"] = "end"
			in["max_range_records"] = 37
			in["max_in_flight"] = 4
			if policy != "default" {
				in["on_data_loss"] = policy
			}
			recs, res := runInputResult(t, in, 90*time.Second, withMappingPipeline(2, "", valueMapping))
			log := res.Stdout + res.Stderr
			require.Emptyf(t, matchingLines(log, dataLossLine), "compaction reported as data loss")
			require.Emptyf(t, matchingLines(log, regexp.MustCompile(`\blevel=error\b`)), "errors logged on a compacted topic")
			if policy == "skip" {
				requireLostInSummary(t, log, 0)
			} else if n, ok := lostInSummary(t, log); ok {
				require.Zerof(t, n, "lost offsets counted for compaction")
			}

			got := countOffsets(recs)
			for p, m := range got {
				for o, n := range m {
					require.Equalf(t, 1, n, "%d/%d written %d times", p, o, n)
					require.Truef(t, present[p][o], "%d/%d written but the plain consumer had not seen it (compacted before the run)", p, o)
				}
			}
			requireValuesMatch(t, prod, recs)
			for p, m := range latest {
				for k, o := range m {
					require.Equalf(t, 1, got[p][o], "latest value of key %q in partition %d (offset %d) not written", k, p, o)
				}
			}
			t.Logf("compacted read (%s): %d records written of %d produced (%d present before the run)", policy, len(recs), prod.count(), len(present[0])+len(present[1]))
		})
	}
}

// TestTransactionsCommittedAbortedAndOpen builds, on 3 partitions (kgo transactional producer
// plus a plain one):
//
//	p0: plain x5, committed x4, COMMIT, aborted x3, ABORT, after x2
//	p1: plain x5, committed x4, COMMIT, aborted x3, ABORT, open x3 (transaction left open), after x2
//	p2: plain x5, committed x4, COMMIT, aborted x3, ABORT, open x3 (transaction left open), after x2
//
// and reads it while the third transaction is still open. read_committed (bounded, ranges of 3):
// exit 0, exactly plain, committed and p0's after records (p1 and p2 end at their last stable
// offset, the first open record); no aborted or open record. read_uncommitted: exit 0, every
// data record exactly once (aborted and open included) and no control record.
func TestTransactionsCommittedAbortedAndOpen(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	const partitions = 3
	topic := createTopic(t, partitions)
	recs := func(kind string, n int, parts ...int32) []*kgo.Record {
		var out []*kgo.Record
		for _, p := range parts {
			for i := range n {
				v := fmt.Sprintf("%s-%d-%d", kind, p, i)
				out = append(out, &kgo.Record{Topic: topic, Partition: p, Key: []byte(v), Value: []byte(v)})
			}
		}
		return out
	}
	plain := producer(t)
	byKind := map[string]produced{}
	byKind["plain"] = produceAll(t, plain, recs("plain", 5, 0, 1, 2))

	txn := producer(t, kgo.TransactionalID(uniqueName(t, "txn")), kgo.TransactionTimeout(5*time.Minute))
	ctx := t.Context()
	inTxn := func(r []*kgo.Record) produced {
		t.Helper()
		require.NoError(t, txn.BeginTransaction())
		return produceAll(t, txn, r)
	}
	byKind["committed"] = inTxn(recs("committed", 4, 0, 1, 2))
	require.NoError(t, txn.EndTransaction(ctx, kgo.TryCommit))
	byKind["aborted"] = inTxn(recs("aborted", 3, 0, 1, 2))
	require.NoError(t, txn.EndTransaction(ctx, kgo.TryAbort))
	byKind["open"] = inTxn(recs("open", 3, 1, 2))
	t.Cleanup(func() {
		ctx, cancel := contextTimeout(30 * time.Second)
		defer cancel()
		if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Logf("abort the open transaction: %v", err)
		}
	})
	byKind["after"] = produceAll(t, plain, recs("after", 2, 0, 1, 2))

	all := produced{}
	for _, p := range byKind {
		mergeProduced(all, p)
	}
	wantEnd := map[int32]int64{}
	for p, m := range all {
		for o := range m {
			wantEnd[p] = max(wantEnd[p], o+1)
		}
	}
	require.Equal(t, map[int32]int64{0: 16, 1: 19, 2: 19}, wantEnd, "unexpected log layout")
	require.Eventuallyf(t, func() bool { return maps.Equal(endOffsets(t, topic), wantEnd) },
		30*time.Second, 200*time.Millisecond, "end offsets never reached %v", wantEnd)

	for _, policy := range []string{"default", "skip"} {
		t.Run("read_committed_"+policy, func(t *testing.T) {
			in := baseInput(topic)
			in["start_from"] = "earliest"
			in["stop_at"] = "end"
			in["isolation_level"] = "read_committed"
			in["max_range_records"] = 3
			if policy != "default" {
				in["on_data_loss"] = policy
			}
			got, res := runInputResult(t, in, 60*time.Second)
			log := res.Stdout + res.Stderr
			require.Emptyf(t, matchingLines(log, dataLossLine), "aborted records or markers reported as data loss")
			if policy == "skip" {
				requireLostInSummary(t, log, 0)
			}
			want := produced{}
			mergeProduced(want, byKind["plain"])
			mergeProduced(want, byKind["committed"])
			mergeProduced(want, only(byKind["after"], 0))
			for _, r := range got {
				assert.Falsef(t, strings.HasPrefix(r.V, "aborted-") || strings.HasPrefix(r.V, "open-"),
					"aborted or open record delivered under read_committed: %d/%d %q", r.P.V, r.O.V, r.V)
			}
			requireExactlyOnce(t, offsetsOf(want), got)
			requireValuesMatch(t, want, got)
		})
	}

	t.Run("read_uncommitted", func(t *testing.T) {
		in := baseInput(topic)
		in["start_from"] = "earliest"
		in["stop_at"] = "end"
		in["isolation_level"] = "read_uncommitted"
		in["max_range_records"] = 3
		got := runInput(t, in, 60*time.Second)
		requireExactlyOnce(t, offsetsOf(all), got)
		requireValuesMatch(t, all, got)
	})

	// A group offset above the last stable offset (a read_uncommitted
	// consumer committed past the open transaction of partition 1) is valid
	// under read_committed: the partition waits for the transaction instead
	// of the run failing as if the log were truncated.
	t.Run("read_committed_group_offset_above_last_stable_offset", func(t *testing.T) {
		group, adm := newGroup(t)
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: topic, Partition: 1, At: 17, LeaderEpoch: -1})
		cctx, cancel := contextTimeout(30 * time.Second)
		defer cancel()
		resp, err := adm.CommitOffsets(cctx, group, offs)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
		in := baseInput(topic)
		in["consumer_group"] = group
		in["stop_at"] = "end"
		in["isolation_level"] = "read_committed"
		in["max_range_records"] = 3
		got, res := runInputResult(t, in, 60*time.Second)
		assert.Contains(t, res.Stdout, "committed offset 17 is above the last stable offset 14; waiting for open transactions to end")
		want := produced{}
		for _, kind := range []string{"plain", "committed"} {
			mergeProduced(want, only(byKind[kind], 0, 2))
		}
		mergeProduced(want, only(byKind["after"], 0))
		requireExactlyOnce(t, offsetsOf(want), got)
	})
}

// TestNeverModeWithoutGroupReadsAddedPartitions runs stop_at: never without a consumer group
// (poll_interval 1s) on a 2-partition topic, adds 2 partitions while it runs and produces 100
// records to each of the 4 partitions right away (before the input's next poll): every record
// in the new partitions must be written, from their first offset, exactly once; SIGTERM ends the
// run with exit 0. With start_from: earliest the records produced before the start are written
// too; with start_from: latest only those produced after it (a partition created later is read
// from its first offset whatever start_from says).
func TestNeverModeWithoutGroupReadsAddedPartitions(t *testing.T) {
	t.Parallel()
	for _, startFrom := range []string{"earliest", "latest"} {
		t.Run(startFrom, func(t *testing.T) {
			t.Parallel()
			requireBroker(t)
			topic := createTopic(t, 2)
			adm := newAdmin(t)
			want := produced{}
			before := produceSpread(t, topic, []int32{0, 1}, 200, "before")
			if startFrom == "earliest" {
				mergeProduced(want, before)
			}

			in := baseInput(topic)
			in["start_from"] = startFrom
			in["stop_at"] = "never"
			in["poll_interval"] = "1s"
			in["max_range_records"] = 50
			rc, out := startRun(t, in, 2, "", leanMapping)
			if startFrom == "latest" {
				// The input snapshots its start offsets when it starts: wait for a sign
				// of life before producing what it must read.
				time.Sleep(3 * time.Second)
			}
			mergeProduced(want, produceSpread(t, topic, []int32{0, 1}, 100, "while-running"))
			wait := func(what string) {
				t.Helper()
				if !rc.waitFor(60*time.Second, func() bool { return completeLines(out) >= want.count() }) {
					res := rc.stop(syscall.SIGTERM, 30*time.Second)
					t.Fatalf("%s: %d of %d records written within 60s\n%s", what, completeLines(out), want.count(), res)
				}
			}
			wait("records of the original partitions")

			ctx, cancel := contextTimeout(30 * time.Second)
			defer cancel()
			cp, err := adm.CreatePartitions(ctx, 2, topic)
			require.NoError(t, err)
			require.NoError(t, cp.Error())
			require.Eventually(t, func() bool {
				td, err := adm.ListTopics(ctx, topic)
				return err == nil && len(td[topic].Partitions) == 4
			}, 20*time.Second, 50*time.Millisecond, "metadata never showed 4 partitions")
			added := time.Now()
			mergeProduced(want, produceSpread(t, topic, []int32{0, 1, 2, 3}, 100, "new-partitions"))
			t.Logf("produced to the new partitions %s after they were listed", time.Since(added).Round(time.Millisecond))
			wait("records of the partitions added while running")
			time.Sleep(1 * time.Second) // anything written twice would show now

			res := rc.stop(syscall.SIGTERM, 45*time.Second)
			require.Falsef(t, res.TimedOut, "connect did not stop within 45s of SIGTERM")
			require.Equalf(t, 0, res.ExitCode, "exit code after SIGTERM")
			requireExactlyOnce(t, offsetsOf(want), readOutput(t, out))
		})
	}
}
