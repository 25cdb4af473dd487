package security

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		sasl []SASL
		want []string // substrings of the error, none for a valid config
	}{
		{name: "none"},
		{name: "plain", sasl: []SASL{{Mechanism: MechanismPlain, Username: "u", Password: "p"}}},
		{name: "scram-256", sasl: []SASL{{Mechanism: MechanismScramSHA256, Username: "u", Password: "p"}}},
		{name: "scram-512", sasl: []SASL{{Mechanism: MechanismScramSHA512, Username: "u", Password: "p"}}},
		{name: "oauth", sasl: []SASL{{Mechanism: MechanismOAuthBearer, Token: "t"}}},
		{name: "oauth with extensions", sasl: []SASL{{Mechanism: MechanismOAuthBearer, Token: "t", Extensions: map[string]string{"traceId": "a b=c", "logicalCluster": "lkc-1"}}}},
		{
			name: "extensions of another mechanism",
			sasl: []SASL{{Mechanism: MechanismPlain, Username: "u", Password: "p", Extensions: map[string]string{"x": "1"}}},
			want: []string{"sasl[0].extensions is only used by mechanism OAUTHBEARER, not PLAIN"},
		},
		{
			name: "extension named auth",
			sasl: []SASL{{Mechanism: MechanismOAuthBearer, Token: "t", Extensions: map[string]string{"auth": "x"}}},
			want: []string{`sasl[0].extensions: key "auth" is reserved (it carries the token)`},
		},
		{
			name: "extension key not letters",
			sasl: []SASL{{Mechanism: MechanismOAuthBearer, Token: "t", Extensions: map[string]string{"trace-id": "x"}}},
			want: []string{`sasl[0].extensions: key "trace-id" must be letters only (RFC 7628)`},
		},
		{
			name: "extension value with a control character",
			sasl: []SASL{{Mechanism: MechanismOAuthBearer, Token: "t", Extensions: map[string]string{"x": "a\x01b"}}},
			want: []string{`sasl[0].extensions.x: the value must be printable ASCII, spaces, tabs or line breaks (RFC 7628)`},
		},
		{
			name: "two mechanisms",
			sasl: []SASL{{Mechanism: MechanismScramSHA512, Username: "u", Password: "p"}, {Mechanism: MechanismPlain, Username: "u", Password: "p"}},
		},
		{
			name: "plain without password",
			sasl: []SASL{{Mechanism: MechanismPlain, Username: "u"}},
			want: []string{"sasl[0].password is required for mechanism PLAIN"},
		},
		{
			name: "scram without username and password",
			sasl: []SASL{{Mechanism: MechanismScramSHA256}},
			want: []string{"sasl[0].username is required for mechanism SCRAM-SHA-256", "sasl[0].password is required for mechanism SCRAM-SHA-256"},
		},
		{
			name: "second entry",
			sasl: []SASL{{Mechanism: MechanismPlain, Username: "u", Password: "p"}, {Mechanism: MechanismScramSHA512, Username: "u"}},
			want: []string{"sasl[1].password is required for mechanism SCRAM-SHA-512"},
		},
		{
			name: "scram with a token",
			sasl: []SASL{{Mechanism: MechanismScramSHA256, Username: "u", Password: "p", Token: "tok-secret"}},
			want: []string{"sasl[0].token is only used by mechanism OAUTHBEARER, not SCRAM-SHA-256"},
		},
		{
			name: "oauth without token",
			sasl: []SASL{{Mechanism: MechanismOAuthBearer}},
			want: []string{"sasl[0].token is required for mechanism OAUTHBEARER"},
		},
		{
			name: "oauth with a password",
			sasl: []SASL{{Mechanism: MechanismOAuthBearer, Token: "t", Password: "pw-secret"}},
			want: []string{"sasl[0].username and sasl[0].password are not used by mechanism OAUTHBEARER"},
		},
		{
			name: "unknown mechanism",
			sasl: []SASL{{Mechanism: "GSSAPI", Username: "u", Password: "pw-secret"}},
			want: []string{`sasl[0].mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM, got "GSSAPI"`},
		},
		{
			name: "lower case mechanism",
			sasl: []SASL{{Mechanism: "plain", Username: "u", Password: "p"}},
			want: []string{`sasl[0].mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM, got "plain"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{SASL: tc.sasl}.Validate()
			if len(tc.want) == 0 {
				require.NoError(t, err, "Validate(%v)", tc.sasl)
				return
			}
			require.Error(t, err, "Validate(%v)", tc.sasl)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "secret", "Validate error holds a secret")
			if strings.Contains(tc.name, "mechanism") && strings.Contains(tc.name, "unknown") {
				assert.ErrorIs(t, err, ErrUnknownMechanism)
			}
		})
	}
}

// TestOpts checks how many options Opts returns for each shape of Config:
// none for plaintext, one for TLS, one for SASL (all mechanisms in one
// kgo.SASL), two for both; with TCP set, one kgo.Dialer whether or not TLS
// is set (it dials TLS itself).
func TestOpts(t *testing.T) {
	sasl := []SASL{{Mechanism: MechanismPlain, Username: "u", Password: "p"}, {Mechanism: MechanismOAuthBearer, Token: "t"}}
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"plaintext", Config{}, 0},
		{"tls", Config{TLS: &tls.Config{}}, 1},
		{"sasl", Config{SASL: sasl}, 1},
		{"tls and sasl", Config{TLS: &tls.Config{}, SASL: sasl}, 2},
		{"tcp", Config{TCP: TCP{ConnectTimeout: time.Second}}, 1},                             // kgo.Dialer
		{"tls and tcp", Config{TLS: &tls.Config{}, TCP: TCP{ConnectTimeout: time.Second}}, 1}, // kgo.Dialer with TLS
	} {
		assert.Lenf(t, tc.cfg.Opts(), tc.want, "Opts() of %s", tc.name)
	}
}

// TestMechanismMessages checks the first message each mechanism sends: the
// mechanism name franz-go negotiates and the credentials where they belong
// (PLAIN: authzid NUL user NUL password; SCRAM: the client-first message
// with the user; OAUTHBEARER: the GS2 header and `auth=Bearer <token>`).
func TestMechanismMessages(t *testing.T) {
	for _, tc := range []struct {
		sasl     SASL
		wantName string
		want     string // prefix of the first message, or all of it for PLAIN and OAUTHBEARER
		exact    bool
	}{
		{SASL{Mechanism: MechanismPlain, Username: "alice", Password: "pw"}, "PLAIN", "\x00alice\x00pw", true},
		{SASL{Mechanism: MechanismScramSHA256, Username: "alice", Password: "pw"}, "SCRAM-SHA-256", "n,,n=alice,r=", false},
		{SASL{Mechanism: MechanismScramSHA512, Username: "alice", Password: "pw"}, "SCRAM-SHA-512", "n,,n=alice,r=", false},
		{SASL{Mechanism: MechanismOAuthBearer, Token: "tok.en"}, "OAUTHBEARER", "n,,\x01auth=Bearer tok.en\x01\x01", true},
		{SASL{Mechanism: MechanismOAuthBearer, Token: "tok.en", Extensions: map[string]string{"traceId": "abc"}}, "OAUTHBEARER", "n,,\x01auth=Bearer tok.en\x01traceId=abc\x01\x01", true},
	} {
		m := tc.sasl.mechanism()
		require.Equal(t, tc.wantName, m.Name())
		_, first, err := m.Authenticate(t.Context(), "127.0.0.1:9092")
		require.NoError(t, err, "%s: Authenticate", tc.wantName)
		if tc.exact {
			assert.Equalf(t, tc.want, string(first), "%s: first message", tc.wantName)
		} else {
			assert.Truef(t, strings.HasPrefix(string(first), tc.want), "%s: first message %q, want prefix %q", tc.wantName, first, tc.want)
		}
	}
	_, _, err := SASL{Mechanism: "GSSAPI"}.mechanism().Authenticate(t.Context(), "127.0.0.1:9092")
	require.ErrorIs(t, err, ErrUnknownMechanism)
}

// TestScramSignatureMismatch checks that a SCRAM exchange whose last server
// message fails verification says so without the signature the password
// would have produced (franz-go's error holds it, and it can be cracked
// offline into the password).
func TestScramSignatureMismatch(t *testing.T) {
	for _, mech := range []string{MechanismScramSHA256, MechanismScramSHA512} {
		sess, first, err := SASL{Mechanism: mech, Username: "alice", Password: "pw"}.mechanism().Authenticate(t.Context(), "b:9092")
		require.NoError(t, err)
		_, nonce, ok := strings.Cut(string(first), ",r=")
		require.Truef(t, ok, "%s: no nonce in the first message %q", mech, first)
		salt := base64.StdEncoding.EncodeToString([]byte("salt"))
		done, _, err := sess.Challenge([]byte("r=" + nonce + "server,s=" + salt + ",i=4096"))
		require.NoError(t, err, "%s: server-first message", mech)
		require.False(t, done)
		_, _, err = sess.Challenge([]byte("v=" + base64.StdEncoding.EncodeToString([]byte("not the signature"))))
		require.Error(t, err, "%s: a wrong server signature was accepted", mech)
		assert.Equalf(t, mech+` as user "alice": the broker's final message does not prove that it knows the password (server signature mismatch): is it the broker it claims to be?`, err.Error(), "%s: error", mech)
	}
}

// TestWarnings checks the warnings of each insecure setting, naming the
// field, and none for settings that keep secrets off the network.
func TestWarnings(t *testing.T) {
	plain := SASL{Mechanism: MechanismPlain, Username: "u", Password: "p"}
	scram := SASL{Mechanism: MechanismScramSHA512, Username: "u", Password: "p"}
	oauth := SASL{Mechanism: MechanismOAuthBearer, Token: "t"}
	const skip = "tls.skip_cert_verify is true: the brokers' certificates are not verified, so anyone on the network path can pose as a broker (and read what is sent to it, credentials included); trust the brokers' CA with tls.root_cas or tls.root_cas_file instead"
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"plaintext", Config{}, nil},
		{"tls", Config{TLS: &tls.Config{}}, nil},
		{"scram without tls", Config{SASL: []SASL{scram}}, nil},
		{"plain with tls", Config{TLS: &tls.Config{}, SASL: []SASL{plain, oauth}}, nil},
		{"plain without tls", Config{SASL: []SASL{scram, plain}}, []string{
			"sasl[1] uses mechanism PLAIN without tls: the password crosses the network in clear; enable tls (a SASL_SSL listener) or use SCRAM-SHA-512",
		}},
		{"oauthbearer without tls", Config{SASL: []SASL{oauth}}, []string{
			"sasl[0] uses mechanism OAUTHBEARER without tls: the token crosses the network in clear; enable tls (a SASL_SSL listener)",
		}},
		{"skip verify", Config{TLS: &tls.Config{InsecureSkipVerify: true}, SASL: []SASL{plain}}, []string{skip}},
	} {
		assert.Equalf(t, tc.want, tc.cfg.Warnings(), "Warnings() of %s", tc.name)
	}
}

