package security

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
)

const (
	mskHost     = "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com"
	mskAddr     = mskHost + ":9098"
	testKeyID   = "AKIDEXAMPLE"
	testSecret  = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	testToken   = "session-token-secret"
	testRoleARN = "arn:aws:iam::123456789012:role/kafka-reader"
	testRegion  = "eu-west-1"
)

// cleanAWSEnv makes the AWS credential chain see nothing of the machine it
// runs on: no AWS_ variable, shared config and credentials files that do not
// exist (in dir, where a test may write them), and no instance metadata
// (AWS_EC2_METADATA_DISABLED, so the chain fails at once instead of waiting
// for a metadata service).
func cleanAWSEnv(t *testing.T) (dir string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "") // restored after the test
			require.NoError(t, os.Unsetenv(k))
		}
	}
	dir = t.TempDir()
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return dir
}

// authenticateOnce runs the first step of m's authentication with host, as
// franz-go does on a new connection, and finishes the session with a
// broker's non-empty reply.
func authenticateOnce(t *testing.T, m sasl.Mechanism, host string) (mskPayload, error) {
	t.Helper()
	session, b, err := m.Authenticate(t.Context(), host)
	if err != nil {
		return nil, err
	}
	done, more, err := session.Challenge([]byte(`{"version":"2020_10_22","request-id":"r"}`))
	require.NoError(t, err)
	assert.True(t, done, "AWS_MSK_IAM is one round trip")
	assert.Empty(t, more)
	return decodeMSKPayload(t, b), nil
}

func awsEntry(a AWS) SASL { return SASL{Mechanism: MechanismAWSMSKIAM, AWS: a} }

// TestAWSPayload checks the payload franz-go's pkg/sasl/aws signs for static
// credentials from the fields: every SigV4 field of kafka-cluster:Connect,
// dated between the clock readings around the call, valid 900 s, the
// session token only when one is set, and a signature this test's own
// SigV4 recomputes. franz-go's package reads time.Now itself (it takes no
// clock), so the fixed-clock check of the signer is TestSigV4MatchesSDKPresign.
func TestAWSPayload(t *testing.T) {
	cleanAWSEnv(t)
	for _, token := range []string{"", testToken} {
		t.Run(fmt.Sprintf("token %t", token != ""), func(t *testing.T) {
			m := awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret, SessionToken: token}).mechanism()
			assert.Equal(t, "AWS_MSK_IAM", m.Name())
			before := time.Now().UTC().Truncate(time.Second)
			p, err := authenticateOnce(t, m, mskAddr)
			after := time.Now().UTC()
			require.NoError(t, err)

			keys := []string{"version", "host", "user-agent", "action", "x-amz-algorithm", "x-amz-credential",
				"x-amz-date", "x-amz-expires", "x-amz-signedheaders", "x-amz-signature"}
			if token != "" {
				keys = append(keys, "x-amz-security-token")
			}
			got := make([]string, 0, len(p))
			for k := range p {
				got = append(got, k)
			}
			assert.ElementsMatch(t, keys, got, "payload fields")

			assert.Equal(t, "2020_10_22", p["version"])
			assert.Equal(t, mskHost, p["host"], "host is signed without the port")
			assert.True(t, strings.HasPrefix(p["user-agent"], "franz-go/"), "user-agent %q", p["user-agent"])
			assert.Equal(t, "kafka-cluster:Connect", p["action"])
			assert.Equal(t, "AWS4-HMAC-SHA256", p["x-amz-algorithm"])
			assert.Equal(t, "host", p["x-amz-signedheaders"])
			assert.Equal(t, "900", p["x-amz-expires"], "valid 15 minutes, as the Java client signs")
			signed, err := time.Parse("20060102T150405Z", p["x-amz-date"])
			require.NoError(t, err)
			assert.False(t, signed.Before(before) || signed.After(after), "x-amz-date %s not within [%s, %s]", signed, before, after)
			assert.Equal(t, testKeyID+"/"+signed.Format("20060102")+"/"+testRegion+"/kafka-cluster/aws4_request", p["x-amz-credential"])
			assert.Equal(t, token, p["x-amz-security-token"])
			assert.Len(t, p["x-amz-signature"], 64)
			assert.Equal(t, p.signature(testSecret), p["x-amz-signature"], "signature recomputed from the spec")
			assert.NotEqual(t, p.signature(testSecret+"x"), p["x-amz-signature"], "another secret signs differently")

			secrets := map[string]string{testKeyID: testSecret}
			require.NoError(t, p.verify(secrets, testRegion, signed))
			require.NoError(t, p.verify(secrets, testRegion, signed.Add(899*time.Second)))
			assert.ErrorContains(t, p.verify(secrets, testRegion, signed.Add(901*time.Second)), "is not valid at", "expired after 900 s")
			assert.ErrorContains(t, p.verify(secrets, "us-east-1", signed), "x-amz-credential", "signed for eu-west-1 only")
		})
	}
}

