package plugin

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

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
	fieldSASLExtensions = "extensions"
	fieldTLSEnabledPath = fieldTLS + ".enabled"

	fieldTCP               = "tcp"
	fieldTCPConnectTimeout = fieldTCP + ".connect_timeout"
	fieldTCPIdle           = fieldTCP + ".keep_alive.idle"
	fieldTCPInterval       = fieldTCP + ".keep_alive.interval"
	fieldTCPCount          = fieldTCP + ".keep_alive.count"
)

// securityFields returns the spec fields of TLS and SASL.
func securityFields() []*service.ConfigField {
	return []*service.ConfigField{
		tcpField(),
		service.NewTLSToggledField(fieldTLS).
			Description("TLS for every connection to Kafka (the SSL and SASL_SSL security protocols; a Go `tls.Dialer` over the `tcp` settings, as franz-go `kgo.DialTLSConfig` dials). With `enabled: false` (the default) connections are plaintext. Brokers are verified against the system's root certificates, or `root_cas` / `root_cas_file` if set, and by the host name of the address dialed unless `tls_server_name` is set; `client_certs` are presented for mutual TLS (Kafka `ssl.client.auth`)."),
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
				security.MechanismAWSMSKIAM:   "Amazon MSK IAM access control (franz-go `sasl/aws`): each connection signs `kafka-cluster:Connect` with AWS credentials (SigV4) from `aws`; needs `aws.region` and `tls.enabled: true` (MSK's IAM listener, port 9098).",
			}).
				LintRule(""). // the rule of sasl checks it, naming the entry
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
			service.NewStringMapField(fieldSASLExtensions).
				Description("SASL extensions sent with the `OAUTHBEARER` token (RFC 7628, franz-go `oauth.Auth.Extensions`), as `key: value`; keys are letters only, `auth` excepted, e.g. Confluent Cloud's `logicalCluster` and `identityPoolId`. Unused by the other mechanisms.").
				Example(map[string]any{"logicalCluster": "lkc-abc123", "identityPoolId": "pool-xyz"}).
				Optional(),
			awsField(),
		).
			LintRule(fieldLint(fieldSASL)).
			Description("SASL authentication of every connection (the SASL_PLAINTEXT and SASL_SSL security protocols; franz-go `kgo.SASL`). Empty (the default): no authentication. With several entries each connection uses the first mechanism the broker enables.").
			Example([]any{map[string]any{"mechanism": security.MechanismScramSHA512, "username": "${KAFKA_USER}", "password": "${KAFKA_PASSWORD}"}}).
			Example([]any{map[string]any{"mechanism": security.MechanismOAuthBearer, "token": "${KAFKA_TOKEN}"}}).
			Example([]any{map[string]any{"mechanism": security.MechanismAWSMSKIAM, "aws": map[string]any{"region": "us-east-1"}}}).
			Default([]any{}),
	}
}

// tcpField is the spec field of how connections are dialed, as Redpanda
// Connect's kafka_franz names it.
func tcpField() *service.ConfigField {
	return service.NewObjectField(fieldTCP,
		service.NewDurationField("connect_timeout").
			LintRule(fieldLint(fieldTCPConnectTimeout)).
			Description("How long a dial to a broker may take, TCP connect and TLS handshake included (Go `net.Dialer.Timeout`, through franz-go `kgo.Dialer`); an unreachable broker is then retried like any connection error. `0s` is franz-go's default, 10s.").
			Default(security.DefaultConnectTimeout.String()),
		service.NewObjectField("keep_alive",
			service.NewDurationField("idle").
				LintRule(fieldLint(fieldTCPIdle)).
				Description("How long a connection is idle before the first keep-alive probe (Linux `TCP_KEEPIDLE`, Go `net.KeepAliveConfig.Idle`).").
				Default("15s"),
			service.NewDurationField("interval").
				LintRule(fieldLint(fieldTCPInterval)).
				Description("The time between keep-alive probes (Linux `TCP_KEEPINTVL`).").
				Default("15s"),
			service.NewAnyField("count").
				LintRule(fieldLint(fieldTCPCount)).
				Description("How many unanswered probes close the connection (Linux `TCP_KEEPCNT`), an integer: with the defaults a dead peer is noticed after about 15s + 9 x 15s.").
				Default(9),
		).Description("TCP keep-alive of every connection, which notices a broker or network path that died without closing it."),
		foreignSpecField(strings.TrimPrefix(fieldTCPUserTimeout, fieldTCP+"."), fieldTCPUserTimeout),
	).
		Description("How every connection to the brokers is dialed: the connect timeout and TCP keep-alive (Go `net.Dialer`, franz-go `kgo.Dialer`).").
		Advanced()
}

// parseTCP reads the tcp block, of a config that passed checkRules.
func parseTCP(pc *service.ParsedConfig) (security.TCP, error) {
	var errs []error
	dur := func(path string) time.Duration {
		d, err := pc.FieldDuration(strings.Split(path, ".")...)
		errs = append(errs, err)
		return d
	}
	t := security.TCP{ConnectTimeout: dur(fieldTCPConnectTimeout)}
	t.KeepAlive = net.KeepAliveConfig{Enable: true, Idle: dur(fieldTCPIdle), Interval: dur(fieldTCPInterval)}
	v, err := pc.FieldAny(strings.Split(fieldTCPCount, ".")...)
	if err == nil {
		t.KeepAlive.Count, err = parseInteger(fieldTCPCount, v)
	}
	errs = append(errs, err)
	return t, errors.Join(errs...)
}

