package plugin

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoFile is a file of this repository named in a doc: a path under one of
// its top-level folders with the extension of a file it keeps.
var repoFile = regexp.MustCompile(`\b(?:internal|plugin|cmd|config|resources|tests|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:go|md|yaml|sh|py|json)\b`)

// bareGoFile is a Go file named without its folder.
var bareGoFile = regexp.MustCompile(`(?:^|[\s(])([a-z_]+\.go)\b`)

// mdLink is a markdown link: its target, without a title.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdHeading is a markdown heading.
var mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)

// anchorOf is the anchor GitHub gives a heading.
func anchorOf(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^\p{L}\p{N}\- _]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestDocsNameFilesThatExist: every relative link of README.md and docs/
// resolves (its file exists and, for a link into a markdown file, the
// anchor is one of its headings), and every repository file that a doc
// page or a package's doc comment (doc.go) names exists. Files move; a doc
// that still names the old place misleads its reader.
func TestDocsNameFilesThatExist(t *testing.T) {
	root := ".."
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	docs, err := filepath.Glob(filepath.Join(root, "*", "doc.go"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(root, "*", "*", "doc.go"))
	require.NoError(t, err)
	docs = append(docs, more...)
	require.NotEmpty(t, docs)

	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		a := map[string]bool{}
		for _, m := range mdHeading.FindAllStringSubmatch(string(b), -1) {
			a[anchorOf(m[1])] = true
		}
		anchors[path] = a
		return a
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		text := string(b)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				_, err := os.Stat(path)
				assert.NoErrorf(t, err, "%s links to %s, which does not exist", page, target)
				if err != nil {
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") {
				assert.Truef(t, anchorsOf(path)[anchor], "%s links to %s: no heading of %s has the anchor %q", page, target, path, anchor)
			}
		}
		for _, f := range repoFile.FindAllString(text, -1) {
			_, err := os.Stat(filepath.Join(root, f))
			assert.NoErrorf(t, err, "%s names %s, which does not exist", page, f)
		}
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, f := range repoFile.FindAllString(string(b), -1) {
			_, err := os.Stat(filepath.Join(root, f))
			assert.NoErrorf(t, err, "%s names %s, which does not exist", doc, f)
		}
		// A bare file name in a package doc is a file of that package.
		for _, m := range bareGoFile.FindAllStringSubmatch(string(b), -1) {
			_, err := os.Stat(filepath.Join(filepath.Dir(doc), m[1]))
			assert.NoErrorf(t, err, "%s names %s, which is not a file of its package", doc, m[1])
		}
	}
}

// TestReadmeIsForUsers: README.md is short (at most 20 KB), shows a complete
// kafka_batched_ranges config within its first 80 lines, begins with the two
// set-up commands, and holds no measurement history (times of day, load
// averages, commit hashes): that goes to docs/history.md.
func TestReadmeIsForUsers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	text := string(b)
	assert.LessOrEqual(t, len(b), 20000, "README.md size in bytes")
	lines := strings.Split(text, "\n")
	require.Greater(t, len(lines), 80)
	first := strings.Join(lines[:80], "\n")
	assert.Contains(t, first, "  kafka_batched_ranges:\n    seed_brokers:", "a config within the first 80 lines")
	assert.Contains(t, first, "    topics:")
	assert.Contains(t, first, "go run ./cmd/connect demo")
	assert.Contains(t, first, "make test")
	assert.NotRegexp(t, `(?i)load average`, text)
	assert.NotRegexp(t, `\b[0-2][0-9]:[0-5][0-9]\b`, text, "a time of day")
	assert.NotRegexp(t, "`[0-9a-f]{7,40}`", text, "a commit hash")
}

// goPackageDirs returns every folder under internal/ and plugin/ (from the
// repository root) that holds a non-test Go file.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, top := range []string{"internal", "plugin"} {
		err := filepath.WalkDir(filepath.Join("..", top), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || d.Name() == "testdata" {
				return err
			}
			files, _ := filepath.Glob(filepath.Join(p, "*.go"))
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") {
					rel, _ := filepath.Rel("..", p)
					out = append(out, filepath.ToSlash(rel))
					break
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

// TestLayoutNamesEveryPackage (the reverse of TestDocsNameFilesThatExist):
// the Layout table of docs/design.md
// names every package, and README.md's Layout every package of internal/.
func TestLayoutNamesEveryPackage(t *testing.T) {
	for _, page := range []string{"docs/design.md", "README.md"} {
		b, err := os.ReadFile(filepath.Join("..", page))
		require.NoError(t, err)
		text := string(b)
		for _, pkg := range goPackageDirs(t) {
			if page == "README.md" && !strings.HasPrefix(pkg, "internal/") {
				continue
			}
			named := regexp.MustCompile("`" + regexp.QuoteMeta(pkg) + "/?`").MatchString(text)
			assert.Truef(t, named, "%s: its Layout does not name the package %s", page, pkg)
		}
	}
}

// TestPluginDocNamesEveryFile: plugin/doc.go's list of files ("The
// files: ...") names every non-test Go file of the package.
func TestPluginDocNamesEveryFile(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		assert.Containsf(t, string(b), f, "plugin/doc.go does not name %s", f)
	}
}

// TestFiguresStatedOnce (issue 45): a benchmark figure is stated in
// docs/benchmarks.md (and the tables next to what they measure), never again
// in README.md or docs/design.md, which link to it, so the figures cannot
// drift apart.
func TestFiguresStatedOnce(t *testing.T) {
	figure := regexp.MustCompile(`[0-9] ?(MB/s|GB/s|records/s)|[0-9]\.[0-9]+x\b|[0-9] ms\b|[0-9]% of a core`)
	for _, page := range []string{"README.md", "docs/design.md"} {
		b, err := os.ReadFile(filepath.Join("..", page))
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			assert.Falsef(t, figure.MatchString(line), "%s:%d states a figure (%q): state it in docs/benchmarks.md and link to it", page, i+1, figure.FindString(line))
		}
	}
}
