package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/soulstack/soulstack/internal/module"
)

// checkInput validates input against the scenario's declarations and
// returns it normalized (JSON-compatible values, integers as int64) with
// defaults applied.
func (s *Scenario) checkInput(input map[string]any, ps *problems) map[string]any {
	out := make(map[string]any, len(input)+len(s.Inputs))
	at := s.inputsPos
	if at.Line == 0 {
		at = Pos{File: s.File, Line: 1, Column: 1}
	}
	declared := map[string]*InputDecl{}
	for _, d := range s.Inputs {
		declared[d.Name] = d
	}
	keys := make([]string, 0, len(input))
	for k := range input {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := normalize(input[k], 0)
		if err != nil {
			ps.add(at, CodeInputType, "input %q: %v", k, err)
			continue
		}
		d := declared[k]
		if d == nil {
			if s.DeclaresInputs {
				names := make([]string, 0, len(s.Inputs))
				for _, d := range s.Inputs {
					names = append(names, d.Name)
				}
				msg := fmt.Sprintf("input %q is not declared in the scenario's inputs", k)
				if sugg := module.Suggest(k, names); sugg != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", sugg)
				} else if len(names) > 0 {
					msg += fmt.Sprintf(" (declared: %s)", strings.Join(names, ", "))
				}
				ps.add(at, CodeInputUndeclared, "%s", msg)
				continue
			}
			out[k] = v
			continue
		}
		if v == nil {
			continue // null counts as not given
		}
		if d.Type == module.TypeInt {
			v = toInt64(v)
		}
		if err := d.Type.Check(v, ""); err != nil {
			ps.add(d.Pos, CodeInputType, "input %q: %v", k, err)
			continue
		}
		out[k] = v
	}
	for _, d := range s.Inputs {
		if _, given := out[d.Name]; given {
			continue
		}
		if _, bad := input[d.Name]; bad && input[d.Name] != nil {
			continue // reported above
		}
		switch {
		case d.HasDefault:
			if d.Default != nil {
				out[d.Name] = deepCopy(d.Default)
			}
		case d.Required:
			ps.add(d.Pos, CodeInputMissing, "input %q is required and was not given", d.Name)
		}
	}
	return out
}

// normalize converts an input value to a JSON-compatible value: integers
// become int64 (uint64 beyond its range), json.Number becomes int64 or
// float64, typed slices and maps become []any and map[string]any.
func normalize(v any, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
	}
	switch x := v.(type) {
	case nil, bool, string, int64, uint64:
		return x, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("infinite and NaN numbers are not supported")
		}
		return x, nil
	case float32:
		return normalize(float64(x), depth)
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint:
		return normalizeUint(uint64(x)), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("bad number %q", x.String())
		}
		return normalize(f, depth)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := normalize(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, err := normalize(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	}
	// Typed slices, maps and structs: through JSON.
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Func || rv.Kind() == reflect.Chan {
		return nil, fmt.Errorf("a %T is not a JSON value", v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not a JSON value: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return normalize(out, depth)
}

func normalizeUint(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u
}

// toInt64 turns an integral float64 into int64, for int inputs given as
// JSON numbers.
func toInt64(v any) any {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f)
	}
	return v
}

// deepCopy copies a JSON-compatible value so plans do not share defaults.
func deepCopy(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	}
	return v
}