// ---------------------------------------------------------------------------------------------
// against kfake

// pki is a CA made at test time, a server certificate and a client
// certificate it signed.
type pki struct {
	roots  *x509.CertPool // trusts the CA
	server tls.Certificate
	client tls.Certificate // for mutual TLS (client auth)
}

// newPKI makes a CA named caName and a server certificate it signed, valid for the given DNS
// names and IPs.
func newPKI(t *testing.T, caName string, dnsNames []string, ips []net.IP) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: caName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "security test broker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)

	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	clientTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "security test client"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, clientTmpl, ca, &clientKey.PublicKey, caKey)
	require.NoError(t, err)

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return pki{
		roots:  roots,
		server: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
		client: tls.Certificate{Certificate: [][]byte{clientDER, caDER}, PrivateKey: clientKey},
	}
}

// newCluster starts a kfake cluster with opts, closed when the test ends, and
// returns its address. With sasl, it requires SASL and knows kfakeUser with
// kfakePass for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
func newCluster(t *testing.T, sasl bool, opts ...kfake.Opt) string {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)
	if sasl {
		opts = append(opts,
			kfake.EnableSASL(),
			kfake.Superuser(MechanismPlain, kfakeUser, kfakePass),
			kfake.Superuser(MechanismScramSHA256, kfakeUser, kfakePass),
			kfake.Superuser(MechanismScramSHA512, kfakeUser, kfakePass),
		)
	}
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	rejectLikeKafka(c, sasl)
	return c.ListenAddrs()[0]
}

