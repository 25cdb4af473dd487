package security

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// DefaultConnectTimeout bounds a dial when TCP.ConnectTimeout is zero:
// franz-go's default dial timeout.
const DefaultConnectTimeout = 10 * time.Second

// TCP is how connections to brokers are dialed. ConnectTimeout bounds each
// dial, the TLS handshake included (zero: DefaultConnectTimeout); KeepAlive
// sets the TCP keep-alive probes of each connection (net.Dialer's
// KeepAliveConfig; its zero values are Go's defaults, 15s, 15s and 9
// probes on Linux).
type TCP struct {
	ConnectTimeout time.Duration
	KeepAlive      net.KeepAliveConfig
}

// dial returns the function franz-go dials brokers with (kgo.Dialer): a
// net.Dialer with c's TCP settings, and over it, if c.TLS is set, a TLS
// client verifying the host dialed unless TLS.ServerName is set, as
// kgo.DialTLSConfig does.
func (c Config) dial() func(ctx context.Context, network, host string) (net.Conn, error) {
	d := &net.Dialer{Timeout: c.TCP.ConnectTimeout, KeepAliveConfig: c.TCP.KeepAlive}
	if d.Timeout <= 0 {
		d.Timeout = DefaultConnectTimeout
	}
	if c.TLS == nil {
		return d.DialContext
	}
	base := c.TLS.Clone()
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		conf := base.Clone()
		if conf.ServerName == "" {
			server, _, err := net.SplitHostPort(host)
			if err != nil {
				return nil, fmt.Errorf("unable to split host:port for dialing: %w", err)
			}
			conf.ServerName = server
		}
		return (&tls.Dialer{NetDialer: d, Config: conf}).DialContext(ctx, network, host)
	}
}