// TestAWSRegion checks the region franz-go signs for against aws.region:
// franz-go takes it from the broker's host name, and from AWS_REGION for a
// host that names none (an IP address, an alias). A disagreement fails the
// authentication before anything is sent, naming both.
func TestAWSRegion(t *testing.T) {
	cleanAWSEnv(t)
	entry := awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret})

	_, err := authenticateOnce(t, entry.mechanism(), "b-2.demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `signs for region us-east-1`)
	assert.Contains(t, err.Error(), `aws.region is "eu-west-1"`)

	_, err = authenticateOnce(t, entry.mechanism(), "127.0.0.1:9098")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"127.0.0.1"`)
	assert.Contains(t, err.Error(), "AWS_REGION")

	t.Setenv("AWS_REGION", testRegion)
	p, err := authenticateOnce(t, entry.mechanism(), "127.0.0.1:9098")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", p["host"])
	require.NoError(t, p.verify(map[string]string{testKeyID: testSecret}, testRegion, time.Now()))

	t.Setenv("AWS_REGION", "us-east-1")
	_, err = authenticateOnce(t, entry.mechanism(), "127.0.0.1:9098")
	assert.ErrorContains(t, err, `signs for region us-east-1`)
}

// issuer hands out numbered temporary credentials, as STS or a container
// credentials endpoint does, each valid for lifetime, and remembers their
// secrets so payloads signed with them can be verified.
type issuer struct {
	lifetime time.Duration

	mu      sync.Mutex // guards the fields below
	issued  int
	secrets map[string]string
	calls   []string // what asked: the STS action, or "container"
	callers []string // access key of the signature of each STS request
}

func newIssuer(lifetime time.Duration) *issuer {
	return &issuer{lifetime: lifetime, secrets: make(map[string]string)}
}

func (is *issuer) issue(call, caller string) (id, secret, token string, expires time.Time) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.issued++
	id = fmt.Sprintf("ASIATEST%04d", is.issued)
	secret = fmt.Sprintf("issued-secret-%d", is.issued)
	token = fmt.Sprintf("issued-token-secret-%d", is.issued)
	is.secrets[id] = secret
	is.calls = append(is.calls, call)
	is.callers = append(is.callers, caller)
	return id, secret, token, time.Now().Add(is.lifetime).UTC()
}

// secretsNow returns the secrets issued so far.
func (is *issuer) secretsNow() map[string]string {
	_, _, secrets := is.snapshot()
	return secrets
}

func (is *issuer) snapshot() (calls, callers []string, secrets map[string]string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	secrets = make(map[string]string, len(is.secrets))
	for k, v := range is.secrets {
		secrets[k] = v
	}
	return append([]string(nil), is.calls...), append([]string(nil), is.callers...), secrets
}

// containerEndpoint serves is as the container credentials endpoint of ECS
// and EKS Pod Identity (AWS_CONTAINER_CREDENTIALS_FULL_URI).
func (is *issuer) containerEndpoint(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, token, exp := is.issue("container", "")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"AccessKeyId": id, "SecretAccessKey": secret, "Token": token, "Expiration": exp.Format(time.RFC3339),
		})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v2/credentials"
}

// stsEndpoint serves is as STS (AWS_ENDPOINT_URL_STS): AssumeRole and
// AssumeRoleWithWebIdentity, recording the access key that signed each
// AssumeRole request.
func (is *issuer) stsEndpoint(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		action := r.PostForm.Get("Action")
		if action != "AssumeRole" && action != "AssumeRoleWithWebIdentity" {
			http.Error(w, "unexpected action "+action, http.StatusBadRequest)
			return
		}
		var caller string
		if _, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential="); ok {
			caller, _, _ = strings.Cut(cred, "/")
		}
		call := action + " " + r.PostForm.Get("RoleArn")
		if x := r.PostForm.Get("ExternalId"); x != "" {
			call += " external-id=" + x
		}
		id, secret, token, exp := is.issue(call, caller)
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<%[1]sResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><%[1]sResult><Credentials>`+
			`<AccessKeyId>%[2]s</AccessKeyId><SecretAccessKey>%[3]s</SecretAccessKey><SessionToken>%[4]s</SessionToken><Expiration>%[5]s</Expiration>`+
			`</Credentials></%[1]sResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></%[1]sResponse>`,
			action, id, secret, token, exp.Format(time.RFC3339))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAWSCredentialChain checks where an entry without credentials in its
