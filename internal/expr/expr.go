// Package expr is the expression language of scenarios: a CEL environment
// (cel.dev/cel-go) with the scenario variables, and ${ } interpolation of
// expressions in strings.
//
// Variables, all maps with string keys:
//
//   - input: the run's input, after defaults were applied.
//   - steps: one entry per earlier step, steps.<name>.{output, changed,
//     status}; for soul-side steps output is a map by SID.
//   - soul: the current target's registry record and facts (soul-side
//     steps only, ScopeSoul).
//   - result: the current module result, {output, changed, failed,
//     error} (changed_when and failed_when only, ScopeResult).
//
// Beyond CEL's standard library and extensions, quote(s) returns the string
// s quoted for a POSIX shell (internal/shell.Quote), so that a value
// spliced into a command line stays one literal word:
// cmd: "ls -l ${ quote(input.dir) }".
//
// A string that is exactly one "${ expr }" evaluates to the expression's
// value with its own type (an int stays an int, a list a list); inside a
// longer string each value is rendered as text (see Text). "$${" writes a
// literal "${".
//
// Compiling (syntax and type checks) is separate from evaluating, and an
// Env caches compiled programs by their text and scope, so the same
// expression in many runs is compiled once.
package expr

import (
	"container/list"
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"

	"github.com/soulstack/soulstack/internal/shell"
)

// Scope selects the variables an expression may use beyond input and
// steps.
type Scope uint8

// Scopes combine with |.
const (
	// ScopeSoul declares soul: the expression is evaluated per target of a
	// soul-side step.
	ScopeSoul Scope = 1 << iota
	// ScopeResult declares result: the expression judges a module's
	// result (changed_when, failed_when).
	ScopeResult
)

// scopeCount is the number of distinct scopes.
const scopeCount = 4

// Variables returns the names of the variables declared in scope.
func (s Scope) Variables() []string {
	vars := []string{"input", "steps"}
	if s&ScopeSoul != 0 {
		vars = append(vars, "soul")
	}
	if s&ScopeResult != 0 {
		vars = append(vars, "result")
	}
	return vars
}

// Defaults of an Env.
const (
	// DefaultCacheSize is how many compiled programs an Env keeps.
	DefaultCacheSize = 4096
	// DefaultCostLimit bounds the work of one evaluation, in CEL cost
	// units (roughly one per operation), so a runaway comprehension
	// fails instead of hanging a run.
	DefaultCostLimit = 1_000_000
	// MaxExpressionLength is the longest expression source accepted, in
	// characters.
	MaxExpressionLength = 16 << 10
)

// Env compiles and caches expressions. It is safe for concurrent use.
type Env struct {
	envs      [scopeCount]*cel.Env
	costLimit uint64
	cache     *cache
}

// Option configures an Env.
type Option func(*Env)

// WithCacheSize sets how many compiled programs the Env keeps (least
// recently used ones are dropped first).
func WithCacheSize(n int) Option { return func(e *Env) { e.cache = newCache(n) } }

// WithCostLimit sets the cost limit of one evaluation.
func WithCostLimit(n uint64) Option { return func(e *Env) { e.costLimit = n } }

// NewEnv returns an Env with the scenario variables and CEL's standard
// library plus the strings, encoders, math, lists, sets and optional
// types extensions.
func NewEnv(opts ...Option) (*Env, error) {
	e := &Env{costLimit: DefaultCostLimit, cache: newCache(DefaultCacheSize)}
	for _, o := range opts {
		o(e)
	}
	dynMap := cel.MapType(cel.StringType, cel.DynType)
	base, err := cel.NewEnv(
		cel.Variable("input", dynMap),
		cel.Variable("steps", dynMap),
		ext.Strings(),
		ext.Encoders(),
		ext.Math(),
		ext.Lists(),
		ext.Sets(),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		quoteFunction,
		cel.ParserExpressionSizeLimit(MaxExpressionLength),
	)
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	for s := Scope(0); s < scopeCount; s++ {
		var extra []cel.EnvOption
		if s&ScopeSoul != 0 {
			extra = append(extra, cel.Variable("soul", dynMap))
		}
		if s&ScopeResult != 0 {
			extra = append(extra, cel.Variable("result", dynMap))
		}
		if e.envs[s], err = base.Extend(extra...); err != nil {
			return nil, fmt.Errorf("cel environment for scope %d: %w", s, err)
		}
	}
	return e, nil
}

// quoteFunction declares quote(string) -> string, POSIX shell quoting. A
// NUL byte, which no shell word can hold, is an evaluation error.
var quoteFunction = cel.Function("quote",
	cel.Overload("quote_string", []*cel.Type{cel.StringType}, cel.StringType,
		cel.UnaryBinding(func(v ref.Val) ref.Val {
			s, ok := v.(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(v)
			}
			if strings.IndexByte(string(s), 0) >= 0 {
				return types.NewErr("quote: the value contains a NUL byte, which no shell word can hold")
			}
			return types.String(shell.Quote(string(s)))
		})))

