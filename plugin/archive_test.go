package plugin

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Archive mode: ranges handed out as archives (plugin/archive.go).

// produceValues writes n records to topic, record i to partition
// i%partitions with value value(i) and timestamp base+i ms, and returns the
// values of each partition in offset order.
func produceValues(t *testing.T, addr, topic string, partitions int32, n int, value func(i int) []byte) map[int32][][]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	base := time.UnixMilli(1_700_000_000_000)
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: value(i), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
	}
	// In 20 calls, so that a range arrives in several fetches.
	for i := 0; i < n; i += max(n/20, 1) {
		require.NoError(t, cl.ProduceSync(t.Context(), recs[i:min(i+max(n/20, 1), n)]...).FirstErr())
	}
	out := map[int32][][]byte{}
	for _, r := range recs {
		require.Equal(t, int64(len(out[r.Partition])), r.Offset, "offsets of partition %d", r.Partition)
		out[r.Partition] = append(out[r.Partition], r.Value)
	}
	return out
}

// unarchived is one record as unarchive gave it back: its piece and value.
type unarchived struct {
	partition, pieceStart int64
	index                 int // in its piece
	value                 []byte
	file                  string // tar: archive_filename
}

// byPiece returns, per partition, the values of msgs (records unarchived
// from archives) in the order of their pieces' starts: what the partition
// holds, in offset order, when every record came once.
func byPiece(t *testing.T, msgs []got) map[int32][][]byte {
	t.Helper()
	var us []unarchived
	index := map[[2]int64]int{}
	for _, g := range msgs {
		p, ok := g.meta[metaPartition].(int64)
		require.True(t, ok, "kafka_partition = %#v", g.meta[metaPartition])
		s, ok := g.meta[metaPieceStart].(int64)
		require.True(t, ok, "kafka_range_piece_start = %#v", g.meta[metaPieceStart])
		k := [2]int64{p, s}
		file, _ := g.meta["archive_filename"].(string)
		us = append(us, unarchived{partition: p, pieceStart: s, index: index[k], value: g.body, file: file})
		index[k]++
	}
	sort.SliceStable(us, func(i, j int) bool {
		if us[i].partition != us[j].partition {
			return us[i].partition < us[j].partition
		}
		return us[i].pieceStart < us[j].pieceStart
	})
	out := map[int32][][]byte{}
	for _, u := range us {
		out[int32(u.partition)] = append(out[int32(u.partition)], u.value)
		if u.file != "" {
			assert.Equal(t, strconv.FormatInt(u.pieceStart+int64(u.index), 10), u.file, "tar: a record's file is named by its offset")
		}
	}
	return out
}

