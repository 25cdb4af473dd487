package security

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanism names, as Kafka's sasl.mechanism spells them.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
)

// Mechanisms returns the SASL mechanisms this package supports, in the order
// they are documented.
func Mechanisms() []string {
	return []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512, MechanismOAuthBearer, MechanismAWSMSKIAM}
}

// SASL is one SASL mechanism and its credentials. PLAIN and SCRAM use
// Username and Password; OAUTHBEARER uses Token, a static bearer token;
// AWS_MSK_IAM uses AWS (aws.go).
type SASL struct {
	Mechanism string
	Username  string
	Password  string // secret: never printed
	Token     string // secret: never printed
	// Extensions are OAUTHBEARER's SASL extensions (RFC 7628), sent as
	// key=value pairs after the token, e.g. Confluent Cloud's
	// logicalCluster and identityPoolId.
	Extensions map[string]string
	AWS        AWS
}

var (
	// extensionKeyPattern is an OAUTHBEARER extension key (RFC 7628: key =
	// 1*(ALPHA)).
	extensionKeyPattern = regexp.MustCompile(`^[A-Za-z]+$`)
	// extensionValuePattern is an extension value: printable ASCII, space,
	// tab and line breaks.
	extensionValuePattern = regexp.MustCompile(`^[\x21-\x7E \t\r\n]*$`)
)

// validateExtensions returns the errors of s's extensions.
func (s SASL) validateExtensions(field func(string) string) []error {
	if len(s.Extensions) == 0 {
		return nil
	}
	if s.Mechanism != MechanismOAuthBearer {
		return []error{fmt.Errorf("%s is only used by mechanism %s, not %s", field("extensions"), MechanismOAuthBearer, s.Mechanism)}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(s.Extensions)) {
		switch {
		case k == "auth":
			errs = append(errs, fmt.Errorf("%s: key %q is reserved (it carries the token)", field("extensions"), k))
		case !extensionKeyPattern.MatchString(k):
			errs = append(errs, fmt.Errorf("%s: key %q must be letters only (RFC 7628)", field("extensions"), k))
		case !extensionValuePattern.MatchString(s.Extensions[k]):
			// The value may be a secret: it is not quoted.
			errs = append(errs, fmt.Errorf("%s.%s: the value must be printable ASCII, spaces, tabs or line breaks (RFC 7628)", field("extensions"), k))
		}
	}
	return errs
}

// String describes the entry without its secrets, e.g. `SCRAM-SHA-256 as
// user "alice"`.
func (s SASL) String() string {
	if s.Mechanism == MechanismOAuthBearer {
		return s.Mechanism + " with a bearer token"
	}
	if s.Mechanism == MechanismAWSMSKIAM {
		return s.Mechanism + " " + s.AWS.String()
	}
	return fmt.Sprintf("%s as user %q", s.Mechanism, s.Username)
}

// Config is how every Kafka client connects: over TLS when TLS is not nil,
// and authenticated with the first mechanism of SASL the broker enables
// (franz-go tries them in order) when SASL is not empty. The zero Config is
// plaintext without authentication.
type Config struct {
	TLS  *tls.Config
	SASL []SASL
	TCP  TCP // how connections are dialed (tcp.go); zero: franz-go's dialer
}

// Validate checks every SASL entry: a known mechanism, a username and a
// password for PLAIN and SCRAM, a token for OAUTHBEARER, a region and TLS for
// AWS_MSK_IAM (validateAWS, TLSRequired). Errors name the
// field as the config spells it (`sasl[0].password is required for mechanism
// SCRAM-SHA-256`) and never hold a secret.
func (c Config) Validate() error {
	errs := c.validateSASL()
	if c.TLS == nil {
		errs = append(errs, c.TLSRequired()...)
	}
	return errors.Join(errs...)
}

// ValidateSASL is Validate without the rules that need TLS (TLSRequired):
// what the sasl entries alone say.
func (c Config) ValidateSASL() error { return errors.Join(c.validateSASL()...) }

// TLSRequired returns, whether TLS is set or not, an error for each SASL
// entry whose mechanism needs TLS (AWS_MSK_IAM).
func (c Config) TLSRequired() []error {
	var errs []error
	for i, s := range c.SASL {
		if s.Mechanism == MechanismAWSMSKIAM {
			errs = append(errs, fmt.Errorf("sasl[%d].mechanism %s requires tls.enabled: true (MSK serves IAM authentication on its TLS listener only, port 9098)", i, MechanismAWSMSKIAM))
		}
	}
	return errs
}

