package cache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The read benchmarks compare the cache's own fetch path with a prototype
// reading through kgo's consumer (kgoRangeReader below), on the same data:
// benchRecords records of benchValueSize bytes in one partition, read in
// ranges of benchRangeSize records. They run against kfake, and also against
// the broker at $KBR_KAFKA_BROKERS when it is set (a topic is created for
// the run and deleted after it).
//
//	go test -run '^$' -bench 'Range' -benchtime 5x -count 3 ./internal/cache/
//	KBR_KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench 'Range' -benchtime 5x -count 3 ./internal/cache/
const (
	benchRecords   = 200_000
	benchValueSize = 1024
	benchRangeSize = 10_000
)

// rangeReader is what both read paths offer: read [start, end) of one
// partition, continuing without a seek when start is where the last read
// ended.
type rangeReader interface {
	Read(ctx context.Context, start, end int64, emit func([]*kgo.Record) error) (int64, error)
	Close()
}

// cacheReader reads each range through a lease of the cache, as the engine
// does: Acquire, Read, Release.
type cacheReader struct {
	c         *Cache
	topic     string
	partition int32
}

func (r *cacheReader) Read(ctx context.Context, start, end int64, emit func([]*kgo.Record) error) (int64, error) {
	l, err := r.c.Acquire(ctx, r.topic, r.partition, start)
	if err != nil {
		return start, err
	}
	pos, err := l.Read(ctx, start, end, func(recs []*kgo.Record, _ int64) error { return emit(recs) })
	l.Release(err)
	return pos, err
}

func (r *cacheReader) Close() { _ = r.c.Close(context.Background()) }

// kgoRangeReader is the prototype of reading ranges through kgo's own
// consumer: one client consuming one partition directly
// (kgo.ConsumePartitions), seeking with SetOffsets, keeping control records
// so that transaction markers move the position. Records fetched past a
// range's end stay buffered for the next range. It exists to be measured; it
// does not handle a range whose last offsets were compacted away at the end
// of the log (no record at or past end ever arrives, so Read would wait):
// kgo does not expose its fetch position, only the records it returns.
type kgoRangeReader struct {
	cl        *kgo.Client
	topic     string
	partition int32
	pos       int64         // offset of the next record to deliver
	buf       []*kgo.Record // polled, not delivered, offsets >= pos
}

func newKgoRangeReader(seeds []string, topic string, partition int32, start int64) (*kgoRangeReader, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(start)}}),
		kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	return &kgoRangeReader{cl: cl, topic: topic, partition: partition, pos: start}, nil
}

func (r *kgoRangeReader) Read(ctx context.Context, start, end int64, emit func([]*kgo.Record) error) (int64, error) {
	if start != r.pos {
		r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.topic: {r.partition: {Epoch: -1, Offset: start}}})
		r.buf = nil
		r.pos = start
	}
	for {
		n := 0
		for n < len(r.buf) && r.buf[n].Offset < end {
			n++
		}
		if n > 0 {
			out := make([]*kgo.Record, 0, n)
			for _, rec := range r.buf[:n] {
				if !rec.Attrs.IsControl() {
					out = append(out, rec)
				}
			}
			r.pos = r.buf[n-1].Offset + 1
			r.buf = r.buf[n:]
			if len(out) > 0 {
				if err := emit(out); err != nil {
					return r.pos, err
				}
			}
		}
		if len(r.buf) > 0 || r.pos >= end {
			r.pos = end
			return end, nil
		}
		fs := r.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return r.pos, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return r.pos, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset >= r.pos {
				r.buf = append(r.buf, rec)
			}
		})
	}
}

func (r *kgoRangeReader) Close() { r.cl.Close() }

