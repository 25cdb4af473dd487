// Command mutate is the mutation run of the state machines' model walks
// (`make mutate`): it injects known bugs into internal/engine and
// internal/cache, one at a time, and reports which of them the model walks
// alone catch, and which the package's tests catch.
//
// Each mutant (mutants.go) is an exact replacement of one string of one
// file. The string must occur exactly once: a refactor that moves or
// changes it makes the run say which mutant no longer applies (an error,
// never a mutant silently left untested). The repository is copied once per
// job into a scratch directory (the working tree is never touched), and
// each mutant is written into a copy, tested and restored there.
//
// For each mutant it runs:
//
//  1. `go test -run '^$'` of the mutated package: a mutant that does not
//     compile (or that go vet's test checks refuse) is an error, not a bug
//     caught;
//  2. the walks alone: the package's model walk and fuzz seeds
//     (TestPartitionTableModelWalk and FuzzPartitionTable for the engine,
//     TestCursorModelWalk and FuzzCursorModel for the cache), with
//     KBR_MODEL_TIME set to -model-time;
//  3. every test of the package (go test without -race, -failfast, with
//     -timeout; the kfake tests included, the walks at their default two
//     seconds).
//
// A mutant is caught when the test run fails. Before the mutants, the walks
// run once without one: if they fail, the run stops (every mutant would look
// caught). It prints a table and, last, the line
//
//	mutate: walks caught X of N, package caught Y of N
//
// and exits 1 if a mutant did not apply or did not compile.
//
// Run it from the repository's root:
//
//	go run ./resources/mutate [-model-time 20s] [-jobs 3] [-timeout 10m] [-run regexp] [-walks-only] [-logs dir]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

