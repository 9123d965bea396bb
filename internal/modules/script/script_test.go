package script_test

import (
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	"github.com/soulstack/soulstack/internal/modules/script"
)

func TestRan(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	m := &script.Ran{}
	// The handler reads the event from stdin and the connection from env,
	// and prints its JSON result: the second seed's "function".
	src := `read -r event
printf '{"got":%s,"vm":"%s","changed":false}\n' "$event" "$VM_IP"`
	res, err := moduletest.Run(t, m, tg, map[string]any{"source": src, "event": map[string]any{"packages": []any{"git"}}, "env": map[string]any{"VM_IP": "10.0.0.7"}})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Output.(map[string]any)
	if res.Changed || out["vm"] != "10.0.0.7" || out["got"].(map[string]any)["packages"].([]any)[0] != "git" {
		t.Fatalf("result = %+v", res)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"source": "import json,sys\nprint(json.dumps({'n': len(sys.stdin.readline())}))", "interpreter": "/usr/bin/env python3"})
	if err == nil && res.Output.(map[string]any)["n"] == nil {
		t.Fatalf("python interpreter: %+v", res)
	}
	res, err = moduletest.Run(t, m, tg, map[string]any{"source": "echo not json"})
	if err != nil || !res.Changed || res.Output.(map[string]any)["stdout"] != "not json\n" {
		t.Fatalf("plain output: %+v, %v", res, err)
	}
	_, err = moduletest.Run(t, m, tg, map[string]any{"source": "echo broken >&2; exit 2"})
	if module.Code(err) != "script.failed" || err.Error() != "exit status 2: broken" {
		t.Fatalf("failing script: %v", err)
	}
	// The script text reaches the interpreter byte for byte, and the
	// variable that carried it is gone before the script runs.
	res, err = moduletest.Run(t, m, tg, map[string]any{"source": "# it's \"ü\" \\ $x `id`\nprintf '{\"src\":\"%s\"}' \"${SOULSTACK_SCRIPT_SOURCE-unset}\"\n"})
	if err != nil || res.Output.(map[string]any)["src"] != "unset" {
		t.Fatalf("script text: %+v, %v", res, err)
	}
	// The largest script accepted runs; one byte more is refused up front.
	big := "#" + strings.Repeat("x", 128<<10-len("SOULSTACK_SCRIPT_SOURCE")-2-len("#\necho 1")) + "\necho 1"
	res, err = moduletest.Run(t, m, tg, map[string]any{"source": big})
	if err != nil || res.Output != float64(1) {
		t.Fatalf("largest script: %+v, %v", res, err)
	}
	_, err = moduletest.Run(t, m, tg, map[string]any{"source": big + "\n"})
	if module.Code(err) != "script.too_large" {
		t.Fatalf("script one byte too long: %v", err)
	}
	tg.Files = map[string][]byte{"handler.sh": []byte("echo '[1,2]'")}
	res, err = moduletest.Run(t, m, tg, map[string]any{"path": "handler.sh"})
	if err != nil || len(res.Output.([]any)) != 2 {
		t.Fatalf("keeper file: %+v, %v", res, err)
	}
}