// parseSecurity reads the TLS and SASL fields into a security.Config, of a
// config that passed checkRules (which checks them with
// security.Config.Validate and serverNeedsTLS).
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
		aws, err := parseAWS(e, i)
		if err != nil {
			errs = append(errs, err)
		}
		var ext map[string]string
		if e.Contains(fieldSASLExtensions) {
			if ext, err = e.FieldStringMap(fieldSASLExtensions); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d].%s: %w", fieldSASL, i, fieldSASLExtensions, err))
			}
		}
		if len(ext) == 0 {
			ext = nil
		}
		c.SASL = append(c.SASL, security.SASL{
			Mechanism:  strings.TrimSpace(str(fieldSASLMechanism)),
			Username:   str(fieldSASLUsername),
			Password:   str(fieldSASLPassword),
			Token:      str(fieldSASLToken),
			Extensions: ext,
			AWS:        aws,
		})
	}
	c.TCP, err = parseTCP(pc)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return security.Config{}, err
	}
	return c, nil
}

// checkSASL is the rule of sasl: security.Config.Validate on its entries.
func checkSASL(name string, v any) []error {
	if objectWritten(v) {
		return []error{fmt.Errorf("%s must be a list of mechanisms, each an object: %s: [ { mechanism: PLAIN, username: ..., password: ... } ] (the old kafka input's %s object, with user, is one entry here, with username)", name, name, name)}
	}
	c, ok := saslConfig(v)
	if !ok {
		return nil
	}
	// TLS is another field. tlsNeeded reports what needs it.
	return unjoin(c.ValidateSASL())
}

// objectWritten reports whether the sasl value v was written as one object
// (the old kafka input's sasl: mechanism, user, password) where a list is
// expected. Benthos hands the lint one entry per key and per value of the
// mapping, each with the defaults and none with a mechanism (a list
// written with entries that all lack one has a single entry, or one the
// checks name). Before, it gave one invented "sasl[i].mechanism" error per
// key and value.
func objectWritten(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) < 2 || len(list)%2 != 0 {
		return false
	}
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return true
		}
		if _, named := m[fieldSASLMechanism]; named {
			return false
		}
	}
	return true
}

// saslConfig reads the sasl entries as written (v) into a security.Config
// without TLS.
func saslConfig(v any) (security.Config, bool) {
	list, ok := v.([]any)
	if !ok {
		return security.Config{}, false
	}
	var c security.Config
	for _, e := range list {
		m, _ := e.(map[string]any)
		str := func(k string) string { s, _ := scalarText(m[k]); return s }
		aws, _ := m[fieldSASLAWS].(map[string]any)
		creds, _ := aws[fieldAWSCredentials].(map[string]any)
		sub := func(m map[string]any, k string) string { s, _ := scalarText(m[k]); return s }
		var ext map[string]string
		if em, ok := m[fieldSASLExtensions].(map[string]any); ok && len(em) > 0 {
			ext = map[string]string{}
			for k := range em {
				ext[k] = sub(em, k)
			}
		}
		c.SASL = append(c.SASL, security.SASL{
			Mechanism:  strings.TrimSpace(str(fieldSASLMechanism)),
			Username:   str(fieldSASLUsername),
			Password:   str(fieldSASLPassword),
			Token:      str(fieldSASLToken),
			Extensions: ext,
			AWS: security.AWS{
				Region:          sub(aws, fieldAWSRegion),
				AccessKeyID:     sub(creds, fieldAWSID),
				SecretAccessKey: sub(creds, fieldAWSSecret),
				SessionToken:    sub(creds, fieldAWSToken),
				RoleARN:         sub(creds, fieldAWSRole),
				RoleExternalID:  sub(creds, fieldAWSExternalID),
				Profile:         sub(creds, fieldAWSProfile),
				Endpoint:        sub(aws, fieldAWSEndpoint),
				FromEC2Role:     creds[fieldAWSFromEC2Role] == true,
			},
		})
	}
	return c, true
}

// tlsNeeded: a sasl mechanism that needs TLS (AWS_MSK_IAM) without
// tls.enabled (security.Config.TLSRequired).
func tlsNeeded(pc *service.ParsedConfig) []error {
	if enabled, _ := pc.FieldBool(fieldTLS, "enabled"); enabled || !pc.Contains(fieldSASL) {
		return nil
	}
	v, err := pc.FieldAny(fieldSASL)
	if err != nil {
		return nil
	}
	c, _ := saslConfig(v)
	return c.TLSRequired()
}

// unjoin splits an errors.Join error into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return one(err)
}

// serverNeedsTLS: tls_server_name is a TLS setting.
func serverNeedsTLS(pc *service.ParsedConfig) []error {
	enabled, _ := pc.FieldBool(fieldTLS, "enabled")
	if text(pc, fieldTLSServerName) != "" && !enabled {
		return one(fmt.Errorf("%s requires %s: true", fieldTLSServerName, fieldTLSEnabledPath))
	}
	return nil
}

// warnInsecure logs, once when the input is built, each setting of c that
// exposes credentials or the connection (security.Config.Warnings).
func warnInsecure(log *service.Logger, c security.Config) {
	for _, w := range c.Warnings() {
		log.Warnf("Insecure connection settings: %s", w)
	}
}