// benchData returns seeds and a topic holding the benchmark's records, on
// kfake or on the broker named by $KBR_KAFKA_BROKERS.
func benchData(b *testing.B, real bool) ([]string, string) {
	b.Helper()
	var seeds []string
	topicName := "bench"
	if real {
		addr := os.Getenv("KBR_KAFKA_BROKERS")
		if addr == "" {
			b.Skip("KBR_KAFKA_BROKERS not set")
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			b.Skipf("broker %s unreachable: %v", addr, err)
		}
		conn.Close()
		seeds = []string{addr}
		topicName = fmt.Sprintf("cache-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		require.NoError(b, err)
		b.Cleanup(c.Close)
		seeds = c.ListenAddrs()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topicName),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(b, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	resp, err := adm.CreateTopic(ctx, 1, 1, nil, topicName)
	require.NoError(b, err)
	require.NoError(b, resp.Err)
	if real {
		b.Cleanup(func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				return
			}
			defer cl.Close()
			_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topicName)
		})
	}
	value := bytes.Repeat([]byte("v"), benchValueSize)
	recs := make([]*kgo.Record, 0, 10_000)
	for i := range benchRecords {
		recs = append(recs, &kgo.Record{Value: value})
		if len(recs) == cap(recs) || i == benchRecords-1 {
			require.NoError(b, cl.ProduceSync(ctx, recs...).FirstErr())
			recs = recs[:0]
		}
	}
	return seeds, topicName
}

func newReader(b *testing.B, kind string, seeds []string, topicName string) rangeReader {
	b.Helper()
	switch kind {
	case "cache":
		c, err := New(Config{Seeds: seeds, Capacity: 4, IdleTimeout: time.Minute})
		require.NoError(b, err)
		return &cacheReader{c: c, topic: topicName}
	default:
		r, err := newKgoRangeReader(seeds, topicName, 0, 0)
		require.NoError(b, err)
		return r
	}
}

// BenchmarkRangeReadContinuation reads the whole partition in consecutive
// ranges (each starts where the last ended) through a fresh reader per
// iteration, checking every offset arrives once.
func BenchmarkRangeReadContinuation(b *testing.B) {
	for _, broker := range []string{"kfake", "kafka"} {
		b.Run(broker, func(b *testing.B) {
			seeds, topicName := benchData(b, broker == "kafka")
			for _, kind := range []string{"cache", "kgo"} {
				b.Run(kind, func(b *testing.B) {
					ctx := context.Background()
					b.SetBytes(benchRecords * benchValueSize)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						r := newReader(b, kind, seeds, topicName)
						next := int64(0)
						for start := int64(0); start < benchRecords; start += benchRangeSize {
							pos, err := r.Read(ctx, start, start+benchRangeSize, func(recs []*kgo.Record) error {
								for _, rec := range recs {
									if rec.Offset != next {
										return fmt.Errorf("got offset %d, want %d", rec.Offset, next)
									}
									next++
								}
								return nil
							})
							if err != nil || pos != start+benchRangeSize {
								b.Fatalf("read [%d, %d): pos %d, err %v", start, start+benchRangeSize, pos, err)
							}
						}
						r.Close()
						if next != benchRecords {
							b.Fatalf("read %d records, want %d", next, benchRecords)
						}
					}
					b.ReportMetric(float64(b.N*benchRecords)/b.Elapsed().Seconds(), "records/s")
				})
			}
		})
	}
}

// BenchmarkRangeSeek measures one range of 100 records that starts away from
// the reader's position (a seek: the buffer is dropped and a fetch issued at
// the new offset), on a warm reader with its connection open.
func BenchmarkRangeSeek(b *testing.B) {
	for _, broker := range []string{"kfake", "kafka"} {
		b.Run(broker, func(b *testing.B) {
			seeds, topicName := benchData(b, broker == "kafka")
			for _, kind := range []string{"cache", "kgo"} {
				b.Run(kind, func(b *testing.B) {
					ctx := context.Background()
					r := newReader(b, kind, seeds, topicName)
					defer r.Close()
					rng := rand.New(rand.NewPCG(1, 2))
					read := func(start int64) {
						var n int64
						pos, err := r.Read(ctx, start, start+100, func(recs []*kgo.Record) error { n += int64(len(recs)); return nil })
						if err != nil || pos != start+100 || n != 100 {
							b.Fatalf("read [%d, %d): pos %d, %d records, err %v", start, start+100, pos, n, err)
						}
					}
					read(0) // connect and load metadata outside the timing
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						read(rng.Int64N(benchRecords - 100))
					}
				})
			}
		})
	}
}
