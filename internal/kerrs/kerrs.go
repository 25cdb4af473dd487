// Package kerrs holds the one list of Kafka errors that retrying cannot fix
// whatever the request: refusals of access, by the cluster's ACLs
// (authorisation) or at the connection (SASL authentication). Every
// classifier of permanent errors consults it, and adds only the errors of
// its own requests:
//
//   - cache.Permanent (internal/cache): and data that no longer exists, a
//     truncated log, a recreated or unknown topic or partition, a corrupt
//     batch, a bug of the cache;
//   - the engine's permanent (internal/engine): and the cache's, and
//     CORRUPT_MESSAGE;
//   - the share reader's permanent (internal/share): and UNSUPPORTED_VERSION,
//     INVALID_GROUP_ID and INVALID_REQUEST of the share requests.
//
// Which setting to change for a SASL or TLS failure is internal/security's
// Explain; this package only says that retrying is pointless.
package kerrs

import (
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// denied are the broker answers that mean the client's credentials or the
// cluster's ACLs do not allow the request. A client with the same
// credentials gets the same answer on every retry.
var denied = []error{
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.SaslAuthenticationFailed, // wrong password, unknown user, expired token
	kerr.UnsupportedSaslMechanism, // the listener does not enable the mechanism
	kerr.IllegalSaslState,         // SASL configured, the listener does not use it
}

// Denied reports whether err is, or wraps, a refusal of access:
// authorisation (topic, cluster, group) or SASL authentication.
func Denied(err error) bool {
	return err != nil && isAny(err, denied)
}

// Permanent reports whether retrying cannot fix err: it is Denied, or is or
// wraps one of more, the permanent errors of the caller's own requests.
// Context errors are not permanent: the caller stopped.
func Permanent(err error, more ...error) bool {
	return Denied(err) || (err != nil && isAny(err, more))
}

// DeniedErrors returns the refusals Denied reports, for a test that checks
// a classifier consults them.
func DeniedErrors() []error { return slices.Clone(denied) }

func isAny(err error, targets []error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
