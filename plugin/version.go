package plugin

import "runtime/debug"

// Version is the version of this input a program carries: `connect
// --version` shows it, and each input logs it when it is built, so an
// embedding program (a Benthos or Redpanda Connect build of one's own)
// says which version it runs. Builds stamp it, as make build, make release
// and the Dockerfile do:
//
//	go build -ldflags "-X github.com/kbr/kafka_batched_ranges/plugin.Version=v0.1.0" ...
//
// Unstamped, it is set at init from the program's build info
// (moduleVersion). The version of this module a program was built with,
// or of the main module when it is this one, or else the VERSION file's
// with -devel (a build from a checkout: v0.1.0-devel).
var Version string

// modulePath is this project's module path.
const modulePath = "github.com/kbr/kafka_batched_ranges"

// sourceVersion is the version in the VERSION file, the version the
// sources are of (TestSourceVersionIsTheVersionFile keeps them equal).
const sourceVersion = "v0.1.0"

func init() {
	if Version == "" {
		info, _ := debug.ReadBuildInfo()
		Version = moduleVersion(info)
	}
}

// moduleVersion returns the version of this module in info: the
// dependency's (its replacement's if that has a version), or the main
// module's when it is this one. sourceVersion with -devel when neither
// has a version (a build from a checkout, a replacement by a directory)
// or info is nil.
func moduleVersion(info *debug.BuildInfo) string {
	if info != nil {
		if info.Main.Path == modulePath && released(info.Main.Version) {
			return info.Main.Version
		}
		for _, m := range info.Deps {
			if m.Path != modulePath {
				continue
			}
			if m.Replace != nil {
				if released(m.Replace.Version) {
					return m.Replace.Version
				}
				break // a directory: the sources of a checkout
			}
			if released(m.Version) {
				return m.Version
			}
		}
	}
	return sourceVersion + "-devel"
}

// released reports whether v names a version of the module (not the "(devel)"
// of a build from a checkout).
func released(v string) bool { return v != "" && v != "(devel)" }