// fields gets them: the AWS SDK's default chain, fed here by environment
// variables, the shared credentials and config files, web identity and the
// container endpoint (instance metadata is disabled: it cannot be reached
// here), with aws.credentials.role assumed on top; fields win over the chain.
func TestAWSCredentialChain(t *testing.T) {
	verify := func(t *testing.T, m sasl.Mechanism, secrets func() map[string]string) mskPayload {
		t.Helper()
		p, err := authenticateOnce(t, m, mskAddr)
		require.NoError(t, err)
		require.NoError(t, p.verify(secrets(), testRegion, time.Now()))
		return p
	}
	chain := awsEntry(AWS{Region: testRegion})

	t.Run("environment", func(t *testing.T) {
		cleanAWSEnv(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
		t.Setenv("AWS_SESSION_TOKEN", "env-token-secret")
		p := verify(t, chain.mechanism(), fixed(map[string]string{"AKIAENV": "env-secret"}))
		assert.Equal(t, "env-token-secret", p["x-amz-security-token"])
	})
	t.Run("shared credentials file", func(t *testing.T) {
		dir := cleanAWSEnv(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "credentials"), []byte(
			"[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n\n"+
				"[reader]\naws_access_key_id = AKIAREADER\naws_secret_access_key = reader-secret\n"), 0o600))
		p := verify(t, chain.mechanism(), fixed(map[string]string{"AKIAFILE": "file-secret"}))
		assert.NotContains(t, p, "x-amz-security-token")

		t.Setenv("AWS_PROFILE", "reader")
		verify(t, chain.mechanism(), fixed(map[string]string{"AKIAREADER": "reader-secret"}))
	})
	t.Run("shared config file", func(t *testing.T) {
		dir := cleanAWSEnv(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config"), []byte(
			"[profile reader]\naws_access_key_id = AKIACONFIG\naws_secret_access_key = config-secret\n"), 0o600))
		t.Setenv("AWS_PROFILE", "reader")
		verify(t, chain.mechanism(), fixed(map[string]string{"AKIACONFIG": "config-secret"}))
	})
	t.Run("fields win over the environment", func(t *testing.T) {
		cleanAWSEnv(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
		verify(t, awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret}).mechanism(),
			fixed(map[string]string{testKeyID: testSecret}))
	})
	t.Run("web identity", func(t *testing.T) {
		dir := cleanAWSEnv(t)
		is := newIssuer(time.Hour)
		tokenFile := filepath.Join(dir, "web-identity-token")
		require.NoError(t, os.WriteFile(tokenFile, []byte("oidc-token-secret"), 0o600))
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		t.Setenv("AWS_ROLE_ARN", testRoleARN)
		t.Setenv("AWS_ENDPOINT_URL_STS", is.stsEndpoint(t))
		m := chain.mechanism()
		_, _, secrets := is.snapshot()
		assert.Empty(t, secrets, "credentials are fetched at the first authentication, not when the mechanism is built")
		verify(t, m, is.secretsNow)
		calls, _, _ := is.snapshot()
		assert.Equal(t, []string{"AssumeRoleWithWebIdentity " + testRoleARN}, calls)
	})
	t.Run("role from static credentials", func(t *testing.T) {
		cleanAWSEnv(t)
		is := newIssuer(time.Hour)
		t.Setenv("AWS_ENDPOINT_URL_STS", is.stsEndpoint(t))
		m := awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret, RoleARN: testRoleARN}).mechanism()
		p := verify(t, m, is.secretsNow)
		assert.Equal(t, "issued-token-secret-1", p["x-amz-security-token"])
		calls, callers, _ := is.snapshot()
		assert.Equal(t, []string{"AssumeRole " + testRoleARN}, calls)
		assert.Equal(t, []string{testKeyID}, callers, "AssumeRole is signed with the configured key")
	})
	t.Run("role from the chain", func(t *testing.T) {
		cleanAWSEnv(t)
		is := newIssuer(time.Hour)
		t.Setenv("AWS_ENDPOINT_URL_STS", is.stsEndpoint(t))
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
		verify(t, awsEntry(AWS{Region: testRegion, RoleARN: testRoleARN}).mechanism(), is.secretsNow)
		_, callers, _ := is.snapshot()
		assert.Equal(t, []string{"AKIAENV"}, callers)
	})
	t.Run("no credentials anywhere", func(t *testing.T) {
		cleanAWSEnv(t)
		_, err := authenticateOnce(t, chain.mechanism(), mskAddr)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "sasl mechanism AWS_MSK_IAM in region eu-west-1 with credentials from the aws default chain")
		assert.Contains(t, err.Error(), "retrieving aws credentials")
	})
	t.Run("malformed shared config file", func(t *testing.T) {
		dir := cleanAWSEnv(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config"), []byte("[profile reader\nregion = x\n"), 0o600))
		t.Setenv("AWS_PROFILE", "reader")
		_, err := authenticateOnce(t, chain.mechanism(), mskAddr)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "loading the aws configuration")
	})
}

