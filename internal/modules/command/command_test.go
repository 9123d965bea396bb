package command_test

import (
	"path/filepath"
	"testing"

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
