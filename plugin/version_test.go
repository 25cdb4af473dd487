package plugin

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestModuleVersion: the version an unstamped build carries comes from its build info: this
// module's version where a program depends on it (or its replacement's, when that has one),
// the main module's where this is the main module, else the VERSION file's with -devel (a build
// from a checkout, a directory replacement).
func TestModuleVersion(t *testing.T) {
	dev := sourceVersion + "-devel"
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"a program that requires it", &debug.BuildInfo{Main: debug.Module{Path: "example.com/myconnect", Version: "(devel)"}, Deps: []*debug.Module{{Path: modulePath, Version: "v0.3.1"}}}, "v0.3.1"},
		{"replaced by another version", &debug.BuildInfo{Main: debug.Module{Path: "example.com/myconnect"}, Deps: []*debug.Module{{Path: modulePath, Version: "v0.3.1", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.3.2"}}}}, "v0.3.2"},
		{"replaced by a directory", &debug.BuildInfo{Main: debug.Module{Path: "example.com/myconnect"}, Deps: []*debug.Module{{Path: modulePath, Version: "v0.0.0", Replace: &debug.Module{Path: "../kafka_batched_ranges"}}}}, dev},
		{"the main module, tagged", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.4.0"}}, "v0.4.0"},
		{"the main module, a checkout", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, dev},
		{"no build info", nil, dev},
	} {
		assert.Equal(t, tc.want, moduleVersion(tc.info), tc.name)
	}
	// The test binary is this module's, built from the checkout.
	assert.NotEmpty(t, Version)
}

// TestSourceVersionIsTheVersionFile: the version an unstamped build from the sources says is
// the VERSION file's.
func TestSourceVersionIsTheVersionFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "VERSION"))
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(b)), sourceVersion, "plugin.sourceVersion and VERSION")
}