// imdsEndpoint serves is as EC2 instance metadata (IMDSv2: a session token,
// the instance profile's role name, then its credentials), for
// AWS_EC2_METADATA_SERVICE_ENDPOINT.
func (is *issuer) imdsEndpoint(t *testing.T) string {
	t.Helper()
	const role = "kafka-instance-role"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/latest/api/token":
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
			_, _ = w.Write([]byte("imds-session"))
		case "/latest/meta-data/iam/security-credentials/":
			_, _ = w.Write([]byte(role))
		case "/latest/meta-data/iam/security-credentials/" + role:
			id, secret, token, exp := is.issue("ec2 "+role, "")
			_ = json.NewEncoder(w).Encode(map[string]string{
				"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": id, "SecretAccessKey": secret, "Token": token,
				"Expiration": exp.Format(time.RFC3339), "LastUpdated": time.Now().UTC().Format(time.RFC3339),
			})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAWSCredentialOptions checks the credential options kafka_franz
// offers beyond keys and a role: a profile of the shared files, an external
// ID for the role, a custom endpoint for the AWS API (STS) and the EC2
// instance's role.
func TestAWSCredentialOptions(t *testing.T) {
	verify := func(t *testing.T, m sasl.Mechanism, secrets func() map[string]string) mskPayload {
		t.Helper()
		p, err := authenticateOnce(t, m, mskAddr)
		require.NoError(t, err)
		require.NoError(t, p.verify(secrets(), testRegion, time.Now()))
		return p
	}
	t.Run("profile", func(t *testing.T) {
		dir := cleanAWSEnv(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "credentials"), []byte(
			"[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n\n"+
				"[reader]\naws_access_key_id = AKIAREADER\naws_secret_access_key = reader-secret\n"), 0o600))
		verify(t, awsEntry(AWS{Region: testRegion, Profile: "reader"}).mechanism(), fixed(map[string]string{"AKIAREADER": "reader-secret"}))
	})
	t.Run("role with an external id through a custom endpoint", func(t *testing.T) {
		cleanAWSEnv(t)
		is := newIssuer(time.Hour)
		m := awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret, RoleARN: testRoleARN,
			RoleExternalID: "ext-42", Endpoint: is.stsEndpoint(t)}).mechanism()
		verify(t, m, is.secretsNow)
		calls, callers, _ := is.snapshot()
		assert.Equal(t, []string{"AssumeRole " + testRoleARN + " external-id=ext-42"}, calls)
		assert.Equal(t, []string{testKeyID}, callers)
	})
	t.Run("ec2 instance role", func(t *testing.T) {
		cleanAWSEnv(t)
		is := newIssuer(time.Hour)
		t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
		t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", is.imdsEndpoint(t))
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENV") // the chain would take these first
		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
		verify(t, awsEntry(AWS{Region: testRegion, FromEC2Role: true}).mechanism(), is.secretsNow)
		calls, _, _ := is.snapshot()
		assert.Equal(t, []string{"ec2 kafka-instance-role"}, calls)
	})
}