// TestArchiveFormatsUnarchive runs each archive format through a Benthos
// stream whose input's processors unarchive it: the records come back, each
// once, in offset order within each partition (pieces in the order of their
// starts), and the group commits every partition's end.
func TestArchiveFormatsUnarchive(t *testing.T) {
	for _, format := range []string{archiveLines, archiveBinary, archiveJSONArray, archiveTar} {
		t.Run(format, func(t *testing.T) {
			const (
				topic      = "archived"
				partitions = 3
				n          = 3000
			)
			addr := newKafka(t, topic, partitions)
			want := produceValues(t, addr, topic, partitions, n, func(i int) []byte {
				if format == archiveBinary && i%7 == 0 {
					return fmt.Appendf(nil, "line\nbreak %d", i) // binary holds any bytes
				}
				return fmt.Appendf(nil, `"v-%d"`, i)
			})
			res := runStream(t, addr, fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ %s ]
  consumer_group: g
  stop_at: end
  max_range_records: 700
  fetch_max_partition_bytes: 2KiB
  archive:
    format: %s
    max_bytes: 4KiB
processors:
  - unarchive:
      format: %s
`, topic, format, format), nil)
			requireEnded(t, res)
			got := byPiece(t, res.msgs)
			for p := range int32(partitions) {
				require.Equal(t, len(want[p]), len(got[p]), "records of partition %d", p)
				for i := range want[p] {
					require.Equal(t, string(want[p][i]), string(got[p][i]), "partition %d, offset %d", p, i)
				}
			}
			if format == archiveTar {
				for _, g := range res.msgs {
					_, err := strconv.ParseInt(g.meta["archive_filename"].(string), 10, 64)
					require.NoError(t, err, "archive_filename is the offset")
				}
			}
			committed := committedOffsets(t, newAdmin(t, addr), "g", topic)
			for p := range int32(partitions) {
				assert.Equal(t, int64(len(want[p])), committed[p], "committed offset of partition %d", p)
			}
		})
	}
}

// archiveMsg is one archive message as delivered.
type archiveMsg struct {
	partition, rangeStart, rangeEnd, start, end, records, firstTS, lastTS int64
	body                                                                  []byte
	err                                                                   error
}

func readArchive(t *testing.T, m *service.Message) archiveMsg {
	t.Helper()
	b, err := m.AsBytes()
	require.NoError(t, err)
	return archiveMsg{
		partition: metaInt(t, m, metaPartition), rangeStart: metaInt(t, m, metaRangeStart), rangeEnd: metaInt(t, m, metaRangeEnd),
		start: metaInt(t, m, metaPieceStart), end: metaInt(t, m, metaPieceEnd), records: metaInt(t, m, metaRecords),
		firstTS: metaInt(t, m, metaFirstTS), lastTS: metaInt(t, m, metaLastTS),
		body: bytes.Clone(b), err: m.GetError(),
	}
}

// TestArchivePiecesAtTheCap: a range larger than max_bytes comes in pieces
// of at most max_bytes, cut at record boundaries, that follow each other
// from the range's start; each message's metadata says which records it
// holds (concatenate: the body is their values, one after the other).
func TestArchivePiecesAtTheCap(t *testing.T) {
	const (
		topic      = "capped"
		partitions = 2
		n          = 4000
		maxBytes   = 1000
	)
	addr := newKafka(t, topic, partitions)
	want := produceValues(t, addr, topic, partitions, n, func(i int) []byte { return fmt.Appendf(nil, "<%d>", i) })
	var (
		mu   sync.Mutex // guards msgs
		msgs []archiveMsg
	)
	res := runStream(t, addr, fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ %s ]
  stop_at: end
  max_range_records: 900
  fetch_max_partition_bytes: 1KiB
  archive:
    format: concatenate
    max_bytes: %d
`, topic, maxBytes), func(b service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range b {
			msgs = append(msgs, readArchive(t, m))
		}
		return nil
	})
	requireEnded(t, res)
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(msgs, func(a, b archiveMsg) int {
		if a.partition != b.partition {
			return int(a.partition - b.partition)
		}
		return int(a.start - b.start)
	})
	next := map[int64]int64{} // per partition, where the next piece starts
	for _, m := range msgs {
		at := fmt.Sprintf("%d/[%d,%d)", m.partition, m.start, m.end)
		require.Equal(t, next[m.partition], m.start, "piece %s does not start where the one before ended", at)
		require.LessOrEqual(t, len(m.body), maxBytes, "piece %s", at)
		require.True(t, m.rangeStart <= m.start && m.end <= m.rangeEnd, "piece %s outside its range [%d, %d)", at, m.rangeStart, m.rangeEnd)
		require.Equal(t, m.end-m.start, m.records, "piece %s: kafka_range_records", at)
		var body []byte
		for o := m.start; o < m.end; o++ {
			body = append(body, want[int32(m.partition)][o]...)
		}
		require.Equal(t, string(body), string(m.body), "piece %s", at)
		if m.end < int64(len(want[int32(m.partition)])) && m.end < m.rangeEnd {
			// Cut at the cap: the next record would not have fit.
			assert.Greater(t, len(m.body)+len(want[int32(m.partition)][m.end]), maxBytes, "piece %s cut early", at)
		}
		base := int64(1_700_000_000_000)
		assert.Equal(t, base+m.start*partitions+m.partition, m.firstTS, "piece %s first timestamp", at)
		assert.Equal(t, base+(m.end-1)*partitions+m.partition, m.lastTS, "piece %s last timestamp", at)
		next[m.partition] = m.end
	}
	for p := range int32(partitions) {
		assert.Equal(t, int64(len(want[p])), next[int64(p)], "partition %d read to its end", p)
	}
}

// TestArchiveAlignedRangesAreTheSameBytes: with align_ranges every range is
// one batch of its pieces, each on a block of max_range_records, and a
// second run (nothing committed) hands out the same pieces, byte for byte.
func TestArchiveAlignedRangesAreTheSameBytes(t *testing.T) {
	const (
		topic      = "aligned"
		partitions = 2
		n          = 3000
	)
	addr := newKafka(t, topic, partitions)
	produceValues(t, addr, topic, partitions, n, func(i int) []byte { return fmt.Appendf(nil, "value %d", i) })
	check := checkAligned(t, n, partitions)
	run := func() map[string]string {
		var (
			mu       sync.Mutex // guards files, problems
			files    = map[string]string{}
			problems []error // acknowledged anyway: a rejection would be replayed until the run times out
		)
		res := runStream(t, addr, fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ %s ]
  stop_at: end
  align_ranges: true
  max_range_records: 400
  max_in_flight: 3
  fetch_max_partition_bytes: 1KiB
  archive:
    format: tar
    max_bytes: 40KiB
`, topic), func(b service.MessageBatch) error {
			mu.Lock()
			defer mu.Unlock()
			if err := check(b, files); err != nil {
				problems = append(problems, err)
			}
			return nil
		})
		requireEnded(t, res)
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, problems)
		return files
	}
	first := run()
	require.Greater(t, len(first), 2*((n/partitions+399)/400), "40 KiB pieces of 400 tar files: more than one a range")
	assert.Equal(t, first, run(), "a re-run's pieces")
}

// checkAligned checks a batch of archives of TestArchiveAlignedRangesAreTheSameBytes
// and adds its pieces to files.
func checkAligned(t *testing.T, n, partitions int64) func(b service.MessageBatch, files map[string]string) error {
	return func(b service.MessageBatch, files map[string]string) error {
		var first archiveMsg
		records := int64(0)
		for i, m := range b {
			a := readArchive(t, m)
			records += a.records
			if err := tarTimes(a, partitions); err != nil {
				return err
			}
			if i == 0 {
				first = a
				if a.rangeStart%400 != 0 || (a.rangeEnd%400 != 0 && a.rangeEnd != n/partitions) {
					return fmt.Errorf("range [%d, %d) not on a block", a.rangeStart, a.rangeEnd)
				}
			} else if a.rangeStart != first.rangeStart || a.partition != first.partition {
				return fmt.Errorf("a batch of two ranges")
			}
			name := fmt.Sprintf("%d/%d", a.partition, a.start)
			if _, dup := files[name]; dup {
				return fmt.Errorf("piece %s twice", name)
			}
			files[name] = string(a.body)
		}
		if records != first.rangeEnd-first.rangeStart {
			return fmt.Errorf("range %d/[%d, %d) is not one batch: %d records", first.partition, first.rangeStart, first.rangeEnd, records)
		}
		return nil
	}
}

// tarTimes checks that each file of a tar archive of produceValues'
// records carries its record's timestamp, to the second: the same bytes on
// every run.
func tarTimes(a archiveMsg, partitions int64) error {
	tr := tar.NewReader(bytes.NewReader(a.body))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		o, err := strconv.ParseInt(h.Name, 10, 64)
		if err != nil {
			return err
		}
		want := time.UnixMilli(1_700_000_000_000 + o*partitions + a.partition).Unix()
		if h.ModTime.Unix() != want {
			return fmt.Errorf("file %s of piece %d/%d: time %v, want %d", h.Name, a.partition, a.start, h.ModTime, want)
		}
	}
}

// TestArchiveOrdered: with ordered, a partition's archives reach the
// pipeline one at a time, in offset order.
func TestArchiveOrdered(t *testing.T) {
	const (
		topic      = "ordered"
		partitions = 2
		n          = 2000
	)
	addr := newKafka(t, topic, partitions)
	want := produceValues(t, addr, topic, partitions, n, func(i int) []byte { return fmt.Appendf(nil, "%d", i) })
	var (
		mu     sync.Mutex // guards seen, inside
		seen   = map[int64][]string{}
		inside = map[int64]int{}
	)
	res := runStream(t, addr, fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ %s ]
  stop_at: end
  ordered: true
  max_range_records: 300
  fetch_max_partition_bytes: 1KiB
  archive:
    format: lines
    max_bytes: 1KiB
processors:
  - unarchive:
      format: lines
`, topic), func(b service.MessageBatch) error {
		p := metaInt(t, b[0], metaPartition)
		mu.Lock()
		inside[p]++
		busy := inside[p] > 1
		mu.Unlock()
		time.Sleep(time.Millisecond) // let a second batch of the partition in, if any comes
		mu.Lock()
		defer mu.Unlock()
		inside[p]--
		if busy {
			return errors.New("two batches of one partition in the pipeline at once")
		}
		for _, m := range b {
			v, err := m.AsBytes()
			if err != nil {
				return err
			}
			seen[p] = append(seen[p], string(v))
		}
		return nil
	})
	requireEnded(t, res)
	mu.Lock()
	defer mu.Unlock()
	for p := range int32(partitions) {
		var w []string
		for _, v := range want[p] {
			w = append(w, string(v))
		}
		assert.Equal(t, w, seen[int64(p)], "partition %d in offset order, once", p)
	}
}

