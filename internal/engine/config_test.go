package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigValidateFetch checks the engine's own checks of the fetch
// settings: zero takes the default, a negative value or a minimum above the
// maximum is the caller's mistake.
func TestConfigValidateFetch(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" for valid
	}{
		{name: "zero values take the defaults", mod: func(*Config) {}},
		{name: "set", mod: func(c *Config) {
			c.Fetch.MaxWait, c.Fetch.MinBytes, c.Fetch.MaxBytes, c.Fetch.RackID = time.Second, 1000, 1000, "r1"
		}},
		{name: "min bytes with default max bytes", mod: func(c *Config) { c.Fetch.MinBytes = 1 << 30 }},
		{name: "negative wait", mod: func(c *Config) { c.Fetch.MaxWait = -time.Millisecond }, wantErr: "fetch max wait must be >= 0 (0 means 500ms), got -1ms"},
		{name: "negative min bytes", mod: func(c *Config) { c.Fetch.MinBytes = -1 }, wantErr: "fetch min bytes must be >= 0 (0 means 1), got -1"},
		{name: "min above max bytes", mod: func(c *Config) { c.Fetch.MinBytes, c.Fetch.MaxBytes = 1001, 1000 }, wantErr: "fetch min bytes (1001) must not exceed fetch max bytes (1000)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Seeds: []string{"a:1"}, Topics: []TopicSpec{{Name: "t"}}, MaxRangeRecords: 1, MaxInFlight: 1, PollInterval: time.Second}
			tc.mod(&cfg)
			_, err := New(cfg)
			if tc.wantErr == "" {
				assert.NoError(t, err, "New(%+v)", cfg)
				return
			}
			require.Error(t, err, "New(%+v)", cfg)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