// fixed returns secrets, for a verification that takes them when it runs.
func fixed(secrets map[string]string) func() map[string]string {
	return func() map[string]string { return secrets }
}

// TestAWSRefreshBeforeExpiry checks that credentials are refreshed before
// they expire: every authentication (a new connection, or a KIP-368
// re-authentication) asks the credentials cache, which keeps credentials
// while they have more than awsRefreshWindow left and fetches new ones when
// they have less, so a payload is never signed with credentials about to
// expire.
func TestAWSRefreshBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		lifetime  time.Duration
		wantCalls int
	}{
		{lifetime: time.Hour, wantCalls: 1},
		{lifetime: awsRefreshWindow - time.Minute, wantCalls: 3},
	} {
		t.Run(tc.lifetime.String(), func(t *testing.T) {
			cleanAWSEnv(t)
			is := newIssuer(tc.lifetime)
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", is.containerEndpoint(t))
			m := awsEntry(AWS{Region: testRegion}).mechanism()
			var keys []string
			for range 3 {
				p, err := authenticateOnce(t, m, mskAddr)
				require.NoError(t, err)
				_, _, secrets := is.snapshot()
				require.NoError(t, p.verify(secrets, testRegion, time.Now()))
				keys = append(keys, strings.SplitN(p["x-amz-credential"], "/", 2)[0])
			}
			calls, _, _ := is.snapshot()
			assert.Len(t, calls, tc.wantCalls, "credential fetches for 3 authentications")
			want := []string{"ASIATEST0001", "ASIATEST0001", "ASIATEST0001"}
			if tc.wantCalls == 3 {
				want = []string{"ASIATEST0001", "ASIATEST0002", "ASIATEST0003"}
			}
			assert.Equal(t, want, keys, "access key of each authentication")
		})
	}
}