func main() {
	modelTime := flag.Duration("model-time", 20*time.Second, "KBR_MODEL_TIME of each model walk, per mutant")
	jobs := flag.Int("jobs", 3, "mutants tested at once (each in a copy of its own)")
	timeout := flag.Duration("timeout", 10*time.Minute, "go test -timeout of a package's tests")
	run := flag.String("run", "", "test only the mutants whose name matches this regular expression")
	walksOnly := flag.Bool("walks-only", false, "run only the walks, not every test of the package")
	list := flag.Bool("list", false, "list the mutants and exit")
	keep := flag.Bool("keep", false, "keep the scratch directory")
	logs := flag.String("logs", "", "write each mutant's test output into this directory (<mutant>.walks.txt, <mutant>.package.txt)")
	flag.Parse()

	if *list {
		for _, m := range mutants {
			fmt.Printf("%-22s %-28s %s\n", m.name, m.file, m.desc)
		}
		return
	}
	var filter *regexp.Regexp
	if *run != "" {
		filter = regexp.MustCompile(*run)
	}
	var todo []mutant
	for _, m := range mutants {
		if filter == nil || filter.MatchString(m.name) {
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		fatalf("no mutant matches -run %q", *run)
	}
	root, err := os.Getwd()
	if err != nil {
		fatalf("%v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		fatalf("run it from the repository's root (no go.mod in %s)", root)
	}
	scratch, err := os.MkdirTemp("", "kbr-mutate-")
	if err != nil {
		fatalf("%v", err)
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "mutate: scratch directory %s\n", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	began := time.Now()
	n := max(1, min(*jobs, len(todo)))
	copies := make([]string, n)
	for i := range copies {
		copies[i] = filepath.Join(scratch, fmt.Sprintf("repo%d", i))
		if err := copyTree(root, copies[i]); err != nil {
			fatalf("copy the repository: %v", err)
		}
	}
	r := runner{modelTime: *modelTime, timeout: *timeout, walksOnly: *walksOnly, logs: *logs}
	if r.logs != "" {
		if err := os.MkdirAll(r.logs, 0o755); err != nil {
			fatalf("%v", err)
		}
	}

	// The walks pass without a mutant, or every mutant would look caught.
	fmt.Fprintf(os.Stderr, "mutate: the walks without a mutant (KBR_MODEL_TIME=%s)\n", *modelTime)
	for _, pkg := range []string{enginePkg, cachePkg} {
		if out, err := r.walks(copies[0], pkg); err != nil {
			fatalf("the walks of %s fail without a mutant:\n%s", pkg, out)
		}
	}

	results := make([]result, len(todo))
	next := make(chan int)
	var wg sync.WaitGroup
	for _, dir := range copies {
		wg.Go(func() {
			for i := range next {
				results[i] = r.test(dir, todo[i])
				fmt.Fprintf(os.Stderr, "mutate: %s: %s\n", todo[i].name, results[i].summary(r.walksOnly))
			}
		})
	}
	for i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()

	report(os.Stdout, todo, results, r.walksOnly)
	fmt.Printf("(KBR_MODEL_TIME=%s, %d jobs, %s)\n", *modelTime, n, time.Since(began).Round(time.Second))
	walks, pkgs, errs := 0, 0, 0
	for _, res := range results {
		switch {
		case res.err != nil:
			errs++
		default:
			if res.walks != "" {
				walks++
			}
			if res.pkg != "" {
				pkgs++
			}
		}
	}
	line := fmt.Sprintf("mutate: walks caught %d of %d, package caught %d of %d", walks, len(todo), pkgs, len(todo))
	if r.walksOnly {
		line = fmt.Sprintf("mutate: walks caught %d of %d, package not run", walks, len(todo))
	}
	if errs > 0 {
		line += fmt.Sprintf(" (%d errors)", errs)
	}
	fmt.Println(line)
	if errs > 0 {
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mutate: "+format+"\n", args...)
	os.Exit(2)
}

// The packages with model walks, and their walks.
const (
	enginePkg = "./internal/engine"
	cachePkg  = "./internal/cache"
	rangesPkg = "./internal/ranges"
)

var walkTests = map[string]string{
	enginePkg: "^(TestPartitionTableModelWalk|FuzzPartitionTable)$",
	cachePkg:  "^(TestCursorModelWalk|FuzzCursorModel)$",
	// internal/ranges has no model walk: its fuzz tests' seeds stand for it.
	rangesPkg: "^(FuzzPlanner|FuzzTracker)$",
}

// mutant is one injected bug: old, found exactly once in file, becomes new.
type mutant struct {
	name, file, desc string
	old, new         string
}

// pkg is the package the mutant is in.
func (m mutant) pkg() string { return "./" + filepath.Dir(m.file) }

type result struct {
	err   error  // it did not apply or did not compile
	walks string // the walk tests that failed; "" if none did
	pkg   string // the package's tests that failed; "" if none did
	took  time.Duration
}

func (res result) summary(walksOnly bool) string {
	if res.err != nil {
		return "ERROR: " + res.err.Error()
	}
	pkg := "package " + yes(res.pkg)
	if walksOnly {
		pkg = "package not run"
	}
	return fmt.Sprintf("walks %s, %s (%s)", yes(res.walks), pkg, res.took.Round(time.Second))
}

func yes(failed string) string {
	if failed == "" {
		return "no"
	}
	return "yes (" + failed + ")"
}

type runner struct {
	modelTime time.Duration
	timeout   time.Duration
	walksOnly bool
	logs      string // where to write each run's output; "" for nowhere
}

// log writes out, the output of m's run what, into the logs directory.
func (r runner) log(m mutant, what, out string) {
	if r.logs == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(r.logs, m.name+"."+what+".txt"), []byte(out), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "mutate: %v\n", err)
	}
}

// test applies m in the copy dir, runs the tests and restores the file.
func (r runner) test(dir string, m mutant) (res result) {
	began := time.Now()
	defer func() { res.took = time.Since(began) }()
	path := filepath.Join(dir, m.file)
	src, err := os.ReadFile(path)
	if err != nil {
		return result{err: err}
	}
	if n := bytes.Count(src, []byte(m.old)); n != 1 {
		return result{err: fmt.Errorf("%s no longer applies: its target string occurs %d times in %s (want once)", m.name, n, m.file)}
	}
	if m.old == m.new {
		return result{err: fmt.Errorf("%s changes nothing", m.name)}
	}
	if err := os.WriteFile(path, bytes.Replace(src, []byte(m.old), []byte(m.new), 1), 0o644); err != nil {
		return result{err: err}
	}
	defer func() {
		if err := os.WriteFile(path, src, 0o644); err != nil {
			fatalf("restore %s: %v", path, err)
		}
	}()
	if out, err := goTest(dir, nil, "-count=1", "-run", "^$", m.pkg()); err != nil {
		return result{err: fmt.Errorf("%s does not compile:\n%s", m.name, indent(out))}
	}
	out, err := r.walks(dir, m.pkg())
	r.log(m, "walks", out)
	if err != nil {
		res.walks = failedTests(out, err)
	}
	if r.walksOnly {
		return res
	}
	out, err = goTest(dir, []string{"KBR_MODEL_TIME="}, "-count=1", "-failfast", "-timeout", r.timeout.String(), m.pkg())
	r.log(m, "package", out)
	if err != nil {
		res.pkg = failedTests(out, err)
	}
	return res
}

// walks runs pkg's model walk and fuzz seeds in dir.
func (r runner) walks(dir, pkg string) (string, error) {
	timeout := 2*r.modelTime + 5*time.Minute
	return goTest(dir, []string{"KBR_MODEL_TIME=" + r.modelTime.String()}, "-count=1", "-timeout", timeout.String(), "-run", walkTests[pkg], pkg)
}

// goTest runs go test -trimpath (so that the copies share the build cache)
// in dir with env added to the environment.
func goTest(dir string, env []string, args ...string) (string, error) {
	gobin := os.Getenv("GO")
	if gobin == "" {
		gobin = "go"
	}
	cmd := exec.CommandContext(context.Background(), gobin, append([]string{"test", "-trimpath"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// failedTests names the top-level tests that failed in go test's output
// (or says how it failed when none is named: a panic, a timeout).
func failedTests(out string, err error) string {
	var names []string
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^--- FAIL: (\S+)`).FindAllStringSubmatch(out, -1) {
		name := m[1]
		if i := strings.IndexByte(name, '/'); i > 0 {
			name = name[:i]
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	switch {
	case len(names) > 0:
		return strings.Join(names, ",")
	case strings.Contains(out, "panic: test timed out"):
		return "timeout"
	case strings.Contains(out, "panic:"):
		return "panic"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > 2000 {
		s = s[:2000] + "\n..."
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// report prints the table of results.
func report(f *os.File, todo []mutant, results []result, walksOnly bool) {
	tw := tabwriter.NewWriter(f, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mutant\tdescription\tcaught by walks\tcaught by package\ttime")
	for i, m := range todo {
		res := results[i]
		if res.err != nil {
			fmt.Fprintf(tw, "%s\t%s\tERROR\tERROR\t%s\n", m.name, m.desc, res.took.Round(time.Second))
			continue
		}
		pkg := yes(res.pkg)
		if walksOnly {
			pkg = "not run"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.name, m.desc, yes(res.walks), pkg, res.took.Round(time.Second))
	}
	tw.Flush()
	for i, m := range todo {
		if err := results[i].err; err != nil {
			fmt.Fprintf(f, "ERROR %s: %v\n", m.name, err)
		}
	}
}

// copyTree copies the repository at src to dst: the files the tests need,
// without .git and what the build makes.
func copyTree(src, dst string) error {
	skip := map[string]bool{".git": true, "bin": true, "dist": true, "backfill": true, "changelog": true}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() && skip[rel] {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
}