// newClosingSASLCluster starts a kfake cluster that requires SASL and knows
// kfakeUser with kfakePass for PLAIN and SCRAM-SHA-256, and that, as kfake
// and brokers before Kafka 1.0 do, closes the connection on a failed
// authentication instead of answering it.
func newClosingSASLCluster(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(MechanismPlain, kfakeUser, kfakePass),
		kfake.Superuser(MechanismScramSHA256, kfakeUser, kfakePass))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// rejectLikeKafka makes c answer two SASL requests as Apache Kafka does where
// kfake closes the connection instead (which a client sees as EOF): without
// sasl, a SASLHandshake gets ILLEGAL_SASL_STATE; with it, a SASLAuthenticate
// carrying wrongPass (PLAIN) or the unknown user "mallory" (SCRAM's first
// message) gets SASL_AUTHENTICATION_FAILED with Kafka's message. Other
// requests are left to kfake.
func rejectLikeKafka(c *kfake.Cluster, sasl bool) {
	if !sasl {
		c.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
			resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
			resp.ErrorCode = kerr.IllegalSaslState.Code
			c.KeepControl()
			return resp, nil, true
		})
		return
	}
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		auth := req.(*kmsg.SASLAuthenticateRequest)
		resp := auth.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		switch payload := string(auth.SASLAuthBytes); {
		case strings.Contains(payload, "\x00"+wrongPass):
			msg := "Authentication failed: Invalid username or password"
			resp.ErrorMessage = &msg
		case strings.HasPrefix(payload, "n,,n=mallory,"):
			msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
			resp.ErrorMessage = &msg
		default:
			return nil, nil, false
		}
		c.KeepControl()
		return resp, nil, true
	})
}

