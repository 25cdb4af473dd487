package plugin

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// A bounded run (stop_at: end or timestamp) ends when this input ends, and
// Benthos ends an input only once every message it handed out is
// acknowledged. Its input layer waits for them before it closes the stream's
// transactions. A batching policy downstream that has no period flushes an
// incomplete batch only once those transactions close, so the run's last
// messages would wait in it for ever, acknowledged by nothing. RunCLI refuses
// that configuration before the stream starts (checkEndBatching), naming the
// policy. The engine warns about it at run time in streams built otherwise.

// checkEndBatching returns an error naming the first batching policy of conf
// (a whole parsed config, as service.ParsedConfig.FieldAny gives it) that
// would hold the last messages of a bounded kafka_batched_ranges input for
// ever: one without a period that can hold messages (count above 1,
// byte_size, or check) in an output, an output resource or a wrapping input
// (a broker input's batching, a batched input's policy). A config with a
// buffer is not refused: a buffer acknowledges what it stores, so the input
// ends and the buffer then drains into the batch, which flushes.
func checkEndBatching(conf any) error {
	root, ok := conf.(map[string]any)
	if !ok {
		return nil
	}
	root = maps.Clone(root)
	for k, v := range root {
		root[k] = decoded(v)
	}
	stopAt := boundedInput(root)
	if stopAt == "" || hasBuffer(root["buffer"]) {
		return nil
	}
	var found []string
	for _, section := range []string{"output", "output_resources"} {
		holdingPolicies(root[section], section, false, &found)
	}
	for _, section := range []string{"input", "input_resources"} {
		holdingPolicies(root[section], section, true, &found)
	}
	if len(found) == 0 {
		return nil
	}
	sort.Strings(found)
	return fmt.Errorf("%s: a batching policy without a period holds the last messages of a bounded run (%s with %s: %s) for ever: "+
		"Benthos flushes an incomplete batch only once the input has ended, and ends the input only once its messages are acknowledged. "+
		"Give the policy a period (for example period: 1s), or batch in the input's own %s field, which flushes at every range's end",
		found[0], InputName, fieldStopAt, stopAt, fieldBatching)
}

// decoded returns v with a section Benthos keeps as a YAML node (input,
// output) decoded into maps and lists. Anything else as it is.
func decoded(v any) any {
	n, ok := v.(interface{ Decode(any) error })
	if !ok {
		return v
	}
	var out any
	if err := n.Decode(&out); err != nil {
		return nil
	}
	return out
}

// boundedInput returns the stop_at of the first kafka_batched_ranges input
// of root (its input or input resources) that ends by itself, or "".
func boundedInput(root map[string]any) string {
	var stopAt string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if stopAt != "" {
					return
				}
				if in, ok := c.(map[string]any); ok && k == InputName {
					if s, _ := in[fieldStopAt].(string); s != "" && s != stopNever {
						stopAt = s
					}
					continue
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(root["input"])
	walk(root["input_resources"])
	return stopAt
}

// hasBuffer reports whether v, a config's buffer section, names a buffer
// other than none.
func hasBuffer(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k := range m {
		if k != "none" && k != "label" {
			return true
		}
	}
	return false
}

// holdingPolicies appends to found the path of every batching policy under v
// (at path) that can hold messages and has no period. In an input section
// (inInput) the batching field of kafka_batched_ranges itself is skipped (it
// flushes at every range's end) and a batched input's policy counts.
func holdingPolicies(v any, path string, inInput bool, found *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			p := path + "." + k
			switch {
			case inInput && k == InputName:
				continue
			case k == "batching" || (inInput && k == "policy" && strings.HasSuffix(path, ".batched")):
				if m, ok := c.(map[string]any); ok && holds(m) {
					*found = append(*found, p)
				}
				continue
			}
			holdingPolicies(c, p, inInput, found)
		}
	case []any:
		for i, c := range v {
			holdingPolicies(c, path+"."+strconv.Itoa(i), inInput, found)
		}
	}
}

// holds reports whether the batching policy m can hold messages until its
// input ends. It has no period, and a count above 1, a byte_size or a check.
func holds(m map[string]any) bool {
	if s, _ := m["period"].(string); strings.TrimSpace(s) != "" {
		return false
	}
	if s, _ := m["check"].(string); strings.TrimSpace(s) != "" {
		return true
	}
	return number(m["count"]) > 1 || number(m["byte_size"]) > 0
}

// number returns v, a YAML number (or a string holding one), as an int64; 0
// for anything else.
func number(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case uint64:
		return int64(n)
	case float64:
		return int64(n)
	case string:
		i, _ := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		return i
	}
	return 0
}

// endBatchingOpt is RunCLI's check of the whole config before the stream
// starts (checkEndBatching).
func endBatchingOpt() service.CLIOptFunc {
	return service.CLIOptOnConfigParse(func(p *service.ParsedConfig) error {
		v, err := p.FieldAny()
		if err != nil {
			return nil // nothing to check: Benthos reports a config it cannot read itself
		}
		return checkEndBatching(v)
	})
}
