package security

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOAuthExtensionsSent checks that OAUTHBEARER extensions reach the
// broker: a kfake broker that offers OAUTHBEARER records the bytes of every
// SASLAuthenticate request a client built with Opts sends, and the client
// first message holds the token and each extension as key=value.
func TestOAuthExtensionsSent(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	var (
		mu   sync.Mutex
		sent [][]byte
	)
	cluster.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		resp := req.(*kmsg.SASLHandshakeRequest).ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{MechanismOAuthBearer}
		return resp, nil, true
	})
	cluster.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		mu.Lock()
		sent = append(sent, append([]byte(nil), r.SASLAuthBytes...))
		mu.Unlock()
		return r.ResponseKind(), nil, true
	})

	c := Config{SASL: []SASL{{Mechanism: MechanismOAuthBearer, Token: "tok.en", Extensions: map[string]string{"traceId": "abc", "logicalCluster": "lkc-1"}}}}
	cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(cluster.ListenAddrs()...))...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.Ping(t.Context()))

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, sent, "no SASLAuthenticate request reached the broker")
	first := string(sent[0])
	assert.True(t, strings.HasPrefix(first, "n,,\x01auth=Bearer tok.en\x01"), "client first message %q", first)
	assert.Contains(t, first, "\x01traceId=abc\x01", "client first message %q", first)
	assert.Contains(t, first, "\x01logicalCluster=lkc-1\x01", "client first message %q", first)
}
