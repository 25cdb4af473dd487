package plugin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// Field names of the connection security settings.
const (
	fieldTLS            = "tls"
	fieldTLSServerName  = "tls_server_name"
	fieldSASL           = "sasl"
	fieldSASLMechanism  = "mechanism"
	fieldSASLUsername   = "username"
	fieldSASLPassword   = "password"
	fieldSASLToken      = "token"
	fieldTLSEnabledPath = fieldTLS + ".enabled"
)

// securityLintRules are the lint rules of the TLS and SASL fields, items of
// the array that lintRule builds (so there is one spec lint rule); the same
// rules are checked in Go by parseSecurity and security.Config.Validate.
const securityLintRules = `
  if this.tls_server_name.or("") != "" && !this.tls.enabled.or(false) { "tls_server_name requires tls.enabled: true" },
].merge(this.sasl.or([]).enumerated().map_each(e -> [
  if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"].contains(e.value.mechanism.or("")) { "sasl[%v].mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, got %v".format(e.index, e.value.mechanism.or("").string().quote()) },
  if ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(e.value.mechanism.or("")) && e.value.username.or("") == "" { "sasl[%v].username is required for mechanism %v".format(e.index, e.value.mechanism) },
  if ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(e.value.mechanism.or("")) && e.value.password.or("") == "" { "sasl[%v].password is required for mechanism %v".format(e.index, e.value.mechanism) },
  if ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(e.value.mechanism.or("")) && e.value.token.or("") != "" { "sasl[%v].token is only used by mechanism OAUTHBEARER, not %v".format(e.index, e.value.mechanism) },
  if e.value.mechanism.or("") == "OAUTHBEARER" && e.value.token.or("") == "" { "sasl[%v].token is required for mechanism OAUTHBEARER".format(e.index) },
  if e.value.mechanism.or("") == "OAUTHBEARER" && (e.value.username.or("") != "" || e.value.password.or("") != "") { "sasl[%v].username and sasl[%v].password are not used by mechanism OAUTHBEARER (the token names the principal)".format(e.index, e.index) },
])).flatten()`

// securityFields returns the spec fields of TLS and SASL.
func securityFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewTLSToggledField(fieldTLS).
			Description("TLS for every connection to Kafka (the SSL and SASL_SSL security protocols; franz-go `kgo.DialTLSConfig`). With `enabled: false` (the default) connections are plaintext. Brokers are verified against the system's root certificates, or `root_cas` / `root_cas_file` if set, and by the host name of the address dialed unless `tls_server_name` is set; `client_certs` are presented for mutual TLS (Kafka `ssl.client.auth`)."),
		service.NewStringField(fieldTLSServerName).
			Description("The host name the brokers' certificates are verified against, and sent as TLS SNI, instead of the host of each address dialed (Go `tls.Config.ServerName`). Needed when brokers are dialed by IP address or through a proxy and their certificates name a DNS host. Empty: the host dialed. Requires `tls.enabled: true`.").
			Default("").
			Advanced(),
		service.NewObjectListField(fieldSASL,
			service.NewStringAnnotatedEnumField(fieldSASLMechanism, map[string]string{
				security.MechanismPlain:       "Username and password, sent as they are (Kafka `PLAIN`, franz-go `sasl/plain`); use it only with TLS.",
				security.MechanismScramSHA256: "Salted challenge-response with SHA-256 (Kafka `SCRAM-SHA-256`, franz-go `sasl/scram`); the password never crosses the wire.",
				security.MechanismScramSHA512: "Salted challenge-response with SHA-512 (Kafka `SCRAM-SHA-512`, franz-go `sasl/scram`).",
				security.MechanismOAuthBearer: "A static OAuth 2 bearer token, e.g. a JWT issued for this client (Kafka `OAUTHBEARER`, franz-go `sasl/oauth`); it is not refreshed, so the run must end before it expires.",
			}).
				Description("The SASL mechanism (Kafka `sasl.mechanism`); the broker's listener must enable it (`sasl.enabled.mechanisms`)."),
			service.NewStringField(fieldSASLUsername).
				Description("The user name for `PLAIN` and the SCRAM mechanisms (the principal `User:<username>` in Kafka ACLs). Unused by `OAUTHBEARER`.").
				Default(""),
			service.NewStringField(fieldSASLPassword).
				Description("The password for `PLAIN` and the SCRAM mechanisms. A secret: it is scrubbed from printed configs and never logged; take it from the environment, e.g. `${KAFKA_PASSWORD}`.").
				Default("").
				Secret(),
			service.NewStringField(fieldSASLToken).
				Description("The bearer token for `OAUTHBEARER`, sent as `auth=Bearer <token>`. A secret: it is scrubbed from printed configs and never logged; take it from the environment, e.g. `${KAFKA_TOKEN}`.").
				Default("").
				Secret(),
		).
			Description("SASL authentication of every connection (the SASL_PLAINTEXT and SASL_SSL security protocols; franz-go `kgo.SASL`). Empty (the default): no authentication. With several entries each connection uses the first mechanism the broker enables.").
			Example([]any{map[string]any{"mechanism": security.MechanismScramSHA512, "username": "${KAFKA_USER}", "password": "${KAFKA_PASSWORD}"}}).
			Example([]any{map[string]any{"mechanism": security.MechanismOAuthBearer, "token": "${KAFKA_TOKEN}"}}).
			Default([]any{}),
	}
}

// parseSecurity reads the TLS and SASL fields into a security.Config and
// checks them: the rules of securityLintRules, with errors naming the field
// and never a secret.
func parseSecurity(pc *service.ParsedConfig) (security.Config, error) {
	var c security.Config
	tlsConf, enabled, err := pc.FieldTLSToggled(fieldTLS)
	if err != nil {
		return c, fmt.Errorf("%s: %w", fieldTLS, err)
	}
	serverName, err := pc.FieldString(fieldTLSServerName)
	if err != nil {
		return c, err
	}
	if enabled {
		c.TLS = tlsConf
		c.TLS.ServerName = serverName
	} else if serverName != "" {
		return c, fmt.Errorf("%s %q requires %s: true", fieldTLSServerName, serverName, fieldTLSEnabledPath)
	}

	entries, err := pc.FieldObjectList(fieldSASL)
	if err != nil {
		return c, err
	}
	var errs []error
	for i, e := range entries {
		str := func(name string) string {
			v, err := e.FieldString(name)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d].%s: %w", fieldSASL, i, name, err))
			}
			return v
		}
		c.SASL = append(c.SASL, security.SASL{
			Mechanism: strings.TrimSpace(str(fieldSASLMechanism)),
			Username:  str(fieldSASLUsername),
			Password:  str(fieldSASLPassword),
			Token:     str(fieldSASLToken),
		})
	}
	if err := errors.Join(errs...); err != nil {
		return security.Config{}, err
	}
	if err := c.Validate(); err != nil {
		return security.Config{}, err
	}
	return c, nil
}

// warnInsecure logs, once when the input is built, each setting of c that
// exposes credentials or the connection (security.Config.Warnings).
func warnInsecure(log *service.Logger, c security.Config) {
	for _, w := range c.Warnings() {
		log.Warnf("Insecure connection settings: %s", w)
	}
}
