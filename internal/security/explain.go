package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinels of this package, checked with errors.Is. The errors Explain
// returns wrap one of the last five and the original error.
var (
	// ErrUnknownMechanism is wrapped by errors about a SASL mechanism this
	// package does not know.
	ErrUnknownMechanism = errors.New("unknown sasl mechanism")
	// ErrAuthentication: the broker rejected the SASL credentials (wrong
	// password, unknown user, invalid or expired token), or closed the
	// connection instead of answering them.
	ErrAuthentication = errors.New("sasl authentication failed")
	// ErrSASLMismatch: the client and the broker's listener disagree on
	// SASL: it requires SASL and none is configured, it does not use SASL
	// and some is configured, or it does not enable the mechanism.
	ErrSASLMismatch = errors.New("sasl mismatch")
	// ErrUntrustedCertificate: the broker's TLS certificate failed
	// verification (unknown authority, wrong host name, expired).
	ErrUntrustedCertificate = errors.New("untrusted broker certificate")
	// ErrTLSMismatch: one side speaks TLS and the other plaintext.
	ErrTLSMismatch = errors.New("tls mismatch")
	// ErrClientCertificate: the broker's listener requires mutual TLS and
	// no client certificate was sent, or it rejected the one sent.
	ErrClientCertificate = errors.New("client certificate required or rejected")
)

// Explain rewrites err, the error of a request made by a client built with
// cfg.Opts and seed brokers seeds (typically the metadata listing that
// starts the input), when it comes from TLS or SASL: the result says what
// failed, where, and which setting to change, and wraps both a sentinel of
// this package and err. Any other error, and nil, is returned unchanged.
//
// franz-go errors do not carry the address of the broker a connection
// failed on; the seed brokers are named, which is where a client connects
// first. The explanation is built from the mechanism, user and brokers
// only, never from a password or token, and err's message is kept whole:
// neither franz-go's errors nor the broker's messages hold a secret (SCRAM's
// one error that would is rewritten by the mechanism, see scramMechanism).
func Explain(err error, cfg Config, seeds []string) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*explained](err); ok {
		return err // already explained
	}
	at := brokerNames(seeds)
	kind, why := classify(err, cfg, at)
	if kind == nil {
		return err
	}
	return &explained{kind: kind, msg: why + ": " + err.Error(), err: err}
}

// classify returns the sentinel and the explanation of err, or a nil
// sentinel when err is not a TLS or SASL failure.
func classify(err error, cfg Config, at string) (kind error, why string) {
	var verify *tls.CertificateVerificationError
	var hostname x509.HostnameError
	var firstEOF *kgo.ErrFirstReadEOF
	var header tls.RecordHeaderError
	var remote *net.OpError
	text := err.Error()
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return ErrAuthentication, fmt.Sprintf("sasl authentication %s was rejected by %s: wrong password, unknown user or invalid token",
			cfg.describeSASL(text), at)

	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return ErrSASLMismatch, fmt.Sprintf("%s does not enable sasl mechanism %s (Kafka sasl.enabled.mechanisms of its listener)",
			at, cfg.mechanismNames())

	case errors.Is(err, kerr.IllegalSaslState) && len(cfg.SASL) > 0:
		return ErrSASLMismatch, fmt.Sprintf("sasl is configured (%s) but the listener of %s does not use sasl (it is PLAINTEXT or SSL): remove sasl or connect to the broker's SASL listener",
			cfg.mechanismNames(), at)

	case errors.As(err, &hostname):
		return ErrUntrustedCertificate, fmt.Sprintf("tls: the certificate of %s is not valid for %s, the name it was verified against; it is valid for %s: dial the broker by one of those names or set tls_server_name",
			at, hostname.Host, certNames(hostname.Certificate))

	case errors.As(err, &verify):
		var who string
		if len(verify.UnverifiedCertificates) > 0 {
			leaf := verify.UnverifiedCertificates[0]
			who = fmt.Sprintf(" (certificate %q issued by %q)", leaf.Subject.CommonName, leaf.Issuer.CommonName)
		}
		return ErrUntrustedCertificate, fmt.Sprintf("tls: the certificate of %s failed verification%s: %v; set tls.root_cas or tls.root_cas_file to the CA that signed it",
			at, who, verify.Err)

	case cfg.TLS != nil && (errors.As(err, &header) ||
		(errors.As(err, &firstEOF) && strings.Contains(firstEOF.Error(), "after a dial")) ||
		(errors.Is(err, syscall.ECONNRESET) && strings.Contains(text, "unable to dial"))): // a plain dial reads nothing: the reset is the handshake's
		return ErrTLSMismatch, fmt.Sprintf("tls is enabled but %s closed the connection during the tls handshake: its listener does not speak tls (PLAINTEXT or SASL_PLAINTEXT); set tls.enabled: false or connect to the broker's SSL/SASL_SSL listener", at)

	case cfg.TLS == nil && (strings.Contains(text, "tls alert record") || (errors.As(err, &firstEOF) && strings.Contains(firstEOF.Error(), "requires TLS"))):
		return ErrTLSMismatch, fmt.Sprintf("tls is not enabled but %s speaks tls (an SSL or SASL_SSL listener): set tls.enabled: true", at)

	case len(cfg.SASL) == 0 && errors.As(err, &firstEOF) && strings.Contains(firstEOF.Error(), "SASL is required"):
		return ErrSASLMismatch, fmt.Sprintf("%s closed the connection after the first request: its listener requires sasl authentication (SASL_PLAINTEXT or SASL_SSL); set sasl", at)

	case cfg.TLS != nil && errors.As(err, &remote) && remote.Op == "remote error":
		return classifyAlert(remote.Err.Error(), cfg.TLS, at)

	case len(cfg.SASL) > 0 && !errors.As(err, &firstEOF) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		// franz-go returns the bare EOF of a connection closed while it
		// authenticates; a broker that is down refuses the dial instead.
		return ErrAuthentication, fmt.Sprintf("%s closed the connection instead of answering sasl authentication %s: the credentials are wrong or the listener does not enable the mechanism (brokers that do not report sasl errors, such as Kafka before 1.0, close the connection): check %s, %s and the listener's sasl.enabled.mechanisms",
			at, cfg.describeSASL(""), "sasl[].username", "sasl[].password")
	}
	return nil, ""
}

