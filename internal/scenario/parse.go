package scenario

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/module"
)

// Scenario is a parsed scenario: its structure is known, its names and
// types are checked; modules, params and expressions are checked by
// Validate.
type Scenario struct {
	// File is the name used in positions.
	File string
	// Name is the scenario's name; it defaults to the file name without
	// its extension.
	Name string
	// Description is free text.
	Description string
	// Inputs are the declared inputs, in the order written.
	Inputs []*InputDecl
	// DeclaresInputs reports whether the scenario has an inputs section:
	// then undeclared inputs are errors.
	DeclaresInputs bool
	// Steps are the steps, in order.
	Steps []*Step

	src       *source
	inputsPos Pos
	parseErrs problems
	mu        sync.Mutex // guards compiled
	compiled  *compiled
}

// InputDecl declares one input.
type InputDecl struct {
	Name string
	// Type is the input's type; TypeAny when not given.
	Type module.Type
	// Required inputs must be given. It defaults to true when there is no
	// default, false otherwise.
	Required bool
	// Default is the value used when the input is not given (HasDefault).
	Default    any
	HasDefault bool
	// Secret inputs are masked on every output channel and encrypted at
	// rest, whatever their name.
	Secret bool
	Doc    string
	Pos    Pos

	defaultNode *node
}

// Step is one parsed step.
type Step struct {
	Name        string
	Description string
	// Module is the module ID as written.
	Module module.ID
	// Keeper reports whether the step says `on: keeper`.
	Keeper         bool
	AnyErrorsFatal bool
	// Forks bounds how many targets run at once; 0 means the run's
	// default.
	Forks int
	// Retries is how many times a failed target is run again; RetryDelay
	// is the wait between tries.
	Retries    int
	RetryDelay time.Duration
	// Connect overrides the transport's connection retries; nil keeps the
	// soul's or the transport's defaults.
	Connect *Connect
	// Timeout bounds one target's run of the module; 0 means only the
	// run's timeout applies.
	Timeout time.Duration
	Pos     Pos

	index                   int
	nameNode, moduleNode    *node
	on, when, params        *node
	changedWhen, failedWhen *node
	retriesKey, forksKey    *node
	connectKey, paramsKey   *node
}

// Connect is how a transport retries connecting to a soul that is not
// reachable yet (still booting, say).
type Connect struct {
	// Retries is how many more times to try after the first failure.
	Retries int
	// Delay is the wait between tries.
	Delay time.Duration
}

// DefaultRetryDelay is the wait between tries of a step with retries and
// no retry_delay.
const DefaultRetryDelay = 5 * time.Second

// Limits of step settings.
const (
	MaxForks   = 10_000
	MaxRetries = 100
)

// identifier is the grammar of step and input names: they are CEL
// identifiers, so steps.<name> and input.<name> work.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celReserved are words CEL does not accept as identifiers.
var celReserved = []string{"as", "break", "const", "continue", "else", "false", "for", "function", "if", "import", "in", "let", "loop", "package", "namespace", "null", "return", "true", "var", "void", "while"}

// checkName reports why s cannot name a step or an input, or "".
func checkName(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case !identifier.MatchString(s):
		return "use letters, digits and '_', not starting with a digit, so that expressions can refer to it"
	case slices.Contains(celReserved, s):
		return "it is a reserved word of the expression language"
	}
	return ""
}

var (
	scenarioFields = []string{"name", "description", "inputs", "steps"}
	inputFields    = []string{"type", "required", "default", "secret", "doc", "description"}
	stepFields     = []string{"name", "description", "on", "when", "module", "params", "changed_when", "failed_when", "any_errors_fatal", "forks", "retries", "retry_delay", "connect", "timeout"}
	connectFields  = []string{"retries", "delay"}
)

// Parse reads a scenario strictly: YAML syntax, unknown keys, the types
// of fields, step and input names. file names the scenario in positions
// and gives its default name. The returned *Scenario is nil only when the
// YAML could not be read at all; otherwise it is returned even with an
// error, so that Validate can report more problems at once. The error is
// an *Error listing every problem.
func Parse(file string, src []byte) (*Scenario, error) {
	if file == "" {
		file = "scenario.yaml"
	}
	s := &Scenario{File: file, src: newSource(file, src)}
	root, err := parseYAML(s.src, &s.parseErrs)
	if err != nil {
		if f, ok := err.(*fatal); ok {
			return nil, &Error{Problems: []Problem{f.p}}
		}
		return nil, err
	}
	s.decode(root)
	return s, s.parseErrs.err()
}

