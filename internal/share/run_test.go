package share

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kbr/kafka_batched_ranges/internal/kerrs"
)

// TestPermanent: the reader stops on what retrying cannot fix, the one
// list of refusals of access (internal/kerrs, SASL included) and the share
// requests' own, and retries the rest.
func TestPermanent(t *testing.T) {
	for _, err := range kerrs.DeniedErrors() {
		assert.Truef(t, permanent(err), "permanent(%v): a refusal of access", err)
		assert.Truef(t, permanent(&kgo.ErrGroupSession{Err: err}), "permanent(ErrGroupSession{%v})", err)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kerr.SaslAuthenticationFailed, true},
		{kerr.UnsupportedSaslMechanism, true},
		{kerr.IllegalSaslState, true},
		{kerr.GroupAuthorizationFailed, true},
		{kerr.UnsupportedVersion, true},
		{kerr.InvalidGroupID, true},
		{kerr.InvalidRequest, true},
		{fmt.Errorf("topic t partition 0: %w", kerr.TopicAuthorizationFailed), true},
		{kerr.NotLeaderForPartition, false},
		{kerr.ShareSessionNotFound, false},
		{kerr.InvalidRecordState, false},
		{kerr.CoordinatorNotAvailable, false},
		{kerr.CorruptMessage, false},
		{errors.New("connection reset"), false},
		{nil, false},
	} {
		assert.Equalf(t, c.want, permanent(c.err), "permanent(%v)", c.err)
	}
}

// TestSASLFailureStopsTheReader: a member whose credentials stop working
// (a broker answers the authentication of its new connection with
// SASL_AUTHENTICATION_FAILED: a password rotated, a user deleted) stops
// with that error, which Next returns, instead of retrying for ever. Its
// share group heartbeat's connection is closed once, so the heartbeat
// reconnects and authenticates again.
func TestSASLFailureStopsTheReader(t *testing.T) {
	const n = 5
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.BrokerConfigs(map[string]string{"group.share.heartbeat.interval.ms": "100"}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	auth := kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism())
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), auth, kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	for i := range n {
		require.NoError(t, cl.ProduceSync(t.Context(), kgo.StringRecord(strconv.Itoa(i))).FirstErr())
	}

	c.SetGroupConfigs("g", map[string]string{"share.auto.offset.reset": "earliest"})
	r, err := New(Config{Seeds: c.ListenAddrs(), ClientOpts: []kgo.Opt{auth}, Group: "g", Topics: []string{topic}, Logger: tlog{t}})
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Close(ctx) // its leave fails too: the heartbeat cannot authenticate
	}()
	b := next(t, r)

	// From now on every authentication fails, as Kafka answers bad
	// credentials (kfake would close the connection instead), and the
	// next heartbeat's connection is closed.
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := kreq.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr("Authentication failed: Invalid username or password")
		return resp, nil, true
	})
	var closed atomic.Bool
	c.ControlKey(int16(kmsg.ShareGroupHeartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		if closed.CompareAndSwap(false, true) {
			return nil, errors.New("connection closed by the test"), true
		}
		c.KeepControl()
		return nil, nil, false
	})
	b.Ack()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	began := time.Now()
	for {
		b, err := r.Next(ctx)
		if err != nil {
			require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, "Next: want the reader stopped on the SASL failure, got %v", err)
			t.Logf("stopped after %s: %v", time.Since(began).Round(time.Millisecond), err)
			return
		}
		b.Ack()
	}
}

// TestRenewalUnderWayIsNotMarkedAgain: when the broker answers renewals
// slower than the renew ticks (400 ms here, ticks every 250 ms), a batch
// is not renewed again while its renewal is under way: franz-go would
// ignore that renewal (a no-op), and it was counted as a renewal all the
// same. Every renewal counted is one the broker got (counted here on the
// wire) and took, and the slow pipeline keeps its records.
func TestRenewalUnderWayIsNotMarkedAgain(t *testing.T) {
	c := newCluster(t, 5, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "1500",
		"share.record.lock.sweep.interval.ms": "50",
	}))
	var wire atomic.Int64
	c.ControlKey(int16(kmsg.ShareAcknowledge), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ShareAcknowledgeRequest)
		if !req.IsRenewAck {
			return nil, nil, false
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				for _, b := range rp.AcknowledgementBatches {
					if len(b.AcknowledgeTypes) == 1 && b.AcknowledgeTypes[0] == int8(kgo.AckRenew) {
						wire.Add(b.LastOffset - b.FirstOffset + 1)
					}
				}
			}
		}
		c.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
		return nil, nil, false
	})
	r := newReader(t, c, "g", func(cfg *Config) { cfg.RenewInterval = 500 * time.Millisecond; cfg.Logger = tlog{t} })
	b := next(t, r)
	time.Sleep(4 * time.Second) // the pipeline: more than two locks
	b.Ack()
	closeReader(t, r)
	st := r.Stats()
	require.Positive(t, wire.Load())
	require.Equal(t, Stats{Acquired: 5, Accepted: 5, Renewed: wire.Load()}, st, "renewals counted against %d sent", wire.Load())
}
