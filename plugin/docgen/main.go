// Command docgen writes docs/kafka_batched_ranges.md, the reference of the
// kafka_batched_ranges input, from its config spec (plugin.Spec): summary,
// description with the metadata keys, the common and full configs, every
// field by its full path with type, default, options and examples, and the
// examples of config/examples.
//
// Run it through `go generate ./...` (the directive below). TestDocIsCurrent
// fails when the committed file differs from what the spec generates.
package main

//go:generate go run . -o ../../docs/kafka_batched_ranges.md

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/template"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/plugin"
)

func main() {
	out := flag.String("o", "", "file to write (required)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "docgen: -o is required")
		os.Exit(2)
	}
	b, err := render()
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %v\n", err)
		os.Exit(1)
	}
}

// render returns the Markdown reference of the input, from the spec as
// Benthos' public ConfigView.TemplateData sees it.
func render() ([]byte, error) {
	env := service.NewEmptyEnvironment()
	if err := plugin.Register(env, plugin.Options{}); err != nil {
		return nil, fmt.Errorf("register input: %w", err)
	}
	var view *service.ConfigView
	env.WalkInputs(func(name string, v *service.ConfigView) {
		if name == plugin.InputName {
			view = v
		}
	})
	if view == nil {
		return nil, fmt.Errorf("input %s is not registered", plugin.InputName)
	}
	return renderView(view)
}

// renderView returns the Markdown reference of the component view documents.
func renderView(view *service.ConfigView) ([]byte, error) {
	data, err := view.TemplateData()
	if err != nil {
		return nil, fmt.Errorf("template data: %w", err)
	}
	optional, err := optionalFields(view)
	if err != nil {
		return nil, err
	}
	pd := pageData{TemplateDataPlugin: data}
	for _, f := range data.Fields {
		pd.Fields = append(pd.Fields, field{TemplateDataPluginField: f, Optional: optional[f.FullName]})
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, pd); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return tidy(buf.String()), nil
}

// pageData is what the page template renders: the view's template data,
// with each field marked optional or not (TemplateData does not say).
type pageData struct {
	service.TemplateDataPlugin
	Fields []field
}

// field is a field of the page.
type field struct {
	service.TemplateDataPluginField
	Optional bool // Optional() in the spec: it may be left out, with no default
}

// specField is a field of the spec as ConfigView.FormatJSON writes it.
type specField struct {
	Name         string      `json:"name"`
	Kind         string      `json:"kind"`
	IsOptional   bool        `json:"is_optional"`
	IsDeprecated bool        `json:"is_deprecated"`
	Children     []specField `json:"children"`
}

// optionalFields returns the full names (as TemplateData names them:
// "sasl[].mechanism") of the fields the view's spec marks optional, which
// only its JSON form tells.
func optionalFields(view *service.ConfigView) (map[string]bool, error) {
	b, err := view.FormatJSON()
	if err != nil {
		return nil, fmt.Errorf("spec json: %w", err)
	}
	var spec struct {
		Config specField `json:"config"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("spec json: %w", err)
	}
	optional := map[string]bool{}
	var walk func(prefix string, fields []specField)
	walk = func(prefix string, fields []specField) {
		for _, f := range fields {
			name := prefix + f.Name
			optional[name] = f.IsOptional
			switch f.Kind {
			case "array":
				name += "[]"
			case "2darray":
				name += "[][]"
			case "map":
				name += ".<name>"
			}
			walk(name+".", f.Children)
		}
	}
	walk("", spec.Config.Children)
	return optional, nil
}

// tidy removes what the templates leave behind: trailing spaces, and blank
// lines following a blank line outside code blocks. It ends the page with
// one newline.
func tidy(s string) []byte {
	var (
		out           []string
		inCode, blank bool
	)
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		l = strings.TrimRight(l, " ")
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if l == "" && blank && !inCode {
			continue
		}
		blank = l == ""
		out = append(out, l)
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"trim":     strings.TrimSpace,
	"cell":     cell,
	"required": required,
	"typeName": typeName,
}).Parse(pageTemplate))

// typeName is the field's type as a reader knows it. Fields that accept
// several YAML kinds (so that the input's lint rule, not Benthos' decoder,
// reports a bad value) have no declared type. Their default, or their
// examples, say what they hold.
func typeName(f field) string {
	if f.Type != "unknown" {
		return f.Type
	}
	if _, err := strconv.ParseInt(f.DefaultMarshalled, 10, 64); err == nil {
		return "int"
	}
	if len(f.Examples) > 0 {
		if _, ok := f.Examples[0].([]any); ok {
			return "array"
		}
		if _, ok := f.Examples[0].([]string); ok {
			return "array"
		}
	}
	return "any"
}

// cell makes s fit in one Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// required reports whether a field must be set. It has no default, is not
// optional and is not an object (whose fields have their own defaults).
func required(f field) bool {
	return f.DefaultMarshalled == "" && !f.Optional && f.Type != "object"
}

const pageTemplate = `# ` + "`{{.Name}}`" + ` {{.Type}}

<!-- Code generated by plugin/docgen from plugin.Spec(); DO NOT EDIT. Run go generate ./... after changing the spec. -->

{{.Summary}}

Status: {{.Status}}.

## Configuration

Common fields, with their defaults:

` + "```yaml" + `
{{trim .CommonConfigYAML}}
` + "```" + `

Every field, with its default:

` + "```yaml" + `
{{trim .AdvancedConfigYAML}}
` + "```" + `

## Description

{{trim .Description}}

## Fields
{{range .Fields}}
### ` + "`{{.FullName}}`" + `

{{.Description}}

Type: ` + "`{{typeName .}}`" + `{{if required .}}, required{{else if .DefaultMarshalled}}, default ` + "`{{.DefaultMarshalled}}`" + `{{else if .Optional}}, optional{{end}}.{{if .IsSecret}} A secret: ` + "`connect echo`" + ` prints it scrubbed.{{end}}{{if .IsInterpolated}} Supports interpolation functions.{{end}}
{{- if .AnnotatedOptions}}

| option | meaning |
|---|---|
{{- range .AnnotatedOptions}}
| ` + "`{{index . 0}}`" + ` | {{cell (index . 1)}} |
{{- end}}
{{- else if .Options}}

Options: {{range $i, $o := .Options}}{{if $i}}, {{end}}` + "`{{$o}}`" + `{{end}}.
{{- end}}
{{- if .ExamplesMarshalled}}

Examples:
{{range .ExamplesMarshalled}}
` + "```yaml" + `
{{trim .}}
` + "```" + `
{{end}}
{{- end}}
{{end}}
## Examples

Each is a file of [config/examples](../config/examples), with Benthos unit tests that ` + "`connect test`" + ` runs.
{{range .Examples}}
### {{.Title}}

{{.Summary}}

` + "```yaml" + `
{{trim .Config}}
` + "```" + `
{{end}}`
