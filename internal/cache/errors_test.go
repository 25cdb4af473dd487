package cache

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kbr/kafka_batched_ranges/internal/kerrs"
)

// readResult is what one lease's Read returned.
type readResult struct {
	pos     int64
	offsets []int64
	err     error
	elapsed time.Duration
}

// readOnce leases topicName/partition, reads [start, end) and releases the
// lease with Read's error.
func readOnce(t *testing.T, cc *Cache, topicName string, partition int32, start, end int64) readResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := cc.Acquire(ctx, topicName, partition, start)
	require.NoError(t, err)
	var res readResult
	began := time.Now()
	res.pos, res.err = l.Read(ctx, start, end, func(recs []*kgo.Record, _ int64) error {
		for _, r := range recs {
			res.offsets = append(res.offsets, r.Offset)
		}
		return nil
	})
	res.elapsed = time.Since(began)
	l.Release(res.err)
	require.NotErrorIs(t, res.err, context.DeadlineExceeded, "Read hung")
	return res
}

func admin(t *testing.T, c *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// TestPermanentErrors checks the errors retrying cannot fix: each wraps its
// sentinel or the broker's kerr error, names the topic and partition, is
// reported by Permanent, and is returned without retries.
func TestPermanentErrors(t *testing.T) {
	t.Run("unknown topic", func(t *testing.T) {
		c := newCluster(t, 1, 0)
		res := readOnce(t, newCache(t, c, nil), "missing", 0, 0, 10)
		require.ErrorIs(t, res.err, ErrUnknownPartition)
		assert.True(t, Permanent(res.err))
		assert.Contains(t, res.err.Error(), "missing/0")
	})

	t.Run("unknown partition", func(t *testing.T) {
		c := newCluster(t, 2, 0)
		res := readOnce(t, newCache(t, c, nil), topic, 2, 0, 10)
		require.ErrorIs(t, res.err, ErrUnknownPartition)
		assert.True(t, Permanent(res.err))
		assert.Contains(t, res.err.Error(), "t/2")
	})

	t.Run("topic deleted while read", func(t *testing.T) {
		c := newCluster(t, 1, 100)
		cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxPartitionBytes = 512 })
		l, err := cc.Acquire(t.Context(), topic, 0, 0)
		require.NoError(t, err)
		require.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
		l.Release(nil)
		resp, err := admin(t, c).DeleteTopics(t.Context(), topic)
		require.NoError(t, err)
		require.NoError(t, resp.Error())

		res := readOnce(t, cc, topic, 0, 10, 100)
		require.ErrorIs(t, res.err, ErrUnknownPartition, "a deleted topic must not surface as a leadership error")
		assert.True(t, Permanent(res.err))
		assert.Less(t, res.elapsed, time.Second, "metadata confirmed the topic missing: no retries needed")
	})

	t.Run("topic recreated while read", func(t *testing.T) {
		c := newCluster(t, 1, 100)
		cc := newCache(t, c, func(cfg *Config) { cfg.FetchMaxPartitionBytes = 512 })
		l, err := cc.Acquire(t.Context(), topic, 0, 0)
		require.NoError(t, err)
		require.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
		l.Release(nil)
		adm := admin(t, c)
		resp, err := adm.DeleteTopics(t.Context(), topic)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
		created, err := adm.CreateTopic(t.Context(), 1, 1, nil, topic)
		require.NoError(t, err)
		require.NoError(t, created.Err)

		res := readOnce(t, cc, topic, 0, 10, 100)
		require.ErrorIs(t, res.err, ErrTopicRecreated)
		assert.True(t, Permanent(res.err))
	})

	t.Run("offsets deleted", func(t *testing.T) {
		c := newCluster(t, 1, 100)
		del := kadm.Offsets{}
		del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 40})
		resp, err := admin(t, c).DeleteRecords(t.Context(), del)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
		res := readOnce(t, newCache(t, c, nil), topic, 0, 0, 50)
		require.ErrorIs(t, res.err, ErrOffsetOutOfRange)
		assert.True(t, Permanent(res.err))
	})

	// Authorisation failures from the broker: returned at once, the kerr
	// error preserved, one request and no retry.
	auth := []struct {
		name  string
		fault kfake.Fault
		want  *kerr.Error
		key   kmsg.Key // the request that is answered with the failure
	}{
		{"topic authorization on fetch", kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1}, kerr.TopicAuthorizationFailed, kmsg.Fetch},
		{"cluster authorization on fetch", kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, TopLevel: true, Err: kerr.ClusterAuthorizationFailed, Count: -1}, kerr.ClusterAuthorizationFailed, kmsg.Fetch},
		{"topic authorization on metadata", kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1}, kerr.TopicAuthorizationFailed, kmsg.Metadata},
	}
	for _, tt := range auth {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 1, 10)
			counter := newRequestCounter()
			cc := newCache(t, c, func(cfg *Config) { cfg.ClientOpts = []kgo.Opt{kgo.WithHooks(counter)} })
			c.Fault(tt.fault)
			res := readOnce(t, cc, topic, 0, 0, 10)
			require.ErrorIs(t, res.err, tt.want)
			assert.True(t, Permanent(res.err))
			assert.Contains(t, res.err.Error(), "t/0")
			assert.Equal(t, 1, counter.key(tt.key), "the failure was retried")
		})
	}

	t.Run("sasl authentication failed", func(t *testing.T) {
		c := newClusterWith(t, 1, 0, kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "admin"))
		// Kafka answers bad credentials with SASL_AUTHENTICATION_FAILED
		// and a message; kfake closes the connection instead. Answer as
		// Kafka does.
		c.ControlKey(int16(kmsg.SASLAuthenticate), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			resp := kreq.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			resp.ErrorMessage = kmsg.StringPtr("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
			return resp, nil, true
		})
		cc := newCache(t, c, func(cfg *Config) {
			cfg.ClientOpts = []kgo.Opt{kgo.SASL(scram.Auth{User: "admin", Pass: "wrong"}.AsSha256Mechanism())}
		})
		res := readOnce(t, cc, topic, 0, 0, 10)
		require.ErrorIs(t, res.err, kerr.SaslAuthenticationFailed)
		assert.True(t, Permanent(res.err))
		assert.Less(t, res.elapsed, time.Second, "the failure was retried")
	})
}

