package main

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docPath is the committed reference, relative to this package.
const docPath = "../../docs/kafka_batched_ranges.md"

// TestDocIsCurrent fails when docs/kafka_batched_ranges.md differs from
// what the spec generates.
func TestDocIsCurrent(t *testing.T) {
	want, err := render()
	require.NoError(t, err)
	got, err := os.ReadFile(docPath)
	require.NoError(t, err, "docs/kafka_batched_ranges.md is missing: run go generate ./...")
	if string(got) != string(want) {
		line := firstDiff(string(got), string(want))
		require.FailNowf(t, "docs/kafka_batched_ranges.md is out of date: run go generate ./...",
			"first difference at line %d:\ncommitted: %q\ngenerated: %q", line+1, lineAt(string(got), line), lineAt(string(want), line))
	}
}

// TestRenderCoversTheSpec checks the page documents every field by its full
// path with its type and default, the metadata keys and the examples.
func TestRenderCoversTheSpec(t *testing.T) {
	b, err := render()
	require.NoError(t, err)
	doc := string(b)
	for _, want := range []string{
		"# `kafka_batched_ranges` input",
		"### `seed_brokers`\n",
		"At least one is required",
		"Type: `array`, default `[]`.", // a list field is an any field (the lint's own type check) with the empty list as its default
		"Type: `string`, required.",
		"### `max_range_records`\n",
		"Type: `int`, default `10000`.",
		"### `consumer_cache.capacity`\n",
		"### `consumer_cache.idle_timeout`\n",
		"### `tls.enabled`\n",
		"### `tls.client_certs[].key`\n",
		"### `sasl[].mechanism`\n",
		"| `SCRAM-SHA-512` |",
		"### `sasl[].password`\n",
		"A secret: `connect echo` prints it scrubbed.",
		"### Metadata",
		"- kafka_range_end",
		"## Examples",
		"### backfill\n",
		"stop_at: end",
	} {
		assert.Contains(t, doc, want, "the generated page lacks %q", want)
	}
	assert.NotContains(t, doc, "\n\n\n", "the page has runs of blank lines")
	assert.True(t, strings.HasSuffix(doc, "```\n"), "the page ends with the last example's code block and one newline")
}

// TestRenderOptionalFields renders a spec with optional fields (no default,
// not required): the page must say so, not call them required.
func TestRenderOptionalFields(t *testing.T) {
	env := service.NewEmptyEnvironment()
	spec := service.NewConfigSpec().Fields(
		service.NewStringField("needed").Description("A required field."),
		service.NewStringField("maybe").Description("An optional field.").Optional(),
		service.NewIntField("count").Description("A field with a default.").Default(3),
		service.NewObjectListField("items",
			service.NewStringField("inner").Description("An optional field of a list's entries.").Optional(),
		).Description("A list.").Default([]any{}),
	)
	require.NoError(t, env.RegisterInput("docgen_test", spec, func(*service.ParsedConfig, *service.Resources) (service.Input, error) {
		return nil, errors.New("not for running")
	}))
	var view *service.ConfigView
	env.WalkInputs(func(name string, v *service.ConfigView) {
		if name == "docgen_test" {
			view = v
		}
	})
	require.NotNil(t, view)
	b, err := renderView(view)
	require.NoError(t, err)
	doc := string(b)
	for _, want := range []string{
		"### `needed`\n\nA required field.\n\nType: `string`, required.\n",
		"### `maybe`\n\nAn optional field.\n\nType: `string`, optional.\n",
		"### `count`\n\nA field with a default.\n\nType: `int`, default `3`.\n",
		"### `items[].inner`\n\nAn optional field of a list's entries.\n\nType: `string`, optional.\n",
	} {
		assert.Contains(t, doc, want)
	}
}

func TestTidy(t *testing.T) {
	in := "# t  \n\n\n\ntext \n```yaml\na: 1\n\n\nb: 2\n```\n\n\n"
	want := "# t\n\ntext\n```yaml\na: 1\n\n\nb: 2\n```\n"
	assert.Equal(t, want, string(tidy(in)))
}

func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i
		}
	}
	return min(len(al), len(bl))
}

func lineAt(s string, i int) string {
	lines := strings.Split(s, "\n")
	if i < len(lines) {
		return lines[i]
	}
	return "<end of file>"
}
