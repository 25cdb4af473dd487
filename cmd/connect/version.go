package main

import (
	"runtime/debug"
)

// Build stamps, set with -ldflags "-X main.version=v1.2.3 -X main.dateBuilt=2026-01-02T03:04:05Z".
// Empty: taken from the build info.
var (
	version   string
	dateBuilt string
)

// benthosModule is the module path of Benthos, whose version is shown next
// to this project's.
const benthosModule = "github.com/redpanda-data/benthos/v4"

// versionString returns what `connect --version` and the /version endpoint
// show: this project's version and the Benthos version it is built on, e.g.
// "v0.4.0 (benthos v4.60.0)". The project's version is stamped (main.version
// set by ldflags), or else the main module's version in the build info, or
// "(devel)". The Benthos version is the one in the build info's dependency
// list (its replacement's, if it is replaced), or "unknown".
func versionString(stamped string, info *debug.BuildInfo) string {
	own, benthos := stamped, ""
	if info != nil {
		if own == "" {
			own = info.Main.Version
		}
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
	if own == "" {
		own = "(devel)"
	}
	if benthos == "" {
		benthos = "unknown"
	}
	return own + " (benthos " + benthos + ")"
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