// TLS alerts a broker sends about the client's certificate, as Go's
// crypto/tls spells them after "remote error: ".
const (
	alertCertificateRequired = "tls: certificate required" // TLS 1.3 servers in Go: no certificate sent
	alertBadCertificate      = "tls: bad certificate"      // Kafka (Java): no certificate sent, or one it does not trust
	alertHandshakeFailure    = "tls: handshake failure"    // TLS 1.2 servers in Go: no certificate sent, among other causes
)

// rejectedCertAlerts are the alerts of a client certificate that was sent and
// refused.
var rejectedCertAlerts = map[string]bool{
	"tls: bad certificate":               true,
	"tls: unsupported certificate":       true,
	"tls: revoked certificate":           true,
	"tls: expired certificate":           true,
	"tls: unknown certificate":           true,
	"tls: unknown certificate authority": true,
	"tls: access denied":                 true,
}

// classifyAlert explains a TLS alert the broker sent during the handshake
// when it is about the client's certificate (mutual TLS).
func classifyAlert(alert string, c *tls.Config, at string) (kind error, why string) {
	haveCert := len(c.Certificates) > 0 || c.GetClientCertificate != nil
	switch {
	case (alert == alertCertificateRequired || alert == alertBadCertificate) && !haveCert:
		return ErrClientCertificate, fmt.Sprintf("tls: %s requires a client certificate (mutual tls: its listener has ssl.client.auth=required) and none is configured: set tls.client_certs to a certificate signed by a CA the broker trusts", at)
	case alert == alertCertificateRequired:
		// Go sends no certificate whose issuer the broker's list of
		// acceptable CAs leaves out.
		return ErrClientCertificate, fmt.Sprintf("tls: %s requires a client certificate and none of tls.client_certs is issued by a CA it accepts%s: set tls.client_certs to a certificate signed by a CA of the broker's ssl.truststore", at, clientCertNames(c))
	case rejectedCertAlerts[alert] && haveCert:
		return ErrClientCertificate, fmt.Sprintf("tls: %s rejected the client certificate of tls.client_certs (remote error: %s): the broker's ssl.truststore must trust the CA that signed it", at, alert)
	case alert == alertHandshakeFailure && !haveCert:
		return ErrClientCertificate, fmt.Sprintf("tls: %s ended the tls handshake (remote error: %s) and no client certificate is configured: if its listener requires one (mutual tls, ssl.client.auth=required), set tls.client_certs", at, alert)
	}
	return nil, ""
}

// clientCertNames describes the configured client certificates, e.g.
// ` (certificate "svc" issued by "my CA")`, or "" if none can be read.
func clientCertNames(c *tls.Config) string {
	var parts []string
	for _, cert := range c.Certificates {
		leaf := cert.Leaf
		if leaf == nil && len(cert.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(cert.Certificate[0])
		}
		if leaf != nil {
			parts = append(parts, fmt.Sprintf("certificate %q issued by %q", leaf.Subject.CommonName, leaf.Issuer.CommonName))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// explained is an error rewritten by Explain: its message explains, and it
// unwraps to a sentinel and to the original error.
type explained struct {
	kind error
	msg  string
	err  error
}

func (e *explained) Error() string   { return e.msg }
func (e *explained) Unwrap() []error { return []error{e.kind, e.err} }

// describeSASL names the mechanism and user that failed: the only entry, the
// entry whose mechanism the broker's message names, or else every entry.
func (c Config) describeSASL(brokerMessage string) string {
	switch {
	case len(c.SASL) == 0:
		return "(none configured)"
	case len(c.SASL) == 1:
		return "with mechanism " + c.SASL[0].String()
	}
	for _, s := range c.SASL {
		if strings.Contains(brokerMessage, "mechanism "+s.Mechanism) {
			return "with mechanism " + s.String()
		}
	}
	parts := make([]string, 0, len(c.SASL))
	for _, s := range c.SASL {
		parts = append(parts, s.String())
	}
	return "with one of the mechanisms " + strings.Join(parts, ", ")
}

// mechanismNames lists the configured mechanisms, e.g. `PLAIN, OAUTHBEARER`.
func (c Config) mechanismNames() string {
	names := make([]string, 0, len(c.SASL))
	for _, s := range c.SASL {
		names = append(names, s.Mechanism)
	}
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// brokerNames names the seed brokers in an explanation.
func brokerNames(seeds []string) string {
	switch len(seeds) {
	case 0:
		return "the broker"
	case 1:
		return "broker " + seeds[0]
	default:
		return "seed brokers " + strings.Join(seeds, ", ")
	}
}

// certNames lists the names a certificate is valid for.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "no name"
	}
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return fmt.Sprintf("no subject alternative name (common name %q)", c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}
