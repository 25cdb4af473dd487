package plugin

import "github.com/twmb/franz-go/pkg/kgo"

// ClientOpts returns the franz-go options that every Kafka client of the
// input uses: the admin and metadata client, the committing client and every
// cached partition client. Connection settings (client ID, TLS, SASL) are
// built here and nowhere else.
func (c Config) ClientOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.ClientID(c.ClientID)}, c.Security.Opts()...)
}
