package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLatencyPeers: kcat and python run when installed, bento only when
// -variants names it (it is built from its own module).
func TestLatencyPeers(t *testing.T) {
	for _, tc := range []struct {
		variants     string
		kcat, python bool
		want         []string
	}{
		{"", true, true, []string{"kcat", "python"}},
		{"", false, true, []string{"python"}},
		{"", false, false, nil},
		{"baseline,input,bento", true, false, []string{"kcat", "bento"}},
		{"kcat,python,bento", true, true, []string{"kcat", "python", "bento"}},
		{"bentox", false, false, nil},
	} {
		got := latencyPeers(options{variants: tc.variants}, tc.kcat, tc.python)
		assert.Equal(t, tc.want, got, "latencyPeers(-variants %q, kcat %v, python %v)", tc.variants, tc.kcat, tc.python)
	}
	// selected keeps them behind baseline and input, in that order.
	o := options{variants: "python,baseline,bento,input"}
	assert.Equal(t, []string{"baseline", "input", "python", "bento"},
		selected(o, append([]string{"baseline", "input"}, latencyPeers(o, true, true)...)))
}

// TestLatencyPeerLaunch pins what each peer is started with: its group and
// topic, reading from the start, and the file it writes its lines to.
func TestLatencyPeerLaunch(t *testing.T) {
	dir := t.TempDir()
	o := options{brokers: "127.0.0.1:9292"}

	l, err := latencyPeerLaunch(o, "/x/bento", dir, "kcat", "kcat-T", "T", "G")
	require.NoError(t, err)
	assert.Equal(t, []string{"kcat", "-C", "-q", "-u", "-b", "127.0.0.1:9292", "-G", "G",
		"-X", "auto.offset.reset=earliest", "-f", "%s\n", "T"}, l.args)
	assert.Equal(t, filepath.Join(dir, "kcat-T.lines"), l.out)
	assert.True(t, l.stdout, "kcat writes its lines to stdout")
	assert.Empty(t, l.files)

	l, err = latencyPeerLaunch(o, "/x/bento", dir, "python", "python-T", "T", "G")
	require.NoError(t, err)
	script := filepath.Join(dir, "group.py")
	assert.Equal(t, []string{pythonBin, script, "--brokers", "127.0.0.1:9292", "--topic", "T", "--group", "G",
		"--out", filepath.Join(dir, "python-T.lines")}, l.args)
	assert.False(t, l.stdout)
	assert.Equal(t, map[string][]byte{script: groupPy}, l.files)
	assert.Contains(t, string(groupPy), `"auto.offset.reset": "earliest"`)

	l, err = latencyPeerLaunch(o, "/x/bento", dir, "bento", "bento-T", "T", "G")
	require.NoError(t, err)
	cfg := filepath.Join(dir, "bento-T.yaml")
	assert.Equal(t, []string{"/x/bento", "-c", cfg}, l.args)
	assert.False(t, l.stdout)
	require.Contains(t, l.files, cfg)
	yaml := string(l.files[cfg])
	for _, want := range []string{
		`kafka_franz:`,
		`seed_brokers: [ "127.0.0.1:9292" ]`,
		`topics: [ "T" ]`,
		`consumer_group: "G"`,
		`start_from_oldest: true`,
		`file: {path: "` + filepath.Join(dir, "bento-T.lines") + `", codec: lines}`,
	} {
		assert.Contains(t, yaml, want)
	}

	_, err = latencyPeerLaunch(o, "", dir, "python cached", "x", "T", "G")
	assert.ErrorContains(t, err, `no variant "python cached"`)
}