// newClosingListener returns the address of a listener that, like a Kafka
// PLAINTEXT listener given a TLS ClientHello (a request size of hundreds of
// megabytes), reads the first bytes of each connection and closes it: after
// reading what the client sent if drain (the client sees EOF, as from Kafka),
// after the size only if not (the client sees a connection reset). kfake
// waits for the announced bytes instead.
func newClosingListener(t *testing.T, drain bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4, 64<<10)
			if drain {
				buf = buf[:cap(buf)]
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = conn.Read(buf)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// listTopics lists topics through a client of addr built with cfg.Opts, and
// returns the error Explain makes of the outcome.
func listTopics(t *testing.T, addr string, cfg Config) error {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(3 * time.Second)}, cfg.Opts()...)...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).ListTopics(ctx)
	return Explain(err, cfg, []string{addr})
}

const (
	kfakeUser = "alice"
	kfakePass = "alice-kfake-secret"
	wrongPass = "wrong-kfake-secret"
	token     = "token-kfake-secret"
)

// TestKfake connects to kfake clusters with each kind of TLS and SASL
// setting and checks the outcome through Explain: success where client and
// cluster agree, and otherwise the sentinel and the exact explanation, which
// names the mechanism and user, or the broker and the TLS failure, and never
// a password or token.
func TestKfake(t *testing.T) {
	t.Parallel()
	certs := newPKI(t, "security test CA", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	otherCA := newPKI(t, "other CA", []string{"localhost"}, nil) // trusts a CA that signed nothing kfake presents
	dnsOnly := newPKI(t, "dns-only CA", []string{"kafka.example"}, nil)
	serverTLS := func(p pki) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	}
	mutual := func(p pki, version uint16) *tls.Config {
		c := serverTLS(certs)
		c.ClientAuth, c.ClientCAs, c.MinVersion, c.MaxVersion = tls.RequireAndVerifyClientCert, p.roots, version, version
		return c
	}
	var (
		mutualTLS13 = newCluster(t, false, kfake.TLS(mutual(certs, tls.VersionTLS13)))
		mutualTLS12 = newCluster(t, false, kfake.TLS(mutual(certs, tls.VersionTLS12)))
		closingSASL = newClosingSASLCluster(t)
		plain       = newCluster(t, false)
		sasl        = newCluster(t, true)
		tlsOnly     = newCluster(t, false, kfake.TLS(serverTLS(certs)))
		tlsSASL     = newCluster(t, true, kfake.TLS(serverTLS(certs)))
		tlsDNSOnly  = newCluster(t, false, kfake.TLS(serverTLS(dnsOnly)))
		closing     = newClosingListener(t, true)
		resetting   = newClosingListener(t, false)
	)
	trust := func(p pki) *tls.Config { return &tls.Config{RootCAs: p.roots} }
	withCert := func(c *tls.Config, cert tls.Certificate) *tls.Config {
		c.Certificates = []tls.Certificate{cert}
		return c
	}
	sendAnyway := func(c *tls.Config, cert tls.Certificate) *tls.Config {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		return c
	}
	user := func(mech, pass string) []SASL { return []SASL{{Mechanism: mech, Username: kfakeUser, Password: pass}} }

	for _, tc := range []struct {
		name     string
		addr     string
		cfg      Config
		wantKind error  // nil: success
		want     string // the explanation, up to the original error; {addr} is the broker
	}{
		{name: "plaintext", addr: plain},
		{name: "tls", addr: tlsOnly, cfg: Config{TLS: trust(certs)}},
		{name: "sasl plain", addr: sasl, cfg: Config{SASL: user(MechanismPlain, kfakePass)}},
		{name: "tls and sasl plain", addr: tlsSASL, cfg: Config{TLS: trust(certs), SASL: user(MechanismPlain, kfakePass)}},
		{name: "tls and scram-sha-256", addr: tlsSASL, cfg: Config{TLS: trust(certs), SASL: user(MechanismScramSHA256, kfakePass)}},
		{name: "tls and scram-sha-512", addr: tlsSASL, cfg: Config{TLS: trust(certs), SASL: user(MechanismScramSHA512, kfakePass)}},
		{
			name: "server name override",
			addr: tlsDNSOnly,
			cfg:  Config{TLS: &tls.Config{RootCAs: dnsOnly.roots, ServerName: "kafka.example"}},
		},
		{
			name:     "wrong password plain",
			addr:     tlsSASL,
			cfg:      Config{TLS: trust(certs), SASL: user(MechanismPlain, wrongPass)},
			wantKind: ErrAuthentication,
			want:     `sasl authentication with mechanism PLAIN as user "alice" was rejected by broker {addr}: wrong password, unknown user or invalid token: `,
		},
		{
			name:     "wrong password plain, oauthbearer listed second",
			addr:     sasl,
			cfg:      Config{SASL: append(user(MechanismPlain, wrongPass), SASL{Mechanism: MechanismOAuthBearer, Token: token})},
			wantKind: ErrAuthentication,
			want:     `sasl authentication with one of the mechanisms PLAIN as user "alice", OAUTHBEARER with a bearer token was rejected by broker {addr}: wrong password, unknown user or invalid token: `,
		},
		{
			name: "oauthbearer not enabled, scram-sha-256 next",
			addr: tlsSASL,
			cfg:  Config{TLS: trust(certs), SASL: append([]SASL{{Mechanism: MechanismOAuthBearer, Token: token}}, user(MechanismScramSHA256, kfakePass)...)},
		},
		{
			name:     "unknown user scram-sha-512",
			addr:     sasl,
			cfg:      Config{SASL: []SASL{{Mechanism: MechanismScramSHA512, Username: "mallory", Password: wrongPass}}},
			wantKind: ErrAuthentication,
			want:     `sasl authentication with mechanism SCRAM-SHA-512 as user "mallory" was rejected by broker {addr}: wrong password, unknown user or invalid token: `,
		},
		{
			name:     "oauthbearer not enabled",
			addr:     sasl,
			cfg:      Config{SASL: []SASL{{Mechanism: MechanismOAuthBearer, Token: token}}},
			wantKind: ErrSASLMismatch,
			want:     `broker {addr} does not enable sasl mechanism OAUTHBEARER (Kafka sasl.enabled.mechanisms of its listener): `,
		},
		{
			name:     "untrusted certificate",
			addr:     tlsOnly,
			cfg:      Config{TLS: trust(otherCA)},
			wantKind: ErrUntrustedCertificate,
			want:     `tls: the certificate of broker {addr} failed verification (certificate "security test broker" issued by "security test CA"): x509: certificate signed by unknown authority; set tls.root_cas or tls.root_cas_file to the CA that signed it: `,
		},
		{
			name:     "certificate for another host",
			addr:     tlsDNSOnly,
			cfg:      Config{TLS: trust(dnsOnly)},
			wantKind: ErrUntrustedCertificate,
			want:     `tls: the certificate of broker {addr} is not valid for 127.0.0.1, the name it was verified against; it is valid for kafka.example: dial the broker by one of those names or set tls_server_name: `,
		},
		{
			name:     "tls against plaintext",
			addr:     closing,
			cfg:      Config{TLS: trust(certs)},
			wantKind: ErrTLSMismatch,
			want:     `tls is enabled but broker {addr} closed the connection during the tls handshake: its listener does not speak tls (PLAINTEXT or SASL_PLAINTEXT); set tls.enabled: false or connect to the broker's SSL/SASL_SSL listener: `,
		},
		{
			name:     "tls against plaintext, reset",
			addr:     resetting,
			cfg:      Config{TLS: trust(certs)},
			wantKind: ErrTLSMismatch,
			want:     `tls is enabled but broker {addr} closed the connection during the tls handshake: its listener does not speak tls (PLAINTEXT or SASL_PLAINTEXT); set tls.enabled: false or connect to the broker's SSL/SASL_SSL listener: `,
		},
		{
			name:     "plaintext against tls",
			addr:     tlsOnly,
			cfg:      Config{},
			wantKind: ErrTLSMismatch,
			want:     `tls is not enabled but broker {addr} speaks tls (an SSL or SASL_SSL listener): set tls.enabled: true: `,
		},
		{name: "mutual tls 1.3", addr: mutualTLS13, cfg: Config{TLS: withCert(trust(certs), certs.client)}},
		{name: "mutual tls 1.2", addr: mutualTLS12, cfg: Config{TLS: withCert(trust(certs), certs.client)}},
		{
			name:     "mutual tls 1.3 without a client certificate",
			addr:     mutualTLS13,
			cfg:      Config{TLS: trust(certs)},
			wantKind: ErrClientCertificate,
			want:     `tls: broker {addr} requires a client certificate (mutual tls: its listener has ssl.client.auth=required) and none is configured: set tls.client_certs to a certificate signed by a CA the broker trusts: `,
		},
		{
			// Go sends no certificate that the broker's list of acceptable CAs leaves out.
			name:     "mutual tls 1.3 with a certificate of another CA",
			addr:     mutualTLS13,
			cfg:      Config{TLS: withCert(trust(certs), otherCA.client)},
			wantKind: ErrClientCertificate,
			want:     `tls: broker {addr} requires a client certificate and none of tls.client_certs is issued by a CA it accepts (certificate "security test client" issued by "other CA"): set tls.client_certs to a certificate signed by a CA of the broker's ssl.truststore: `,
		},
		{
			name:     "mutual tls 1.3, a certificate of another CA sent anyway",
			addr:     mutualTLS13,
			cfg:      Config{TLS: sendAnyway(trust(certs), otherCA.client)},
			wantKind: ErrClientCertificate,
			want:     `tls: broker {addr} rejected the client certificate of tls.client_certs (remote error: tls: unknown certificate authority): the broker's ssl.truststore must trust the CA that signed it: `,
		},
		{
			name:     "mutual tls 1.2 without a client certificate",
			addr:     mutualTLS12,
			cfg:      Config{TLS: trust(certs)},
			wantKind: ErrClientCertificate,
			want:     `tls: broker {addr} ended the tls handshake (remote error: tls: handshake failure) and no client certificate is configured: if its listener requires one (mutual tls, ssl.client.auth=required), set tls.client_certs: `,
		},
		{
			name:     "closed during sasl plain",
			addr:     closingSASL,
			cfg:      Config{SASL: user(MechanismPlain, wrongPass)},
			wantKind: ErrAuthentication,
			want:     `broker {addr} closed the connection instead of answering sasl authentication with mechanism PLAIN as user "alice": the credentials are wrong or the listener does not enable the mechanism (brokers that do not report sasl errors, such as Kafka before 1.0, close the connection): check sasl[].username, sasl[].password and the listener's sasl.enabled.mechanisms: `,
		},
		{
			name:     "closed during sasl scram-sha-512",
			addr:     closingSASL,
			cfg:      Config{SASL: user(MechanismScramSHA512, kfakePass)},
			wantKind: ErrAuthentication,
			want:     `broker {addr} closed the connection instead of answering sasl authentication with mechanism SCRAM-SHA-512 as user "alice": the credentials are wrong or the listener does not enable the mechanism (brokers that do not report sasl errors, such as Kafka before 1.0, close the connection): check sasl[].username, sasl[].password and the listener's sasl.enabled.mechanisms: `,
		},
		{
			name:     "sasl against a listener without sasl",
			addr:     tlsOnly,
			cfg:      Config{TLS: trust(certs), SASL: user(MechanismPlain, kfakePass)},
			wantKind: ErrSASLMismatch,
			want:     `sasl is configured (PLAIN) but the listener of broker {addr} does not use sasl (it is PLAINTEXT or SSL): remove sasl or connect to the broker's SASL listener: `,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := listTopics(t, tc.addr, tc.cfg)
			if tc.wantKind == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, tc.wantKind)
			want := strings.ReplaceAll(tc.want, "{addr}", tc.addr)
			require.Truef(t, strings.HasPrefix(err.Error(), want), "error\n  %s\nwant prefix\n  %s", err, want)
			for _, secret := range []string{kfakePass, wrongPass, token} {
				require.NotContainsf(t, err.Error(), secret, "the error holds a secret")
			}
		})
	}
}

