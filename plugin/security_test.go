package plugin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// caFile writes a self-signed CA certificate as PEM into a temporary file
// and returns its path and the certificate.
func caFile(t *testing.T) (string, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "plugin test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path, cert
}

func TestParseSecurity(t *testing.T) {
	const base = "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"
	ca, caCert := caFile(t)

	t.Run("default is plaintext without sasl", func(t *testing.T) {
		c, err := parseYAML(t, base)
		require.NoError(t, err)
		assert.Nil(t, c.Security.TLS)
		assert.Empty(t, c.Security.SASL)
		assert.Len(t, c.ClientOpts(), 2, "ClientOpts() of a plaintext config: the client ID and kgo.Dialer (tcp)")
	})
	t.Run("tls disabled ignores its settings", func(t *testing.T) {
		c, err := parseYAML(t, base+"tls:\n  enabled: false\n  root_cas_file: "+ca+"\n")
		require.NoError(t, err)
		assert.Nil(t, c.Security.TLS)
	})
	t.Run("tls with a CA file, a server name and every mechanism", func(t *testing.T) {
		c, err := parseYAML(t, base+`tls:
  enabled: true
  root_cas_file: `+ca+`
tls_server_name: kafka.internal
sasl:
  - mechanism: SCRAM-SHA-512
    username: alice
    password: alice-pw
  - mechanism: SCRAM-SHA-256
    username: bob
    password: bob-pw
  - mechanism: PLAIN
    username: carol
    password: carol-pw
  - mechanism: OAUTHBEARER
    token: tok
`)
		require.NoError(t, err)
		require.NotNil(t, c.Security.TLS)
		assert.Equal(t, "kafka.internal", c.Security.TLS.ServerName)
		assert.False(t, c.Security.TLS.InsecureSkipVerify)
		want := x509.NewCertPool()
		want.AddCert(caCert)
		assert.True(t, want.Equal(c.Security.TLS.RootCAs), "tls.RootCAs is not the CA of root_cas_file")
		assert.Equal(t, []security.SASL{
			{Mechanism: "SCRAM-SHA-512", Username: "alice", Password: "alice-pw"},
			{Mechanism: "SCRAM-SHA-256", Username: "bob", Password: "bob-pw"},
			{Mechanism: "PLAIN", Username: "carol", Password: "carol-pw"},
			{Mechanism: "OAUTHBEARER", Token: "tok"},
		}, c.Security.SASL)
		assert.Len(t, c.ClientOpts(), 3, "ClientOpts(): client ID, kgo.Dialer (tcp, with TLS) and kgo.SASL")
	})
	t.Run("tls on system roots", func(t *testing.T) {
		c, err := parseYAML(t, base+"tls:\n  enabled: true\n")
		require.NoError(t, err)
		require.NotNil(t, c.Security.TLS)
		assert.Nil(t, c.Security.TLS.RootCAs, "nil RootCAs: the system's")
		assert.Empty(t, c.Security.TLS.ServerName, "empty ServerName: the host dialed")
	})
	t.Run("missing CA file", func(t *testing.T) {
		_, err := parseYAML(t, base+"tls:\n  enabled: true\n  root_cas_file: /nonexistent/ca.pem\n")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "tls: ")
		assert.Contains(t, err.Error(), "/nonexistent/ca.pem")
	})
}

