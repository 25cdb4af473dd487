// Package security turns a plain description of how to reach a secured Kafka
// cluster (TLS and SASL) into franz-go client options, and failures to
// connect or authenticate into errors that say what went wrong and what to
// change.
//
// A [Config] is built once from the input's configuration and its [Config.Opts]
// are appended to every Kafka client the input opens, so the admin client, the
// committing client and every cached partition client connect the same way.
// [Config.Validate] checks it up front with errors naming the field, and
// [Explain] rewrites the error of a failed connection attempt: it names the
// SASL mechanism and user on an authentication failure, the broker and the
// verification failure on an untrusted certificate, the missing or rejected
// client certificate of mutual TLS, and which side speaks TLS on a
// TLS/plaintext mismatch. Passwords and tokens never appear in an error: the
// explanations are built from mechanisms, users and brokers, never by
// removing a secret from a message. [Config.Warnings] names the settings
// that expose credentials (PLAIN without TLS, skip_cert_verify).
//
// The package uses franz-go's own SASL mechanisms (pkg/sasl/plain,
// pkg/sasl/scram, pkg/sasl/oauth, pkg/sasl/aws) and dials brokers itself
// (tcp.go: a net.Dialer with the connect timeout and keep-alive of [TCP],
// TLS over it as kgo.DialTLSConfig would), through kgo.Dialer. For
// AWS_MSK_IAM (aws.go) it takes credentials from the AWS SDK for Go v2: the
// default chain of its config loader, STS for a role, and its credentials
// cache, asked at every authentication so credentials are replaced before
// they expire.
package security
