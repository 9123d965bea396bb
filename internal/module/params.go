package module

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Type is the declared type of a param or a scenario input.
type Type string

// The types of params and inputs. Values are the JSON-compatible Go values
// a YAML or JSON document decodes to.
const (
	// TypeString accepts a string.
	TypeString Type = "string"
	// TypeInt accepts an integer (a JSON number with no fraction too).
	TypeInt Type = "int"
	// TypeBool accepts true or false.
	TypeBool Type = "bool"
	// TypeList accepts a sequence; Param.Elem may restrict its elements.
	TypeList Type = "list"
	// TypeMap accepts a mapping of names to values; Param.Elem may
	// restrict its values (for example, environment variables).
	TypeMap Type = "map"
	// TypeObject accepts a free-form mapping (any JSON object).
	TypeObject Type = "object"
	// TypeAny accepts every value.
	TypeAny Type = "any"
)

// Types lists every valid Type.
var Types = []Type{TypeString, TypeInt, TypeBool, TypeList, TypeMap, TypeObject, TypeAny}

// Valid reports whether t is one of Types.
func (t Type) Valid() bool { return slices.Contains(Types, t) }

// Check reports whether v, a JSON-compatible value, has type t. elem,
// when not empty, is the type of a list's elements or a map's values.
// The error describes the mismatch for a user ("want int, got string").
func (t Type) Check(v any, elem Type) error {
	if !t.accepts(v) {
		hint := ""
		if t == TypeString && (isInt(v) || Describe(v) == "number" || Describe(v) == "bool") {
			hint = " (quote the value to keep it a string)"
		}
		return fmt.Errorf("want %s, got %s%s", t.describe(elem), Describe(v), hint)
	}
	if elem == "" || elem == TypeAny {
		return nil
	}
	switch t {
	case TypeList:
		for i, e := range v.([]any) {
			if !elem.accepts(e) {
				return fmt.Errorf("want %s, element %d is %s", t.describe(elem), i, Describe(e))
			}
		}
	case TypeMap:
		m := v.(map[string]any)
		for _, k := range sortedKeys(m) {
			if !elem.accepts(m[k]) {
				return fmt.Errorf("want %s, %q is %s", t.describe(elem), k, Describe(m[k]))
			}
		}
	}
	return nil
}

func (t Type) describe(elem Type) string {
	if elem != "" && elem != TypeAny && (t == TypeList || t == TypeMap) {
		return fmt.Sprintf("%s of %s", t, elem)
	}
	return string(t)
}

func (t Type) accepts(v any) bool {
	switch t {
	case TypeAny:
		return true
	case TypeString:
		_, ok := v.(string)
		return ok
	case TypeInt:
		return isInt(v)
	case TypeBool:
		_, ok := v.(bool)
		return ok
	case TypeList:
		_, ok := v.([]any)
		return ok
	case TypeMap, TypeObject:
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

// Int returns the value of an integer param as int64: params decoded from
// JSON or YAML hold integers as int, int64, uint64 or float64. ok is false
// for any other value.
func Int(v any) (n int64, ok bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		return int64(x), true
	case float64:
		return int64(x), true
	}
	return 0, false
}

func isInt(v any) bool {
	switch n := v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	case float64:
		return n == math.Trunc(n) && !math.IsInf(n, 0)
	case json.Number:
		_, err := n.Int64()
		return err == nil
	}
	return false
}

// Describe names the type of a JSON-compatible value for messages:
// "string", "int", "number", "bool", "list", "map" or "null".
func Describe(v any) string {
	switch n := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	case float32, float64, json.Number:
		if isInt(n) {
			return "int"
		}
		return "number"
	}
	if isInt(v) {
		return "int"
	}
	return fmt.Sprintf("%T", v)
}

// Values is the view of a step's params that checks work on. Before a run,
// params given as expressions are present but their values unknown
// (Dynamic); during a run every value is known. A null value counts as
// absent. The zero Values is empty and ready to use.
type Values struct {
	known   map[string]any
	dynamic map[string]bool
}

// Set records a param whose value is known.
func (v *Values) Set(name string, value any) {
	if v.known == nil {
		v.known = map[string]any{}
	}
	v.known[name] = value
}

// SetDynamic records a param that is given but whose value is known only
// at run time.
func (v *Values) SetDynamic(name string) {
	if v.dynamic == nil {
		v.dynamic = map[string]bool{}
	}
	v.dynamic[name] = true
}

// Has reports whether the param is given: known and not null, or dynamic.
func (v Values) Has(name string) bool {
	if v.dynamic[name] {
		return true
	}
	x, ok := v.known[name]
	return ok && x != nil
}

// Get returns the known, non-null value of a param.
func (v Values) Get(name string) (any, bool) {
	x, ok := v.known[name]
	return x, ok && x != nil
}

// Dynamic reports whether the param is given by an expression whose value
// is not known yet.
func (v Values) Dynamic(name string) bool { return v.dynamic[name] }