// shared is the process-wide Env returned by Shared.
var shared = sync.OnceValues(func() (*Env, error) { return NewEnv() })

// Shared returns a process-wide Env with the default options.
func Shared() (*Env, error) { return shared() }

// Kind is the kind of value an expression produces, as far as the type
// checker knows it.
type Kind string

// The kinds of expression results.
const (
	// KindDyn means the type is only known at run time (a value read from
	// input or steps).
	KindDyn    Kind = "dyn"
	KindBool   Kind = "bool"
	KindInt    Kind = "int"
	KindUint   Kind = "uint"
	KindDouble Kind = "double"
	KindString Kind = "string"
	KindBytes  Kind = "bytes"
	KindList   Kind = "list"
	KindMap    Kind = "map"
	KindNull   Kind = "null"
	// KindOther covers timestamps, durations, types and optionals.
	KindOther Kind = "other"
)

func kindOf(t *cel.Type) Kind {
	switch t.Kind() {
	case types.DynKind, types.AnyKind, types.TypeParamKind, types.ErrorKind:
		return KindDyn
	case types.BoolKind:
		return KindBool
	case types.IntKind:
		return KindInt
	case types.UintKind:
		return KindUint
	case types.DoubleKind:
		return KindDouble
	case types.StringKind:
		return KindString
	case types.BytesKind:
		return KindBytes
	case types.ListKind:
		return KindList
	case types.MapKind:
		return KindMap
	case types.NullTypeKind:
		return KindNull
	}
	return KindOther
}

// Ref is a use of a scenario variable in an expression: input.<name>,
// steps.<name>.<field>, soul.<name> or result.<name>.
type Ref struct {
	// Var is the variable: input, steps, soul or result.
	Var string
	// Path holds the names selected from the variable, at most two
	// (steps.build.output gives ["build", "output"]); it is empty or
	// shorter when the expression indexes with a computed key.
	Path []string
	// Offset is the byte offset of the variable's name in the
	// expression's text (in the template's text for Template.Refs).
	Offset int
	// Optional says the first name is selected in a way that tolerates
	// its absence: has(input.x), input.?x, input[?"x"].
	Optional bool
}

// Program is a compiled expression.
type Program struct {
	src      string
	kind     Kind
	typeName string
	refs     []Ref
	prg      cel.Program
}

// Source returns the expression's text.
func (p *Program) Source() string { return p.src }

// Kind returns the kind of the expression's result.
func (p *Program) Kind() Kind { return p.kind }

// TypeName returns the CEL type of the result, such as "list(dyn)".
func (p *Program) TypeName() string { return p.typeName }

// Refs returns the expression's uses of scenario variables.
func (p *Program) Refs() []Ref { return p.refs }

// Expect returns an *Error with ErrType unless the result's kind is one
// of kinds or is only known at run time (KindDyn).
func (p *Program) Expect(kinds ...Kind) error {
	if p.kind == KindDyn {
		return nil
	}
	for _, k := range kinds {
		if p.kind == k {
			return nil
		}
	}
	want := make([]string, len(kinds))
	for i, k := range kinds {
		want[i] = string(k)
	}
	return newError(ErrType, p.src, 0, fmt.Sprintf("expression has type %s; want %s", p.typeName, strings.Join(want, " or ")))
}

// Compile parses and type-checks the CEL expression src in scope. The
// error holds every problem found, each an *Error located in src.
// Programs are cached by scope and text.
func (e *Env) Compile(src string, scope Scope) (*Program, error) {
	scope &= scopeCount - 1
	key := string(rune('0'+scope)) + src
	if p, err, ok := e.cache.get(key); ok {
		return p, err
	}
	p, err := e.compile(src, scope)
	e.cache.put(key, p, err)
	return p, err
}

func (e *Env) compile(src string, scope Scope) (_ *Program, err error) {
	defer recoverInvalid(src, &err)
	if strings.TrimSpace(src) == "" {
		return nil, newError(ErrSyntax, src, 0, "empty expression")
	}
	if n := utf8.RuneCountInString(src); n > MaxExpressionLength {
		return nil, newError(ErrSyntax, src, 0, fmt.Sprintf("expression is %d characters long; at most %d are allowed", n, MaxExpressionLength))
	}
	env := e.envs[scope]
	parsed, iss := env.Parse(src)
	if iss.Err() != nil {
		return nil, issuesError(ErrSyntax, src, iss, scope)
	}
	checked, iss := env.Check(parsed)
	if iss.Err() != nil {
		return nil, issuesError(ErrCheck, src, iss, scope)
	}
	if err := checkMapKeys(checked, src); err != nil {
		return nil, err
	}
	prg, err := env.Program(checked,
		cel.CostLimit(e.costLimit),
		cel.InterruptCheckFrequency(64),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, newError(ErrCheck, src, 0, err.Error())
	}
	out := checked.OutputType()
	return &Program{
		src:      src,
		kind:     kindOf(out),
		typeName: cel.FormatCELType(out),
		refs:     findRefs(checked, src),
		prg:      prg,
	}, nil
}