// TestSecurityLintRules checks each TLS and SASL rule in the lint rule and in
// ParseConfig: both reject the bad fields with the same message, naming the
// field, and accept the closest good ones; no message holds a secret.
func TestSecurityLintRules(t *testing.T) {
	input := func(fields string) string {
		return "kafka_batched_ranges:\n  seed_brokers: [ \"a:1\" ]\n  topics: [ t ]\n" + fields
	}
	tests := []struct {
		name string
		bad  string
		good string
		want string
	}{
		{
			name: "plain needs a password",
			bad:  "  sasl:\n    - mechanism: PLAIN\n      username: alice\n",
			good: "  sasl:\n    - mechanism: PLAIN\n      username: alice\n      password: pw-secret\n",
			want: "sasl[0].password is required for mechanism PLAIN",
		},
		{
			name: "scram-sha-256 needs a password",
			bad:  "  sasl:\n    - mechanism: SCRAM-SHA-256\n      username: alice\n      password: \"\"\n",
			good: "  sasl:\n    - mechanism: SCRAM-SHA-256\n      username: alice\n      password: pw-secret\n",
			want: "sasl[0].password is required for mechanism SCRAM-SHA-256",
		},
		{
			name: "scram-sha-512 needs a username",
			bad:  "  sasl:\n    - mechanism: SCRAM-SHA-512\n      password: pw-secret\n",
			good: "  sasl:\n    - mechanism: SCRAM-SHA-512\n      username: alice\n      password: pw-secret\n",
			want: "sasl[0].username is required for mechanism SCRAM-SHA-512",
		},
		{
			name: "second entry",
			bad:  "  sasl:\n    - mechanism: OAUTHBEARER\n      token: tok-secret\n    - mechanism: PLAIN\n      password: pw-secret\n",
			good: "  sasl:\n    - mechanism: OAUTHBEARER\n      token: tok-secret\n    - mechanism: PLAIN\n      username: alice\n      password: pw-secret\n",
			want: "sasl[1].username is required for mechanism PLAIN",
		},
		{
			name: "oauthbearer needs a token",
			bad:  "  sasl:\n    - mechanism: OAUTHBEARER\n",
			good: "  sasl:\n    - mechanism: OAUTHBEARER\n      token: tok-secret\n",
			want: "sasl[0].token is required for mechanism OAUTHBEARER",
		},
		{
			name: "oauthbearer takes no password",
			bad:  "  sasl:\n    - mechanism: OAUTHBEARER\n      token: tok-secret\n      password: pw-secret\n",
			good: "  sasl:\n    - mechanism: OAUTHBEARER\n      token: tok-secret\n",
			want: "sasl[0].username and sasl[0].password are not used by mechanism OAUTHBEARER",
		},
		{
			name: "scram takes no token",
			bad:  "  sasl:\n    - mechanism: SCRAM-SHA-256\n      username: alice\n      password: pw-secret\n      token: tok-secret\n",
			good: "  sasl:\n    - mechanism: SCRAM-SHA-256\n      username: alice\n      password: pw-secret\n",
			want: "sasl[0].token is only used by mechanism OAUTHBEARER, not SCRAM-SHA-256",
		},
		{
			name: "unknown mechanism",
			bad:  "  sasl:\n    - mechanism: GSSAPI\n      username: alice\n      password: pw-secret\n",
			good: "  sasl:\n    - mechanism: PLAIN\n      username: alice\n      password: pw-secret\n",
			want: `sasl[0].mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM, got "GSSAPI"`,
		},
		{
			name: "server name needs tls",
			bad:  "  tls_server_name: kafka.internal\n",
			good: "  tls_server_name: kafka.internal\n  tls:\n    enabled: true\n",
			want: "requires tls.enabled: true",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := lintInput(t, input(tc.bad))
			assert.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }),
				"Lint(%q) = %q, want a lint containing %q", tc.bad, got, tc.want)
			for _, l := range got {
				assert.NotContains(t, l, "secret", "a lint holds a secret")
			}
			got = lintInput(t, input(tc.good))
			assert.Empty(t, got, "Lint(%q) = %q, want no lints", tc.good, got)

			_, err := parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"+dedent(tc.bad))
			if assert.Error(t, err, "ParseConfig(%q) accepted what the lint rule rejects", tc.bad) {
				assert.Contains(t, err.Error(), tc.want)
				assert.NotContains(t, err.Error(), "secret", "the parse error holds a secret")
			}
			_, err = parseYAML(t, "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"+dedent(tc.good))
			assert.NoError(t, err, "ParseConfig(%q) rejected what the lint rule accepts", tc.good)
		})
	}
}