// TestArchiveJSONArrayNotJSON: a value that is not JSON gives its piece an
// error naming the topic, partition and offset, which the pipeline sees;
// the other pieces have none.
func TestArchiveJSONArrayNotJSON(t *testing.T) {
	const topic = "jsonish"
	addr := newKafka(t, topic, 2)
	produceValues(t, addr, topic, 2, 400, func(i int) []byte {
		if i == 101 { // partition 1, offset 50
			return []byte("not json")
		}
		return fmt.Appendf(nil, `{"i":%d}`, i)
	})
	var (
		mu   sync.Mutex // guards msgs
		msgs []archiveMsg
	)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ jsonish ]
  stop_at: end
  archive:
    format: json_array
    max_bytes: 1KiB
`, func(b service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range b {
			msgs = append(msgs, readArchive(t, m))
		}
		return nil
	})
	requireEnded(t, res)
	mu.Lock()
	defer mu.Unlock()
	failed := 0
	for _, m := range msgs {
		if m.partition == 1 && m.start <= 50 && 50 < m.end {
			failed++
			require.Error(t, m.err, "the piece holding offset 50")
			assert.ErrorIs(t, m.err, errNotJSON)
			assert.Contains(t, m.err.Error(), "jsonish/1 at offsets 50 ")
			assert.Contains(t, string(m.body), ",not json,", "values as they are")
			continue
		}
		assert.NoError(t, m.err, "piece %d/[%d,%d)", m.partition, m.start, m.end)
	}
	assert.Equal(t, 1, failed, "pieces holding offset 50")
	assert.Contains(t, res.log.String(), "Handed out an archive with an error", "the error is logged")
	assert.Equal(t, 1, strings.Count(res.log.String(), "are not JSON"), "logged once")
}

// TestArchiveReplayAfterNack: a rejected archive's records are delivered
// again (auto_replay_nacks), and once everything is acknowledged every
// record was acknowledged in some archive.
func TestArchiveReplayAfterNack(t *testing.T) {
	for _, mode := range []string{"", "align_ranges: true", "ordered: true"} {
		t.Run(mode, func(t *testing.T) { testArchiveReplayAfterNack(t, mode) })
	}
}

// testArchiveReplayAfterNack is TestArchiveReplayAfterNack with the input
// fields mode: streaming (none), or whole mode, where a replay hands out the
// pieces kept while the records' values were released.
func testArchiveReplayAfterNack(t *testing.T, mode string) {
	const topic = "rejected"
	addr := newKafka(t, topic, 1)
	want := produceValues(t, addr, topic, 1, 1000, func(i int) []byte { return fmt.Appendf(nil, "%d", i) })
	var (
		mu     sync.Mutex // guards nacked, acked
		nacked bool
		acked  = map[string]int{}
	)
	res := runStream(t, addr, fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ rejected ]
  stop_at: end
  max_range_records: 400
  %s
  archive:
    format: lines
    max_bytes: 500B
processors:
  - unarchive:
      format: lines
`, mode), func(b service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		if !nacked && metaInt(t, b[0], metaPieceStart) > 0 {
			nacked = true
			return errors.New("rejected once")
		}
		for _, m := range b {
			v, _ := m.AsBytes()
			acked[string(v)]++
		}
		return nil
	})
	requireEnded(t, res)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, nacked)
	for _, v := range want[0] {
		assert.Equal(t, 1, acked[string(v)], "record %s acknowledged", v)
	}
	assert.Len(t, acked, len(want[0]))
}

