package tests

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tests in this file check the issue "TLS and SASL": reading through a SASL_SSL listener of
// a real Apache Kafka broker with each mechanism, and the message of each way connecting can
// fail. They share one broker of their own (resources/kafka.sh with KBR_KAFKA_SASL_SSL_PORT),
// with a CA and broker certificate made at test time.

// Users of the SASL_SSL listener: alice for PLAIN (in the listener's JAAS config), carol for
// SCRAM-SHA-256 and SCRAM-SHA-512 (created when the storage is formatted).
const (
	plainUser     = "alice"
	plainPassword = "alice-pw-4f1c9e"
	scramUser     = "carol"
	scramPassword = "carol-pw-7b2d0a"
	wrongPassword = "wrong-pw-93e5c1"

	// secureSASLPortOffset: the SASL_SSL listener of a broker slot listens this far above its
	// PLAINTEXT port.
	secureSASLPortOffset = 1000

	securePartitions = 3
	securePerPart    = 400
)

// secureBroker is a broker of the test's own with a PLAINTEXT and a SASL_SSL listener, and a
// topic with records marked `kbrmark-<id>-end`, produced through the PLAINTEXT listener.
type secureBroker struct {
	*ownBroker
	pki      testPKI
	saslPort int
	topic    string
	prod     produced
}

func (s *secureBroker) saslAddr() string { return "127.0.0.1:" + strconv.Itoa(s.saslPort) }

// startSecureBroker takes a broker slot, starts its broker with a SASL_SSL listener (stopped
// when the test ends; mutual TLS required with mutualTLS), and writes the topic.
func startSecureBroker(t *testing.T, mutualTLS bool) *secureBroker {
	t.Helper()
	b := newOwnBroker(t)
	s := &secureBroker{ownBroker: b, pki: newTestPKI(t, t.TempDir()), saslPort: b.port + secureSASLPortOffset}
	require.Falsef(t, portInUse(s.saslPort), "port %d (the SASL_SSL listener of slot %s) is in use", s.saslPort, b.addr())
	b.env = []string{
		"KBR_KAFKA_SASL_SSL_PORT=" + strconv.Itoa(s.saslPort),
		"KBR_KAFKA_SSL_KEYSTORE_PEM=" + s.pki.KeystoreFile,
		"KBR_KAFKA_SASL_MECHANISMS=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
		"KBR_KAFKA_SASL_PLAIN_USERS=" + plainUser + ":" + plainPassword,
		"KBR_KAFKA_SASL_SCRAM_USERS=" + scramUser + ":" + scramPassword,
	}
	if mutualTLS {
		b.env = append(b.env, "KBR_KAFKA_SSL_CLIENT_AUTH=required", "KBR_KAFKA_SSL_TRUSTSTORE_PEM="+s.pki.TruststoreFile)
	}
	b.start(t)

	adm := kadm.NewClient(b.client(t))
	s.topic = b.createTopic(t, adm, securePartitions)
	var records []*kgo.Record
	for i := range securePartitions * securePerPart {
		records = append(records, &kgo.Record{
			Topic:     s.topic,
			Partition: int32(i % securePartitions),
			Value:     []byte(fmt.Sprintf(`{"id":%d,"marker":"kbrmark-%d-end"}`, i, i)),
		})
	}
	s.prod = produceAll(t, b.client(t, producerOpts()...), records)
	require.Equal(t, len(records), s.prod.count())
	return s
}

// secureInput is an input config for the SASL_SSL listener with the test CA and the given SASL
// entry (nil: no sasl), reading the topic to its end.
func (s *secureBroker) secureInput(sasl map[string]any) inputConfig {
	in := inputConfig{
		"seed_brokers": []string{s.saslAddr()},
		"topics":       []string{s.topic},
		"stop_at":      "end",
		"tls":          map[string]any{"enabled": true, "root_cas_file": s.pki.CAFile},
	}
	if sasl != nil {
		in["sasl"] = []any{sasl}
	}
	return in
}

