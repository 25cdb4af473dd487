package plugin

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/engine"
	"github.com/kbr/kafka_batched_ranges/internal/ranges"
)

// BenchmarkArchiveBuild measures building one archive of a range's records
// (10,000 of 100 B, or 1,000 of 1 KiB) in each format.
func BenchmarkArchiveBuild(b *testing.B) {
	for _, size := range []int{100, 1024} {
		n := 1_000_000 / size
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Offset: int64(i), Value: bytes.Repeat([]byte{'"'}, size), Timestamp: time.UnixMilli(1_700_000_000_000)}
		}
		for _, format := range []string{archiveConcatenate, archiveLines, archiveBinary, archiveJSONArray, archiveTar} {
			b.Run(fmt.Sprintf("%s/%dB", format, size), func(b *testing.B) {
				a := &archiver{format: format, maxBytes: 1 << 30}
				ps := a.cutPieces(recs, 0, int64(n))
				require.Len(b, ps, 1)
				b.SetBytes(int64(n * size))
				b.ReportAllocs()
				for b.Loop() {
					_ = a.build(ps[0])
				}
			})
		}
	}
}

// TestTarAsArchiveTar: the tar archives are byte for byte those Go's
// archive/tar writes for the same files (USTAR, named by offset, mode 0644,
// the record's time to the second), values of 0, 1, 511, 512 and 513 bytes.
func TestTarAsArchiveTar(t *testing.T) {
	var recs []*kgo.Record
	for i, n := range []int{0, 1, 511, 512, 513, 1000} {
		recs = append(recs, &kgo.Record{Offset: int64(i) * 1_000_003, Value: bytes.Repeat([]byte{byte('a' + i)}, n), Timestamp: time.UnixMilli(1_700_000_000_123 + int64(i)*999_999)})
	}
	a := &archiver{format: archiveTar, maxBytes: 1 << 20}
	ps := a.cutPieces(recs, 0, recs[len(recs)-1].Offset+1)
	require.Len(t, ps, 1)
	got := a.build(ps[0])
	assert.Len(t, got, ps[0].size, "the size cutPieces computed")

	var want bytes.Buffer
	tw := tar.NewWriter(&want)
	for _, rec := range recs {
		require.NoError(t, tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: strconv.FormatInt(rec.Offset, 10), Size: int64(len(rec.Value)),
			Mode: 0o644, ModTime: time.Unix(rec.Timestamp.Unix(), 0), Format: tar.FormatUSTAR,
		}))
		_, err := tw.Write(rec.Value)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.Equal(t, want.Len(), len(got))
	for i := 0; i < len(got); i += tarBlock {
		require.Equal(t, want.Bytes()[i:i+tarBlock], got[i:i+tarBlock], "block %d", i/tarBlock)
	}
}

// TestArchiveBuildPathsAgree: joining the values and appending them give
// the same bytes, of the size cutPieces computed, in every format but tar
// (built on its own), with small and large values, tombstones and empty
// values.
func TestArchiveBuildPathsAgree(t *testing.T) {
	var recs []*kgo.Record
	for i := range 50 {
		var v []byte
		switch i % 5 {
		case 0:
			v = nil // a tombstone
		case 1:
			v = []byte{}
		default:
			v = bytes.Repeat([]byte{byte('0' + i%10)}, i*37)
		}
		recs = append(recs, &kgo.Record{Offset: int64(i), Value: v})
	}
	for _, format := range []string{archiveConcatenate, archiveLines, archiveBinary, archiveJSONArray} {
		a := &archiver{format: format, maxBytes: 1 << 20}
		for _, n := range []int{1, 2, 50} {
			ps := a.cutPieces(recs[:n], 0, int64(n))
			require.Len(t, ps, 1)
			appended, joined := a.buildAppended(ps[0]), a.buildJoined(ps[0])
			assert.Len(t, appended, ps[0].size, "%s of %d records: size", format, n)
			assert.Equal(t, string(appended), string(joined), "%s of %d records", format, n)
		}
	}
}

// TestStreamingPiecesAsCutPieces: the readers' pieces (prepareStreaming,
// batch after batch of one range, then finish) are cut where cutPieces
// cuts the range's records and hold the same bytes as build, in every
// format; the records' values are released once copied; and each part (a
// batch's records in one piece) replays as the archive of those records
// alone.
func TestStreamingPiecesAsCutPieces(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	var recs []*kgo.Record
	for i := range 300 {
		var v []byte
		switch i % 7 {
		case 0:
			v = nil // a tombstone
		case 1:
			v = []byte{}
		default:
			v = bytes.Repeat([]byte{byte('0' + i%10)}, (i*37)%700)
		}
		recs = append(recs, &kgo.Record{Offset: int64(i), Value: v, Timestamp: base.Add(time.Duration(i) * time.Second)})
	}
	clone := func(rs []*kgo.Record) []*kgo.Record {
		out := make([]*kgo.Record, len(rs))
		for i, r := range rs {
			c := *r
			out[i] = &c
		}
		return out
	}
	for _, format := range []string{archiveConcatenate, archiveLines, archiveBinary, archiveJSONArray, archiveTar} {
		for _, maxBytes := range []int{1, 3000, 20000, 1 << 30} {
			a := &archiver{format: format, maxBytes: maxBytes}
			at := fmt.Sprintf("%s, max_bytes %d", format, maxBytes)
			want := a.cutPieces(recs, 0, int64(len(recs)))
			mine := clone(recs)
			var slot any
			var got [][]byte // finished pieces
			var cur *building
			var curN, curTo int
			for i := 0; i < len(mine); i += 17 { // batches of 17 records
				b := &engine.Batch{Records: mine[i:min(i+17, len(mine))], Range: ranges.Range{Topic: "t", Start: 0, End: int64(len(recs))}}
				prep := a.prepareStreaming(b, &slot)
				k := 0 // records of b in the segments so far
				for _, sg := range prep.segs {
					if cur != nil && sg.p != cur {
						got = append(got, a.finish(cur.buf[:curTo], curN))
					}
					cur, curN, curTo = sg.p, sg.count, sg.to
					part := recs[i+k : i+k+sg.n]
					assert.Equal(t, string(a.build(a.cutPieces(part, 0, 1)[0])), string(a.replayBytes(sg.p.buf[sg.from:sg.to], sg.n)),
						"%s: the part at offset %d replays as its records' archive", at, i+k)
					k += sg.n
				}
				require.Equal(t, len(b.Records), k, "%s: every record of the batch at %d in a segment", at, i)
				for _, r := range b.Records {
					require.Nil(t, r.Value, "%s: the value of offset %d released", at, r.Offset)
				}
			}
			got = append(got, a.finish(cur.buf[:curTo], curN))
			require.Len(t, got, len(want), "%s: pieces", at)
			for i, p := range want {
				assert.Equal(t, string(a.build(p)), string(got[i]), "%s: piece %d of offsets [%d, %d)", at, i, p.start, p.end)
			}
		}
	}
}