// TestExplainAlerts checks the explanation of each TLS alert a broker sends
// about the client's certificate, with and without tls.client_certs, as
// crypto/tls returns them (a *net.OpError "remote error"); Kafka's alerts
// are checked against a real broker in tests/secure_test.go.
func TestExplainAlerts(t *testing.T) {
	certs := newPKI(t, "CA", []string{"localhost"}, nil)
	none := Config{TLS: &tls.Config{}}
	some := Config{TLS: &tls.Config{Certificates: []tls.Certificate{certs.client}}}
	const (
		missing  = `tls: broker b:9093 requires a client certificate (mutual tls: its listener has ssl.client.auth=required) and none is configured: set tls.client_certs to a certificate signed by a CA the broker trusts`
		maybe    = `tls: broker b:9093 ended the tls handshake (remote error: tls: handshake failure) and no client certificate is configured: if its listener requires one (mutual tls, ssl.client.auth=required), set tls.client_certs`
		unsent   = `tls: broker b:9093 requires a client certificate and none of tls.client_certs is issued by a CA it accepts (certificate "security test client" issued by "CA"): set tls.client_certs to a certificate signed by a CA of the broker's ssl.truststore`
		rejected = `tls: broker b:9093 rejected the client certificate of tls.client_certs (remote error: %s): the broker's ssl.truststore must trust the CA that signed it`
	)
	for _, tc := range []struct {
		alert string
		cfg   Config
		want  string // "" when Explain leaves the error alone
	}{
		{"tls: certificate required", none, missing},
		{"tls: bad certificate", none, missing},
		{"tls: handshake failure", none, maybe},
		{"tls: unknown certificate authority", none, ""},
		{"tls: certificate required", some, unsent},
		{"tls: bad certificate", some, fmt.Sprintf(rejected, "tls: bad certificate")},
		{"tls: unknown certificate authority", some, fmt.Sprintf(rejected, "tls: unknown certificate authority")},
		{"tls: expired certificate", some, fmt.Sprintf(rejected, "tls: expired certificate")},
		{"tls: handshake failure", some, ""},
		{"tls: protocol version not supported", none, ""},
	} {
		orig := fmt.Errorf("list topics: unable to dial: %w", &net.OpError{Op: "remote error", Err: errors.New(tc.alert)})
		err := Explain(orig, tc.cfg, []string{"b:9093"})
		if tc.want == "" {
			assert.Samef(t, orig, err, "Explain(%q) changed it", tc.alert)
			continue
		}
		assert.ErrorIsf(t, err, ErrClientCertificate, "alert %q", tc.alert)
		assert.Equalf(t, tc.want+": "+orig.Error(), err.Error(), "alert %q, %d client certificates", tc.alert, len(tc.cfg.TLS.Certificates))
	}
}