// unsecuredJWT returns a token that Kafka's default OAUTHBEARER validator (unsecured JWTs,
// alg none) accepts for principal sub for an hour.
func unsecuredJWT(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	now := time.Now().Unix()
	return enc([]byte(`{"alg":"none"}`)) + "." +
		enc([]byte(fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, sub, now, now+3600))) + "."
}

// withJSONLogs makes connect log JSON lines, so tests can read each message whole.
func withJSONLogs() runOption { return withJSONLogsAt("info") }

// withJSONLogsAt makes connect log JSON lines from level up.
func withJSONLogsAt(level string) runOption {
	return func(conf map[string]any) {
		conf["logger"] = map[string]any{"level": level, "format": "json"}
	}
}

// logLine is one JSON log line of connect.
type logLine struct {
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	Time  time.Time `json:"time"`
}

// logLines parses the JSON log lines of out; other lines are skipped.
func logLines(out string) []logLine {
	var lines []logLine
	for _, l := range strings.Split(out, "\n") {
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil && ll.Msg != "" {
			lines = append(lines, ll)
		}
	}
	return lines
}

const failedConnectPrefix = "Failed to connect to kafka_batched_ranges: "

// failedConnects returns the "Failed to connect" lines of out.
func failedConnects(out string) []logLine {
	var lines []logLine
	for _, l := range logLines(out) {
		if strings.HasPrefix(l.Msg, failedConnectPrefix) {
			lines = append(lines, l)
		}
	}
	return lines
}

const inputStoppedPrefix = "Input stopped: "

// unfixableSuffix ends the message of a connection failure that retrying cannot fix.
const unfixableSuffix = "; retrying cannot fix this"

// runStopped runs a bounded read of in (stop_at: end) that cannot start: connect must end on
// its own (within the minute the test gives it, never retrying for ever) with exit 1 and one
// "Input stopped" error line, which it returns with the run's result.
func runStopped(t *testing.T, in inputConfig, opts ...runOption) (logLine, runResult) {
	t.Helper()
	require.Equal(t, "end", in["stop_at"], "runStopped runs bounded reads")
	dir := t.TempDir()
	cfg := writeRunConfig(t, dir, in, filepath.Join(dir, "out.jsonl"), append([]runOption{withJSONLogs()}, opts...)...)
	res := runConnect(t, time.Minute, nil, "run", cfg)
	require.Falsef(t, res.TimedOut, "a bounded run that cannot start did not end on its own\n%s", res)
	require.Equalf(t, 1, res.ExitCode, "a bounded run that cannot start must exit 1\n%s", res)
	var stopped []logLine
	for _, l := range logLines(res.Stdout + res.Stderr) {
		if strings.HasPrefix(l.Msg, inputStoppedPrefix) {
			stopped = append(stopped, l)
		}
	}
	require.Lenf(t, stopped, 1, "want one `Input stopped` line\n%s", res)
	require.Equal(t, "error", stopped[0].Level)
	return stopped[0], res
}

// requireStopped checks the line of a bounded run stopped by a connection failure that retrying
// cannot fix: the explanation, said to be unfixable, in one short line (the client's error is
// logged at DEBUG only), no more than two attempts, and no secret anywhere in the output.
func requireStopped(t *testing.T, line logLine, res runResult, explanation string, secrets ...string) {
	t.Helper()
	require.Truef(t, strings.HasPrefix(line.Msg, inputStoppedPrefix+explanation+unfixableSuffix),
		"stop message\n  %s\nwant it to start with\n  %s", line.Msg, inputStoppedPrefix+explanation+unfixableSuffix)
	require.LessOrEqualf(t, len(line.Msg), len(inputStoppedPrefix+explanation)+200, "the stop line is long: %s", line.Msg)
	attempts := failedConnects(res.Stdout + res.Stderr)
	require.LessOrEqualf(t, len(attempts), 2, "%d connect attempts before a bounded run stopped on an error retrying cannot fix", len(attempts))
	for _, l := range logLines(res.Stdout + res.Stderr) {
		if l.Level == "warn" || l.Level == "warning" || l.Level == "error" {
			require.Truef(t, strings.HasPrefix(l.Msg, inputStoppedPrefix) || strings.HasPrefix(l.Msg, failedConnectPrefix) ||
				strings.HasPrefix(l.Msg, "Insecure connection settings: "), // PLAIN without tls
				"another %s line next to the stop: %s", l.Level, l.Msg)
		}
	}
	for _, s := range secrets {
		require.NotContainsf(t, res.Stdout+res.Stderr, s, "the output holds a secret\n%s", res)
	}
	t.Logf("stopped after %d connect attempts in %s: %s", len(attempts), res.Duration.Round(time.Millisecond), line.Msg)
}