// TestRecordMetadataOff: record_metadata: false hands out the values with
// no metadata at all.
func TestRecordMetadataOff(t *testing.T) {
	addr := newKafka(t, "bare", 2)
	produceRecords(t, addr, "bare", 2, 0, 200)
	res := runStream(t, addr, `
kafka_batched_ranges:
  seed_brokers: [ "${KAFKA_BROKERS}" ]
  topics: [ bare ]
  stop_at: end
  record_metadata: false
`, nil)
	requireEnded(t, res)
	require.Len(t, res.msgs, 200)
	values := map[string]bool{}
	for _, g := range res.msgs {
		assert.Empty(t, g.meta, "metadata of %s", g.body)
		values[string(g.body)] = true
	}
	assert.Len(t, values, 200)
}

// TestArchiveLint: the fields archive mode and record_metadata cannot be
// used with are lint errors, which ParseConfig reports too.
func TestArchiveLint(t *testing.T) {
	base := "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"
	tests := []struct {
		fields string
		want   []string
	}{
		{"archive: { format: zip }", []string{`archive.format must be one of concatenate, lines, binary, json_array, tar, got "zip"`}},
		{"archive: { format: lines, max_bytes: 0 }", []string{`archive.max_bytes must be > 0 and < 2 GiB, got "0"`}},
		{"archive: { format: lines }\nshare_group: sg", []string{fmt.Sprintf(msgArchiveShare, "archive", "share_group", "sg")}},
		{"archive: { format: lines }\nbatching: { count: 10 }", []string{fmt.Sprintf(msgArchiveBatching, "batching", "archive", "archive.max_bytes", "archive.max_bytes")}},
		{"archive: { format: lines }\nlag_metadata: true", []string{fmt.Sprintf(msgArchiveLag, "lag_metadata", "archive")}},
		{"record_metadata: false\nrange_metadata: true", []string{fmt.Sprintf(msgRecordMetaOff, "range_metadata", "record_metadata")}},
		{"record_metadata: false\nshare_group: sg", []string{fmt.Sprintf(msgRecordMetaShare, "record_metadata", "share_group", "sg")}},
		{"record_metadata: false\narchive: { format: binary }", []string{fmt.Sprintf(msgRecordMetaUnused, "record_metadata", "archive")}},
	}
	for _, tt := range tests {
		t.Run(tt.fields, func(t *testing.T) {
			yaml := base + tt.fields + "\n"
			got := lintInput(t, "kafka_batched_ranges:\n"+indent(yaml))
			for _, w := range tt.want {
				assert.Contains(t, got, w, "lint of %q", yaml)
			}
			_, err := parseYAML(t, yaml)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, strings.Split(err.Error(), "\n"), w, "ParseConfig(%q)", yaml)
			}
		})
	}
	for _, good := range []string{
		"archive: { format: json_array }\nordered: true\nconsumer_group: g",
		"archive: { format: tar, max_bytes: 64MiB }\nalign_ranges: true\nrange_metadata: true",
		"record_metadata: false",
	} {
		yaml := base + good + "\n"
		assert.Empty(t, lintInput(t, "kafka_batched_ranges:\n"+indent(yaml)), "lint of %q", yaml)
		c, err := parseYAML(t, yaml)
		require.NoError(t, err, "ParseConfig(%q)", yaml)
		if strings.Contains(good, "64MiB") {
			assert.Equal(t, ArchiveConfig{Format: archiveTar, MaxBytes: 64 << 20}, c.Archive)
		}
	}
	c, err := parseYAML(t, base+"archive: { format: lines }\n")
	require.NoError(t, err)
	assert.Equal(t, ArchiveConfig{Format: archiveLines, MaxBytes: defaultArchiveMaxBytes}, c.Archive)
}

