// Package examples embeds the YAML pipelines of this directory, so the
// input's config spec and `connect demo` use exactly the files users read
// (and `connect lint` / `connect test` check).
package examples

import "embed"

// FS holds every *.yaml file of config/examples.
//
//go:embed *.yaml
var FS embed.FS