// TestExplainPassesOtherErrors checks that Explain leaves errors that are
// not about TLS or SASL alone, returns nil for nil, and does not explain an
// explained error twice.
func TestExplainPassesOtherErrors(t *testing.T) {
	cfg := Config{SASL: []SASL{{Mechanism: MechanismPlain, Username: "u", Password: "p"}}}
	assert.NoError(t, Explain(nil, cfg, nil))
	for _, err := range []error{
		errors.New("list topics: unable to dial: connection refused"),
		context.DeadlineExceeded,
		kerr.UnknownTopicOrPartition,
		fmt.Errorf("list topics: %w", kerr.TopicAuthorizationFailed),
	} {
		assert.Truef(t, err == Explain(err, cfg, []string{"b:9092"}), "Explain(%v) changed it", err)
	}
	once := Explain(fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), cfg, []string{"b:9092"})
	assert.Same(t, once, Explain(once, cfg, []string{"b:9092"}))
}

// TestExplainKeepsMessagesWhole checks that a password that is also part of
// what the message says (here the broker's port) leaves the message whole:
// the explanation is built from the mechanism, user and broker only, and the
// client's error is kept as it is, never rewritten.
func TestExplainKeepsMessagesWhole(t *testing.T) {
	t.Parallel()
	certs := newPKI(t, "security test CA", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	otherCA := newPKI(t, "other CA", []string{"localhost"}, nil)
	addr := newCluster(t, false, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{certs.server}, MinVersion: tls.VersionTLS12}))
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	cfg := Config{
		TLS:  &tls.Config{RootCAs: otherCA.roots},
		SASL: []SASL{{Mechanism: MechanismPlain, Username: kfakeUser, Password: port}},
	}
	err = listTopics(t, addr, cfg)
	require.ErrorIs(t, err, ErrUntrustedCertificate)
	assert.Contains(t, err.Error(), "tls: the certificate of broker "+addr+" failed verification")
	assert.NotContains(t, err.Error(), "[redacted]")

	// The same with a broker's answer: the password 9092 is the port of the broker named.
	cfg = Config{SASL: []SASL{{Mechanism: MechanismPlain, Username: "alice", Password: "9092"}}}
	orig := fmt.Errorf("list topics from seed brokers b1:9092: %w: Authentication failed: Invalid username or password", kerr.SaslAuthenticationFailed)
	err = Explain(orig, cfg, []string{"b1:9092"})
	require.ErrorIs(t, err, ErrAuthentication)
	require.ErrorIs(t, err, orig)
	assert.Equal(t, `sasl authentication with mechanism PLAIN as user "alice" was rejected by broker b1:9092: wrong password, unknown user or invalid token: `+orig.Error(), err.Error())
}