// requireFailure checks every "Failed to connect" line: an error, the exact explanation first,
// said to be unfixable, and no secret anywhere in the output.
func requireFailure(t *testing.T, lines []logLine, res runResult, explanation string, secrets ...string) {
	t.Helper()
	for _, l := range lines {
		require.Equalf(t, "error", l.Level, "connect failure logged at %s: %s", l.Level, l.Msg)
		require.Truef(t, strings.HasPrefix(l.Msg, failedConnectPrefix+explanation+unfixableSuffix),
			"connect failure message\n  %s\nwant it to start with\n  %s", l.Msg, failedConnectPrefix+explanation+unfixableSuffix)
	}
	for _, s := range secrets {
		require.NotContainsf(t, res.Stdout+res.Stderr, s, "the output holds a secret\n%s", res)
	}
	t.Logf("%d connect failures in %s; first: %s", len(lines), res.Duration.Round(time.Millisecond), lines[0].Msg)
}

// TestSecure starts one broker with a SASL_SSL listener and runs, in parallel against it: a
// bounded read of every record through config/examples/secure.yaml with PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512, and through a generated config with OAUTHBEARER; each connection failure with
// its exact message, stopping a bounded run with exit 1 (retried, and said to be unfixable, in a
// continuous one); `connect echo` scrubbing password and token; `connect lint` rejecting a
// missing password.
func TestSecure(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := startSecureBroker(t, false)
	t.Logf("broker with SASL_SSL listener %s up and topic written in %s", s.saslAddr(), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() { t.Logf("secure tests took %s", time.Since(began).Round(time.Millisecond)) })
	example := filepath.Join(repoRoot, "config", "examples", "secure.yaml")

	for _, tc := range []struct{ mechanism, user, password string }{
		{"PLAIN", plainUser, plainPassword},
		{"SCRAM-SHA-256", scramUser, scramPassword},
		{"SCRAM-SHA-512", scramUser, scramPassword},
	} {
		// The example, run as its header says, reads every record exactly once.
		t.Run("read_example_"+tc.mechanism, func(t *testing.T) {
			t.Parallel()
			outDir := t.TempDir()
			res := runConnect(t, 2*time.Minute, []string{
				"KAFKA_BROKERS=" + s.saslAddr(),
				"KAFKA_TOPIC=" + s.topic,
				"KAFKA_CA_FILE=" + s.pki.CAFile,
				"KAFKA_SASL_MECHANISM=" + tc.mechanism,
				"KAFKA_USER=" + tc.user,
				"KAFKA_PASSWORD=" + tc.password,
				"OUT_DIR=" + outDir,
			}, "run", example)
			requireExitZero(t, res)
			require.NotContains(t, res.Stdout+res.Stderr, tc.password, "the output holds the password")
			requireMarkersOnce(t, outDir, securePartitions*securePerPart)
		})
	}

	// The example takes the credentials as they are: a password holding what YAML and a quoted
	// "${KAFKA_PASSWORD}" would change (a backslash sequence, quotes, ": ", " #", a trailing
	// backslash) reaches the broker unchanged. At TRACE, where franz-go logs every connection and
	// SASL step, it is never logged.
	t.Run("read_example_password_with_yaml_characters", func(t *testing.T) {
		t.Parallel()
		const user, password = "dave", `k\t"q'u: o #h:\`
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		alter, err := kadm.NewClient(s.client(t)).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
			{User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password},
		})
		require.NoError(t, err)
		require.NoError(t, alter.Error())
		outDir := t.TempDir()
		res := runConnect(t, 2*time.Minute, []string{
			"KAFKA_BROKERS=" + s.saslAddr(),
			"KAFKA_TOPIC=" + s.topic,
			"KAFKA_CA_FILE=" + s.pki.CAFile,
			"KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
			"KAFKA_USER=" + user,
			"KAFKA_PASSWORD=" + password,
			"OUT_DIR=" + outDir,
		}, "run", "--log.level", "TRACE", example)
		requireExitZero(t, res)
		requireMarkersOnce(t, outDir, securePartitions*securePerPart)
		out := res.Stdout + res.Stderr
		require.Contains(t, out, "franz-go (cursor client): beginning sasl authentication", "no franz-go line at TRACE")
		require.Contains(t, out, "mechanism: SCRAM-SHA-512")
		require.NotContains(t, out, `k\t"q'u`, "the output holds the password")
		require.NotContains(t, out, `k\\t\"q'u`, "the output holds the password, quoted")
	})

	t.Run("read_OAUTHBEARER", func(t *testing.T) {
		t.Parallel()
		token := unsecuredJWT("kbr-oauth")
		recs, res := runInputResult(t, s.secureInput(map[string]any{"mechanism": "OAUTHBEARER", "token": token}), 2*time.Minute)
		requireExactlyOnce(t, offsetsOf(s.prod), recs)
		require.NotContains(t, res.Stdout+res.Stderr, token, "the output holds the token")
	})

	// OAUTHBEARER with SASL extensions (sasl[].extensions): Kafka's broker parses them from
	// the client's first message (a malformed one fails the authentication) and its
	// unsecured validator accepts them; that they are sent is TestOAuthExtensionsSent's.
	t.Run("read_OAUTHBEARER_extensions", func(t *testing.T) {
		t.Parallel()
		token := unsecuredJWT("kbr-oauth-ext")
		recs, res := runInputResult(t, s.secureInput(map[string]any{"mechanism": "OAUTHBEARER", "token": token,
			"extensions": map[string]any{"traceId": "kbr-1", "logicalCluster": "lkc-test"}}), 2*time.Minute)
		requireExactlyOnce(t, offsetsOf(s.prod), recs)
		require.NotContains(t, res.Stdout+res.Stderr, token, "the output holds the token")
	})

	// A bounded run (stop_at: end) stops on a wrong password within its first attempts and
	// exits 1, saying what to change.
	t.Run("wrong_password_bounded", func(t *testing.T) {
		t.Parallel()
		line, res := runStopped(t, s.secureInput(map[string]any{"mechanism": "SCRAM-SHA-256", "username": scramUser, "password": wrongPassword}), withJSONLogsAt("debug"))
		requireStopped(t, line, res,
			fmt.Sprintf(`sasl authentication with mechanism SCRAM-SHA-256 as user %q was rejected by broker %s: wrong password, unknown user or invalid token`, scramUser, s.saslAddr()),
			wrongPassword)
		var details []string
		for _, l := range logLines(res.Stdout + res.Stderr) {
			if l.Level == "debug" && strings.HasPrefix(l.Msg, "Connect attempt ") {
				details = append(details, l.Msg)
			}
		}
		require.NotEmpty(t, details, "no DEBUG line with the client's error")
		require.Contains(t, details[0], "SASL_AUTHENTICATION_FAILED: SASL Authentication failed.: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
	})

	// In a continuous run (stop_at: never) a wrong password is retried with backoff, one error
	// line per attempt, each saying that retrying cannot fix it, for as long as the run lasts.
	t.Run("wrong_password_continuous", func(t *testing.T) {
		t.Parallel()
		const watch = 16 * time.Second
		in := s.secureInput(map[string]any{"mechanism": "SCRAM-SHA-256", "username": scramUser, "password": wrongPassword})
		in["stop_at"] = "never"
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, in, filepath.Join(dir, "out.jsonl"), withJSONLogs())
		rc := startConnect(t, watch+time.Minute, nil, "run", cfg)
		rc.waitFor(watch, func() bool { return false })
		res := rc.stop(syscall.SIGTERM, 30*time.Second)
		require.Falsef(t, res.TimedOut, "connect did not stop within 30s of SIGTERM\n%s", res)
		lines := failedConnects(res.Stdout + res.Stderr)
		require.NotEmptyf(t, lines, "no `Failed to connect` line in %s\n%s", watch, res)
		requireFailure(t, lines, res,
			fmt.Sprintf(`sasl authentication with mechanism SCRAM-SHA-256 as user %q was rejected by broker %s: wrong password, unknown user or invalid token`, scramUser, s.saslAddr()),
			wrongPassword)
		// Connect backs off 1s, 2s, 4s, 8s, then 10s: attempts at about 0, 1, 3, 7 and 15s.
		require.GreaterOrEqualf(t, len(lines), 3, "%d connect attempts in %s: not retried", len(lines), watch)
		require.LessOrEqualf(t, len(lines), int(watch/time.Second)+2, "%d connect attempts in %s: retried without backoff", len(lines), watch)
		for i := 1; i < len(lines); i++ {
			gap := lines[i].Time.Sub(lines[i-1].Time)
			require.GreaterOrEqualf(t, gap, 500*time.Millisecond, "attempts %d and %d %s apart: no backoff", i, i+1, gap)
			require.LessOrEqualf(t, gap, 13*time.Second, "attempts %d and %d %s apart: silent too long", i, i+1, gap)
		}
		require.LessOrEqualf(t, time.Since(lines[len(lines)-1].Time), 13*time.Second, "no attempt logged in the last 13s of the run: it went silent")
		// One line per attempt: nothing else is logged as a warning or an error (franz-go's
		// connection warnings are the input's own error, so they are logged at DEBUG).
		for _, l := range logLines(res.Stdout + res.Stderr) {
			if l.Level == "warn" || l.Level == "warning" || l.Level == "error" {
				require.Truef(t, strings.HasPrefix(l.Msg, failedConnectPrefix), "another %s line next to the connect failures: %s", l.Level, l.Msg)
			}
		}
	})

	t.Run("unknown_user", func(t *testing.T) {
		t.Parallel()
		line, res := runStopped(t, s.secureInput(map[string]any{"mechanism": "PLAIN", "username": "mallory", "password": wrongPassword}))
		requireStopped(t, line, res,
			fmt.Sprintf(`sasl authentication with mechanism PLAIN as user "mallory" was rejected by broker %s: wrong password, unknown user or invalid token`, s.saslAddr()),
			wrongPassword)
	})

	t.Run("untrusted_certificate", func(t *testing.T) {
		t.Parallel()
		in := s.secureInput(map[string]any{"mechanism": "PLAIN", "username": plainUser, "password": plainPassword})
		in["tls"] = map[string]any{"enabled": true, "root_cas_file": s.pki.OtherCAFile}
		line, res := runStopped(t, in)
		requireStopped(t, line, res,
			fmt.Sprintf(`tls: the certificate of broker %s failed verification (certificate "kbr test broker" issued by %q): x509: certificate signed by unknown authority; set tls.root_cas or tls.root_cas_file to the CA that signed it`, s.saslAddr(), s.pki.CASubject),
			plainPassword)
	})

	t.Run("tls_against_plaintext_listener", func(t *testing.T) {
		t.Parallel()
		in := s.secureInput(map[string]any{"mechanism": "PLAIN", "username": plainUser, "password": plainPassword})
		in["seed_brokers"] = []string{s.addr()}
		line, res := runStopped(t, in)
		requireStopped(t, line, res,
			fmt.Sprintf(`tls is enabled but broker %s closed the connection during the tls handshake: its listener does not speak tls (PLAINTEXT or SASL_PLAINTEXT); set tls.enabled: false or connect to the broker's SSL/SASL_SSL listener`, s.addr()),
			plainPassword)
	})

	t.Run("plaintext_against_tls_listener", func(t *testing.T) {
		t.Parallel()
		in := s.secureInput(map[string]any{"mechanism": "PLAIN", "username": plainUser, "password": plainPassword})
		delete(in, "tls")
		line, res := runStopped(t, in)
		requireStopped(t, line, res,
			fmt.Sprintf(`tls is not enabled but broker %s speaks tls (an SSL or SASL_SSL listener): set tls.enabled: true`, s.saslAddr()),
			plainPassword)
	})

	t.Run("echo_scrubs_secrets", func(t *testing.T) {
		t.Parallel()
		res := runConnect(t, time.Minute, []string{"KAFKA_USER=" + plainUser, "KAFKA_PASSWORD=" + plainPassword}, "echo", example)
		requireExitZero(t, res)
		require.NotContains(t, res.Stdout+res.Stderr, plainPassword, "connect echo printed the password")
		require.Regexp(t, `username: \|-\n\s+`+plainUser+`\n`, res.Stdout, "the user name as the example writes it (a block scalar)")
		require.Contains(t, res.Stdout, "password: '!!!SECRET_SCRUBBED!!!'")

		token := unsecuredJWT("kbr-echo")
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, s.secureInput(map[string]any{"mechanism": "OAUTHBEARER", "token": token}), filepath.Join(dir, "out.jsonl"))
		res = runConnect(t, time.Minute, nil, "echo", cfg)
		requireExitZero(t, res)
		require.NotContains(t, res.Stdout+res.Stderr, token, "connect echo printed the token")
		require.Contains(t, res.Stdout, "token: '!!!SECRET_SCRUBBED!!!'")
	})

	t.Run("lint_requires_password", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg := writeRunConfig(t, dir, s.secureInput(map[string]any{"mechanism": "SCRAM-SHA-256", "username": scramUser}), filepath.Join(dir, "out.jsonl"))
		res := runConnect(t, time.Minute, nil, "lint", cfg)
		require.NotEqualf(t, 0, res.ExitCode, "lint accepted SCRAM-SHA-256 without a password\n%s", res)
		require.Contains(t, res.Stdout+res.Stderr, "sasl[0].password is required for mechanism SCRAM-SHA-256")
	})
}

