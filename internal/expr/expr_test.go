package expr

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func newTestEnv(t testing.TB, opts ...Option) *Env {
	t.Helper()
	e, err := NewEnv(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testVars are the variables the evaluation tests use.
var testVars = Vars{
	Input: map[string]any{
		"name":     "web",
		"count":    int64(3),
		"packages": []any{"git", "curl"},
		"spawn":    map[string]any{"provider": "local", "count": float64(2)},
		"secret":   "s3cr3t",
	},
	Steps: map[string]any{
		"provision": StepValue(map[string]any{"hosts": []any{
			map[string]any{"sid": "a.test"}, map[string]any{"sid": "b.test"},
		}}, true, "changed"),
	},
	Soul:   map[string]any{"sid": "a.test"},
	Result: ResultValue(map[string]any{"installed": []any{"git"}}, true, false, ""),
}

func TestSplit(t *testing.T) {
	t.Parallel()
	type seg struct {
		text string
		expr bool
		off  int
	}
	tests := []struct {
		name string
		in   string
		want []seg
		err  string // substring of the error, with its column
	}{
		{"empty", "", nil, ""},
		{"plain", "hello", []seg{{"hello", false, 0}}, ""},
		{"whole", "${ x }", []seg{{" x ", true, 2}}, ""},
		{"mixed", "a ${x} b", []seg{{"a ", false, 0}, {"x", true, 4}, {" b", false, 6}}, ""},
		{"two", "${a}${b}", []seg{{"a", true, 2}, {"b", true, 6}}, ""},
		{"nested braces", `${ {"a": {"b": 1}} }`, []seg{{` {"a": {"b": 1}} `, true, 2}}, ""},
		{"brace in string", `${ "}" + '{' }`, []seg{{` "}" + '{' `, true, 2}}, ""},
		{"escaped quote in string", `${ "a\"}" }`, []seg{{` "a\"}" `, true, 2}}, ""},
		{"raw string", `${ r"\" }`, []seg{{` r"\" `, true, 2}}, ""},
		{"triple quoted", `${ """a"}b""" }`, []seg{{` """a"}b""" `, true, 2}}, ""},
		{"comment", "${ x // }\n}", []seg{{" x // }\n", true, 2}}, ""},
		{"escape", "$${ x }", []seg{{"${ x }", false, 0}}, ""},
		{"escape then expr", "$${a} ${b}", []seg{{"${a} ", false, 0}, {"b", true, 8}}, ""},
		{"dollar alone", "cost $5 $", []seg{{"cost $5 $", false, 0}}, ""},
		{"double dollar", "$$", []seg{{"$$", false, 0}}, ""},
		{"unterminated", "ab ${ x", nil, "column 4: unterminated ${"},
		{"unterminated string", `${ "x }`, nil, "column 1: unterminated string"},
		{"empty expr", "x ${  }", nil, "column 3: empty expression"},
		{"unicode column", "é ${", nil, "column 3:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			segs, err := Split(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrSyntax) {
					t.Fatalf("Split(%q) error = %v; want %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []seg
			for _, s := range segs {
				got = append(got, seg{s.Text, s.Expr, s.Offset})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Split(%q) = %#v; want %#v", tt.in, got, tt.want)
			}
		})
	}
}

func TestTemplateEval(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tests := []struct {
		name  string
		in    string
		scope Scope
		want  any
		kind  Kind
	}{
		{"literal", "plain text", 0, "plain text", KindString},
		{"escape", "$${ not.an.expr }", 0, "${ not.an.expr }", KindString},
		{"whole int keeps type", "${ input.count }", 0, int64(3), KindDyn},
		{"whole int literal", "${ 1 + 2 }", 0, int64(3), KindInt},
		{"whole list", "${ input.packages }", 0, []any{"git", "curl"}, KindDyn},
		{"whole map literal", `${ {"a": 1, "b": [true]} }`, 0, map[string]any{"a": int64(1), "b": []any{true}}, KindMap},
		{"whole bool", "${ has(input.spawn) }", 0, true, KindBool},
		{"whole null", "${ null }", 0, nil, KindNull},
		{"map over steps", "${ steps.provision.output.hosts.map(h, h.sid) }", 0, []any{"a.test", "b.test"}, KindList},
		{"interpolated int", "count=${ input.count }!", 0, "count=3!", KindString},
		{"interpolated list", "pkgs: ${ input.packages }", 0, `pkgs: ["git","curl"]`, KindString},
		{"interpolated double", "n=${ input.spawn.count }", 0, "n=2", KindString},
		{"interpolated null", "v=${ null }", 0, "v=null", KindString},
		{"two exprs", "${ input.name }-${ input.count }", 0, "web-3", KindString},
		{"surrounding space is text", " ${ 1 } ", 0, " 1 ", KindString},
		{"soul scope", "${ soul.sid }", ScopeSoul, "a.test", KindDyn},
		{"result scope", "${ result.output.installed.size() > 0 }", ScopeResult, true, KindBool},
		{"strings ext", "${ input.name.upperAscii() }", 0, "WEB", KindString},
		{"optional", `${ input.?missing.orValue("dflt") }`, 0, "dflt", KindDyn},
		{"cross type compare", "${ input.spawn.count > 1 }", 0, true, KindBool},
		{"quote plain word", "ls ${ quote(input.name) }", 0, "ls web", KindString},
		{"quote hostile", `printf %s ${ quote("'; touch /tmp/pwned; '\n$(id)") }`, 0, `printf %s ''\''; touch /tmp/pwned; '\''` + "\n" + `$(id)'`, KindString},
		{"quote empty", `${ quote("") }`, 0, "''", KindString},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := env.Template(tt.in, tt.scope)
			if err != nil {
				t.Fatal(err)
			}
			if tpl.Kind() != tt.kind {
				t.Errorf("Kind() = %s; want %s", tpl.Kind(), tt.kind)
			}
			got, err := tpl.Eval(context.Background(), testVars)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Eval(%q) = %#v; want %#v", tt.in, got, tt.want)
			}
		})
	}
}

