package scenario

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
)

// Option configures validation and planning.
type Option func(*options)

type options struct {
	lookup func(module.ID) (module.Module, error)
	env    *expr.Env
}

// WithModules makes validation look modules up with lookup instead of
// the process-wide registry (module.Lookup).
func WithModules(lookup func(module.ID) (module.Module, error)) Option {
	return func(o *options) { o.lookup = lookup }
}

// WithEnv makes validation compile expressions in env instead of the
// shared one (expr.Shared).
func WithEnv(env *expr.Env) Option {
	return func(o *options) { o.env = env }
}

// compiled is the outcome of validation: the planned steps and every
// problem found, parse problems included.
type compiled struct {
	steps    []*PlanStep
	problems problems
	// inputRefs are the input.<name> references of a scenario that
	// declares no inputs, checked against the run's input by Plan.
	inputRefs []inputRef
}

// inputRef is one input.<name> reference: where, in what, and whether it
// tolerates the input's absence.
type inputRef struct {
	pos      Pos
	label    string
	where    string
	name     string
	optional bool
}

// Validate checks everything that can be checked before a run, and
// reports every problem, together with Parse's: modules exist, steps run
// on the side their module needs, params match the modules' declarations,
// expressions compile and have the right types, references name earlier
// steps and declared inputs, input declarations are consistent. The
// error is an *Error. Validation runs once per Scenario; later calls
// return the same result.
func (s *Scenario) Validate(opts ...Option) error {
	c, err := s.compile(opts)
	if err != nil {
		return err
	}
	return c.problems.err()
}

func (s *Scenario) compile(opts []Option) (*compiled, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compiled != nil {
		return s.compiled, nil
	}
	o := options{lookup: module.Lookup}
	for _, opt := range opts {
		opt(&o)
	}
	if o.env == nil {
		env, err := expr.Shared()
		if err != nil {
			return nil, err
		}
		o.env = env
	}
	c := &checker{
		s:      s,
		env:    o.env,
		lookup: o.lookup,
		out:    &compiled{},
		names:  map[string]int{},
		inputs: map[string]*InputDecl{},
	}
	c.ps = &c.out.problems
	c.ps.list = append(c.ps.list, s.parseErrs.list...)
	for _, st := range s.Steps {
		if _, dup := c.names[st.Name]; st.Name != "" && !dup {
			c.names[st.Name] = st.index
		}
	}
	for _, d := range s.Inputs {
		c.inputs[d.Name] = d
		c.checkInputDecl(d)
	}
	for _, st := range s.Steps {
		c.out.steps = append(c.out.steps, c.step(st))
	}
	s.compiled = c.out
	return c.out, nil
}

type checker struct {
	s      *Scenario
	env    *expr.Env
	lookup func(module.ID) (module.Module, error)
	out    *compiled
	ps     *problems
	names  map[string]int // step name -> index of its step
	inputs map[string]*InputDecl
}

func (c *checker) checkInputDecl(d *InputDecl) {
	if !d.HasDefault || d.Default == nil {
		return
	}
	if err := d.Type.Check(d.Default, ""); err != nil {
		c.ps.add(d.defaultNode.pos, CodeInputType, "default of input %q: %v", d.Name, err)
	}
}

