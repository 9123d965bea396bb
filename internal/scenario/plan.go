package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
)

// Plan is a validated scenario bound to a checked input, ready for an
// engine to execute: ordered steps with their modules resolved and their
// expressions compiled. A Plan is immutable and safe for concurrent use.
type Plan struct {
	// Name and File identify the scenario.
	Name string
	File string
	// Input is the run's input: validated, normalized (integers as
	// int64) and with defaults applied. It holds secrets in clear:
	// never print it without masking.
	Input map[string]any
	// SecretInputs names the inputs whose values are secret: declared
	// secret, or referred to by a param its module declares secret.
	SecretInputs []string
	// Steps are the steps in order.
	Steps []*PlanStep
}

// Secret is SecretInputs as a set: what a run records as its secret
// inputs, and what its secret set is filled from (secret.Set.AddInput).
func (p *Plan) Secret() map[string]bool {
	out := make(map[string]bool, len(p.SecretInputs))
	for _, name := range p.SecretInputs {
		out[name] = true
	}
	return out
}

// PlanStep is one step of a Plan.
type PlanStep struct {
	// Index is the step's position in the scenario, from 0.
	Index int
	Name  string
	Pos   Pos
	// ID is the module's ID and Module the registered module.
	ID     module.ID
	Module module.Module
	// Keeper reports whether the step runs on the keeper (`on: keeper`).
	Keeper bool
	// AnyErrorsFatal makes one failed target fail the run.
	AnyErrorsFatal bool
	// Forks bounds how many targets run at once; 0 means the run's
	// default.
	Forks int
	// Retries and RetryDelay say how a failed target is tried again.
	Retries    int
	RetryDelay time.Duration
	// Connect overrides the transport's connection retries; nil keeps
	// the defaults.
	Connect *Connect
	// Timeout bounds one target's run of the module; 0 means only the
	// run's timeout applies.
	Timeout time.Duration

	on                      *value
	when                    *condition
	params                  *value
	changedWhen, failedWhen *condition
}

// condition is a compiled when, changed_when or failed_when.
type condition struct {
	constant *bool
	prog     *expr.Program
	src      string
}

func (c *condition) eval(ctx context.Context, vars expr.Vars) (bool, error) {
	if c.constant != nil {
		return *c.constant, nil
	}
	return c.prog.EvalBool(ctx, vars)
}

