package scenario

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/expr"
)

// FuzzParse loads arbitrary bytes as a scenario. It must never panic, and
// every problem must have a position and a scenario code. Plans that
// come out are evaluated too, which must not panic either.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "validate", "*.yaml"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", "steps:", "steps: [", "- a", "a: *b", "a: &a [*a]", "steps: !!str 1", "<<: 1", "? [a]\n: b",
		"steps:\n  - {name: a, on: x.test, module: core.command.ran, params: {cmd: \"${ input.x }\"}}",
		"steps:\n  - name: a\n    on: keeper\n    module: core.cloud.created\n    params: {provider: \"${ {'a': 1}['a'] }\"}",
		"steps:\n  - {name: s, on: [\"${ input.h }\", b.test], when: \"${ true }\", module: core.pkg.installed, params: {packages: [\"${ soul.sid }\"]}}",
		// Map literals with bytes keys made cel-go panic (FuzzInterpolate).
		"steps:\n  - {name: a, on: x.test, module: core.command.ran, when: \"${ {b\\\"0\\\": 1}.size() > 0 }\", params: {cmd: \"${ string({dyn(b'0'): 1}.size()) }\"}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plan, err := Load("fuzz.yaml", data, map[string]any{"h": "a.test", "x": int64(1)})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("Load error %v is not an *Error with problems", err)
			}
			for _, p := range e.Problems {
				scenarioCode := strings.HasPrefix(p.Code, "scenario.") || p.Code == CodeExpressionInvalid
				if p.Pos.Line < 1 || p.Pos.Column < 1 || p.Pos.File != "fuzz.yaml" || !scenarioCode || p.Message == "" {
					t.Fatalf("malformed problem %+v", p)
				}
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		vars := expr.Vars{Input: plan.Input, Soul: map[string]any{"sid": "a.test"}}
		for _, st := range plan.Steps {
			_, _ = st.Targets(ctx, vars)
			_, _ = st.Enabled(ctx, vars)
			_, _ = st.Params(ctx, vars)
			vars.Result = expr.ResultValue(nil, true, false, "")
			_, _ = st.Changed(ctx, vars, true)
			_, _ = st.Failed(ctx, vars, false)
		}
	})
}
