package expr

import (
	"context"
	"strings"
	"testing"
	"time"
)

// FuzzInterpolate splits, compiles and evaluates arbitrary strings as
// templates. It must never panic, and what Split returns must describe
// the input faithfully.
func FuzzInterpolate(f *testing.F) {
	for _, s := range []string{
		"", "plain", "${ x }", "${ input.count }", "a ${ input.name } b ${ steps.provision.output }",
		`${ {"a": {"b": [1, 2]}} }`, `${ "}" }`, `${ r"\" }`, `${ """}""" }`, "$${ x }", "$$${ x }",
		"${", "${ ", "${}", "}", "${ x // c }\n}", "${ 'unterminated }", "${ input.?x.orValue(1) }",
		"${ steps.provision.output.hosts.map(h, h.sid) }", "${ 1 / 0 }", "é${é}", "${ b'\\xff' }",
	} {
		f.Add(s, uint8(0))
	}
	env, err := NewEnv(WithCostLimit(100_000), WithCacheSize(64))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, scope uint8) {
		segs, err := Split(s)
		if err != nil {
			for _, e := range Errors(err) {
				if e.Offset < 0 || e.Offset > len(s) || e.Column < 1 || e.Line < 1 {
					t.Fatalf("Split(%q): error located out of the text: %+v", s, e)
				}
			}
		} else {
			var b strings.Builder
			for _, seg := range segs {
				if seg.Offset < 0 || seg.Offset > len(s) {
					t.Fatalf("Split(%q): segment offset %d out of the text", s, seg.Offset)
				}
				if seg.Expr {
					if !strings.HasPrefix(s[seg.Offset-2:], "${"+seg.Text+"}") {
						t.Fatalf("Split(%q): expression %q at %d is not between ${ and }", s, seg.Text, seg.Offset)
					}
					b.WriteString("${" + seg.Text + "}")
				} else {
					b.WriteString(seg.Text)
				}
			}
			if !strings.Contains(s, "$") && b.String() != s {
				t.Fatalf("Split(%q) without $ rebuilt as %q", s, b.String())
			}
		}
		tpl, err := env.Template(s, Scope(scope)&(ScopeSoul|ScopeResult))
		if err != nil {
			for _, e := range Errors(err) {
				if e.Offset < 0 || e.Offset > len(s) {
					t.Fatalf("Template(%q): error located out of the text: %+v", s, e)
				}
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _ = tpl.Eval(ctx, testVars)
	})
}
