package share

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

const topic = "t"

// tlog logs the reader's lines through t.
type tlog struct{ t *testing.T }

func (l tlog) Debugf(f string, a ...any) { l.t.Logf("DEBUG "+f, a...) }
func (l tlog) Infof(f string, a ...any)  { l.t.Logf("INFO "+f, a...) }
func (l tlog) Warnf(f string, a ...any)  { l.t.Logf("WARN "+f, a...) }
func (l tlog) Errorf(f string, a ...any) { l.t.Logf("ERROR "+f, a...) }

// newCluster starts a one-broker kfake cluster with a one-partition topic
// and n records in it, valued "0" to "n-1".
func newCluster(t *testing.T, n int, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topic)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	produce(t, c, 0, n)
	return c
}

// produce writes records valued from to to-1.
func produce(t *testing.T, c *kfake.Cluster, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, kgo.StringRecord(strconv.Itoa(i)))
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
}

// newReader starts a reader of topic in group; closed at the end of the
// test if the test did not close it.
func newReader(t *testing.T, c *kfake.Cluster, group string, mod func(*Config)) *Reader {
	t.Helper()
	c.SetGroupConfigs(group, map[string]string{"share.auto.offset.reset": "earliest"})
	cfg := Config{Seeds: c.ListenAddrs(), Group: group, Topics: []string{topic}, MaxRecords: 10}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, r.Close(ctx))
	})
	return r
}

// next returns the next batch of r, failing the test after a minute.
func next(t *testing.T, r *Reader) *Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := r.Next(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, b.Records)
	return b
}

func values(b *Batch) []string {
	var vs []string
	for _, r := range b.Records {
		vs = append(vs, string(r.Value))
	}
	return vs
}

func deliveryCounts(b *Batch) []int32 {
	var ds []int32
	for _, r := range b.Records {
		ds = append(ds, r.DeliveryCount())
	}
	return ds
}

func closeReader(t *testing.T, r *Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.Close(ctx))
}

// shareStart returns the share-partition start offset of the group: every
// offset below it is acknowledged (accepted, rejected or archived).
func shareStart(t *testing.T, c *kfake.Cluster, group string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	offs, err := kadm.NewClient(cl).DescribeShareGroupOffsets(t.Context(), group)
	require.NoError(t, err)
	o, ok := offs[group].Offsets[topic][0]
	require.True(t, ok, "no share offset of %s/0 in group %s: %+v", topic, group, offs)
	require.NoError(t, o.Err)
	return o.StartOffset
}

// TestThreeReadersOnePartition: three members of one share group read one
// partition; each gets records (each holds its first batch until the three
// have one, so the others must be handed other records), and every record
// is delivered and acknowledged exactly once.
func TestThreeReadersOnePartition(t *testing.T) {
	const total = 300
	c := newCluster(t, total)
	readers := []*Reader{newReader(t, c, "g", nil), newReader(t, c, "g", nil), newReader(t, c, "g", nil)}

	var mu sync.Mutex
	seen := map[string]int{}
	per := make([]int, len(readers))
	first := make([]*Batch, len(readers))
	record := func(i int, b *Batch) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range values(b) {
			seen[v]++
		}
		per[i] += len(b.Records)
	}
	for i, r := range readers {
		first[i] = next(t, r)
		record(i, first[i])
	}
	for _, b := range first {
		b.Ack()
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= total
	}
	errs := make(chan error, len(readers))
	var wg sync.WaitGroup
	for i, r := range readers {
		wg.Go(func() {
			for !done() {
				b, err := r.Next(ctx)
				if err != nil {
					if !done() {
						errs <- fmt.Errorf("reader %d: %w", i, err)
					}
					return
				}
				record(i, b)
				b.Ack()
			}
		})
	}
	for !done() && ctx.Err() == nil {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel() // unblocks the readers' Next
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, r := range readers {
		closeReader(t, r)
	}

	require.Len(t, seen, total)
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s delivered %d times", v, n)
	}
	var accepted int64
	for i, r := range readers {
		assert.Positive(t, per[i], "reader %d delivered nothing", i)
		st := r.Stats()
		assert.Equal(t, int64(per[i]), st.Acquired, "reader %d", i)
		assert.Zero(t, st.LockExpired, "reader %d", i)
		accepted += st.Accepted
	}
	require.Equal(t, int64(total), accepted)
	require.Equal(t, int64(total), shareStart(t, c, "g"))
}