// TestSpecBuiltOnce: every caller shares one spec.
func TestSpecBuiltOnce(t *testing.T) {
	assert.Same(t, Spec(), Spec())
	assert.Same(t, Spec(), lintSpec())
}

// TestArchiveHandoverDeliversNothingTwice is TestBatchingHandoverDeliversNothingTwice in archive
// mode: pieces of 1 KiB cut from ranges of 300 (so a range's last records wait for its end), a
// pipeline that acknowledges out of order from 4 workers, and a second member that joins, reads
// for 2 s and leaves gracefully: no offset is delivered twice, every offset is delivered, and the
// group commits every partition to its end.
func TestArchiveHandoverDeliversNothingTwice(t *testing.T) {
	for _, bal := range []string{"range", "cooperative_sticky"} {
		t.Run(bal, func(t *testing.T) {
			const parts, perPart = 4, 1500
			addr := newKafka(t, "ah", parts)
			produceRecords(t, addr, "ah", parts, 0, parts*perPart)
			yaml := fmt.Sprintf(`
seed_brokers: [ %q ]
topics: [ ah ]
consumer_group: g-%s
group_balancers: [ %s ]
heartbeat_interval: 100ms
session_timeout: 6s
rebalance_timeout: 6s
commit_period: 100ms
poll_interval: 100ms
max_range_records: 300
max_in_flight: 4
archive:
  format: binary
  max_bytes: 1KiB
`, addr, bal, bal)
			var mu sync.Mutex // guards seen
			seen := map[string]int{}
			run := func(ctx context.Context, in *input) *sync.WaitGroup {
				var wg sync.WaitGroup
				work := make(chan service.AckFunc, 8)
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ack := range work {
							time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
							_ = ack(context.Background(), nil)
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer close(work)
					for ctx.Err() == nil {
						batch, af, err := in.ReadBatch(ctx)
						if err != nil {
							if ctx.Err() == nil {
								time.Sleep(10 * time.Millisecond)
							}
							continue
						}
						mu.Lock()
						for _, m := range batch {
							a := readArchive(t, m)
							for o := a.start; o < a.start+a.records; o++ {
								seen[fmt.Sprintf("%d@%d", a.partition, o)]++
							}
						}
						mu.Unlock()
						work <- af
					}
				}()
				return &wg
			}
			a := connected(t, yaml)
			actx, acancel := context.WithCancel(t.Context())
			defer acancel()
			aw := run(actx, a)
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 1000 }, 20*time.Second, 10*time.Millisecond)

			b := newTestInput(t, yaml)
			cctx, ccancel := context.WithTimeout(t.Context(), 10*time.Second)
			require.NoError(t, b.Connect(cctx))
			ccancel()
			bctx, bcancel := context.WithCancel(t.Context())
			bw := run(bctx, b)
			time.Sleep(2 * time.Second)
			bcancel()
			bw.Wait()
			cctx, ccancel = context.WithTimeout(t.Context(), 10*time.Second)
			assert.NoError(t, b.Close(cctx), "close B")
			ccancel()

			adm := newAdmin(t, addr)
			done := func() bool {
				offs, err := adm.FetchOffsets(t.Context(), "g-"+bal)
				if err != nil {
					return false
				}
				for p := range int32(parts) {
					o, ok := offs.Lookup("ah", p)
					if !ok || o.At != perPart {
						return false
					}
				}
				return true
			}
			require.Eventually(t, done, 30*time.Second, 50*time.Millisecond, "the group did not commit every partition to %d", perPart)
			acancel()
			aw.Wait()
			assert.NoError(t, a.eng.Err(), "A stopped")
			assert.NoError(t, b.eng.Err(), "B stopped")
			mu.Lock()
			defer mu.Unlock()
			dups := 0
			for _, n := range seen {
				dups += n - 1
			}
			t.Logf("%s: %d of %d offsets delivered, %d duplicates; B read %d", bal, len(seen), parts*perPart, dups, b.eng.Summary().Acked)
			assert.Len(t, seen, parts*perPart, "offsets never delivered")
			assert.Zero(t, dups, "offsets delivered twice in graceful handovers")
		})
	}
}