// TestSecurityLintKeepsOtherRules checks that the SASL rules and the rules
// that were in the lint rule before them all report in one lint (the spec has
// one lint rule: a second one would replace the first).
func TestSecurityLintKeepsOtherRules(t *testing.T) {
	got := lintInput(t, `kafka_batched_ranges:
  seed_brokers: [ "a:1" ]
  topics: [ t ]
  start_from: committed
  max_in_flight: 0
  sasl:
    - mechanism: PLAIN
      username: alice
    - mechanism: KERBEROS
`)
	for _, want := range []string{
		"start_from committed requires consumer_group to be set",
		"max_in_flight must be > 0, got 0",
		"sasl[0].password is required for mechanism PLAIN",
		`sasl[1].mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM, got "KERBEROS"`,
	} {
		assert.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }),
			"Lint = %q, want a lint containing %q", got, want)
	}
}

// TestSecretFieldsScrubbed checks that password, token and the TLS secrets
// are Secret fields: a config printed through the spec shows them scrubbed,
// values from the environment included, and the user names as written.
// (tests/secure_test.go checks `connect echo`.)
func TestSecretFieldsScrubbed(t *testing.T) {
	t.Setenv("KBR_TEST_PASSWORD", "env-secret")
	env := service.NewEnvironment()
	const conf = `
input:
  kafka_batched_ranges:
    seed_brokers: [ "a:1" ]
    topics: [ t ]
    sasl:
      - mechanism: SCRAM-SHA-256
        username: alice
        password: hunter2-secret
      - mechanism: OAUTHBEARER
        token: tok-secret
      - mechanism: PLAIN
        username: bob
        password: ${KBR_TEST_PASSWORD}
output:
  drop: {}
`
	sb := env.NewStreamBuilder()
	require.NoError(t, sb.SetYAML(conf))
	out, err := sb.AsYAML()
	require.NoError(t, err)
	assert.NotContains(t, out, "secret", "printed config holds a secret:\n%s", out)
	assert.Contains(t, out, "username: alice")
	assert.Contains(t, out, "username: bob")
	assert.Equal(t, 3, strings.Count(out, "!!!SECRET_SCRUBBED!!!"), "printed config:\n%s", out)
}

// saslCluster starts a kfake cluster that requires SASL, knows user alice
// with password pass for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, serves TLS
// with a self-signed certificate if tlsOn, and holds topic t with 20
// records in each of its 2 partitions.
func saslCluster(t *testing.T, pass string, tlsOn bool) string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(2, "t"), kfake.EnableSASL()}
	for _, m := range []string{security.MechanismPlain, security.MechanismScramSHA256, security.MechanismScramSHA512} {
		opts = append(opts, kfake.Superuser(m, "alice", pass))
	}
	sec := security.Config{SASL: []security.SASL{{Mechanism: security.MechanismScramSHA512, Username: "alice", Password: pass}}}
	if tlsOn {
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, MinVersion: tls.VersionTLS12}))
		sec.TLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the test's own certificate
	}
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner())}, sec.Opts()...)...)
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 40 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: int32(i % 2), Value: []byte(fmt.Sprintf("record %d", i))})
	}
	require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	return addr
}

// selfSigned returns a self-signed certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "plugin test broker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// runLogged runs a stream of inputYAML into a consumer that drops what it
// gets, with Benthos' own logger (the one the connect binary uses) at level
// writing into a file, until the input ends or a minute passes, and returns
// the log.
func runLogged(t *testing.T, level, inputYAML string) string {
	t.Helper()
	env := service.NewEnvironment().Without(InputName)
	require.NoError(t, Register(env, Options{}))
	sb := env.NewStreamBuilder()
	logPath := filepath.Join(t.TempDir(), "connect.log")
	require.NoError(t, sb.SetLoggerYAML(fmt.Sprintf("level: %s\nformat: logfmt\nfile:\n  path: %q\n", level, logPath)))
	require.NoError(t, sb.AddInputYAML(inputYAML))
	require.NoError(t, sb.AddConsumerFunc(func(context.Context, *service.Message) error { return nil }))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runErr := stream.Run(ctx)
	if ctx.Err() != nil {
		_ = stream.StopWithin(10 * time.Second)
	}
	out, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.NoErrorf(t, runErr, "stream run\n%s", out)
	return string(out)
}