// step checks one step and returns its plan.
func (c *checker) step(st *Step) *PlanStep {
	ps := &PlanStep{
		Index:          st.index,
		Name:           st.Name,
		Pos:            st.Pos,
		ID:             st.Module,
		Keeper:         st.Keeper,
		AnyErrorsFatal: st.AnyErrorsFatal,
		Forks:          st.Forks,
		Retries:        st.Retries,
		RetryDelay:     st.RetryDelay,
		Connect:        st.Connect,
		Timeout:        st.Timeout,
	}
	label := st.label()

	// The module.
	var mod module.Module
	if st.moduleNode != nil && st.Module != "" {
		m, err := c.lookup(st.Module)
		switch {
		case errors.Is(err, module.ErrInvalidID):
			c.ps.add(st.moduleNode.pos, CodeUnknownModule, "%s: %q is not a module ID (namespace.module.state, such as core.pkg.installed)", label, st.Module)
		case err != nil:
			msg := fmt.Sprintf("%s: unknown module %s", label, st.Module)
			if sugg := suggestModule(st.Module); sugg != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", sugg)
			}
			c.ps.add(st.moduleNode.pos, CodeUnknownModule, "%s", msg)
		default:
			mod = m
		}
	}
	ps.Module = mod

	// Where it runs.
	c.checkSide(st, mod)
	scope := expr.Scope(0)
	if !st.Keeper {
		scope = expr.ScopeSoul
	}
	if st.on != nil && !st.Keeper {
		ps.on = c.targets(st)
	}
	if st.Keeper {
		if st.forksKey != nil {
			c.ps.add(st.forksKey.pos, CodeFieldNotApplicable, "%s: forks applies to soul-side steps; a keeper step has one target", label)
		}
		if st.connectKey != nil {
			c.ps.add(st.connectKey.pos, CodeFieldNotApplicable, "%s: connect applies to soul-side steps; a keeper step connects to nothing", label)
		}
	}
	if st.Retries > 0 && mod != nil && !mod.Info().Idempotent {
		c.ps.add(st.retriesKey.pos, CodeRetriesNotIdempotent, "%s: %s is not idempotent, so a retry could repeat its side effects; retries are refused (guard the step with when/changed_when instead)", label, st.Module)
	}

	// Conditions and params.
	if st.when != nil {
		ps.when = c.condition(st.when, scope, st, "when")
	}
	ps.params = c.params(st, mod, scope)
	if st.changedWhen != nil {
		ps.changedWhen = c.condition(st.changedWhen, scope|expr.ScopeResult, st, "changed_when")
	}
	if st.failedWhen != nil {
		ps.failedWhen = c.condition(st.failedWhen, scope|expr.ScopeResult, st, "failed_when")
	}
	return ps
}

// checkSide reports a step whose `on` does not fit its module's side.
func (c *checker) checkSide(st *Step, mod module.Module) {
	label := st.label()
	anchor := st.Pos
	if st.moduleNode != nil {
		anchor = st.moduleNode.pos
	}
	if mod == nil {
		if st.on == nil {
			c.ps.add(anchor, CodeMissingField, "%s has no `on`: name the souls it runs on, or keeper", label)
		}
		return
	}
	switch info := mod.Info(); {
	case info.Side == module.SideKeeper && st.on == nil:
		c.ps.add(anchor, CodeKeeperModuleNeedsKeep, "%s: %s runs inside the keeper, so the step must say `on: keeper`", label, info.ID)
	case info.Side == module.SideKeeper && !st.Keeper:
		c.ps.add(st.on.pos, CodeKeeperModuleNeedsKeep, "%s: %s runs inside the keeper, so the step must say `on: keeper`, not name souls", label, info.ID)
	case info.Side == module.SideSoul && st.on == nil:
		c.ps.add(anchor, CodeMissingField, "%s has no `on`: name the souls %s runs on (a SID, a list of SIDs or an expression)", label, info.ID)
	case info.Side == module.SideSoul && st.Keeper:
		c.ps.add(st.on.pos, CodeSoulModuleOnKeeper, "%s: %s runs on souls, not on the keeper; `on` must name souls (a SID, a list of SIDs or an expression)", label, info.ID)
	}
}

// sidPattern is the grammar of a soul ID: a lower-case DNS name.
var sidPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// CheckSID reports why sid is not a valid soul ID (a lower-case DNS name
// of at most 253 characters), or nil.
func CheckSID(sid string) error {
	switch {
	case sid == "":
		return errors.New("a soul ID must not be empty")
	case len(sid) > 253:
		return fmt.Errorf("soul ID %.20q… is longer than 253 characters", sid)
	case sid == module.Keeper:
		return errors.New("keeper is not a soul: a step runs either on the keeper (`on: keeper`) or on souls")
	case !sidPattern.MatchString(sid):
		return fmt.Errorf("%q is not a soul ID (a lower-case DNS name such as web-1.example.com)", sid)
	case strings.HasPrefix(sid, "steps.") || strings.HasPrefix(sid, "input."):
		return fmt.Errorf("%q looks like an expression, not a soul ID: write it as \"${ %s }\"", sid, sid)
	}
	return nil
}

