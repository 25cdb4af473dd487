package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestVersionString(t *testing.T) {
	benthos := &debug.Module{Path: benthosModule, Version: "v4.60.0"}
	tests := []struct {
		name    string
		stamped string
		info    *debug.BuildInfo
		want    string
	}{
		{
			name: "module version from the build info",
			info: &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}, Deps: []*debug.Module{{Path: "github.com/twmb/franz-go", Version: "v1.22.3"}, benthos}},
			want: "v0.4.0 (benthos v4.60.0)",
		},
		{
			name:    "stamped version wins",
			stamped: "v1.2.3",
			info:    &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}, Deps: []*debug.Module{benthos}},
			want:    "v1.2.3 (benthos v4.60.0)",
		},
		{
			name: "devel build",
			info: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: []*debug.Module{benthos}},
			want: "(devel) (benthos v4.60.0)",
		},
		{
			name: "replaced benthos",
			info: &debug.BuildInfo{Deps: []*debug.Module{{Path: benthosModule, Version: "v4.60.0", Replace: &debug.Module{Path: "../benthos", Version: "v4.61.0-rc1"}}}},
			want: "(devel) (benthos v4.61.0-rc1)",
		},
		{
			name: "no build info",
			want: "(devel) (benthos unknown)",
		},
	}
	for _, tc := range tests {
		got := versionString(tc.stamped, tc.info)
		assert.Equal(t, tc.want, got, "%s: versionString(%q, ...) = %q, want %q", tc.name, tc.stamped, got, tc.want)
	}

	// The test binary is built from this module: its own info names Benthos.
	assert.Contains(t, versionString("", buildInfo()), "(benthos v4.", "versionString of the running test binary")
}

func TestBuildDate(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}}}
	assert.Equal(t, "2026-01-02", buildDate("2026-01-02", info), "stamped date wins")
	assert.Equal(t, "2026-11-30T10:00:00Z", buildDate("", info), "vcs.time")
	assert.Equal(t, "unknown", buildDate("", &debug.BuildInfo{}), "no vcs.time")
	assert.Equal(t, "unknown", buildDate("", nil), "no build info")
}
