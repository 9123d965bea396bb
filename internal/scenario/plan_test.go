package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
)

// TestExampleHello proves that the sample scenario a new user starts from
// validates and plans: it runs core.command.ran on the soul given as
// input.
func TestExampleHello(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "hello.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check("hello.yaml", src); err != nil {
		t.Fatalf("examples/hello.yaml does not validate:\n%v", err)
	}
	plan, err := Load("hello.yaml", src, map[string]any{"host": "web-1.local.test"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Name != "hello" || len(plan.Steps) != 2 || plan.Steps[0].ID != "core.command.ran" || plan.Steps[0].Keeper {
		t.Fatalf("unexpected plan: %+v", plan)
	}
	ctx := context.Background()
	vars := expr.Vars{Input: plan.Input}
	sids, err := plan.Steps[0].Targets(ctx, vars)
	if err != nil || !reflect.DeepEqual(sids, []string{"web-1.local.test"}) {
		t.Fatalf("Targets = %v, %v", sids, err)
	}
	params, err := plan.Steps[0].Params(ctx, vars)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"argv":["sh","-c","echo \"$1\" \u003e /tmp/soulstack-hello","sh","hello from Soul Stack"],"creates":"/tmp/soulstack-hello"}`
	if string(params) != want {
		t.Fatalf("Params = %s; want %s", params, want)
	}
	if _, err := Load("hello.yaml", src, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), CodeInputMissing) {
		t.Fatalf("Load without the host input = %v; want %s", err, CodeInputMissing)
	}
}

// TestModuleExamples validates the example step of every registered
// module, as the catalog shows it.
func TestModuleExamples(t *testing.T) {
	t.Parallel()
	for _, m := range module.All() {
		info := m.Info()
		if info.Example == "" || !strings.HasPrefix(string(info.ID), "core.") {
			continue
		}
		t.Run(string(info.ID), func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			b.WriteString("steps:\n")
			if !strings.Contains(info.Example, "name: provision\n") {
				// Examples may use the output of a provision step.
				b.WriteString("  - name: provision\n    on: keeper\n    module: core.cloud.created\n    params: {provider: local}\n")
			}
			for _, line := range strings.Split(info.Example, "\n") {
				b.WriteString("  " + line + "\n")
			}
			if _, err := Check(string(info.ID)+".yaml", []byte(b.String())); err != nil {
				t.Fatalf("the example does not validate:\n%s\n%v", b.String(), err)
			}
		})
	}
}

func TestRuntimeEvaluation(t *testing.T) {
	t.Parallel()
	src := []byte(`
inputs:
  hosts: {type: list}
  count: {type: int, default: 1}
steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params:
      provider: local
      count: "${ input.count }"
      profile: {cpus: "${ input.count + 1 }", name: "vm-${ input.count }"}
  - name: base
    on: ["${ steps.provision.output.hosts.map(h, h.sid) }", "${ input.hosts }", extra.local.test]
    when: soul.sid != "skip.local.test"
    module: core.pkg.installed
    params: {packages: [git, "${ soul.sid }"]}
    changed_when: result.output.installed.size() > 0
    failed_when: result.failed && !result.error.contains("lock")
`)
	plan, err := Load("runtime.yaml", src, map[string]any{"hosts": []any{"b.local.test", "c.local.test"}, "count": json.Number("2")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vars := expr.Vars{
		Input: plan.Input,
		Steps: map[string]any{"provision": expr.StepValue(map[string]any{"hosts": []any{
			map[string]any{"sid": "a.local.test"}, map[string]any{"sid": "b.local.test"},
		}}, true, "changed")},
	}
	prov, base := plan.Steps[0], plan.Steps[1]

	t.Run("keeper targets", func(t *testing.T) {
		t.Parallel()
		sids, err := prov.Targets(ctx, vars)
		if err != nil || !reflect.DeepEqual(sids, []string{module.Keeper}) {
			t.Fatalf("Targets = %v, %v", sids, err)
		}
	})
	t.Run("typed params", func(t *testing.T) {
		t.Parallel()
		raw, err := prov.Params(ctx, vars)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"count":2,"profile":{"cpus":3,"name":"vm-2"},"provider":"local"}`
		if string(raw) != want {
			t.Fatalf("Params = %s; want %s", raw, want)
		}
	})
	t.Run("soul targets flattened without duplicates", func(t *testing.T) {
		t.Parallel()
		sids, err := base.Targets(ctx, vars)
		want := []string{"a.local.test", "b.local.test", "c.local.test", "extra.local.test"}
		if err != nil || !reflect.DeepEqual(sids, want) {
			t.Fatalf("Targets = %v, %v; want %v", sids, err, want)
		}
	})
	t.Run("when per soul", func(t *testing.T) {
		t.Parallel()
		for sid, want := range map[string]bool{"a.local.test": true, "skip.local.test": false} {
			v := vars
			v.Soul = map[string]any{"sid": sid}
			got, err := base.Enabled(ctx, v)
			if err != nil || got != want {
				t.Errorf("Enabled for %s = %v, %v; want %v", sid, got, err, want)
			}
		}
	})
	t.Run("params per soul with defaults", func(t *testing.T) {
		t.Parallel()
		v := vars
		v.Soul = map[string]any{"sid": "a.local.test"}
		raw, err := base.Params(ctx, v)
		want := `{"lock_retries":5,"lock_retry_delay":"15s","packages":["git","a.local.test"],"update":true}`
		if err != nil || string(raw) != want {
			t.Fatalf("Params = %s, %v; want %s", raw, err, want)
		}
	})
	t.Run("changed_when and failed_when", func(t *testing.T) {
		t.Parallel()
		v := vars
		v.Result = expr.ResultValue(map[string]any{"installed": []any{}}, true, true, "dpkg lock held")
		changed, err := base.Changed(ctx, v, true)
		if err != nil || changed {
			t.Errorf("Changed = %v, %v; want false (nothing installed)", changed, err)
		}
		failed, err := base.Failed(ctx, v, true)
		if err != nil || failed {
			t.Errorf("Failed = %v, %v; want false (lock errors are tolerated)", failed, err)
		}
		if c, _ := prov.Changed(ctx, v, true); !c {
			t.Error("without changed_when the module's verdict must stand")
		}
	})
	t.Run("evaluation errors carry a code", func(t *testing.T) {
		t.Parallel()
		_, err := base.Params(ctx, vars) // no soul: soul.sid is missing
		var se *StepError
		if !errors.As(err, &se) || se.Code != CodeEvalParams || se.Step != "base" || !errors.Is(err, expr.ErrEval) {
			t.Fatalf("Params without a soul = %v; want a step.params StepError wrapping expr.ErrEval", err)
		}
	})
	t.Run("runtime param checks", func(t *testing.T) {
		t.Parallel()
		v := vars
		v.Input = map[string]any{"count": int64(0), "hosts": []any{}}
		_, err := prov.Params(ctx, v)
		if !errors.Is(err, module.ErrBadParams) || !strings.Contains(err.Error(), "at least 1") {
			t.Fatalf("Params with count 0 = %v; want the module's check", err)
		}
	})
	t.Run("bad runtime targets", func(t *testing.T) {
		t.Parallel()
		v := vars
		v.Input = map[string]any{"hosts": []any{"Not A SID"}, "count": int64(1)}
		if _, err := base.Targets(ctx, v); err == nil || !strings.Contains(err.Error(), "not a soul ID") {
			t.Fatalf("Targets with a bad SID = %v", err)
		}
	})
}

