package main

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLatencyProxyDelaysByTheRoundTrip sends small messages through the proxy to an echo server
// on loopback: each comes back after the round trip asked for (the median of 7, at most 25ms
// more on a busy machine: a direction delayed by the whole round trip shows at 60ms), on a
// connection opened before the round trip was set too, and the proxy counts the connections it
// accepted.
func TestLatencyProxyDelaysByTheRoundTrip(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	p, err := startLatencyProxy("127.0.0.1:0", echo.Addr().String())
	require.NoError(t, err)
	t.Cleanup(p.Close)

	early, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { early.Close() })
	assert.Less(t, roundTrip(t, early), 25*time.Millisecond, "no delay before SetRTT")

	for _, rtt := range []time.Duration{0, 20 * time.Millisecond, 60 * time.Millisecond} {
		require.NoError(t, p.SetRTT(rtt))
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		for name, conn := range map[string]net.Conn{"new connection": c, "open connection": early} {
			got := roundTrip(t, conn)
			assert.GreaterOrEqualf(t, got, rtt, "rtt %s, %s", rtt, name)
			assert.Lessf(t, got, rtt+25*time.Millisecond, "rtt %s, %s", rtt, name)
		}
		c.Close()
	}
	assert.Equal(t, int64(4), p.Accepted(), "connections accepted")
	assert.Error(t, p.SetRTT(15*time.Millisecond), "an odd number of milliseconds cannot be split in two")
}

// roundTrip returns the median time of 7 echoes of a small message on c.
func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	var took []time.Duration
	buf := make([]byte, 4)
	for range 7 {
		start := time.Now()
		_, err := c.Write([]byte("ping"))
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2]
}

func TestWANLastLine(t *testing.T) {
	for _, tc := range []struct {
		c            wanCase
		input, tuned float64
		want         string
	}{
		{wanCase{partitions: 1, rtt: 50 * time.Millisecond}, 32.04, 121.5,
			"wan 1 partition rtt 50ms: input 32.0 MB/s, tuned consumer 121.5 MB/s, input/tuned 0.26x"},
		{wanCase{partitions: 8, rtt: 0}, 400, 200,
			"wan 8 partitions rtt 0ms: input 400.0 MB/s, tuned consumer 200.0 MB/s, input/tuned 2.00x"},
	} {
		assert.Equal(t, tc.want, wanLastLine(tc.c, tc.input, tc.tuned))
	}
}

func TestWANFlags(t *testing.T) {
	rtts, err := parseRTTs("0, 10ms,50ms")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond}, rtts)
	for _, bad := range []string{"", "15ms", "-2ms", "10"} {
		_, err := parseRTTs(bad)
		assert.Errorf(t, err, "parseRTTs(%q)", bad)
	}

	records, err := parseWANRecords("1:400000, 8:800000")
	require.NoError(t, err)
	assert.Equal(t, map[int]int{1: 400_000, 8: 800_000}, records)
	assert.Equal(t, 400_000, wanRecords(records, 1))
	assert.Equal(t, 200_000, wanRecords(records, 2), "100,000 per partition when not listed")
	for _, bad := range []string{"1", "1:x", "0:5", "1:-5"} {
		_, err := parseWANRecords(bad)
		assert.Errorf(t, err, "parseWANRecords(%q)", bad)
	}

	rows := wanInputRows("", "fetch_max_partition_bytes: 10MiB; max_range_records: 100000, max_in_flight: 32;")
	assert.Equal(t, []string{"", "fetch_max_partition_bytes: 10MiB", "max_range_records: 100000\nmax_in_flight: 32"}, rows)
	assert.Equal(t, "input", wanRowName(rows[0]))
	assert.Equal(t, "input max_range_records: 100000, max_in_flight: 32", wanRowName(rows[2]))
	assert.Equal(t, []string{"ordered: true", "ordered: true\nmax_in_flight: 4"}, wanInputRows("ordered: true\n", "max_in_flight: 4"))

	o := options{partitionList: []int{1, 8}, rtts: []time.Duration{0, 50 * time.Millisecond}, rtt100: true, wanRecords: records}
	assert.Equal(t, []wanCase{
		{partitions: 1, records: 400_000, rtt: 0},
		{partitions: 1, records: 400_000, rtt: 50 * time.Millisecond},
		{partitions: 1, records: 400_000, rtt: 100 * time.Millisecond},
		{partitions: 8, records: 800_000, rtt: 0},
		{partitions: 8, records: 800_000, rtt: 50 * time.Millisecond},
	}, wanCases(o))
}

// TestRecordMarks: the first and last record times are read from the lines a reader printed,
// the consumer's own and the input's through Benthos' logger (logfmt, the message quoted).
func TestRecordMarks(t *testing.T) {
	first, last := recordMarks("kbr-bench first-record 1700000000123456789\nkbr-bench last-record 1700000001123456789\n")
	assert.Equal(t, int64(1700000000123456789), first)
	assert.Equal(t, int64(1700000001123456789), last)
	assert.InDelta(t, 1.0, sample{first: first, last: last}.reading(), 1e-9)

	first, last = recordMarks(`time=2026-12-06T03:00:00Z level=warn msg="kbr-bench first-record 5" @service=benthos label="" path=root.pipeline.processors.0.switch.0.processors.0` + "\n" +
		`time=2026-12-06T03:00:01Z level=warn msg="kbr-bench last-record 9" @service=benthos`)
	assert.Equal(t, int64(5), first)
	assert.Equal(t, int64(9), last)

	first, last = recordMarks("nothing of the kind")
	assert.Zero(t, first)
	assert.Zero(t, last)
}

// TestSummaryMarks: the input's first and last batch come from its closing summary (logfmt, at
// info), whatever units the durations take; other lines give none.
func TestSummaryMarks(t *testing.T) {
	out := `time=2026-12-07T10:00:00Z level=info msg="Read every range up to the end offsets snapshotted at start" @service=benthos` + "\n" +
		`time=2026-12-07T10:00:01Z level=info msg="Closed: 400000 records acknowledged of 400000 handed out (410 MB of values) in 40 ranges in 1.061s: 386 MB/s, 377k records/s; cache: 0 continuations, 24 seeks, 16 new cursors, 435 fetches, 0 evictions, 0 invalidations, 0 lost offsets; batches handed out from 105ms to 1.046s after the start" @service=benthos label="" path=root.input`
	first, last := recordMarks(out)
	assert.Equal(t, int64(105*time.Millisecond), first)
	assert.Equal(t, int64(1046*time.Millisecond), last)
	assert.InDelta(t, 0.941, sample{first: first, last: last}.reading(), 1e-9)

	_, _, ok := summaryMarks(`level=info msg="Read every range up to the end offsets snapshotted at start"`)
	assert.False(t, ok)
	_, _, ok = summaryMarks(`msg="Closed: 0 records acknowledged of 0 handed out (0 B of values) in 0 ranges in 1s: 0 B/s, 0 records/s; cache: 0 continuations"`)
	assert.False(t, ok, "nothing handed out")
}