// targets compiles the `on` of a soul-side step.
func (c *checker) targets(st *Step) *value {
	n := st.on
	label := st.label()
	target := func(it *node, where string) *value {
		if it.kind != kindString {
			c.ps.add(it.pos, CodeFieldType, "%s: %s must be a SID or an expression, not %s", label, where, it.kind.a())
			return nil
		}
		v := c.compileValue(it, 0, st, where)
		switch {
		case v.tpl != nil && v.tpl.Whole() != nil:
			if err := v.tpl.Whole().Expect(expr.KindString, expr.KindList); err != nil {
				c.ps.add(c.s.src.at(it, 2), CodeExpressionType, "%s: %s: the expression must give a SID or a list of SIDs; it has type %s", label, where, v.typeName())
			}
		case !v.dyn && !v.bad:
			if err := CheckSID(v.lit.(string)); err != nil {
				c.ps.add(it.pos, CodeBadTarget, "%s: %s: %v", label, where, err)
			}
		}
		return v
	}
	switch n.kind {
	case kindString:
		return target(n, "on")
	case kindList:
		if len(n.items) == 0 {
			c.ps.add(n.pos, CodeBadTarget, "%s: on lists no souls", label)
			return nil
		}
		v := &value{n: n}
		for i, it := range n.items {
			iv := target(it, fmt.Sprintf("on[%d]", i))
			if iv == nil {
				return nil
			}
			v.items = append(v.items, iv)
			v.dyn = v.dyn || iv.dyn
		}
		if !v.dyn {
			v.lit = v.plainLiteral()
		}
		return v
	}
	c.ps.add(n.pos, CodeFieldType, "%s: on must be keeper, a SID, a list of SIDs or an expression, not %s", label, n.kind.a())
	return nil
}

// condition compiles when, changed_when or failed_when: a bare CEL
// expression, one whole ${ } expression, or true/false.
func (c *checker) condition(n *node, scope expr.Scope, st *Step, where string) *condition {
	label := st.label()
	switch n.kind {
	case kindBool:
		b := n.value.(bool)
		return &condition{constant: &b}
	case kindString:
	default:
		c.ps.add(n.pos, CodeFieldType, "%s: %s must be a CEL expression or true/false, not %s", label, where, n.kind.a())
		return nil
	}
	src, base := n.str(), 0
	if strings.Contains(src, "${") {
		segs, err := expr.Split(src)
		if err != nil {
			c.exprErrors(err, n, 0, st, where)
			return nil
		}
		if len(segs) != 1 || !segs[0].Expr || segs[0].Offset != 2 || len(src) != len(segs[0].Text)+3 {
			c.ps.add(n.pos, CodeBadExpression, "%s: %s is one CEL expression; write it bare, without ${ } or text around it", label, where)
			return nil
		}
		src, base = segs[0].Text, 2
	}
	prog, err := c.env.Compile(src, scope)
	if err != nil {
		c.exprErrors(err, n, base, st, where)
		return nil
	}
	if err := prog.Expect(expr.KindBool); err != nil {
		c.ps.add(c.s.src.at(n, base), CodeExpressionType, "%s: %s must be a bool expression; this one has type %s", label, where, prog.TypeName())
	}
	c.checkRefs(prog.Refs(), n, base, st, where)
	return &condition{prog: prog, src: src}
}

// params compiles a step's params and checks them against the module.
func (c *checker) params(st *Step, mod module.Module, scope expr.Scope) *value {
	label := st.label()
	n := st.params
	if n == nil || n.kind == kindNull {
		n = &node{kind: kindMap, pos: st.Pos}
		if st.paramsKey != nil {
			n.pos = st.paramsKey.pos
		}
	}
	if n.kind != kindMap {
		c.ps.add(n.pos, CodeFieldType, "%s: params must be a map of param names to values, not %s", label, n.kind.a())
		return nil
	}
	v := c.compileValue(n, scope, st, "params")
	if mod == nil {
		return v
	}
	info := mod.Info()
	var vals module.Values
	for i, name := range v.keys {
		pv := v.vals[i]
		if pv.bad {
			vals.SetDynamic(name)
			continue
		}
		if !pv.dyn {
			vals.Set(name, pv.lit)
			if spec, ok := info.Param(name); ok && spec.Secret && pv.lit != nil && pv.lit != "" {
				c.ps.add(pv.n.pos, CodeSecretLiteral, "%s: param %q is secret: written in the scenario it would be stored and shown in clear; pass it through a secret input, such as \"${ input.%s }\"", label, name, name)
			}
			continue
		}
		vals.SetDynamic(name)
		if spec, ok := info.Param(name); ok && !kindFits(pv.kind(), spec.Type) {
			c.ps.add(pv.n.pos, CodeParamType, "%s: param %q: want %s, the expression gives %s", label, name, spec.Type, pv.typeName())
		}
	}
	missingAt := st.Pos
	if st.paramsKey != nil {
		missingAt = st.paramsKey.pos
	} else if st.moduleNode != nil {
		missingAt = st.moduleNode.pos
	}
	for _, pe := range module.CheckParams(mod, vals) {
		pos := missingAt
		if pe.Param != "" {
			if k, pv := n.get(pe.Param); k != nil {
				pos = pv.pos
				if pe.Problem == module.ParamUnknown {
					pos = k.pos
				}
			}
		}
		c.ps.add(pos, "scenario."+string(pe.Problem), "%s: %s", label, pe.Message)
	}
	return v
}

