package command_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/internal/expr"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/command"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

func TestRan(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "done")
	m := &command.Ran{}

	res, err := moduletest.Run(t, m, tg, map[string]any{"cmd": "echo \"$GREETING\" > " + marker + "; echo out; echo err >&2", "env": map[string]any{"GREETING": "it's $HOME"}, "creates": marker})
	if err != nil || !res.Changed {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	out := res.Output.(map[string]any)
	if out["stdout"] != "out\n" || out["stderr"] != "err\n" || out["rc"] != 0 || out["skipped"] != false {
		t.Fatalf("output = %#v", out)
	}
	if got := tg.Sh(t, "cat "+marker); got != "it's $HOME\n" {
		t.Fatalf("env not passed verbatim: %q", got)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"cmd": "false", "creates": marker})
	if err != nil || res.Changed || res.Output.(map[string]any)["skipped"] != true {
		t.Fatalf("creates guard: %+v, %v", res, err)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"argv": []any{"rm", marker}, "removes": marker})
	if err != nil || !res.Changed {
		t.Fatalf("removes: %+v, %v", res, err)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"argv": []any{"rm", marker}, "removes": marker})
	if err != nil || res.Changed {
		t.Fatalf("removes guard: %+v, %v", res, err)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"argv": []any{"printf", "%s|", "a b", "'q'", "$X", "line\nbreak"}, "chdir": dir})
	if err != nil || res.Output.(map[string]any)["stdout"] != "a b|'q'|$X|line\nbreak|" {
		t.Fatalf("argv quoting: %+v, %v", res.Output, err)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"cmd": "pwd", "chdir": dir})
	if err != nil || res.Output.(map[string]any)["stdout"] != dir+"\n" {
		t.Fatalf("chdir: %+v, %v", res.Output, err)
	}
	_, err = moduletest.Run(t, m, tg, map[string]any{"cmd": "echo oops >&2; exit 3"})
	if module.Code(err) != "command.failed" || err.Error() != "exit status 3: oops" {
		t.Fatalf("failing command: %v (%s)", err, module.Code(err))
	}
}

func TestRanStdin(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	m := &command.Ran{}
	in := "line one\n'quoted' $HOME \\ ü\nno trailing newline"
	res, err := moduletest.Run(t, m, tg, map[string]any{"argv": []any{"cat"}, "stdin": in})
	if err != nil || res.Output.(map[string]any)["stdout"] != in {
		t.Fatalf("stdin: %+v, %v", res.Output, err)
	}
	// With env, which travels on the same input, the command's stdin is
	// still exactly its own.
	res, err = moduletest.Run(t, m, tg, map[string]any{"cmd": `printf '%s|' "$A"; cat`, "env": map[string]any{"A": "a\nb"}, "stdin": in})
	if err != nil || res.Output.(map[string]any)["stdout"] != "a\nb|"+in {
		t.Fatalf("stdin with env: %+v, %v", res.Output, err)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"argv": []any{"wc", "-c"}})
	if err != nil || res.Output.(map[string]any)["stdout"] != "0\n" {
		t.Fatalf("no stdin: %+v, %v", res.Output, err)
	}
}

// A hostile input spliced into cmd through quote() reaches the program as
// one literal argument: it neither ends the quoting nor runs a second
// command. The same value spliced in bare does run one, which is what
// quote() is for.
func TestRanQuoteKeepsHostileValuesLiteral(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	m := &command.Ran{}
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	pwned := filepath.Join(t.TempDir(), "pwned")
	hostile := "'; touch " + pwned + "; '\nnext line; touch " + pwned
	render := func(t *testing.T, tpl string) string {
		t.Helper()
		tp, err := env.Template(tpl, 0)
		if err != nil {
			t.Fatal(err)
		}
		v, err := tp.Eval(context.Background(), expr.Vars{Input: map[string]any{"v": hostile}})
		if err != nil {
			t.Fatal(err)
		}
		return v.(string)
	}

	res, err := moduletest.Run(t, m, tg, map[string]any{"cmd": render(t, "printf '%s' ${ quote(input.v) }")})
	if err != nil || res.Output.(map[string]any)["stdout"] != hostile {
		t.Fatalf("quoted: %+v, %v", res.Output, err)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the quoted value ran a command")
	}

	_, _ = moduletest.Run(t, m, tg, map[string]any{"cmd": render(t, "printf '%s' '${ input.v }'")})
	if _, err := os.Stat(pwned); err != nil {
		t.Fatalf("control: the bare value did not run its command (%v), so the test proves nothing", err)
	}
}
