package keeper_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

func targetStatuses(s client.RunStep) map[string]string {
	out := map[string]string{}
	for _, tg := range s.Targets {
		out[tg.SID] = string(tg.Status)
	}
	return out
}

// TestScenarioSemantics runs one scenario on three real hosts and checks
// when (per soul), changed_when, failed_when, outputs seen by later steps,
// a failed target being skipped later while the others go on, and
// any_errors_fatal stopping the run.
func TestScenarioSemantics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	hosts := sshtest.StartN(t, 3, sshtest.Options{})
	sids := []string{"a.local.test", "b.local.test", "c.local.test"}
	for i, h := range hosts {
		addSoul(t, c, sids[i], h)
	}
	ctx := context.Background()
	sc := `name: semantics
inputs:
  hosts: {type: list}
  word: {type: string, default: soul}
steps:
  - name: hello
    on: "${ input.hosts }"
    module: core.command.ran
    params: {cmd: "echo ${ input.word }-$(hostname -s 2>/dev/null || echo x)"}
    changed_when: false
  - name: only_b
    on: "${ input.hosts }"
    when: soul.sid == "b.local.test"
    module: core.command.ran
    params: {argv: [echo, "${ steps.hello.output[soul.sid].stdout }"]}
  - name: break_c
    on: "${ input.hosts }"
    module: core.command.ran
    params: {cmd: "test $(echo ${ soul.sid } | cut -c1) != c"}
  - name: after
    on: "${ input.hosts }"
    module: core.command.ran
    params: {cmd: "echo after"}
    failed_when: result.output.stdout != "after\n"
  - name: tolerate
    on: "${ input.hosts }"
    module: core.command.ran
    params: {cmd: "exit 7"}
    failed_when: result.output.rc != 7
    changed_when: false
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, File: "semantics.yaml", Input: map[string]any{"hosts": sids}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if len(final.Steps) != 5 {
		t.Fatalf("steps = %+v", final.Steps)
	}
	if got := targetStatuses(final.Steps[0]); got["a.local.test"] != "ok" || got["c.local.test"] != "ok" {
		t.Fatalf("hello (changed_when false) = %v", got)
	}
	if got := targetStatuses(final.Steps[1]); got["a.local.test"] != "skipped" || got["b.local.test"] != "changed" || got["c.local.test"] != "skipped" {
		t.Fatalf("only_b (when per soul) = %v", got)
	}
	var out struct{ Stdout string }
	for _, tg := range final.Steps[1].Targets {
		if tg.SID == "b.local.test" {
			_ = json.Unmarshal(tg.Output, &out)
		}
	}
	if !strings.HasPrefix(out.Stdout, "soul-") {
		t.Fatalf("a later step did not see the earlier output: %q", out.Stdout)
	}
	if got := targetStatuses(final.Steps[2]); got["c.local.test"] != "failed" || got["a.local.test"] != "changed" {
		t.Fatalf("break_c = %v", got)
	}
	if got := targetStatuses(final.Steps[3]); got["c.local.test"] != "skipped" || got["a.local.test"] != "changed" || got["b.local.test"] != "changed" {
		t.Fatalf("after (c failed earlier) = %v", got)
	}
	if got := targetStatuses(final.Steps[4]); got["a.local.test"] != "ok" || got["b.local.test"] != "ok" {
		t.Fatalf("tolerate (failed_when overrides exit 7) = %v", got)
	}
	if final.Phase != "Failed" || final.Error.Code != "run.targets_failed" || !strings.Contains(final.Error.Message, "break_c on c.local.test") {
		t.Fatalf("run = %s %+v", final.Phase, final.Error)
	}

	fatal := `steps:
  - name: first
    on: [a.local.test, b.local.test]
    module: core.command.ran
    any_errors_fatal: true
    params: {cmd: "test ${ soul.sid } != a.local.test"}
  - name: never
    on: [a.local.test, b.local.test]
    module: core.command.ran
    params: {cmd: "true"}
`
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: fatal})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != "Failed" || final.Error.Code != "run.fatal_error" || len(final.Steps) != 1 {
		t.Fatalf("any_errors_fatal run = %s %+v steps %d", final.Phase, final.Error, len(final.Steps))
	}
}

// TestHostKeyChangeRefused: after the first contact pins a soul's host key,
// a server presenting another key fails that host with
// ssh.host_key_mismatch and an audit event; it is never accepted.
func TestHostKeyChangeRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	ctx := context.Background()
	sc := "steps:\n  - name: x\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n"
	run, _, _ := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
	if r := waitRun(t, c, run.ID); r.Phase != "Succeeded" {
		t.Fatalf("first run: %s %+v", r.Phase, r.Error)
	}
	port, key := srv.Port, srv.ClientKey
	srv.Stop()
	sshtest.Start(t, sshtest.Options{Port: port, ClientKey: key}) // same place, new host key
	run, _, _ = c.RunCreate(ctx, client.RunCreate{Scenario: sc})
	r := waitRun(t, c, run.ID)
	tg := r.Steps[0].Targets[0]
	if r.Phase != "Failed" || tg.Status != "failed" || tg.Error.Code != "ssh.host_key_mismatch" {
		t.Fatalf("changed host key: %s %+v", r.Phase, tg)
	}
	events, _ := c.AuditList(ctx, client.AuditListOptions{})
	var pinned, mismatch bool
	for _, e := range events.Items {
		pinned = pinned || e.Action == "soul.host_key_pinned"
		mismatch = mismatch || (e.Action == "ssh.host_key_mismatch" && e.Object == "soul/h.local.test")
	}
	if !pinned || !mismatch {
		t.Fatalf("audit lacks the pin or the mismatch: %+v", events.Items)
	}
}