// Plan binds the scenario to input: it validates the scenario (see
// Validate) and the input against the declared inputs, and returns a Plan.
// The error is an *Error listing the problems of both.
func (s *Scenario) Plan(input map[string]any, opts ...Option) (*Plan, error) {
	c, err := s.compile(opts)
	if err != nil {
		return nil, err
	}
	ps := problems{list: slices.Clone(c.problems.list)}
	in := s.checkInput(input, &ps)
	// A scenario that declares no inputs takes any input, but a reference
	// to a name the input does not hold would fail at run time: say so
	// now, as a run would, unless the scenario tests for the name
	// somewhere (has(input.x) ? input.x : …, input.?x).
	tested := map[string]bool{}
	for _, r := range c.inputRefs {
		tested[r.name] = tested[r.name] || r.optional
	}
	for _, r := range c.inputRefs {
		if _, ok := in[r.name]; !ok && !tested[r.name] {
			ps.add(r.pos, CodeUnknownInputRef, "%s: %s refers to input.%s, which the input does not hold and the scenario does not declare (declare it under inputs:, give it, or write input.?%s.orValue(…))",
				r.label, r.where, r.name, r.name)
		}
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	p := &Plan{Name: s.Name, File: s.File, Input: in, Steps: c.steps}
	p.SecretInputs = s.secretInputs(c.steps, in)
	return p, nil
}

// secretInputs names the inputs whose values are secret: those declared
// secret, and those a param the step's module declares secret refers to
// (db_password: "${ input.pw }" makes pw secret, declared so or not):
// a value that reaches a secret param is secret wherever it came from. A
// secret param that names an input only at run time (input[key]) makes
// every input secret.
func (s *Scenario) secretInputs(steps []*PlanStep, input map[string]any) []string {
	var names []string
	add := func(name string) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, d := range s.Inputs {
		if d.Secret {
			add(d.Name)
		}
	}
	for _, st := range steps {
		refs, dynamic := st.secretParamInputs()
		if dynamic {
			for _, d := range s.Inputs {
				add(d.Name)
			}
			for k := range input {
				add(k)
			}
		}
		for _, r := range refs {
			add(r)
		}
	}
	slices.Sort(names)
	return names
}

// secretParamInputs names the inputs the step's secret params refer to,
// and reports whether one of them names an input only at run time.
func (st *PlanStep) secretParamInputs() (names []string, dynamic bool) {
	secret := st.SecretParams()
	if st.params == nil || len(secret) == 0 {
		return nil, false
	}
	for i, k := range st.params.keys {
		if !slices.Contains(secret, k) {
			continue
		}
		st.params.vals[i].inputRefs(func(name string) {
			if name == "" {
				dynamic = true
			} else {
				names = append(names, name)
			}
		})
	}
	return names, dynamic
}

// inputRefs calls f with the name of every input an expression in v
// refers to, and with "" for one it names only at run time.
func (v *value) inputRefs(f func(string)) {
	if v == nil || !v.dyn {
		return
	}
	if v.tpl != nil {
		for _, r := range v.tpl.Refs() {
			if r.Var == "input" {
				if len(r.Path) == 0 {
					f("")
				} else {
					f(r.Path[0])
				}
			}
		}
		return
	}
	for _, it := range v.items {
		it.inputRefs(f)
	}
	for _, it := range v.vals {
		it.inputRefs(f)
	}
}

// Load parses, validates and plans a scenario in one call, reporting the
// problems of all three together.
func Load(file string, src []byte, input map[string]any, opts ...Option) (*Plan, error) {
	s, err := Parse(file, src)
	if s == nil {
		return nil, err
	}
	return s.Plan(input, opts...)
}

// Check parses and validates a scenario without an input, as a client
// does before submitting it.
func Check(file string, src []byte, opts ...Option) (*Scenario, error) {
	s, err := Parse(file, src)
	if s == nil {
		return nil, err
	}
	if err := s.Validate(opts...); err != nil {
		return s, err
	}
	return s, nil
}

// Step returns the step called name.
func (p *Plan) Step(name string) (*PlanStep, bool) {
	for _, st := range p.Steps {
		if st.Name == name {
			return st, true
		}
	}
	return nil, false
}

// Runtime error codes of PlanStep methods.
const (
	CodeEvalTargets = "step.targets"
	CodeEvalWhen    = "step.when"
	CodeEvalParams  = "step.params"
	CodeEvalResult  = "step.result"
)

// StepError is a failure to evaluate part of a step during a run.
type StepError struct {
	Step string
	// Code is one of the step.* codes.
	Code string
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("step %q: %v", e.Step, e.Err) }

// Unwrap returns the cause.
func (e *StepError) Unwrap() error { return e.Err }

func (st *PlanStep) fail(code string, err error) error {
	return &StepError{Step: st.Name, Code: code, Err: err}
}

// Targets evaluates `on`: the SIDs the step runs on, in order and without
// duplicates, or [module.Keeper] for a keeper step. vars.Soul and
// vars.Result are not visible to `on`. An expression may give a SID or a
// list of SIDs; list entries that give lists are flattened.
func (st *PlanStep) Targets(ctx context.Context, vars expr.Vars) ([]string, error) {
	if st.Keeper {
		return []string{module.Keeper}, nil
	}
	if st.on == nil {
		return nil, st.fail(CodeEvalTargets, fmt.Errorf("no targets"))
	}
	vars.Soul, vars.Result = nil, nil
	v, err := st.on.eval(ctx, vars)
	if err != nil {
		return nil, st.fail(CodeEvalTargets, fmt.Errorf("on: %w", err))
	}
	var sids []string
	seen := map[string]bool{}
	var add func(x any, depth int) error
	add = func(x any, depth int) error {
		switch t := x.(type) {
		case string:
			if err := CheckSID(t); err != nil {
				return err
			}
			if !seen[t] {
				seen[t] = true
				sids = append(sids, t)
			}
			return nil
		case []any:
			if depth > 1 {
				return fmt.Errorf("on: lists of SIDs nest at most two deep")
			}
			for _, e := range t {
				if err := add(e, depth+1); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("on gave %s; want a SID or a list of SIDs", module.Describe(x))
	}
	if err := add(v, 0); err != nil {
		return nil, st.fail(CodeEvalTargets, err)
	}
	return sids, nil
}

// Enabled evaluates `when` (true when the step has none). For soul-side
// steps it is evaluated per target, with vars.Soul set.
func (st *PlanStep) Enabled(ctx context.Context, vars expr.Vars) (bool, error) {
	if st.when == nil {
		return true, nil
	}
	vars.Result = nil
	ok, err := st.when.eval(ctx, vars)
	if err != nil {
		return false, st.fail(CodeEvalWhen, fmt.Errorf("when: %w", err))
	}
	return ok, nil
}

// Params evaluates the step's params for one target, applies the module's
// defaults, checks them against its declaration with every value known,
// and returns them as the JSON object Module.Run receives.
func (st *PlanStep) Params(ctx context.Context, vars expr.Vars) (json.RawMessage, error) {
	vars.Result = nil
	raw := map[string]any{}
	if st.params != nil {
		v, err := st.params.eval(ctx, vars)
		if err != nil {
			return nil, st.fail(CodeEvalParams, fmt.Errorf("params.%w", err))
		}
		if m, ok := v.(map[string]any); ok {
			raw = m
		}
	}
	if st.Module == nil {
		return nil, st.fail(CodeEvalParams, fmt.Errorf("module %s is not resolved", st.ID))
	}
	params := module.ApplyDefaults(st.Module.Info(), raw)
	var vals module.Values
	for k, v := range params {
		vals.Set(k, v)
	}
	if errs := module.CheckParams(st.Module, vals); len(errs) > 0 {
		all := make([]error, len(errs))
		for i, e := range errs {
			all[i] = e
		}
		return nil, st.fail(CodeEvalParams, joinErrors(all))
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, st.fail(CodeEvalParams, fmt.Errorf("params are not JSON: %w", err))
	}
	return b, nil
}

// HasChangedWhen and HasFailedWhen report whether the step overrides the
// module's verdicts.
func (st *PlanStep) HasChangedWhen() bool { return st.changedWhen != nil }

// HasFailedWhen reports whether the step has a failed_when.
func (st *PlanStep) HasFailedWhen() bool { return st.failedWhen != nil }

// Changed evaluates changed_when with vars.Result set (see
// expr.ResultValue); without changed_when it returns def, the module's
// own verdict.
func (st *PlanStep) Changed(ctx context.Context, vars expr.Vars, def bool) (bool, error) {
	if st.changedWhen == nil {
		return def, nil
	}
	ok, err := st.changedWhen.eval(ctx, vars)
	if err != nil {
		return false, st.fail(CodeEvalResult, fmt.Errorf("changed_when: %w", err))
	}
	return ok, nil
}

// Failed evaluates failed_when with vars.Result set; without failed_when
// it returns def, whether the module failed.
func (st *PlanStep) Failed(ctx context.Context, vars expr.Vars, def bool) (bool, error) {
	if st.failedWhen == nil {
		return def, nil
	}
	ok, err := st.failedWhen.eval(ctx, vars)
	if err != nil {
		return false, st.fail(CodeEvalResult, fmt.Errorf("failed_when: %w", err))
	}
	return ok, nil
}

// SecretParams names the params of the step's module declared secret.
func (st *PlanStep) SecretParams() []string {
	if st.Module == nil {
		return nil
	}
	return st.Module.Info().SecretParams()
}

// ParamsUsing names the step's top-level params whose value refers, in any
// of its expressions, to one of the inputs named, or to an input whose
// name is computed at run time (input[key]), which might be one of them.
// The engine uses it to tell a module which params carry secret inputs.
func (st *PlanStep) ParamsUsing(inputs []string) []string {
	if st.params == nil || len(inputs) == 0 {
		return nil
	}
	var names []string
	for i, k := range st.params.keys {
		if st.params.vals[i].uses(inputs) {
			names = append(names, k)
		}
	}
	return names
}

// uses reports whether an expression in v refers to one of inputs, or to
// an input it names only at run time.
func (v *value) uses(inputs []string) bool {
	used := false
	v.inputRefs(func(name string) { used = used || name == "" || slices.Contains(inputs, name) })
	return used
}

// joinErrors joins errs, returning the only one unchanged.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