// requireMarkersOnce checks that the files below dir hold every marker kbrmark-<id>-end for id
// in [0, n) exactly once.
func requireMarkersOnce(t *testing.T, dir string, n int) {
	t.Helper()
	seen := make([]int, n)
	marker := regexp.MustCompile(`kbrmark-(\d+)-end`)
	files := 0
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range marker.FindAllSubmatch(b, -1) {
			id, err := strconv.Atoi(string(m[1]))
			require.NoError(t, err)
			require.Lessf(t, id, n, "%s: marker of a record that was not produced", path)
			seen[id]++
		}
		return nil
	}))
	require.NotZerof(t, files, "no files written into %s", dir)
	var wrong []string
	for id, c := range seen {
		if c != 1 {
			wrong = append(wrong, fmt.Sprintf("%d (x%d)", id, c))
		}
	}
	require.Emptyf(t, wrong, "%d of %d records not written exactly once: %v", len(wrong), n, wrong[:min(len(wrong), 20)])
}

// TestSecureMutualTLS starts a broker whose SASL_SSL listener requires a client certificate
// (ssl.client.auth=required, trusting the test CA) and checks, through the binary: a read with a
// certificate the CA signed; the explanation when no certificate is configured, and when the one
// configured is signed by a CA the broker does not trust. Kafka answers both with the TLS alert
// bad_certificate (a Go server: certificate_required, see internal/security's kfake tests).
func TestSecureMutualTLS(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := startSecureBroker(t, true)
	t.Logf("broker with mutual-TLS SASL_SSL listener %s up and topic written in %s", s.saslAddr(), time.Since(began).Round(time.Millisecond))
	plain := map[string]any{"mechanism": "PLAIN", "username": plainUser, "password": plainPassword}
	withCert := func(cert, key string) inputConfig {
		in := s.secureInput(plain)
		in["tls"] = map[string]any{
			"enabled":       true,
			"root_cas_file": s.pki.CAFile,
			"client_certs":  []any{map[string]any{"cert_file": cert, "key_file": key}},
		}
		return in
	}

	t.Run("client_certificate", func(t *testing.T) {
		t.Parallel()
		recs, res := runInputResult(t, withCert(s.pki.ClientCertFile, s.pki.ClientKeyFile), 2*time.Minute)
		requireExactlyOnce(t, offsetsOf(s.prod), recs)
		require.NotContains(t, res.Stdout+res.Stderr, plainPassword, "the output holds the password")
	})

	t.Run("no_client_certificate", func(t *testing.T) {
		t.Parallel()
		line, res := runStopped(t, s.secureInput(plain))
		requireStopped(t, line, res,
			fmt.Sprintf(`tls: broker %s requires a client certificate (mutual tls: its listener has ssl.client.auth=required) and none is configured: set tls.client_certs to a certificate signed by a CA the broker trusts`, s.saslAddr()),
			plainPassword)
	})

	t.Run("client_certificate_of_another_CA", func(t *testing.T) {
		t.Parallel()
		line, res := runStopped(t, withCert(s.pki.OtherClientCertFile, s.pki.OtherClientKeyFile))
		requireStopped(t, line, res,
			fmt.Sprintf(`tls: broker %s rejected the client certificate of tls.client_certs (remote error: tls: bad certificate): the broker's ssl.truststore must trust the CA that signed it`, s.saslAddr()),
			plainPassword)
	})
}