// kindFits reports whether an expression of kind k may give a param of
// type t. Kinds known only at run time fit; null means absent.
func kindFits(k expr.Kind, t module.Type) bool {
	if k == expr.KindDyn || k == expr.KindNull || t == module.TypeAny {
		return true
	}
	switch t {
	case module.TypeString:
		return k == expr.KindString
	case module.TypeInt:
		return k == expr.KindInt || k == expr.KindUint
	case module.TypeBool:
		return k == expr.KindBool
	case module.TypeList:
		return k == expr.KindList
	case module.TypeMap, module.TypeObject:
		return k == expr.KindMap
	}
	return false
}

// exprErrors reports the expression errors in err, located in the string
// of n; base is the offset in that string of the text that was compiled.
func (c *checker) exprErrors(err error, n *node, base int, st *Step, where string) {
	errs := expr.Errors(err)
	if len(errs) == 0 {
		c.ps.add(n.pos, CodeBadExpression, "%s: %s: %v", st.label(), where, err)
		return
	}
	for _, e := range errs {
		code := CodeBadExpression
		switch {
		case errors.Is(e, expr.ErrType):
			code = CodeExpressionType
		case errors.Is(e, expr.ErrInvalid):
			code = CodeExpressionInvalid
		}
		c.ps.add(c.s.src.at(n, base+e.Offset), code, "%s: %s: %s", st.label(), where, e.Message)
	}
}

// stepFieldNames are what steps.<name> holds.
var stepFieldNames = []string{"output", "changed", "status"}

// checkRefs checks the steps.* and input.* references of an expression
// in the string of n (base as for exprErrors).
func (c *checker) checkRefs(refs []expr.Ref, n *node, base int, st *Step, where string) {
	label := st.label()
	for _, r := range refs {
		if len(r.Path) == 0 {
			continue
		}
		pos := c.s.src.at(n, base+r.Offset)
		name := r.Path[0]
		switch r.Var {
		case "steps":
			idx, ok := c.names[name]
			switch {
			case !ok:
				msg := fmt.Sprintf("%s: %s refers to steps.%s, but no step has that name", label, where, name)
				if sugg := module.Suggest(name, c.stepNames()); sugg != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", sugg)
				}
				c.ps.add(pos, CodeUnknownStepRef, "%s", msg)
				continue
			case idx == st.index:
				c.ps.add(pos, CodeForwardStepRef, "%s: %s refers to its own step; a step sees only earlier steps (its own result is `result` in changed_when and failed_when)", label, where)
			case idx > st.index:
				c.ps.add(pos, CodeForwardStepRef, "%s: %s refers to step %q, which comes later; a step sees only earlier steps", label, where, name)
			}
			if len(r.Path) > 1 && !slices.Contains(stepFieldNames, r.Path[1]) {
				c.ps.add(pos, CodeUnknownStepField, "%s: %s refers to steps.%s.%s; a step has only %s", label, where, name, r.Path[1], strings.Join(stepFieldNames, ", "))
			}
		case "input":
			if !c.s.DeclaresInputs {
				c.out.inputRefs = append(c.out.inputRefs, inputRef{pos: pos, label: label, where: where, name: name, optional: r.Optional})
				continue
			}
			if c.inputs[name] != nil {
				continue
			}
			msg := fmt.Sprintf("%s: %s refers to input.%s, which the scenario's inputs do not declare", label, where, name)
			if sugg := module.Suggest(name, c.inputNames()); sugg != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", sugg)
			}
			c.ps.add(pos, CodeUnknownInputRef, "%s", msg)
		}
	}
}

func (c *checker) stepNames() []string {
	var names []string
	for _, st := range c.s.Steps {
		names = append(names, st.Name)
	}
	return names
}

func (c *checker) inputNames() []string {
	var names []string
	for _, d := range c.s.Inputs {
		names = append(names, d.Name)
	}
	return names
}

// suggestModule returns the registered module ID closest to id, if any is
// close.
func suggestModule(id module.ID) string {
	var ids []string
	for _, m := range module.IDs() {
		ids = append(ids, string(m))
	}
	return module.Suggest(string(id), ids)
}