// TestNackRedelivers: a nacked batch is released and delivered again with
// delivery count 2.
func TestNackRedelivers(t *testing.T) {
	c := newCluster(t, 5)
	r := newReader(t, c, "g", nil)
	b := next(t, r)
	require.Equal(t, []string{"0", "1", "2", "3", "4"}, values(b))
	require.Equal(t, []int32{1, 1, 1, 1, 1}, deliveryCounts(b))
	b.Nack(errors.New("processing failed"))

	b = next(t, r)
	require.Equal(t, []string{"0", "1", "2", "3", "4"}, values(b))
	require.Equal(t, []int32{2, 2, 2, 2, 2}, deliveryCounts(b))
	b.Ack()
	closeReader(t, r)
	st := r.Stats()
	require.Equal(t, Stats{Acquired: 10, Accepted: 5, Released: 5}, st)
	require.Equal(t, int64(5), shareStart(t, c, "g"))
}

// TestRejectAfterMaxDeliveries: a record nacked on its MaxDeliveries-th
// delivery is rejected: the broker archives it and never delivers it
// again, so the next record produced is what comes next.
func TestRejectAfterMaxDeliveries(t *testing.T) {
	c := newCluster(t, 1)
	r := newReader(t, c, "g", func(c *Config) { c.MaxDeliveries = 2 })
	b := next(t, r)
	require.Equal(t, []int32{1}, deliveryCounts(b))
	b.Nack(errors.New("bad"))
	b = next(t, r)
	require.Equal(t, []string{"0"}, values(b))
	require.Equal(t, []int32{2}, deliveryCounts(b))
	b.Nack(errors.New("bad again"))

	produce(t, c, 1, 2)
	b = next(t, r)
	require.Equal(t, []string{"1"}, values(b), "the rejected record was delivered again")
	require.Equal(t, []int32{1}, deliveryCounts(b))
	b.Ack()
	closeReader(t, r)
	require.Equal(t, Stats{Acquired: 3, Accepted: 1, Released: 1, Rejected: 1}, r.Stats())
	require.Equal(t, int64(2), shareStart(t, c, "g"))
}

// TestCloseReleasesInFlight: a reader closed with a batch in the pipeline
// releases it, and another member gets its records, delivered a second
// time; what the closed reader had acknowledged stays acknowledged.
func TestCloseReleasesInFlight(t *testing.T) {
	c := newCluster(t, 10)
	a := newReader(t, c, "g", func(c *Config) { c.BatchRecords = 5 })
	acked := next(t, a)
	held := next(t, a)
	require.Equal(t, []string{"0", "1", "2", "3", "4"}, values(acked))
	require.Equal(t, []string{"5", "6", "7", "8", "9"}, values(held))
	acked.Ack()
	closeReader(t, a)
	require.Equal(t, Stats{Acquired: 10, Accepted: 5, Released: 5}, a.Stats())
	held.Ack() // after Close: too late, counted as stale
	require.Equal(t, int64(1), a.Stats().Stale)

	b := newReader(t, c, "g", nil)
	got := next(t, b)
	require.Equal(t, []string{"5", "6", "7", "8", "9"}, values(got))
	require.Equal(t, []int32{2, 2, 2, 2, 2}, deliveryCounts(got))
	got.Ack()
	closeReader(t, b)
	require.Equal(t, int64(10), shareStart(t, c, "g"))
}

// TestRenewKeepsSlowBatch: a batch held four times longer than the
// broker's acquisition lock (500 ms here; kfake takes
// group.share.record.lock.duration.ms) is renewed and its Ack succeeds;
// without renewals (the control) the lock expires and the broker refuses
// the Ack, which is counted as lock expiries.
func TestRenewKeepsSlowBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		renew   time.Duration
		expired bool
	}{
		{"renewed", 100 * time.Millisecond, false},
		{"not renewed", MaxRenewInterval, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 5, kfake.BrokerConfigs(map[string]string{
				"group.share.record.lock.duration.ms": "500",
				"share.record.lock.sweep.interval.ms": "50",
			}))
			r := newReader(t, c, "g", func(c *Config) { c.RenewInterval = tc.renew; c.Logger = tlog{t} })
			b := next(t, r)
			time.Sleep(2 * time.Second) // the pipeline is slow: four lock durations
			b.Ack()
			closeReader(t, r)
			st := r.Stats()
			if tc.expired {
				require.Equal(t, int64(5), st.LockExpired, "%+v", st)
				require.Zero(t, st.Accepted, "an Ack the broker refused counted as accepted: %+v", st)
				require.Zero(t, st.Renewed)
				return
			}
			require.Zero(t, st.LockExpired, "%+v", st)
			require.Positive(t, st.Renewed)
			require.Equal(t, int64(5), st.Accepted)
			require.Equal(t, int64(5), shareStart(t, c, "g"))
		})
	}
}