// TestRetriableErrors checks that errors a retry can fix are returned
// wrapped, after Read's bounded retries where it retries, and that
// Permanent says so.
func TestRetriableErrors(t *testing.T) {
	t.Run("fetch says unknown partition, metadata has it", func(t *testing.T) {
		c := newCluster(t, 1, 10)
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.UnknownTopicOrPartition, Count: -1})
		res := readOnce(t, newCache(t, c, nil), topic, 0, 0, 10)
		require.ErrorIs(t, res.err, kerr.UnknownTopicOrPartition)
		assert.NotErrorIs(t, res.err, ErrUnknownPartition, "metadata says the partition exists")
		assert.False(t, Permanent(res.err))
		assert.Contains(t, res.err.Error(), fmt.Sprintf("after %d metadata refreshes", maxLeaderRetries))
	})

	t.Run("leadership that does not settle", func(t *testing.T) {
		c := newCluster(t, 1, 10)
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1})
		res := readOnce(t, newCache(t, c, nil), topic, 0, 0, 10)
		require.ErrorIs(t, res.err, kerr.NotLeaderForPartition)
		assert.False(t, Permanent(res.err))
		assert.Equal(t, int64(0), res.pos)
	})

	t.Run("broker error", func(t *testing.T) {
		c := newCluster(t, 1, 10)
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.UnknownServerError})
		res := readOnce(t, newCache(t, c, nil), topic, 0, 0, 10)
		require.ErrorIs(t, res.err, kerr.UnknownServerError)
		assert.False(t, Permanent(res.err))
	})

	t.Run("broker gone", func(t *testing.T) {
		c := newCluster(t, 1, 100)
		cc := newCache(t, c, func(cfg *Config) {
			cfg.FetchMaxPartitionBytes = 512
			cfg.ClientOpts = []kgo.Opt{kgo.RetryTimeout(time.Second), kgo.RequestRetries(1)}
		})
		l, err := cc.Acquire(t.Context(), topic, 0, 0)
		require.NoError(t, err)
		require.Equal(t, seq(0, 10), readRange(t, l, 0, 10))
		l.Release(nil)
		c.Close()
		res := readOnce(t, cc, topic, 0, 10, 100)
		require.Error(t, res.err)
		assert.False(t, Permanent(res.err))
		assert.False(t, errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, context.Canceled))
	})
}

func TestPermanent(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{context.Canceled, false},
		{fmt.Errorf("x: %w", kerr.NotLeaderForPartition), false},
		{fmt.Errorf("x: %w", kerr.UnknownTopicOrPartition), false},
		{fmt.Errorf("x: %w", ErrOffsetOutOfRange), true},
		{&OffsetOutOfRangeError{Topic: "t"}, true},
		{&LogTruncatedError{Topic: "t"}, true},
		{fmt.Errorf("x: %w", ErrTopicRecreated), true},
		{fmt.Errorf("x: %w: %w", ErrUnknownPartition, kerr.UnknownTopicOrPartition), true},
		{fmt.Errorf("x: %w at offset 5: %w", ErrCorrupt, errors.New("crc")), true},
		{fmt.Errorf("x: %w", kerr.TopicAuthorizationFailed), true},
		{fmt.Errorf("x: %w", kerr.ClusterAuthorizationFailed), true},
		{fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Permanent(tt.err), "Permanent(%v) = %v, want %v", tt.err, !tt.want, tt.want)
	}
}

// TestPermanentConsultsTheOneList: every refusal of access of
// internal/kerrs' one list is permanent for the cache, as are its own
// sentinels, and a leadership error is not.
func TestPermanentConsultsTheOneList(t *testing.T) {
	for _, err := range kerrs.DeniedErrors() {
		assert.Truef(t, Permanent(fmt.Errorf("t/0: %w", err)), "Permanent(%v)", err)
	}
	for _, err := range []error{ErrOffsetOutOfRange, ErrTopicRecreated, ErrUnknownPartition, ErrLogTruncated, ErrCorrupt, ErrInternal} {
		assert.Truef(t, Permanent(fmt.Errorf("t/0: %w", err)), "Permanent(%v)", err)
	}
	for _, err := range []error{nil, kerr.NotLeaderForPartition, kerr.CorruptMessage, context.Canceled, errors.New("read: connection reset")} {
		assert.Falsef(t, Permanent(err), "Permanent(%v)", err)
	}
}