func (s *Scenario) decode(root *node) {
	ps := &s.parseErrs
	s.Name = strings.TrimSuffix(filepath.Base(s.File), filepath.Ext(s.File))
	if root.kind != kindMap {
		ps.add(root.pos, CodeFieldType, "a scenario is a map with steps (and optionally name, description, inputs), not %s", root.kind.a())
		return
	}
	f := fieldsOf(ps, root, "the scenario", scenarioFields, "x-")
	if _, v := f.get("name"); v != nil {
		s.Name = stringField(ps, v, "name")
	}
	if _, v := f.get("description"); v != nil {
		s.Description = stringField(ps, v, "description")
	}
	if k, v := f.get("inputs"); v != nil {
		s.DeclaresInputs = true
		s.inputsPos = k.pos
		s.decodeInputs(v)
	}
	k, v := f.get("steps")
	switch {
	case v == nil:
		ps.add(root.pos, CodeEmptySteps, "the scenario has no steps")
		return
	case v.kind == kindNull || (v.kind == kindList && len(v.items) == 0):
		ps.add(k.pos, CodeEmptySteps, "the scenario has no steps")
		return
	case v.kind != kindList:
		ps.add(v.pos, CodeFieldType, "steps must be a list of steps, not %s", v.kind.a())
		return
	}
	seen := map[string]*Step{}
	for i, item := range v.items {
		st := s.decodeStep(item, i)
		if st == nil {
			continue
		}
		s.Steps = append(s.Steps, st)
		if st.Name == "" {
			continue
		}
		if first, dup := seen[st.Name]; dup {
			ps.add(st.nameNode.pos, CodeDuplicateStep, "step name %q is already used by the step at line %d", st.Name, first.Pos.Line)
			continue
		}
		seen[st.Name] = st
	}
}

func (s *Scenario) decodeInputs(v *node) {
	ps := &s.parseErrs
	if v.kind == kindNull {
		return
	}
	if v.kind != kindMap {
		ps.add(v.pos, CodeFieldType, "inputs must map input names to declarations, not be a %s", v.kind)
		return
	}
	for i, k := range v.keys {
		d := &InputDecl{Name: k.str(), Type: module.TypeAny, Pos: k.pos}
		if why := checkName(d.Name); why != "" {
			ps.add(k.pos, CodeBadInput, "input name %q is not valid: %s", d.Name, why)
		}
		decl := v.vals[i]
		if decl.kind == kindNull {
			d.Required = true
			s.Inputs = append(s.Inputs, d)
			continue
		}
		if decl.kind != kindMap {
			ps.add(decl.pos, CodeFieldType, "input %q must be declared with a map such as {type: string}, not %s", d.Name, decl.kind.a())
			continue
		}
		f := fieldsOf(ps, decl, fmt.Sprintf("input %q", d.Name), inputFields)
		if _, t := f.get("type"); t != nil {
			name := stringField(ps, t, "type")
			d.Type = module.Type(name)
			if name != "" && !d.Type.Valid() {
				ps.add(t.pos, CodeBadInput, "input %q has unknown type %q; use one of %s", d.Name, name, typeList())
				d.Type = module.TypeAny
			}
		}
		required, hasRequired := false, false
		if _, r := f.get("required"); r != nil {
			required, hasRequired = boolField(ps, r, "required"), true
		}
		if _, sec := f.get("secret"); sec != nil {
			d.Secret = boolField(ps, sec, "secret")
		}
		for _, key := range []string{"doc", "description"} {
			if _, doc := f.get(key); doc != nil {
				d.Doc = stringField(ps, doc, key)
			}
		}
		if dk, def := f.get("default"); def != nil {
			d.HasDefault, d.Default, d.defaultNode = true, def.plain(), def
			if required {
				ps.add(dk.pos, CodeBadInput, "input %q is required and has a default; drop one of them", d.Name)
			}
		}
		d.Required = required || (!hasRequired && !d.HasDefault)
		s.Inputs = append(s.Inputs, d)
	}
}