// TestAWSValidate checks the rules of AWS_MSK_IAM entries; the messages name
// the field and hold no secret.
func TestAWSValidate(t *testing.T) {
	tlsOn := &tls.Config{}
	for _, tc := range []struct {
		name string
		tls  bool
		sasl SASL
		want []string
	}{
		{name: "default chain", tls: true, sasl: awsEntry(AWS{Region: testRegion})},
		{name: "static keys", tls: true, sasl: awsEntry(AWS{Region: "us-gov-west-1", AccessKeyID: testKeyID, SecretAccessKey: testSecret, SessionToken: testToken})},
		{name: "role", tls: true, sasl: awsEntry(AWS{Region: "cn-north-1", RoleARN: "arn:aws-cn:iam::123456789012:role/path/kafka"})},
		{name: "no region", tls: true, sasl: awsEntry(AWS{}), want: []string{"sasl[0].aws.region is required for mechanism AWS_MSK_IAM"}},
		{name: "bad region", tls: true, sasl: awsEntry(AWS{Region: "eu-west"}), want: []string{`sasl[0].aws.region must be an aws region such as us-east-1, got "eu-west"`}},
		{name: "no tls", sasl: awsEntry(AWS{Region: testRegion}), want: []string{"sasl[0].mechanism AWS_MSK_IAM requires tls.enabled: true"}},
		{
			name: "id without secret", tls: true, sasl: awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID}),
			want: []string{"sasl[0].aws.credentials.id and sasl[0].aws.credentials.secret must be set together"},
		},
		{
			name: "secret without id", tls: true, sasl: awsEntry(AWS{Region: testRegion, SecretAccessKey: testSecret}),
			want: []string{"sasl[0].aws.credentials.id and sasl[0].aws.credentials.secret must be set together"},
		},
		{
			name: "token alone", tls: true, sasl: awsEntry(AWS{Region: testRegion, SessionToken: testToken}),
			want: []string{"sasl[0].aws.credentials.token requires sasl[0].aws.credentials.id and sasl[0].aws.credentials.secret"},
		},
		{
			name: "bad role", tls: true, sasl: awsEntry(AWS{Region: testRegion, RoleARN: "kafka-reader"}),
			want: []string{`sasl[0].aws.credentials.role must be an iam role arn (arn:aws:iam::<account>:role/<name>), got "kafka-reader"`},
		},
		{name: "profile, endpoint, external id", tls: true, sasl: awsEntry(AWS{Region: testRegion, Profile: "reader", Endpoint: "https://sts.example:8443", RoleARN: testRoleARN, RoleExternalID: "x"})},
		{name: "ec2 role", tls: true, sasl: awsEntry(AWS{Region: testRegion, FromEC2Role: true, RoleARN: testRoleARN})},
		{
			name: "external id without role", tls: true, sasl: awsEntry(AWS{Region: testRegion, RoleExternalID: "x"}),
			want: []string{"sasl[0].aws.credentials.role_external_id requires sasl[0].aws.credentials.role"},
		},
		{
			name: "ec2 role and keys", tls: true, sasl: awsEntry(AWS{Region: testRegion, FromEC2Role: true, AccessKeyID: testKeyID, SecretAccessKey: testSecret}),
			want: []string{"sasl[0].aws.credentials.from_ec2_role cannot be set with sasl[0].aws.credentials.id or sasl[0].aws.credentials.profile"},
		},
		{
			name: "ec2 role and profile", tls: true, sasl: awsEntry(AWS{Region: testRegion, FromEC2Role: true, Profile: "p"}),
			want: []string{"sasl[0].aws.credentials.from_ec2_role cannot be set with sasl[0].aws.credentials.id or sasl[0].aws.credentials.profile"},
		},
		{
			name: "bad endpoint", tls: true, sasl: awsEntry(AWS{Region: testRegion, Endpoint: "sts.example"}),
			want: []string{`sasl[0].aws.endpoint must be an http or https url such as https://sts.eu-west-1.amazonaws.com, got "sts.example"`},
		},
		{
			name: "password", tls: true, sasl: SASL{Mechanism: MechanismAWSMSKIAM, Password: "pw-secret", AWS: AWS{Region: testRegion}},
			want: []string{"sasl[0].username, sasl[0].password and sasl[0].token are not used by mechanism AWS_MSK_IAM (its credentials are under sasl[0].aws)"},
		},
		{
			name: "aws with plain", tls: true, sasl: SASL{Mechanism: MechanismPlain, Username: "u", Password: "p", AWS: AWS{Region: testRegion}},
			want: []string{"sasl[0].aws is only used by mechanism AWS_MSK_IAM, not PLAIN"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{SASL: []SASL{tc.sasl}}
			if tc.tls {
				c.TLS = tlsOn
			}
			err := c.Validate()
			if len(tc.want) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Len(t, strings.Split(err.Error(), "\n"), len(tc.want), "errors: %v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			for _, secret := range []string{testSecret, testToken, "pw-secret"} {
				assert.NotContains(t, err.Error(), secret)
			}
		})
	}
}