func TestInputs(t *testing.T) {
	t.Parallel()
	src := []byte(`
inputs:
  n: {type: int}
  tags: {type: list, default: [a]}
  opts: {type: map, required: false}
  flag: {type: bool, default: false}
steps:
  - {name: s, on: a.local.test, module: core.command.ran, params: {cmd: "true"}}
`)
	s, err := Parse("inputs.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input map[string]any
		want  map[string]any
		codes []string
	}{
		{"defaults", map[string]any{"n": 1}, map[string]any{"n": int64(1), "tags": []any{"a"}, "flag": false}, nil},
		{"json numbers", map[string]any{"n": 3.0}, map[string]any{"n": int64(3), "tags": []any{"a"}, "flag": false}, nil},
		{"typed go values", map[string]any{"n": int32(4), "tags": []string{"x", "y"}, "opts": map[string]string{"k": "v"}}, map[string]any{"n": int64(4), "tags": []any{"x", "y"}, "opts": map[string]any{"k": "v"}, "flag": false}, nil},
		{"fraction is not int", map[string]any{"n": 1.5}, nil, []string{CodeInputType}},
		{"missing", nil, nil, []string{CodeInputMissing}},
		{"undeclared and wrong type", map[string]any{"n": 1, "flag": "yes", "nn": 2}, nil, []string{CodeInputUndeclared, CodeInputType}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan, err := s.Plan(tt.input)
			if tt.codes == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(plan.Input, tt.want) {
					t.Fatalf("Input = %#v; want %#v", plan.Input, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Plan = %v; want an *Error", err)
			}
			var codes []string
			for _, p := range e.Problems {
				codes = append(codes, p.Code)
			}
			for _, c := range tt.codes {
				if !strings.Contains(strings.Join(codes, " "), c) {
					t.Errorf("codes %v lack %s", codes, c)
				}
			}
		})
	}
	// Defaults are copied: changing one plan's input leaves the next alone.
	p1, _ := s.Plan(map[string]any{"n": 1})
	p1.Input["tags"].([]any)[0] = "changed"
	p2, _ := s.Plan(map[string]any{"n": 1})
	if p2.Input["tags"].([]any)[0] != "a" {
		t.Fatal("plans share default values")
	}
}