func TestTemplateErrors(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tests := []struct {
		name  string
		in    string
		scope Scope
		want  []string // each error, as Error() prints it
		is    error
	}{
		{"syntax", "ab ${ 1 + }", 0, []string{"column 11: Syntax error: mismatched input '<EOF>' expecting"}, ErrSyntax},
		{"undeclared", "x ${ inptu.a }", 0, []string{"column 6: undeclared reference to 'inptu' (did you mean 'input'?) (variables here: input, steps)"}, ErrCheck},
		{"soul outside soul scope", "${ soul.sid }", 0, []string{"column 4: undeclared reference to 'soul'"}, ErrCheck},
		{"result outside result scope", "${ result.changed }", ScopeSoul, []string{"column 4: undeclared reference to 'result' (variables here: input, steps, soul)"}, ErrCheck},
		{"overload", `${ 1 + "a" }`, 0, []string{"column 6: found no matching overload for '_+_'"}, ErrCheck},
		{"every expression reported", "${ a1 } and ${ b2 }", 0, []string{"column 4: undeclared reference to 'a1'", "column 16: undeclared reference to 'b2'"}, ErrCheck},
		{"second line", "line one\nx ${ nope }", 0, []string{"line 2, column 6: undeclared reference to 'nope'"}, ErrCheck},
		{"unterminated", "${ {", 0, []string{"column 1: unterminated ${"}, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := env.Template(tt.in, tt.scope)
			if !errors.Is(err, tt.is) {
				t.Fatalf("error %v; want %v", err, tt.is)
			}
			errs := Errors(err)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors (%v); want %d", len(errs), err, len(tt.want))
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d = %q; want prefix %q", i, e.Error(), tt.want[i])
				}
			}
		})
	}
}

func TestExpect(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tests := []struct {
		src string
		ok  bool
	}{
		{"has(input.spawn)", true},
		{"input.count", true}, // dyn: checked at run time
		{"1 + 2", false},
		{"[1, 2]", false},
		{"input.count > 1 && steps.provision.changed", true},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			p, err := env.Compile(tt.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Expect(KindBool)
			if (err == nil) != tt.ok {
				t.Fatalf("Expect(bool) on %q (%s) = %v; want ok=%v", tt.src, p.TypeName(), err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrType) || !strings.Contains(err.Error(), "want bool")) {
				t.Fatalf("error %v is not a type error naming bool", err)
			}
		})
	}
}

func TestRefs(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	type ref struct {
		v    string
		path string
		off  int
	}
	tests := []struct {
		src  string
		want []ref
	}{
		{"input.a", []ref{{"input", "a", 0}}},
		{"steps.build.output.x", []ref{{"steps", "build.output", 0}}},
		{`steps["build"].changed`, []ref{{"steps", "build.changed", 0}}},
		{"has(steps.build.output)", []ref{{"steps", "build.output", 4}}},
		{"input.?a.orValue(1)", []ref{{"input", "a", 0}}},
		{"steps.a.output.map(h, h.sid) + [input.x]", []ref{{"steps", "a.output", 0}, {"input", "x", 32}}},
		{"[1].map(steps, steps)", nil},
		{"steps[input.k]", []ref{{"steps", "", 0}, {"input", "k", 6}}},
		{"size(steps)", []ref{{"steps", "", 5}}},
		{"'é' + input.a", []ref{{"input", "a", 7}}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			p, err := env.Compile(tt.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []ref
			for _, r := range p.Refs() {
				got = append(got, ref{r.Var, strings.Join(r.Path, "."), r.Offset})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Refs(%q) = %v; want %v", tt.src, got, tt.want)
			}
		})
	}
}