// issuesError turns CEL issues into *Error values located in src.
func issuesError(kind error, src string, iss *cel.Issues, scope Scope) error {
	var errs []error
	for _, ce := range iss.Errors() {
		msg := strings.ReplaceAll(ce.Message, " (in container '')", "")
		if strings.HasPrefix(msg, "undeclared reference to '") {
			msg += fmt.Sprintf(" (variables here: %s)", strings.Join(scope.Variables(), ", "))
		}
		off := 0
		if loc := ce.Location; loc != nil && loc.Line() > 0 {
			off = byteOffset(src, loc.Line(), loc.Column())
		}
		errs = append(errs, newError(kind, src, off, msg))
	}
	if len(errs) == 0 {
		errs = append(errs, newError(kind, src, 0, iss.String()))
	}
	return join(errs)
}

// byteOffset converts a 1-based line and 0-based character column of src
// to a byte offset.
func byteOffset(src string, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		nl := strings.IndexByte(src[off:], '\n')
		if nl < 0 {
			return len(src)
		}
		off += nl + 1
	}
	return runeOffset(src, off, col)
}

// runeOffset returns the byte offset n characters after byte offset off.
func runeOffset(src string, off, n int) int {
	for ; n > 0 && off < len(src); n-- {
		_, size := utf8.DecodeRuneInString(src[off:])
		off += size
	}
	return off
}

// Vars are the values of the variables for one evaluation. Values must be
// JSON-compatible Go values: nil, bool, string, int64 (or another integer
// type), float64, []any and map[string]any. Nil maps are empty.
type Vars struct {
	Input  map[string]any
	Steps  map[string]any
	Soul   map[string]any
	Result map[string]any
}

// StepValue returns the value a step has under steps.<name>.
func StepValue(output any, changed bool, status string) map[string]any {
	return map[string]any{"output": output, "changed": changed, "status": status}
}

// ResultValue returns the value of result in changed_when and failed_when:
// the module's output, its own changed verdict, whether it failed and its
// error message ("" when it did not fail).
func ResultValue(output any, changed, failed bool, errMsg string) map[string]any {
	return map[string]any{"output": output, "changed": changed, "failed": failed, "error": errMsg}
}

func (v Vars) activation() map[string]any {
	nonNil := func(m map[string]any) map[string]any {
		if m == nil {
			return map[string]any{}
		}
		return m
	}
	return map[string]any{
		"input":  nonNil(v.Input),
		"steps":  nonNil(v.Steps),
		"soul":   nonNil(v.Soul),
		"result": nonNil(v.Result),
	}
}

// Eval evaluates the program and returns its value as a JSON-compatible Go
// value (see Native). Failures are *Error values with ErrEval, or
// ErrInvalid when cel-go panicked.
func (p *Program) Eval(ctx context.Context, vars Vars) (_ any, err error) {
	defer recoverInvalid(p.src, &err)
	if err := ctx.Err(); err != nil {
		return nil, newError(ErrEval, p.src, 0, err.Error())
	}
	out, _, err := p.prg.ContextEval(ctx, vars.activation())
	if err != nil {
		return nil, newError(ErrEval, p.src, 0, err.Error())
	}
	v, err := Native(out)
	if err != nil {
		return nil, newError(ErrEval, p.src, 0, err.Error())
	}
	return v, nil
}

// EvalBool evaluates a program that must produce a bool.
func (p *Program) EvalBool(ctx context.Context, vars Vars) (bool, error) {
	v, err := p.Eval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, newError(ErrEval, p.src, 0, fmt.Sprintf("expression produced %s; want bool", describe(v)))
	}
	return b, nil
}

// cache is a bounded least-recently-used map of compiled programs.
type cache struct {
	mu    sync.Mutex
	max   int
	order *list.List
	items map[string]*list.Element
}

type cacheEntry struct {
	key  string
	prog *Program
	err  error
}

func newCache(n int) *cache {
	return &cache{max: max(n, 1), order: list.New(), items: map[string]*list.Element{}}
}

func (c *cache) get(key string) (*Program, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, nil, false
	}
	c.order.MoveToFront(el)
	ent := el.Value.(*cacheEntry)
	return ent.prog, ent.err, true
}

func (c *cache) put(key string, p *Program, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, prog: p, err: err})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}

// len returns the number of cached programs.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