// TestAWSString checks how an entry is described in messages: region,
// where the credentials come from, the role; never a secret.
func TestAWSString(t *testing.T) {
	assert.Equal(t, `AWS_MSK_IAM in region eu-west-1 with access key "AKIDEXAMPLE"`,
		awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret, SessionToken: testToken}).String())
	assert.Equal(t, `AWS_MSK_IAM in region eu-west-1 with credentials from the aws default chain, assuming role "`+testRoleARN+`"`,
		awsEntry(AWS{Region: testRegion, RoleARN: testRoleARN}).String())
}

// fakeMSK makes a kfake cluster answer SASL as an MSK IAM listener does:
// it enables AWS_MSK_IAM only, verifies each authentication's payload with
// the tests' SigV4 against the secrets it is given, and grants a session of
// lifetime (KIP-368), after which the client must authenticate again.
type fakeMSK struct {
	region   string
	secrets  func() map[string]string
	lifetime time.Duration

	mu       sync.Mutex // guards the fields below
	accepted []string   // access key of each accepted authentication
	rejected []error
}

func (f *fakeMSK) install(c *kfake.Cluster) {
	c.ControlKey(kmsg.SASLHandshake.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.SASLHandshakeRequest)
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{MechanismAWSMSKIAM}
		if req.Mechanism != MechanismAWSMSKIAM {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		return resp, nil, true
	})
	c.ControlKey(kmsg.SASLAuthenticate.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.SASLAuthenticateRequest)
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		var p mskPayload
		err := json.Unmarshal(req.SASLAuthBytes, &p)
		if err == nil {
			err = p.verify(f.secrets(), f.region, time.Now())
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if err != nil {
			f.rejected = append(f.rejected, err)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "[" + err.Error() + "] Access denied"
			resp.ErrorMessage = &msg
			return resp, nil, true
		}
		f.accepted = append(f.accepted, strings.SplitN(p["x-amz-credential"], "/", 2)[0])
		resp.SASLAuthBytes = []byte(`{"version":"2020_10_22","request-id":"fake"}`)
		resp.SessionLifetimeMillis = f.lifetime.Milliseconds()
		return resp, nil, true
	})
}

func (f *fakeMSK) results() (accepted []string, rejected []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.accepted...), append([]error(nil), f.rejected...)
}

