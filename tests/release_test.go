package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file check what the repository gives to deploy: `make build` stamps the
// version, `make release` builds archives with checksums that verify, and the Dockerfile is a
// multi-stage build of a static binary run by a user other than root, with the examples inside
// (docker is not run here: the file is checked as text).

// makeIn runs make with args in the repository root and returns its output.
func makeIn(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := contextTimeout(timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"-s"}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoErrorf(t, err, "make %v:\n%s", args, out)
	return string(out)
}

// TestMakeBuildStampsVersion: `make build` writes a binary whose --version is the version `make
// version` prints (a git tag v*, or else the VERSION file), never "(devel)".
func TestMakeBuildStampsVersion(t *testing.T) {
	t.Parallel()
	version := strings.TrimSpace(makeIn(t, time.Minute, "version"))
	require.Regexp(t, `^v\d+\.\d+\.\d+`, version, "make version")
	file, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	require.NoError(t, err)
	require.Regexp(t, `^v\d+\.\d+\.\d+\n?$`, string(file), "the VERSION file")

	bin := filepath.Join(t.TempDir(), "connect")
	makeIn(t, 10*time.Minute, "build", "BIN="+bin)
	res := runConnectBin(t, bin, "--version")
	assert.Contains(t, res, "Version: "+version+" (kafka_batched_ranges "+version+", benthos v4.", "connect --version of make build: the binary's and the input's version (plugin.Version) stamped")
	assert.NotContains(t, res, "(devel)")
	assert.NotContains(t, res, "-devel")
}

// runConnectBin runs bin with args and returns its output.
func runConnectBin(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoErrorf(t, err, "%s %v:\n%s", bin, args, out)
	return string(out)
}

// TestMakeRelease builds the release archive of one platform (the host's, linux/amd64 in CI:
// the others are the same build for another GOOS/GOARCH) with a given version: the archive holds
// the binary, README, LICENSE, CHANGELOG and the examples; SHA256SUMS verifies with sha256sum
// -c; the binary is static and prints the version.
func TestMakeRelease(t *testing.T) {
	t.Parallel()
	dist := t.TempDir()
	const version = "v9.8.7-test"
	makeIn(t, 15*time.Minute, "release", "PLATFORMS=linux/amd64", "DIST="+dist, "VERSION="+version)

	name := "kafka_batched_ranges_" + version + "_linux_amd64"
	entries, err := os.ReadDir(dist)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	require.ElementsMatch(t, []string{name + ".tar.gz", "SHA256SUMS"}, files, "make release's output")

	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}  `+regexp.QuoteMeta(name)+`\.tar\.gz\n$`, string(sums))
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dist
	out, err := check.CombinedOutput()
	require.NoErrorf(t, err, "sha256sum -c SHA256SUMS:\n%s", out)

	x := t.TempDir()
	out, err = exec.Command("tar", "-xzf", filepath.Join(dist, name+".tar.gz"), "-C", x).CombinedOutput()
	require.NoErrorf(t, err, "tar:\n%s", out)
	for _, f := range []string{"connect", "README.md", "LICENSE", "CHANGELOG.md", "examples/backfill.yaml", "examples/secure.yaml"} {
		assert.FileExistsf(t, filepath.Join(x, name, f), "%s in the archive", f)
	}
	bin := filepath.Join(x, name, "connect")
	assert.Contains(t, runConnectBin(t, bin, "--version"), "Version: "+version+" (kafka_batched_ranges "+version+", benthos v4.")
	out, err = exec.Command("go", "version", "-m", bin).CombinedOutput()
	require.NoErrorf(t, err, "go version -m:\n%s", out)
	assert.Contains(t, string(out), "CGO_ENABLED=0", "the release binary is not static")
	assert.Contains(t, string(out), "-trimpath=true", "the release binary holds build paths")
}

// TestDockerfile checks the Dockerfile as text: a build stage on the Go version of go.mod that
// builds a static binary (CGO_ENABLED=0) with the version stamped, and a final stage from another
// image that copies the binary and the examples from it, runs as a user other than root, and
// starts the binary. It was never built here (no docker daemon).
func TestDockerfile(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	type stage struct {
		from, name string
		lines      []string
	}
	var stages []*stage
	sc := bufio.NewScanner(f)
	fromRE := regexp.MustCompile(`(?i)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?$`)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := fromRE.FindStringSubmatch(line); m != nil {
			stages = append(stages, &stage{from: m[1], name: m[2]})
			continue
		}
		require.NotEmptyf(t, stages, "instruction before FROM: %s", line)
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, len(stages), 2, "a multi-stage build")
	build, final := stages[0], stages[len(stages)-1]
	all := func(s *stage) string { return strings.Join(s.lines, "\n") }

	goMod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	require.NotNil(t, goVersion)
	assert.Truef(t, strings.HasPrefix(build.from, "golang:"+string(goVersion[1])), "the build stage's image %s is not Go %s of go.mod", build.from, goVersion[1])
	require.NotEmpty(t, build.name, "the build stage is named")
	assert.Contains(t, all(build), "CGO_ENABLED=0", "the binary is not static")
	assert.Contains(t, all(build), "main.version=", "the version is not stamped")
	assert.Contains(t, all(build), "github.com/kbr/kafka_batched_ranges/plugin.Version=", "the input's version is not stamped")
	assert.Contains(t, all(build), "./cmd/connect")

	assert.NotEqual(t, build.from, final.from, "the final stage is the build image")
	assert.Regexp(t, `(?m)^COPY --from=`+regexp.QuoteMeta(build.name)+`\s.*connect`, all(final), "the final stage copies the binary from the build")
	assert.Regexp(t, `(?m)^COPY .*config/examples`, all(final), "the examples are not in the image")
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(all(final), -1)
	require.NotEmpty(t, user, "the final stage sets no USER (it would run as root)")
	last := strings.Split(user[len(user)-1][1], ":")[0]
	assert.NotContains(t, []string{"root", "0"}, last, "the final stage runs as root")
	assert.Regexp(t, `(?m)^ENTRYPOINT \[".*connect"\]`, all(final))
}