func TestNoInputsSectionAcceptsAnyInput(t *testing.T) {
	t.Parallel()
	src := []byte("steps:\n  - {name: s, on: \"${ input.host }\", module: core.command.ran, params: {cmd: \"echo ${ input.anything }\"}}\n")
	plan, err := Load("free.yaml", src, map[string]any{"host": "a.local.test", "anything": []any{1}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plan.Input["anything"], []any{int64(1)}) {
		t.Fatalf("input not normalized: %#v", plan.Input)
	}
}

// TestPositions checks that expression problems point at the character
// inside the string, for each way YAML writes a string.
func TestPositions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		line, col   int
	}{
		{"plain", `echo ${ nope }`, 6, 20},
		{"double quoted", `"echo ${ nope }"`, 6, 21},
		{"single quoted", `'echo ${ nope }'`, 6, 21},
		{"escape before falls back", `"\techo ${ nope }"`, 6, 12},
		{"unicode", `"héllo ${ nope }"`, 6, 22},
		{"literal block", "|\n        first line\n          echo ${ nope }", 8, 19},
		{"folded block falls back", ">\n        echo ${ nope }", 6, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "steps:\n  - name: s\n    on: a.local.test\n    module: core.command.ran\n    params:\n      cmd: " + tt.value + "\n"
			_, err := Check("pos.yaml", []byte(src))
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) != 1 {
				t.Fatalf("Check = %v; want one problem", err)
			}
			p := e.Problems[0]
			if p.Code != CodeBadExpression || p.Pos.Line != tt.line || p.Pos.Column != tt.col {
				t.Fatalf("problem %s; want %s at %d:%d", p, CodeBadExpression, tt.line, tt.col)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	many := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "  k%d: 1\n", i)
		}
		return b.String()
	}
	tests := []struct {
		name string
		src  string
		code string
	}{
		{"too large", "steps: []\n" + strings.Repeat("#", MaxSize), CodeTooLarge},
		{"deep flow nesting", "steps: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), CodeTooComplex},
		{"deep block nesting", "steps:\n" + strings.Repeat("- ", 5000) + "x\n", CodeTooComplex},
		{"many keys", "steps: []\nx-big:\n" + many(MaxMapKeys+1), CodeTooComplex},
		{"alias expansion", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nsteps: *e\n", CodeTooComplex},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("limits.yaml", []byte(tt.src))
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) != 1 || e.Problems[0].Code != tt.code {
				t.Fatalf("Parse = %v; want one %s problem", err, tt.code)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	_, err := Check("e.yaml", []byte("steps:\n  - {name: a, on: x.test, module: core.command.ran, params: {cmd: x}}\n  - {name: a, on: x.test, module: core.command.ran, params: {cmd: x}}\n"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v; want ErrInvalid", err)
	}
	var e *Error
	errors.As(err, &e)
	if e.Code() != CodeInvalid || len(e.Problems) != 1 {
		t.Fatalf("problems = %v", e.Problems)
	}
	want := `e.yaml:3:12: scenario.duplicate_step: step name "a" is already used by the step at line 2`
	if err.Error() != want {
		t.Fatalf("Error() = %q; want %q", err.Error(), want)
	}
}

// TestValidateOnce checks that a scenario validates once and can then be
// planned from many goroutines.
func TestValidateOnce(t *testing.T) {
	t.Parallel()
	s, err := Parse("c.yaml", []byte("steps:\n  - {name: a, on: \"${ input.h }\", module: core.command.ran, params: {cmd: x}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			_, err := s.Plan(map[string]any{"h": "a.local.test"})
			done <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestWithModules(t *testing.T) {
	t.Parallel()
	lookup := func(id module.ID) (module.Module, error) {
		return nil, module.ErrUnknown
	}
	_, err := Check("m.yaml", []byte("steps:\n  - {name: a, on: x.test, module: core.command.ran, params: {cmd: x}}\n"), WithModules(lookup))
	if err == nil || !strings.Contains(err.Error(), CodeUnknownModule) {
		t.Fatalf("Check with an empty registry = %v; want %s", err, CodeUnknownModule)
	}
}

// ParamsUsing finds the params computed from given inputs anywhere in
// their value, and those that pick an input by a computed name.
func TestParamsUsing(t *testing.T) {
	t.Parallel()
	src := []byte(`
inputs:
  pin: {type: string, secret: true}
  name: {type: string}
  key: {type: string}
steps:
  - name: write
    on: a.local.test
    module: core.command.ran
    params:
      cmd: "echo ${ quote(input.name) }"
      stdin: "pin=${ input.pin }"
      env: {A: plain, B: "${ input.?pin.orValue('') }"}
      chdir: "${ input[input.key] }"
      creates: /tmp/x
`)
	plan, err := Load("using.yaml", src, map[string]any{"pin": "4711", "name": "n", "key": "name"})
	if err != nil {
		t.Fatal(err)
	}
	got := plan.Steps[0].ParamsUsing([]string{"pin"})
	slices.Sort(got)
	if want := []string{"chdir", "env", "stdin"}; !slices.Equal(got, want) {
		t.Fatalf("ParamsUsing(pin) = %v; want %v", got, want)
	}
	if got := plan.Steps[0].ParamsUsing(nil); got != nil {
		t.Fatalf("ParamsUsing(nil) = %v", got)
	}
}

// vault is a module with a secret param, for TestSecretParamMakesItsInputSecret.
type vault struct{}

func (vault) Info() module.Info {
	return module.Info{ID: "test.vault.stored", Summary: "Stores a password.", Side: module.SideSoul, Idempotent: true,
		ChangesWhen: "Never.", UnchangedWhen: "Always.",
		Params: []module.Param{{Name: "password", Type: module.TypeString, Secret: true}, {Name: "label", Type: module.TypeString}}}
}

func (vault) Run(context.Context, module.RunInfo, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, nil
}

// A value that reaches a param its module declares secret makes the input
// it came from secret, declared so or not; an input that reaches only a
// plain param does not; a secret param that picks its input at run time
// makes every input secret.
func TestSecretParamMakesItsInputSecret(t *testing.T) {
	t.Parallel()
	lookup := WithModules(func(id module.ID) (module.Module, error) {
		if id == "test.vault.stored" {
			return vault{}, nil
		}
		return nil, fmt.Errorf("unknown module %s", id)
	})
	src := `
inputs:
  pw: {type: string}
  label: {type: string}
  pin: {type: string, secret: true}
  which: {type: string, default: pw}
steps:
  - name: store
    on: a.local.test
    module: test.vault.stored
    params: {password: "x-${ input.pw }", label: "${ input.label }"}
`
	in := map[string]any{"pw": "canary", "label": "l", "pin": "1"}
	plan, err := Load("vault.yaml", []byte(src), in, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pin", "pw"}; !slices.Equal(plan.SecretInputs, want) {
		t.Fatalf("SecretInputs = %v; want %v", plan.SecretInputs, want)
	}
	dyn := strings.Replace(src, `"x-${ input.pw }"`, `"${ input[input.which] }"`, 1)
	plan, err = Load("vault.yaml", []byte(dyn), in, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"label", "pin", "pw", "which"}; !slices.Equal(plan.SecretInputs, want) {
		t.Fatalf("with input[key]: SecretInputs = %v; want %v", plan.SecretInputs, want)
	}
}

// A scenario that declares no inputs takes any input, but a reference to
// a name the input does not hold is a problem before anything runs, as it
// would be a failure when the step evaluates it; has(), .? and [?]
// tolerate the absence.
func TestUndeclaredInputReferences(t *testing.T) {
	t.Parallel()
	src := []byte(`steps:
  - name: a
    on: a.local.test
    module: core.command.ran
    params:
      cmd: "echo ${ input.nope } ${ input.here }"
      chdir: "${ has(input.maybe) ? input.maybe : '/' }"
      env: {A: "${ input.?opt.orValue('') }", B: "${ input[?'idx'].orValue('') }"}
`)
	_, err := Load("u.yaml", src, map[string]any{"here": "x"})
	var se *Error
	if !errors.As(err, &se) || len(se.Problems) != 1 || se.Problems[0].Code != CodeUnknownInputRef ||
		!strings.Contains(se.Problems[0].Message, "input.nope") || se.Problems[0].Pos.Line != 6 {
		t.Fatalf("Load = %v; want one %s about input.nope at line 6", err, CodeUnknownInputRef)
	}
	if _, err := Load("u.yaml", src, map[string]any{"here": "x", "nope": "y"}); err != nil {
		t.Fatalf("with every name given: %v", err)
	}
	if _, err := Check("u.yaml", src); err != nil {
		t.Fatalf("Check, which knows no input, refused it: %v", err)
	}
}
