package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func TestVersionString(t *testing.T) {
	benthos := &debug.Module{Path: benthosModule, Version: "v4.60.0"}
	tests := []struct {
		name           string
		stamped, input string
		info           *debug.BuildInfo
		want           string
	}{
		{
			name:  "the input's version, from the build info",
			input: "v0.4.0",
			info:  &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}, Deps: []*debug.Module{{Path: "github.com/twmb/franz-go", Version: "v1.22.3"}, benthos}},
			want:  "v0.4.0 (kafka_batched_ranges v0.4.0, benthos v4.60.0)",
		},
		{
			name:    "stamped version wins",
			stamped: "v1.2.3",
			input:   "v1.2.3",
			info:    &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}, Deps: []*debug.Module{benthos}},
			want:    "v1.2.3 (kafka_batched_ranges v1.2.3, benthos v4.60.0)",
		},
		{
			name:  "devel build",
			input: "v0.1.0-devel",
			info:  &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: []*debug.Module{benthos}},
			want:  "v0.1.0-devel (kafka_batched_ranges v0.1.0-devel, benthos v4.60.0)",
		},
		{
			name:  "replaced benthos",
			input: "v0.1.0-devel",
			info:  &debug.BuildInfo{Deps: []*debug.Module{{Path: benthosModule, Version: "v4.60.0", Replace: &debug.Module{Path: "../benthos", Version: "v4.61.0-rc1"}}}},
			want:  "v0.1.0-devel (kafka_batched_ranges v0.1.0-devel, benthos v4.61.0-rc1)",
		},
		{
			name:  "no build info",
			input: "v0.1.0-devel",
			want:  "v0.1.0-devel (kafka_batched_ranges v0.1.0-devel, benthos unknown)",
		},
	}
	for _, tc := range tests {
		got := versionString(tc.stamped, tc.input, tc.info)
		assert.Equal(t, tc.want, got, "%s: versionString(%q, %q, ...) = %q, want %q", tc.name, tc.stamped, tc.input, got, tc.want)
	}

	// The test binary is built from this module: its own info names Benthos, and the input's
	// version is plugin.Version.
	got := versionString("", plugin.Version, buildInfo())
	assert.Contains(t, got, "(kafka_batched_ranges "+plugin.Version+", benthos v4.", "versionString of the running test binary")
}

func TestBuildDate(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}}}
	assert.Equal(t, "2026-01-02", buildDate("2026-01-02", info), "stamped date wins")
	assert.Equal(t, "2026-11-30T10:00:00Z", buildDate("", info), "vcs.time")
	assert.Equal(t, "unknown", buildDate("", &debug.BuildInfo{}), "no vcs.time")
	assert.Equal(t, "unknown", buildDate("", nil), "no build info")
}
