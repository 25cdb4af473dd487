package plugin

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/bloblang"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Each lint rule of the spec is the same one-line bloblang mapping that calls
// lintMethod, a bloblang method this package registers in bloblang's global
// environment: Benthos parses lint rules in a copy of it (the pure methods),
// so the method must be registered before the spec is built, which fieldLint
// and specLint do. With a field's path the method runs that field's rule on
// `this`, the field's value. With "" it runs the rules across fields on
// `this`, the whole input config as written.
//
// Benthos reports the lints of a field's rule at the line where the field's
// value starts (a block list: its first entry), and those of the spec's rule
// at the line where the input's mapping starts (its first field): the public
// API (ConfigSpec.LintRule) gives a lint rule no other line, so a rule across
// fields names its fields instead.
const lintMethod = "kafka_batched_ranges_lint"

// lintMethodOnce guards the registration of lintMethod.
var lintMethodOnce sync.Once

// registerLintMethod registers lintMethod once per process.
func registerLintMethod() { lintMethodOnce.Do(registerLintMethodOnce) }

func registerLintMethodOnce() {
	spec := bloblang.NewPluginSpec().
		Description("Checks a field (its path) or, with \"\", the whole config of the kafka_batched_ranges input, and returns the messages of what is wrong.").
		Param(bloblang.NewStringParam("field"))
	bloblang.MustRegisterMethodV2(lintMethod, spec, func(args *bloblang.ParsedParams) (bloblang.Method, error) {
		path, err := args.GetString("field")
		if err != nil {
			return nil, err
		}
		check := lintCrossRules
		if path != "" {
			i := slices.IndexFunc(fieldRules, func(r fieldRule) bool { return r.path == path })
			if i < 0 {
				return nil, fmt.Errorf("no value rule for field %s", path)
			}
			check = func(v any) []error {
				if v == nil && !checksNull(path) {
					return nil
				}
				return fieldRules[i].check(path, v)
			}
		}
		return func(v any) (any, error) {
			lints := []any{}
			for _, err := range check(v) {
				lints = append(lints, err.Error())
			}
			return lints, nil
		}, nil
	})
}

// lintedFields are the paths fieldLint gave a lint rule, for
// TestEveryFieldRuleLinted.
var lintedFields sync.Map

// fieldLint returns the lint rule of the field at path: its fieldRule.
func fieldLint(path string) string {
	registerLintMethod()
	lintedFields.Store(path, true)
	return fmt.Sprintf("root = this.%s(%q)", lintMethod, path)
}

// specLint returns the spec's lint rule: the rules across fields.
func specLint() string {
	registerLintMethod()
	return fmt.Sprintf("root = this.%s(\"\")", lintMethod)
}

var (
	lintSpecOnce sync.Once
	lintSpecView *service.ConfigSpec // Spec(), for lintSpec
)

// lintSpec returns the spec the lint parses a config with, built once.
func lintSpec() *service.ConfigSpec {
	lintSpecOnce.Do(func() { lintSpecView = Spec() })
	return lintSpecView
}

// lintCrossRules runs the rules across fields on an input config as written
// (v, after environment variables are replaced), parsed by the spec so that
// the rules read it as ParseConfig does, defaults filled in. A config that
// does not parse gets no lint here. Benthos' own type checks report why.
func lintCrossRules(v any) []error {
	b, err := json.Marshal(noValueKept(v))
	if err != nil {
		return nil
	}
	pc, err := lintSpec().ParseYAML(string(b), nil)
	if err != nil {
		return nil
	}
	var errs []error
	for _, r := range crossRules {
		errs = append(errs, r(pc)...)
	}
	written := differsFromDefault(pc)
	for _, r := range writtenRules {
		errs = append(errs, r(pc, written)...)
	}
	return errs
}

// noValueKept returns v without its null values (withoutNulls), except a
// list field written without a value (checksNull: what an environment
// variable that is not set leaves), which stays set, to "". Its own rule
// says it has no value, and the rules across fields, which skip a list
// field that is not a list (notList), add nothing, where its default (the
// empty list) would make them say it names nothing.
//
// Likewise seed_brokers of nothing but empty entries, as `seed_brokers: [
// "${KAFKA_BROKERS}" ]` leaves it with the variable not set. Benthos' lint
// says the variable is not set, and that is the whole error, so it is set
// to "" as above, where brokersNamed would add that it names no broker.
// ParseConfig, which Benthos does not tell of unset variables, still
// refuses it (msgEmptyBrokers). The topic lists keep their empty entries.
// An empty topic name or pattern is an error of its own.
func noValueKept(v any) any {
	out := withoutNulls(v)
	in, ok := v.(map[string]any)
	if !ok {
		return out
	}
	m := out.(map[string]any)
	for k, e := range in {
		if e == nil && checksNull(k) {
			m[k] = ""
		}
	}
	if l, ok := in[fieldSeedBrokers].([]any); ok && len(l) > 0 && !slices.ContainsFunc(l, func(x any) bool { return x != "" }) {
		m[fieldSeedBrokers] = ""
	}
	return m
}

// withoutNulls returns v without the null values of its maps, at any depth.
// Benthos hands an empty list as null (`topics: []`, and nested ones such as
// `tls.client_certs: []`, which `connect create` writes, or
// `batching.processors: []`), which the spec does not parse. It is the
// field unset. Before, a nested one made the parse fail, and with it every
// rule across fields.
func withoutNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			if l, isList := e.([]any); e == nil || (isList && l == nil) {
				continue
			}
			m[k] = withoutNulls(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = withoutNulls(e)
		}
		return l
	}
	return v
}