func (c Config) validateSASL() []error {
	var errs []error
	for i, s := range c.SASL {
		field := func(name string) string { return fmt.Sprintf("sasl[%d].%s", i, name) }
		switch s.Mechanism {
		case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
			if s.Username == "" {
				errs = append(errs, fmt.Errorf("%s is required for mechanism %s", field("username"), s.Mechanism))
			}
			if s.Password == "" {
				errs = append(errs, fmt.Errorf("%s is required for mechanism %s", field("password"), s.Mechanism))
			}
			if s.Token != "" {
				errs = append(errs, fmt.Errorf("%s is only used by mechanism %s, not %s", field("token"), MechanismOAuthBearer, s.Mechanism))
			}
		case MechanismOAuthBearer:
			if s.Token == "" {
				errs = append(errs, fmt.Errorf("%s is required for mechanism %s", field("token"), s.Mechanism))
			}
			if s.Username != "" || s.Password != "" {
				errs = append(errs, fmt.Errorf("%s and %s are not used by mechanism %s (the token names the principal)", field("username"), field("password"), s.Mechanism))
			}
		case MechanismAWSMSKIAM: // validateAWS
		default:
			errs = append(errs, fmt.Errorf("%s must be one of %s, got %q: %w", field("mechanism"), strings.Join(Mechanisms(), ", "), s.Mechanism, ErrUnknownMechanism))
		}
		errs = append(errs, s.validateAWS(field)...)
		errs = append(errs, s.validateExtensions(field)...)
	}
	return errs
}

// Opts returns the franz-go options that make a client connect as c
// describes: kgo.Dialer with c's TCP settings (and TLS over them) when TCP
// is set, else kgo.DialTLSConfig with a clone of TLS; and kgo.SASL with one
// mechanism per entry. A client built without them connects in plaintext
// without authentication. An entry that Validate rejects becomes a mechanism
// that fails every authentication with ErrUnknownMechanism.
func (c Config) Opts() []kgo.Opt {
	var opts []kgo.Opt
	switch {
	case c.TCP != (TCP{}):
		opts = append(opts, kgo.Dialer(c.dial()))
	case c.TLS != nil:
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if len(c.SASL) > 0 {
		mechs := make([]sasl.Mechanism, 0, len(c.SASL))
		for _, s := range c.SASL {
			mechs = append(mechs, s.mechanism())
		}
		opts = append(opts, kgo.SASL(mechs...))
	}
	return opts
}

// Warnings returns one sentence per setting of c that exposes credentials or
// the connection, naming the field: PLAIN or OAUTHBEARER without TLS (the
// password or token crosses the network in clear) and skip_cert_verify. The
// input logs them once when it starts.
func (c Config) Warnings() []string {
	var warns []string
	if c.TLS == nil {
		for i, s := range c.SASL {
			switch s.Mechanism {
			case MechanismPlain:
				warns = append(warns, fmt.Sprintf("sasl[%d] uses mechanism %s without tls: the password crosses the network in clear; enable tls (a SASL_SSL listener) or use %s", i, s.Mechanism, MechanismScramSHA512))
			case MechanismOAuthBearer:
				warns = append(warns, fmt.Sprintf("sasl[%d] uses mechanism %s without tls: the token crosses the network in clear; enable tls (a SASL_SSL listener)", i, s.Mechanism))
			}
		}
	}
	if c.TLS != nil && c.TLS.InsecureSkipVerify {
		warns = append(warns, "tls.skip_cert_verify is true: the brokers' certificates are not verified, so anyone on the network path can pose as a broker (and read what is sent to it, credentials included); trust the brokers' CA with tls.root_cas or tls.root_cas_file instead")
	}
	return warns
}

// mechanism returns the franz-go mechanism of s. Its errors hold no secret:
// franz-go's PLAIN and OAUTHBEARER errors name the mechanism or hold the
// broker's message only, and SCRAM's are rewritten by scramMechanism where
// they would hold a value derived from the password.
func (s SASL) mechanism() sasl.Mechanism {
	switch s.Mechanism {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case MechanismScramSHA256:
		return scramMechanism{scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), s.Username}
	case MechanismScramSHA512:
		return scramMechanism{scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), s.Username}
	case MechanismOAuthBearer:
		return oauth.Auth{Token: s.Token, Extensions: s.Extensions}.AsMechanism()
	case MechanismAWSMSKIAM:
		return s.AWS.mechanism()
	default:
		return unknownMechanism(s.Mechanism)
	}
}

// scramMechanism is franz-go's SCRAM mechanism with one error rewritten:
// when the broker's final message fails verification, franz-go's error
// holds the server signature the password produces, from which the password
// can be guessed offline; this one says what failed without it.
type scramMechanism struct {
	sasl.Mechanism
	user string
}

func (m scramMechanism) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	sess, first, err := m.Mechanism.Authenticate(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	return scramSession{sess, m}, first, nil
}

type scramSession struct {
	sasl.Session
	m scramMechanism
}

func (s scramSession) Challenge(resp []byte) (bool, []byte, error) {
	done, next, err := s.Session.Challenge(resp)
	if err != nil && strings.HasPrefix(err.Error(), "server signature mismatch") {
		err = fmt.Errorf("%s as user %q: the broker's final message does not prove that it knows the password (server signature mismatch): is it the broker it claims to be?", s.m.Name(), s.m.user)
	}
	return done, next, err
}

// unknownMechanism is the mechanism of an entry Validate rejects: it fails
// rather than connecting some other way.
type unknownMechanism string

func (m unknownMechanism) Name() string { return string(m) }

func (m unknownMechanism) Authenticate(context.Context, string) (sasl.Session, []byte, error) {
	return nil, nil, fmt.Errorf("sasl mechanism %q: %w", string(m), ErrUnknownMechanism)
}
