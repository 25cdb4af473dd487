package kerrs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"
)

var errOwn = errors.New("an error of the caller's own")

func TestPermanent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{kerr.TopicAuthorizationFailed, true},
		{kerr.ClusterAuthorizationFailed, true},
		{kerr.GroupAuthorizationFailed, true},
		{kerr.SaslAuthenticationFailed, true},
		{kerr.UnsupportedSaslMechanism, true},
		{kerr.IllegalSaslState, true},
		{fmt.Errorf("topic t partition 0: %w", kerr.SaslAuthenticationFailed), true},
		{errors.Join(errors.New("x"), kerr.GroupAuthorizationFailed), true},
		{errOwn, true},
		{fmt.Errorf("wrapped: %w", errOwn), true},
		{kerr.NotLeaderForPartition, false},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.RequestTimedOut, false},
		{kerr.UnsupportedVersion, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("connection refused"), false},
	} {
		assert.Equalf(t, c.want, Permanent(c.err, errOwn), "Permanent(%v, errOwn)", c.err)
		if c.err != errOwn && !errors.Is(c.err, errOwn) {
			assert.Equalf(t, c.want, Denied(c.err), "Denied(%v)", c.err)
		}
	}
	assert.False(t, Denied(errOwn), "Denied(errOwn): an own error is not a refusal")
}

func TestDeniedErrorsIsACopy(t *testing.T) {
	l := DeniedErrors()
	l[0] = errOwn
	assert.True(t, Denied(kerr.TopicAuthorizationFailed))
	assert.False(t, Denied(errOwn))
}
