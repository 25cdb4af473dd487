package plugin

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBoundedRunStoppedBeforeItsEndFails: a bounded run whose stream is
// stopped (as SIGINT or SIGTERM stop connect) before it read everything
// reports ErrStoppedBeforeEnd through OnFailure, with how many offsets were
// not acknowledged, and its summary counts the acknowledged records and says
// what was left. Before, it closed as a success ("Closed: 17246 records" with
// 14,492 written) and connect exited 0. In a consumer group too: the close
// hands every partition back to the group before the summary is taken, and
// what they left unread stays in the total (it said "0 of 15000 offsets not
// acknowledged" of a 300,000-offset backfill stopped at 5%); the summary
// says where a run again resumes: the group's committed offsets, or
// start_from without a group (nothing was committed).
func TestBoundedRunStoppedBeforeItsEndFails(t *testing.T) {
	for _, group := range []string{"", "stopped-g"} {
		name := "without_group"
		if group != "" {
			name = "in_a_group"
		}
		t.Run(name, func(t *testing.T) { testBoundedRunStopped(t, group) })
	}
}

func testBoundedRunStopped(t *testing.T, group string) {
	const (
		topic      = "backfill"
		partitions = 4
		n          = 40000
	)
	addr := newKafka(t, topic, partitions)
	produceRecords(t, addr, topic, partitions, 0, n)

	var (
		mu      sync.Mutex // guards sum, failure, acked
		sum     Summary
		failure error
		acked   int
	)
	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{
		OnClose:   func(s Summary) { mu.Lock(); sum = s; mu.Unlock() },
		OnFailure: func(err error) { mu.Lock(); failure = err; mu.Unlock() },
	}))
	sb := env.NewStreamBuilder()
	log := &syncBuffer{}
	sb.SetLogger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, sb.AddInputYAML(`
kafka_batched_ranges:
  seed_brokers: [ "`+addr+`" ]
  topics: [ backfill ]
  consumer_group: "`+group+`"
  stop_at: end
  max_range_records: 500
  max_in_flight: 4
`))
	stopNow := make(chan struct{})
	var once sync.Once
	require.NoError(t, sb.AddBatchConsumerFunc(func(ctx context.Context, b service.MessageBatch) error {
		mu.Lock()
		acked += len(b)
		enough := acked >= 2000
		mu.Unlock()
		if enough {
			once.Do(func() { close(stopNow) })
			time.Sleep(10 * time.Millisecond) // a slow output: the run is far from its end
		}
		return nil
	}))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- stream.Run(ctx) }()
	select {
	case <-stopNow:
	case err := <-ran:
		require.FailNow(t, "the stream ended before it was stopped", "%v\n%s", err, log)
	}
	require.NoError(t, stream.StopWithin(30*time.Second))
	<-ran

	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, failure, ErrStoppedBeforeEnd, "OnFailure of a bounded run stopped before its end\n%s", log)
	assert.True(t, sum.Bounded)
	assert.False(t, sum.Ended)
	assert.Less(t, sum.Done, int64(n), "offsets acknowledged")
	assert.Equal(t, int64(acked), sum.Acked, "Summary.Acked: the records the output acknowledged")
	assert.LessOrEqual(t, sum.Acked, sum.Records)
	m := regexp.MustCompile(`stopped before the end: (\d+) of (\d+) offsets not acknowledged`).FindStringSubmatch(failure.Error())
	require.NotNil(t, m, "the failure says what was left: %v", failure)
	left, _ := strconv.ParseInt(m[1], 10, 64)
	total, _ := strconv.ParseInt(m[2], 10, 64)
	assert.Equal(t, sum.Total-sum.Done, left)
	assert.Equal(t, sum.Total, total)
	assert.Positive(t, left, "offsets left of a backfill stopped at ~5%%: %v", failure)
	assert.Equal(t, int64(n), sum.Total, "the total of a bounded run is its whole snapshot")
	closed := `level=WARN msg="Closed: \d+ records acknowledged of \d+ handed out .*; stopped before the end: \d+ of \d+ offsets not acknowledged; `
	if group != "" {
		assert.Regexp(t, closed+`run it again to resume from group \\"`+group+`\\"'s committed offsets`, log.String())
	} else {
		assert.Regexp(t, closed+`nothing was committed \(no consumer_group\): a run again reads from start_from`, log.String())
	}
}