// TestTraceLogsHoldNoSecret reads through each SASL mechanism with the
// logger at TRACE, where franz-go's own lines (connections, SASL steps,
// every request) are logged, and checks that they are there and that the
// password is not: a password that appears nowhere else must not appear at
// all, and a password that is part of every broker address ("127") must not
// appear where a leaked credential would (after the user, or a password
// key), nor be replaced by "[redacted]" in what is logged.
func TestTraceLogsHoldNoSecret(t *testing.T) {
	t.Parallel()
	const unique = "kbr-trace-pw-5c1e9a"
	const common = "127"
	leaked := regexp.MustCompile(`(?i)(pass(word)?\W{0,3}|alice\W{1,4}|\\x00)` + common + `\b`)
	for _, mech := range []string{security.MechanismPlain, security.MechanismScramSHA256, security.MechanismScramSHA512} {
		for _, pass := range []string{unique, common} {
			t.Run(mech+"/"+pass, func(t *testing.T) {
				t.Parallel()
				addr := saslCluster(t, pass, false)
				log := runLogged(t, "TRACE", fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ t ]
  stop_at: end
  sasl:
    - mechanism: %s
      username: alice
      password: %q
`, addr, mech, pass))
				for _, want := range []string{
					"franz-go (cursor client): beginning sasl authentication",
					"mechanism: " + mech,
					"franz-go (cursor client): wrote Fetch",
				} {
					require.Containsf(t, log, want, "no franz-go line %q at TRACE", want)
				}
				require.NotContains(t, log, "[redacted]")
				if pass == unique {
					require.NotContainsf(t, log, pass, "the log holds the password\n%s", log)
				} else {
					require.Emptyf(t, leaked.FindAllString(log, 5), "the log holds the password\n%s", log)
				}
			})
		}
	}
}

// TestInsecureSettingsWarnOnce checks the warnings the input logs when it
// starts: PLAIN without TLS (the password crosses the network in clear) and
// skip_cert_verify, each once, and neither for PLAIN over verified TLS or
// SCRAM.
func TestInsecureSettingsWarnOnce(t *testing.T) {
	t.Parallel()
	const pass = "warn-pw-0d3b"
	plainWarn := "sasl[0] uses mechanism PLAIN without tls: the password crosses the network in clear"
	skipWarn := "tls.skip_cert_verify is true: the brokers' certificates are not verified"
	input := func(addr, mech, tls string) string {
		return fmt.Sprintf(`
kafka_batched_ranges:
  seed_brokers: [ %q ]
  topics: [ t ]
  stop_at: end
%s  sasl:
    - mechanism: %s
      username: alice
      password: %s
`, addr, tls, mech, pass)
	}
	for _, tc := range []struct {
		name          string
		tls           bool
		mech, tlsConf string
		plain, skip   int // how many times each warning is logged
	}{
		{name: "plain without tls", mech: "PLAIN", plain: 1},
		{name: "scram without tls", mech: "SCRAM-SHA-256"},
		{name: "plain, tls without verification", tls: true, mech: "PLAIN", tlsConf: "  tls: { enabled: true, skip_cert_verify: true }\n", skip: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := runLogged(t, "INFO", input(saslCluster(t, pass, tc.tls), tc.mech, tc.tlsConf))
			assert.Equalf(t, tc.plain, strings.Count(log, plainWarn), "warnings %q\n%s", plainWarn, log)
			assert.Equalf(t, tc.skip, strings.Count(log, skipWarn), "warnings %q\n%s", skipWarn, log)
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, plainWarn) || strings.Contains(l, skipWarn) {
					assert.Containsf(t, l, "level=warn", "warning logged at another level: %s", l)
				}
			}
		})
	}
}

// TestConnectClosedDuringSASL checks the error of Connect against a broker
// that closes the connection on a failed SASL authentication (kfake does, as
// brokers before Kafka 1.0 did): it says authentication failed or the
// mechanism is not enabled, not a bare EOF.
func TestConnectClosedDuringSASL(t *testing.T) {
	t.Parallel()
	addr := saslCluster(t, "right-pw", false)
	in := newTestInput(t, fmt.Sprintf("seed_brokers: [ %q ]\ntopics: [ t ]\nsasl:\n  - { mechanism: SCRAM-SHA-256, username: alice, password: wrong-pw }\n", addr))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := in.Connect(ctx)
	var backOff *service.ErrBackOff
	require.ErrorAs(t, err, &backOff)
	require.ErrorIs(t, backOff.Err, security.ErrAuthentication)
	assert.Contains(t, err.Error(), fmt.Sprintf(`broker %s closed the connection instead of answering sasl authentication with mechanism SCRAM-SHA-256 as user "alice": the credentials are wrong or the listener does not enable the mechanism`, addr))
	assert.Contains(t, err.Error(), "retrying cannot fix this: it fails until the configuration or the cluster changes", "a continuous run says the error will not go away")
}

// TestBoundedConnectStopsOnAuthentication checks that a bounded run (stop_at:
// end) whose credentials are rejected stops at its second attempt instead of
// being retried: Connect returns service.ErrEndOfInput, and Close reports the
// explanation through Options.OnFailure, so connect exits 1.
func TestBoundedConnectStopsOnAuthentication(t *testing.T) {
	t.Parallel()
	addr := saslCluster(t, "right-pw", false)
	conf, err := parseYAML(t, fmt.Sprintf("seed_brokers: [ %q ]\ntopics: [ t ]\nstop_at: end\nsasl:\n  - { mechanism: SCRAM-SHA-256, username: alice, password: wrong-pw }\n", addr))
	require.NoError(t, err)
	var failures []error
	in, err := newInput(conf, service.MockResources(), Options{OnFailure: func(err error) { failures = append(failures, err) }})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = in.Connect(ctx)
	var backOff *service.ErrBackOff
	require.ErrorAs(t, err, &backOff, "the first attempt is retried")
	require.ErrorIs(t, in.Connect(ctx), service.ErrEndOfInput, "the second attempt stops the bounded run")
	require.NoError(t, in.Close(ctx))
	require.Len(t, failures, 1)
	require.ErrorIs(t, failures[0], security.ErrAuthentication)
	assert.Contains(t, failures[0].Error(), "retrying cannot fix this, so the bounded run (stop_at: end) stops")
	assert.NotContains(t, failures[0].Error(), "wrong-pw")
}

// TestParseOAuthExtensions checks sasl[].extensions: parsed into the
// entry, and a key RFC 7628 forbids rejected by the lint and by
// ParseConfig alike, naming the entry and the key.
func TestParseOAuthExtensions(t *testing.T) {
	const base = "seed_brokers: [ \"a:1\" ]\ntopics: [ t ]\n"
	c, err := parseYAML(t, base+"sasl:\n  - mechanism: OAUTHBEARER\n    token: tok\n    extensions: { logicalCluster: lkc-1, identityPoolId: pool-2 }\n")
	require.NoError(t, err)
	require.Len(t, c.Security.SASL, 1)
	assert.Equal(t, map[string]string{"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}, c.Security.SASL[0].Extensions)

	bad := base + "sasl:\n  - mechanism: OAUTHBEARER\n    token: tok\n    extensions: { trace-id: x }\n"
	const want = `sasl[0].extensions: key "trace-id" must be letters only (RFC 7628)`
	_, err = parseYAML(t, bad)
	require.Error(t, err)
	assert.Equal(t, want, err.Error())
	assert.Contains(t, lintInput(t, "kafka_batched_ranges:\n"+indent(bad)), want)
}
