package tests

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTimeWindowSelectsRecords produces records with explicit timestamps (kgo.Record.Timestamp)
// over 10 minutes of fake time starting T0 (a whole minute 30 minutes ago; retention.ms -1):
//
//	p0: 120 records at T0 + 5s·i        (T0 .. T0+595s)
//	p1:  80 records at T0 + 2s + 7s·i   (T0+2s .. T0+555s)
//	p2:  30 records at T0 + i s, then 30 at T0 + 500s + i s: nothing in the window
//
// and reads it with start_from: timestamp, start_timestamp T0+60s, stop_at: timestamp,
// stop_timestamp T0+300s, the timestamps given as RFC 3339 strings, unix milliseconds as
// integers, and unix milliseconds as strings. Each run must exit 0 (p2 is empty and does not hold
// it up) and write exactly the records whose timestamp lies in [T0+60s, T0+300s), each once,
// with its value and timestamp: p0's record at exactly T0+60s is in, the one at exactly T0+300s
// is out.
func TestTimeWindowSelectsRecords(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	topic := createTopicWithConfigs(t, 3, map[string]string{"retention.ms": "-1"})
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	var records []*kgo.Record
	add := func(p int32, at time.Duration, i int) {
		records = append(records, &kgo.Record{
			Topic:     topic,
			Partition: p,
			Key:       []byte(fmt.Sprintf("k-%d-%d", p, i)),
			Value:     []byte(fmt.Sprintf("p%d-%d@%s", p, i, at)),
			Timestamp: t0.Add(at),
		})
	}
	for i := range 120 {
		add(0, time.Duration(i)*5*time.Second, i)
	}
	for i := range 80 {
		add(1, 2*time.Second+time.Duration(i)*7*time.Second, i)
	}
	for i := range 30 {
		add(2, time.Duration(i)*time.Second, i)
	}
	for i := range 30 {
		add(2, 500*time.Second+time.Duration(i)*time.Second, 30+i)
	}
	prod := produceAll(t, producer(t), records)
	require.Equal(t, len(records), prod.count())

	start, stop := t0.Add(60*time.Second), t0.Add(300*time.Second)
	want := produced{}
	for p, m := range prod {
		for o, r := range m {
			require.NotZerof(t, r.Timestamp, "%d/%d has no timestamp", p, o)
			if r.Timestamp >= start.UnixMilli() && r.Timestamp < stop.UnixMilli() {
				if want[p] == nil {
					want[p] = map[int64]producedRecord{}
				}
				want[p][o] = r
			}
		}
	}
	// The layout above: p0 i in [12, 60), p1 i in [9, 43), p2 nothing.
	require.Len(t, want[0], 48, "records of p0 in the window")
	require.Len(t, want[1], 34, "records of p1 in the window")
	require.Empty(t, want[2], "records of p2 in the window")

	forms := []struct {
		name        string
		start, stop any
	}{
		{"rfc3339", start.Format(time.RFC3339), stop.Format(time.RFC3339)},
		{"unix_ms_int", start.UnixMilli(), stop.UnixMilli()},
		{"unix_ms_string", strconv.FormatInt(start.UnixMilli(), 10), strconv.FormatInt(stop.UnixMilli(), 10)},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			in := baseInput(topic)
			in["start_from"] = "timestamp"
			in["start_timestamp"] = f.start
			in["stop_at"] = "timestamp"
			in["stop_timestamp"] = f.stop
			in["max_range_records"] = 10
			recs := runInput(t, in, 60*time.Second)
			requireExactlyOnce(t, offsetsOf(want), recs)
			requireValuesMatch(t, want, recs)
			for _, r := range recs {
				require.Truef(t, r.TS.Valid, "%d/%d has no kafka_timestamp_ms", r.P.V, r.O.V)
				require.Equalf(t, want[int32(r.P.V)][r.O.V].Timestamp, r.TS.V, "kafka_timestamp_ms of %d/%d", r.P.V, r.O.V)
			}
			t.Logf("%s (%v .. %v): %d records", f.name, f.start, f.stop, len(recs))
		})
	}
}
