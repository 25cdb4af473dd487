package main

import (
	"runtime/debug"
)

// Build stamps, set with -ldflags "-X main.version=v1.2.3 -X main.dateBuilt=2026-01-02T03:04:05Z"
// (make build also stamps plugin.Version, the input's). Empty: taken from
// the input's version and the build info.
var (
	version   string
	dateBuilt string
)

// benthosModule is the module path of Benthos, whose version is shown next
// to this project's.
const benthosModule = "github.com/redpanda-data/benthos/v4"

// versionString returns what `connect --version` and the /version endpoint
// show: this binary's version, then the versions of the kafka_batched_ranges
// input it carries and of Benthos it is built on, e.g. "v0.4.0
// (kafka_batched_ranges v0.4.0, benthos v4.60.0)". The binary's version is
// stamped (main.version set by ldflags), or else the input's (input,
// plugin.Version: the same module, stamped too or read from the build info,
// v0.1.0-devel from a checkout). The Benthos version is the one in the
// build info's dependency list (its replacement's, if it is replaced), or
// "unknown".
func versionString(stamped, input string, info *debug.BuildInfo) string {
	own, benthos := stamped, ""
	if own == "" {
		own = input
	}
	if info != nil {
		for _, m := range info.Deps {
			if m.Path != benthosModule {
				continue
			}
			benthos = m.Version
			if m.Replace != nil && m.Replace.Version != "" {
				benthos = m.Replace.Version
			}
		}
	}
	if benthos == "" {
		benthos = "unknown"
	}
	return own + " (kafka_batched_ranges " + input + ", benthos " + benthos + ")"
}

// buildDate returns the stamped build date (main.dateBuilt), or else the
// commit time recorded in the build info (vcs.time), or "unknown".
func buildDate(stamped string, info *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if info != nil {
		for _, s := range info.Settings {
			if s.Key == "vcs.time" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// buildInfo returns the running binary's build info, nil if it has none.
func buildInfo() *debug.BuildInfo {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return info
}
