package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestRunMessage checks a finished run's message on a real keeper with
// real sshd hosts: the JSON of the outputs when it Succeeded, and the
// error when it did not, as the second seed's job puts what it raised in
// its message — each failed target as "<step> on <sid>: <code>:
// <message>" joined with "; ", at most five then a count, or "<code>:
// <message>" for a run-level error — with the outputs still in outputs
// and secrets masked.
func TestRunMessage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	hosts := sshtest.StartN(t, 2, sshtest.Options{})
	for i, sid := range []string{"a.msg.test", "b.msg.test"} {
		addSoul(t, c, sid, hosts[i])
	}
	var many []string
	for i := 1; i <= 7; i++ {
		many = append(many, fmt.Sprintf("n%d.msg.test", i))
		addSoul(t, c, many[i-1], hosts[0])
	}
	const secretValue = "canary-Msg-7f3a-secret"
	tests := []struct {
		name     string
		scenario string
		input    map[string]any
		timeout  string
		phase    client.Phase
		code     string
		message  string // the whole message, unless it is the outputs
		outputs  string // a step output that must stay in outputs
	}{
		{
			name: "succeeded",
			scenario: `steps:
  - name: hello
    on: [a.msg.test]
    module: core.command.ran
    params: {cmd: "echo hi"}
`,
			phase: "Succeeded", outputs: `"stdout":"hi\n"`,
		},
		{
			// One target prints text that is not JSON, the other exits
			// 3: both errors, in the order of the targets, and the first
			// step's output stays in outputs.
			name: "targets failed",
			scenario: `steps:
  - name: hello
    on: [a.msg.test, b.msg.test]
    module: core.command.ran
    params: {cmd: "echo hi"}
  - name: handler
    on: [a.msg.test, b.msg.test]
    module: core.script.ran
    params:
      source: |
        if [ "$SID" = a.msg.test ]; then echo not json; else echo disk full >&2; exit 3; fi
      env: {SID: "${ soul.sid }"}
`,
			phase: "Failed", code: "run.targets_failed",
			message: `handler on a.msg.test: script.output_invalid: the script exited 0 but its standard output is not JSON (invalid character 'o' in literal null (expecting 'u')); it begins "not json"` +
				`; handler on b.msg.test: script.failed: exit status 3: disk full`,
			outputs: `"stdout":"hi\n"`,
		},
		{
			name: "any_errors_fatal",
			scenario: `steps:
  - name: first
    on: [a.msg.test]
    module: core.command.ran
    any_errors_fatal: true
    params: {cmd: "echo broken >&2; exit 4"}
`,
			phase: "Failed", code: "run.fatal_error",
			message: `first on a.msg.test: command.failed: exit status 4: broken`,
		},
		{
			// Seven souls (one sshd) that all fail: five spelled out, the
			// rest counted.
			name: "more than five",
			scenario: `inputs:
  hosts: {type: list}
steps:
  - name: ping
    on: "${ input.hosts }"
    module: core.command.ran
    params: {cmd: "exit 1"}
`,
			input: map[string]any{"hosts": many},
			phase: "Failed", code: "run.targets_failed",
			message: `ping on n1.msg.test: command.failed: exit status 1: (no output); ping on n2.msg.test: command.failed: exit status 1: (no output); ` +
				`ping on n3.msg.test: command.failed: exit status 1: (no output); ping on n4.msg.test: command.failed: exit status 1: (no output); ` +
				`ping on n5.msg.test: command.failed: exit status 1: (no output); and 2 more failed target(s)`,
		},
		{
			// A secret input the failing command prints is masked in the
			// message as everywhere.
			name: "secret masked",
			scenario: `inputs:
  pw: {type: string, secret: true}
steps:
  - name: leak
    on: [b.msg.test]
    module: core.command.ran
    params: {argv: [sh, -c, 'echo "bad $0" >&2; exit 1', "${ input.pw }"]}
`,
			input: map[string]any{"pw": secretValue},
			phase: "Failed", code: "run.targets_failed",
			message: `leak on b.msg.test: command.failed: exit status 1: bad ***`,
		},
		{
			name: "run timeout",
			scenario: `steps:
  - name: slow
    on: [a.msg.test]
    module: core.command.ran
    params: {cmd: "sleep 30"}
`,
			timeout: "1s",
			phase:   "Failed", code: "run.timeout",
			message: `run.timeout: the run did not finish within its timeout of 1s`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: tt.scenario, Input: tt.input, Timeout: tt.timeout})
			if err != nil {
				t.Fatal(err)
			}
			final := waitRun(t, c, run.ID)
			if final.Phase != tt.phase || (tt.code != "" && (final.Error == nil || final.Error.Code != tt.code)) {
				t.Fatalf("run = %s %+v, want %s %s", final.Phase, final.Error, tt.phase, tt.code)
			}
			if tt.outputs != "" && !strings.Contains(string(final.Outputs), tt.outputs) {
				t.Errorf("outputs = %s, want them to hold %s", final.Outputs, tt.outputs)
			}
			if tt.phase == "Succeeded" {
				var a, b any
				if json.Unmarshal([]byte(final.Message), &a) != nil || json.Unmarshal(final.Outputs, &b) != nil || !jsonEqual(a, b) {
					t.Fatalf("message = %q, want the JSON of the outputs %s", final.Message, final.Outputs)
				}
				return
			}
			if final.Message != tt.message {
				t.Fatalf("message =\n%q\nwant\n%q", final.Message, tt.message)
			}
			if strings.Contains(final.Message+string(final.Outputs)+final.Error.Message, secretValue) {
				t.Fatal("a secret input shows in the run")
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