// TestAWSAgainstFakeBroker runs a franz-go client with Config.Opts against a
// broker that verifies AWS_MSK_IAM payloads (fakeMSK): the client
// authenticates on each new connection and again when its KIP-368 session
// ends, every time with credentials fresh from the container endpoint
// (they expire inside awsRefreshWindow, so each authentication fetches
// new ones), and the broker accepts each signature. A wrong secret is
// rejected and Explain reports an authentication failure.
func TestAWSAgainstFakeBroker(t *testing.T) {
	cleanAWSEnv(t)
	t.Setenv("AWS_REGION", testRegion) // kfake listens on 127.0.0.1: no region in the host name
	is := newIssuer(awsRefreshWindow - time.Minute)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", is.containerEndpoint(t))

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	broker := &fakeMSK{region: testRegion, lifetime: 1500 * time.Millisecond, secrets: is.secretsNow}
	broker.install(c)

	cfg := Config{SASL: []SASL{awsEntry(AWS{Region: testRegion})}}
	var nconnect int
	var connMu sync.Mutex
	hook := connectHook(func() { connMu.Lock(); nconnect++; connMu.Unlock() })
	cl, err := kgo.NewClient(append(cfg.Opts(), kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(hook))...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)

	// Requests every 100 ms until a connection has authenticated again (10 s at
	// most; the session ends after about 500 ms).
	deadline := time.Now().Add(10 * time.Second)
	for {
		ends, err := adm.ListEndOffsets(t.Context(), "t") // metadata is cached; a ListOffsets is sent each time
		require.NoError(t, err)
		require.NoError(t, ends.Error())
		accepted, _ := broker.results()
		connMu.Lock()
		n := nconnect
		connMu.Unlock()
		if len(accepted) > n || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	accepted, rejected := broker.results()
	assert.Empty(t, rejected)
	connMu.Lock()
	n := nconnect
	connMu.Unlock()
	assert.Greater(t, len(accepted), n, "authentications %v on %d connections: no KIP-368 re-authentication", accepted, n)
	seen := make(map[string]bool)
	for _, k := range accepted {
		assert.False(t, seen[k], "access key %s used twice: credentials within the refresh window were not refreshed", k)
		seen[k] = true
	}

	// A wrong secret: the broker rejects it, Explain says so.
	bad := Config{TLS: nil, SASL: []SASL{awsEntry(AWS{Region: testRegion, AccessKeyID: "ASIATEST0001", SecretAccessKey: "wrong-secret"})}}
	cl2, err := kgo.NewClient(append(bad.Opts(), kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequestRetries(0))...)
	require.NoError(t, err)
	t.Cleanup(cl2.Close)
	_, err = kadm.NewClient(cl2).ListTopics(t.Context())
	require.Error(t, err)
	err = Explain(err, bad, c.ListenAddrs())
	assert.True(t, errors.Is(err, ErrAuthentication), "Explain(%v) is not ErrAuthentication", err)
	assert.Contains(t, err.Error(), "AWS_MSK_IAM in region eu-west-1")
	assert.NotContains(t, err.Error(), "wrong-secret")
	_, rejected = broker.results()
	require.NotEmpty(t, rejected)
	assert.Contains(t, rejected[0].Error(), "does not verify")
}

// connectHook counts the client's successful broker connections.
type connectHook func()

func (h connectHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h()
	}
}

// TestAWSErrorsHoldNoSecret: the messages of AWS_MSK_IAM are built from the
// mechanism, region, access key ID and broker only: a rejected
// authentication, a region the signature cannot use and credentials the
// chain cannot find never hold the secret key or the session token (there
// is no substring redaction to catch them afterwards).
func TestAWSErrorsHoldNoSecret(t *testing.T) {
	cleanAWSEnv(t)
	entry := awsEntry(AWS{Region: testRegion, AccessKeyID: testKeyID, SecretAccessKey: testSecret, SessionToken: testToken})
	cfg := Config{SASL: []SASL{entry}}
	err := Explain(fmt.Errorf("list topics: %w", kerr.SaslAuthenticationFailed), cfg, []string{mskAddr})
	require.ErrorIs(t, err, ErrAuthentication)
	assert.Contains(t, err.Error(), `with mechanism AWS_MSK_IAM in region eu-west-1 with access key "AKIDEXAMPLE" was rejected`)
	_, regionErr := authenticateOnce(t, entry.mechanism(), "b-2.demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098")
	require.Error(t, regionErr)
	_, chainErr := authenticateOnce(t, awsEntry(AWS{Region: testRegion}).mechanism(), mskAddr)
	require.Error(t, chainErr, "no credentials anywhere")
	for _, e := range []error{err, regionErr, chainErr, Explain(regionErr, cfg, []string{mskAddr})} {
		assert.NotContains(t, e.Error(), testSecret)
		assert.NotContains(t, e.Error(), testToken)
		assert.NotContains(t, e.Error(), "[redacted]")
	}
}