// TestStreamsAPIShowsConfigAsRead runs `connect streams` on a stream whose SASL password comes
// from the environment and checks what docs/security.md ("Secure clusters") says of Benthos v4.60.0's
// streams API: GET /streams/{id} returns the stream's config as read, with the environment
// variable replaced by its value (the API does not scrub secret fields, and the raw config never
// holds "${VAR}"), and http.basic_auth puts the API behind credentials.
func TestStreamsAPIShowsConfigAsRead(t *testing.T) {
	t.Parallel()
	const password = "streams-pw-8e41d2"
	const apiUser, apiPassword = "ops", "api-pw-51c7"
	dir := t.TempDir()
	stream := filepath.Join(dir, "reader.yaml")
	require.NoError(t, os.WriteFile(stream, []byte(fmt.Sprintf(`input:
  kafka_batched_ranges:
    seed_brokers: [ %q ]
    topics: [ t ]
    tls: { enabled: true }
    sasl:
      - mechanism: SCRAM-SHA-512
        username: reader
        password: |-
          ${KBR_STREAMS_PASSWORD}
output:
  drop: {}
`, closedAddr(t))), 0o600))
	apiAddr := closedAddr(t)
	sum := sha256.Sum256([]byte(apiPassword))
	observability := filepath.Join(dir, "observability.yaml")
	require.NoError(t, os.WriteFile(observability, []byte(fmt.Sprintf(`http:
  address: %q
  basic_auth:
    enabled: true
    username: %s
    algorithm: sha256
    password_hash: %q
logger:
  level: info
`, apiAddr, apiUser, base64.StdEncoding.EncodeToString(sum[:]))), 0o600))

	rc := startConnect(t, 2*time.Minute, []string{"KBR_STREAMS_PASSWORD=" + password}, "streams", "-o", observability, stream)
	get := func(auth bool) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+apiAddr+"/streams/reader", nil)
		require.NoError(t, err)
		if auth {
			req.SetBasicAuth(apiUser, apiPassword)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	var code int
	var body string
	up := rc.waitFor(time.Minute, func() bool { code, body = get(true); return code == http.StatusOK })
	noAuth, noAuthBody := get(false)
	res := rc.stop(syscall.SIGTERM, 30*time.Second)
	require.Truef(t, up, "GET /streams/reader with credentials: %d %s\n%s", code, body, res)
	require.Equalf(t, http.StatusUnauthorized, noAuth, "GET /streams/reader without credentials behind basic_auth: %s", noAuthBody)
	require.NotContains(t, noAuthBody, password)

	var got struct {
		Config struct {
			Input struct {
				Kafka struct {
					SASL []map[string]any `json:"sasl"`
				} `json:"kafka_batched_ranges"`
			} `json:"input"`
		} `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got), body)
	require.Len(t, got.Config.Input.Kafka.SASL, 1, body)
	require.Equalf(t, password, got.Config.Input.Kafka.SASL[0]["password"], "the password GET /streams/{id} returns (docs/security.md, Secure clusters says: in clear, the variable replaced)\n%s", body)

}

// closedAddr returns a loopback address nothing listens on now.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