func TestTemplateRefsOffsets(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tpl, err := env.Template("a ${ steps.x.output } b ${input.y}", 0)
	if err != nil {
		t.Fatal(err)
	}
	refs := tpl.Refs()
	if len(refs) != 2 || refs[0].Offset != 5 || refs[1].Offset != 26 {
		t.Fatalf("Refs = %+v; want offsets 5 and 26", refs)
	}
}

func TestEvalErrors(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, WithCostLimit(10_000))
	tests := []struct {
		name, src string
		want      string
	}{
		{"missing key", "x=${ input.nope }", "column 5: no such key: nope"},
		{"division by zero", "${ 1 / (input.count - 3) }", "division by zero"},
		{"quote NUL", `${ quote(input.name + "\x00") }`, "NUL byte"},
		{"quote not a string", "${ quote(input.count) }", "no such overload"},
		{"cost limit", "${ [1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, a+b+c+d)))) }", "cost limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := env.Template(tt.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tpl.Eval(context.Background(), testVars)
			if !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Eval error = %v; want ErrEval containing %q", err, tt.want)
			}
		})
	}
}

func TestEvalCancelled(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	p, err := env.Compile("[1,2,3].all(x, x > 0)", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Eval(ctx, Vars{}); !errors.Is(err, ErrEval) {
		t.Fatalf("Eval with a cancelled context = %v; want ErrEval", err)
	}
}

func TestEvalBool(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	p, err := env.Compile("input.name", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.EvalBool(context.Background(), testVars); !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), "want bool") {
		t.Fatalf("EvalBool of a string = %v", err)
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, WithCacheSize(2))
	a1, _ := env.Compile("1 + 1", 0)
	a2, _ := env.Compile("1 + 1", 0)
	if a1 != a2 {
		t.Fatal("the same text in the same scope compiled twice")
	}
	s, _ := env.Compile("1 + 1", ScopeSoul)
	if s == a1 {
		t.Fatal("scopes share a cache entry")
	}
	_, err1 := env.Compile("nope", 0)
	if env.cache.len() != 2 {
		t.Fatalf("cache holds %d programs; want its bound 2", env.cache.len())
	}
	_, err2 := env.Compile("nope", 0)
	if err1 == nil || err1 != err2 {
		t.Fatal("compile errors are not cached")
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   any
		want string
	}{
		{nil, "null"}, {"s", "s"}, {true, "true"}, {int64(-4), "-4"}, {uint64(4), "4"},
		{2.0, "2"}, {0.5, "0.5"}, {1e21, "1000000000000000000000"}, {ts, "2026-01-02T03:04:05Z"},
		{[]any{"a", int64(1)}, `["a",1]`}, {map[string]any{"b": 1, "a": 2}, `{"a":2,"b":1}`},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%#v) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	done := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			tpl, err := env.Template("${ input.count * 2 }", 0)
			if err == nil {
				_, err = tpl.Eval(context.Background(), testVars)
			}
			done <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Expressions that make cel-go panic fail to compile with a located error
// instead: map keys of a type CEL does not allow are a check error at the
// key, and any other panic inside cel-go is ErrInvalid at the expression.
// The first one is the crasher FuzzInterpolate found (testdata/fuzz keeps
// it); before, it took down the keeper's request and soulctl.
func TestCELPanicsAreErrors(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tests := []struct {
		name, src string
		kind      error
		column    int
		message   string
	}{
		{"bytes map key", `${ {b"0": 1}.size() > 0 }`, ErrCheck, 5, "a map key of type bytes; map keys must be int, uint, bool or string"},
		{"list map key", `x ${ {[1]: 1} }`, ErrCheck, 7, "a map key of type list(int)"},
		{"double map key", `${ {1.5: 1} }`, ErrCheck, 5, "a map key of type double"},
		{"dyn bytes key folded while planning", `${ {dyn(b"0"): 1}.size() > 0 }`, ErrInvalid, 4, "CEL cannot handle this expression (runtime error: hash of unhashable type types.Bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := env.Template(tt.src, 0)
			errs := Errors(err)
			if len(errs) != 1 || !errors.Is(errs[0], tt.kind) || errs[0].Column != tt.column || !strings.Contains(errs[0].Message, tt.message) {
				t.Fatalf("Template(%q) = %v; want one %v at column %d containing %q", tt.src, err, tt.kind, tt.column, tt.message)
			}
		})
	}
	// A string-keyed map literal still works.
	tpl, err := env.Template(`${ {input.name: 1, "b": 2}.size() }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := tpl.Eval(context.Background(), testVars); err != nil || v != int64(2) {
		t.Fatalf("Eval = %v, %v", v, err)
	}
}

// recoverInvalid turns a panic in the deferring function into ErrInvalid.
func TestRecoverInvalid(t *testing.T) {
	t.Parallel()
	err := func() (err error) {
		defer recoverInvalid("a + b", &err)
		panic("boom")
	}()
	if !errors.Is(err, ErrInvalid) || err.Error() != "column 1: CEL cannot handle this expression (boom); rewrite it" {
		t.Fatalf("err = %v", err)
	}
}