func (s *Scenario) decodeStep(n *node, index int) *Step {
	ps := &s.parseErrs
	if n.kind != kindMap {
		ps.add(n.pos, CodeFieldType, "a step is a map with name, module, on and params, not %s", n.kind.a())
		return nil
	}
	st := &Step{Pos: n.pos, index: index}
	if _, v := n.get("name"); v != nil && v.kind == kindString {
		st.Name = v.str()
	}
	f := fieldsOf(ps, n, st.label(), stepFields)

	if k, v := f.get("name"); v != nil {
		st.nameNode = v
		st.Name = stringField(ps, v, "name")
		if st.Name != "" {
			if why := checkName(st.Name); why != "" {
				ps.add(v.pos, CodeBadStepName, "step name %q is not valid: %s", st.Name, why)
			}
		} else if v.kind == kindString {
			ps.add(k.pos, CodeBadStepName, "step name is empty")
		}
	} else {
		ps.add(n.pos, CodeMissingField, "step %d has no name", index+1)
	}
	label := st.label()
	if _, v := f.get("description"); v != nil {
		st.Description = stringField(ps, v, "description")
	}
	if _, v := f.get("module"); v != nil {
		st.moduleNode = v
		st.Module = module.ID(stringField(ps, v, "module"))
	} else {
		ps.add(n.pos, CodeMissingField, "%s has no module", label)
	}
	if _, v := f.get("on"); v != nil {
		st.on = v
		st.Keeper = v.kind == kindString && v.str() == module.Keeper
	}
	_, st.when = f.get("when")
	st.paramsKey, st.params = f.get("params")
	_, st.changedWhen = f.get("changed_when")
	_, st.failedWhen = f.get("failed_when")
	if _, v := f.get("any_errors_fatal"); v != nil {
		st.AnyErrorsFatal = boolField(ps, v, "any_errors_fatal")
	}
	if k, v := f.get("forks"); v != nil {
		st.forksKey = k
		st.Forks = intField(ps, v, "forks", 1, MaxForks)
	}
	if k, v := f.get("retries"); v != nil {
		st.retriesKey = k
		st.Retries = intField(ps, v, "retries", 0, MaxRetries)
	}
	if _, v := f.get("retry_delay"); v != nil {
		st.RetryDelay = durationField(ps, v, "retry_delay", false)
	} else if st.Retries > 0 {
		st.RetryDelay = DefaultRetryDelay
	}
	if _, v := f.get("timeout"); v != nil {
		st.Timeout = durationField(ps, v, "timeout", true)
	}
	if k, v := f.get("connect"); v != nil {
		st.connectKey = k
		if v.kind != kindMap {
			ps.add(v.pos, CodeFieldType, "connect must be a map such as {retries: 3, delay: 10s}, not %s", v.kind.a())
		} else {
			c := &Connect{}
			cf := fieldsOf(ps, v, "connect", connectFields)
			if _, r := cf.get("retries"); r != nil {
				c.Retries = intField(ps, r, "connect.retries", 0, MaxRetries)
			}
			if _, d := cf.get("delay"); d != nil {
				c.Delay = durationField(ps, d, "connect.delay", false)
			}
			st.Connect = c
		}
	}
	return st
}

// label names a step in messages.
func (st *Step) label() string {
	if st.Name != "" {
		return fmt.Sprintf("step %q", st.Name)
	}
	return fmt.Sprintf("step %d", st.index+1)
}

// fieldsOf checks the keys of a map node against allowed, reporting
// unknown ones, and returns the node for lookups. Keys that start with
// extPrefix, when given, are extension fields and allowed.
func fieldsOf(ps *problems, n *node, what string, allowed []string, extPrefix ...string) *node {
	for _, k := range n.keys {
		name := k.str()
		if slices.Contains(allowed, name) || (len(extPrefix) > 0 && strings.HasPrefix(name, extPrefix[0])) {
			continue
		}
		msg := fmt.Sprintf("unknown field %q in %s", name, what)
		if s := module.Suggest(name, allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else {
			msg += fmt.Sprintf(" (known fields: %s)", strings.Join(allowed, ", "))
		}
		ps.add(k.pos, CodeUnknownField, "%s", msg)
	}
	return n
}

func stringField(ps *problems, v *node, name string) string {
	if v.kind != kindString {
		ps.add(v.pos, CodeFieldType, "%s must be a string, not %s", name, v.kind.a())
		return ""
	}
	return v.str()
}

func boolField(ps *problems, v *node, name string) bool {
	if v.kind != kindBool {
		ps.add(v.pos, CodeFieldType, "%s must be true or false, not %s", name, v.kind.a())
		return false
	}
	return v.value.(bool)
}

func intField(ps *problems, v *node, name string, lo, hi int64) int {
	if v.kind != kindInt {
		ps.add(v.pos, CodeFieldType, "%s must be an integer, not %s", name, v.kind.a())
		return 0
	}
	n, ok := v.value.(int64)
	if !ok || n < lo || n > hi {
		ps.add(v.pos, CodeFieldValue, "%s must be between %d and %d, got %v", name, lo, hi, v.value)
		return 0
	}
	return int(n)
}

func durationField(ps *problems, v *node, name string, positive bool) time.Duration {
	if v.kind != kindString {
		ps.add(v.pos, CodeFieldType, "%s must be a duration such as \"10s\" or \"5m\", not %s", name, v.kind.a())
		return 0
	}
	d, err := time.ParseDuration(v.str())
	if err != nil || d < 0 || (positive && d == 0) {
		ps.add(v.pos, CodeFieldValue, "%s must be a positive duration such as \"10s\" or \"5m\", got %q", name, v.str())
		return 0
	}
	return d
}

func typeList() string {
	names := make([]string, len(module.Types))
	for i, t := range module.Types {
		names[i] = string(t)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
