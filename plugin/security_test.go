package plugin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		assert.Len(t, c.ClientOpts(), 1, "ClientOpts() of a plaintext config: only the client ID")
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
		assert.Len(t, c.ClientOpts(), 3, "ClientOpts(): client ID, kgo.DialTLSConfig and kgo.SASL")
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