// Names returns the names of the given params, sorted.
func (v Values) Names() []string {
	var names []string
	for k := range v.known {
		names = append(names, k)
	}
	for k := range v.dynamic {
		if _, dup := v.known[k]; !dup {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// ParamProblem classifies a ParamError.
type ParamProblem string

// The kinds of param problems. Scenario validation reports them with the
// code "scenario." + the kind, for example scenario.unknown_param.
const (
	ParamUnknown  ParamProblem = "unknown_param"
	ParamMissing  ParamProblem = "missing_param"
	ParamType     ParamProblem = "param_type"
	ParamConflict ParamProblem = "param_conflict"
	ParamInvalid  ParamProblem = "param_invalid"
)

// ParamError is a problem with the params of one step.
type ParamError struct {
	// Param names the param at fault; empty when the problem concerns the
	// params as a whole (such as a missing one of a required group).
	Param   string
	Problem ParamProblem
	Message string
}

func (e *ParamError) Error() string { return e.Message }

// Is reports whether target is ErrBadParams, so callers can branch on
// errors.Is(err, module.ErrBadParams).
func (e *ParamError) Is(target error) bool { return target == ErrBadParams }

// CheckParams checks v against m's declaration: unknown params, missing
// required ones, the types of known values, mutually exclusive groups,
// then m's own Validator if it has one (and the other checks passed). It
// returns every problem found, nil when there is none. Unknown params are
// reported in sorted order so messages are stable.
func CheckParams(m Module, v Values) []*ParamError {
	info := m.Info()
	var errs []*ParamError
	for _, name := range v.Names() {
		if _, ok := info.Param(name); !ok {
			msg := fmt.Sprintf("unknown param %q for %s", name, info.ID)
			if s := Suggest(name, paramNames(info)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			errs = append(errs, &ParamError{Param: name, Problem: ParamUnknown, Message: msg})
		}
	}
	for _, p := range info.Params {
		if p.Required && !v.Has(p.Name) {
			errs = append(errs, &ParamError{Problem: ParamMissing, Message: fmt.Sprintf("missing required param %q for %s", p.Name, info.ID)})
			continue
		}
		x, ok := v.Get(p.Name)
		if !ok {
			continue
		}
		if err := p.Type.Check(x, p.Elem); err != nil {
			errs = append(errs, &ParamError{Param: p.Name, Problem: ParamType, Message: fmt.Sprintf("param %q: %v", p.Name, err)})
			continue
		}
		if len(p.Enum) > 0 {
			if s, _ := x.(string); !slices.Contains(p.Enum, s) {
				errs = append(errs, &ParamError{Param: p.Name, Problem: ParamInvalid, Message: fmt.Sprintf("param %q is %q; want one of %s", p.Name, s, strings.Join(p.Enum, ", "))})
			}
		}
	}
	for _, g := range info.Exclusive {
		var given []string
		for _, name := range g.Params {
			if v.Has(name) {
				given = append(given, name)
			}
		}
		switch {
		case len(given) > 1:
			errs = append(errs, &ParamError{Param: given[1], Problem: ParamConflict, Message: fmt.Sprintf("params %s are mutually exclusive; give at most one", quoteList(given))})
		case len(given) == 0 && g.Required:
			errs = append(errs, &ParamError{Problem: ParamMissing, Message: fmt.Sprintf("%s needs one of the params %s", info.ID, quoteList(g.Params))})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if val, ok := m.(Validator); ok {
		if err := val.ValidateParams(v); err != nil {
			errs = append(errs, paramErrors(err)...)
		}
	}
	return errs
}

// paramErrors flattens err (possibly joined) into ParamErrors; an error
// that is not a *ParamError becomes a ParamInvalid problem.
func paramErrors(err error) []*ParamError {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*ParamError
		for _, e := range j.Unwrap() {
			out = append(out, paramErrors(e)...)
		}
		return out
	}
	var pe *ParamError
	if errors.As(err, &pe) {
		return []*ParamError{pe}
	}
	return []*ParamError{{Problem: ParamInvalid, Message: err.Error()}}
}

// Invalid returns a ParamInvalid error about one param, for Validators.
func Invalid(param, format string, args ...any) *ParamError {
	return &ParamError{Param: param, Problem: ParamInvalid, Message: fmt.Sprintf(format, args...)}
}

// ApplyDefaults returns a copy of params without null values and with the
// declared default of every absent param that has one.
func ApplyDefaults(info Info, params map[string]any) map[string]any {
	out := make(map[string]any, len(params)+len(info.Params))
	for k, v := range params {
		if v != nil {
			out[k] = v
		}
	}
	for _, p := range info.Params {
		if _, ok := out[p.Name]; !ok && p.Default != nil {
			out[p.Name] = p.Default
		}
	}
	return out
}

// DecodeParams decodes the JSON object params into dst strictly: unknown
// fields and trailing data are errors.
func DecodeParams(params json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("decode params: %w", err)
	}
	if dec.More() {
		return errors.New("decode params: trailing data after the params object")
	}
	return nil
}

func paramNames(info Info) []string {
	names := make([]string, len(info.Params))
	for i, p := range info.Params {
		names[i] = p.Name
	}
	return names
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Suggest returns the candidate closest to name when it is close enough to
// be a likely typo (an edit distance of at most 2, and less than half of
// name's length), or "".
func Suggest(name string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := editDistance(name, c)
		if d < bestDist && d*2 < len(name) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b,
// in bytes: insertions, deletions, substitutions and transpositions of
// adjacent bytes each count one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