// versionGuess is franz-go's guess of the version of c's broker (kfake
// capped to 3.9 advertises only the keys it implements, so the guess is
// older than 3.9; against Kafka 4.4.0 it is v4.4).
func versionGuess(t *testing.T, c *kfake.Cluster) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	vs, err := kadm.NewClient(cl).ApiVersions(t.Context())
	require.NoError(t, err)
	for _, v := range vs.Sorted() {
		return v.VersionGuess()
	}
	t.Fatal("no broker answered")
	return ""
}

// TestStartWithoutShareGroups: against a broker without share groups,
// Start fails naming the broker, its version and share_group.
func TestStartWithoutShareGroups(t *testing.T) {
	t.Run("old broker", func(t *testing.T) {
		c := newCluster(t, 1, kfake.MaxVersions(kversion.V3_9_0()))
		r, err := New(Config{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{topic}})
		require.NoError(t, err)
		err = r.Start(t.Context())
		require.ErrorIs(t, err, ErrNoShareGroups)
		require.ErrorContains(t, err, "share_group")
		require.ErrorContains(t, err, "broker 0")
		require.ErrorContains(t, err, "Kafka "+versionGuess(t, c))
		require.NoError(t, r.Close(t.Context()))
	})
	t.Run("share.version 0", func(t *testing.T) {
		c := newCluster(t, 1)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		require.NoError(t, err)
		defer cl.Close()
		req := kmsg.NewPtrUpdateFeaturesRequest()
		f := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
		f.Feature, f.MaxVersionLevel, f.UpgradeType = "share.version", 0, 2 // safe downgrade
		req.FeatureUpdates = append(req.FeatureUpdates, f)
		resp, err := req.RequestWith(t.Context(), cl)
		require.NoError(t, err)
		require.Zero(t, resp.ErrorCode, "%v", resp.ErrorMessage)

		r, err := New(Config{Seeds: c.ListenAddrs(), Group: "g", Topics: []string{topic}})
		require.NoError(t, err)
		err = r.Start(t.Context())
		require.ErrorIs(t, err, ErrNoShareGroups)
		require.ErrorContains(t, err, "share_group")
		require.ErrorContains(t, err, "share.version")
		require.ErrorContains(t, err, "broker 0")
		require.NoError(t, r.Close(t.Context()))
	})
}

// TestAcquireModes (issue 51): with RecordLimit a fetch acquires at most MaxRecords records (the
// client asks for record_limit, kgo.ShareMaxRecordsStrict); with BatchOptimized it asks for whole
// record batches. Either way the client fetches only while polled (MaxConcurrentFetches 0: a
// member holds one fetch at a time), and every record is accepted once. (kfake acquires at most
// MaxRecords records in both modes; the real broker completes the last record batch, see
// docs/benchmarks.md.)
func TestAcquireModes(t *testing.T) {
	for _, mode := range []AcquireMode{RecordLimit, BatchOptimized} {
		t.Run(mode.String(), func(t *testing.T) {
			r, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, AcquireMode: mode})
			require.NoError(t, err)
			cl, err := kgo.NewClient(r.clientOpts()...)
			require.NoError(t, err)
			strict, fetches := cl.OptValue(kgo.ShareMaxRecordsStrict), cl.OptValue(kgo.MaxConcurrentFetches)
			cl.Close()
			require.Equal(t, mode == RecordLimit, strict, "record_limit (ShareMaxRecordsStrict)")
			require.Equal(t, 0, fetches, "fetches in flight or buffered while not polled")

			c := newCluster(t, 30)
			r = newReader(t, c, "g", func(c *Config) { c.MaxRecords = 10; c.AcquireMode = mode })
			n := 0
			for n < 30 {
				b := next(t, r)
				n += len(b.Records)
				b.Ack()
			}
			closeReader(t, r)
			require.Equal(t, int64(30), r.Stats().Accepted, "%+v", r.Stats())
			require.Equal(t, int64(30), shareStart(t, c, "g"))
		})
	}
	_, err := New(Config{Seeds: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, AcquireMode: 7})
	require.ErrorContains(t, err, "share group g: acquire mode must be record_limit or batch_optimized, got AcquireMode(7)")
}
