package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCeilingHandsOutEveryRecordOnce builds the ceiling variant's binary and
// runs it on 2,500 records of 3 partitions in batches of 1,000 (the last one
// short) into stdout: every record comes out once, with the input's
// metadata, and the run ends by itself.
func TestCeilingHandsOutEveryRecordOnce(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ceiling")
	build := exec.Command("go", "build", "-o", bin, "./ceiling")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(`logger: {level: warn}
input:
  bench_ceiling: {records: 2500, size: 4, partitions: 3, batch_records: 1000}
pipeline:
  processors:
    - mapping: 'root = "%s/%s %s".format(meta("kafka_partition"), meta("kafka_offset"), content())'
output:
  stdout: {}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "run", cfg).Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2500 {
		t.Fatalf("got %d lines, want 2500", len(lines))
	}
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
		if !strings.HasSuffix(l, " abcd") {
			t.Fatalf("line %q: want the value abcd", l)
		}
	}
	// Batches 0, 1, 2 go to partitions 0, 1, 2, each from offset 0:
	// partition 0 has offsets 0..999, 1 has 0..999, 2 has 0..499.
	for _, p := range []struct {
		part string
		n    int
	}{{"0", 1000}, {"1", 1000}, {"2", 500}} {
		n := 0
		for l, c := range seen {
			if strings.HasPrefix(l, p.part+"/") {
				n += c
				if c != 1 {
					t.Fatalf("%q came out %d times", l, c)
				}
			}
		}
		if n != p.n {
			t.Fatalf("partition %s: %d records, want %d", p.part, n, p.n)
		}
	}
}
