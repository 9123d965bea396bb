package keeper_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
)

// TestProjectIsolationOverTheBus: two souls reached through their agents
// over the real NATS bus (their SSH ports closed), one in project a and
// one in project b. A token of project a runs a command on its soul over
// the bus; a run of a that names b's soul is refused when it is
// validated, and one whose target is computed while it goes is refused
// when the step runs: b's agent never receives the command.
func TestProjectIsolationOverTheBus(t *testing.T) {
	t.Parallel()
	k := startAgentKeeper(t)
	ctx := t.Context()
	var ids []bustest.Identity
	for _, p := range []string{"a", "b"} {
		if _, err := k.c.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
		sid := "agent." + p + ".test"
		if _, err := k.c.SoulCreate(ctx, client.SoulCreate{SID: sid, Address: "127.0.0.1", Project: p, Connection: client.Connection{Port: closedPort(t)}}); err != nil {
			t.Fatal(err)
		}
		id := bustest.Issue(t, k.ca, sid, time.Hour, time.Now())
		recordSerial(t, k.cfg, sid, id.Serial)
		ids = append(ids, id)
	}
	k.agents(t, ids...)
	k.waitPresent(t, "agent.a.test")
	k.waitPresent(t, "agent.b.test")
	tok, err := k.c.TokenCreate(ctx, client.TokenCreate{Name: "a-op", Role: "operator", Project: "a"})
	if err != nil {
		t.Fatal(err)
	}
	opA, _ := client.New(k.url, tok.Token)

	ours := filepath.Join(t.TempDir(), "ours")
	r, _, err := opA.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: mine\n    on: agent.a.test\n    module: core.command.ran\n    connect: {retries: 0}\n    params: {cmd: \"touch " + ours + "\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if done := waitRun(t, opA, r.ID); done.Phase != client.PhaseSucceeded {
		t.Fatalf("a's run on its own soul over the bus: %s\n%s", done.Phase, describeSteps(done.Steps))
	}
	if _, err := os.Stat(ours); err != nil {
		t.Fatalf("a's command did not run on its soul: %v", err)
	}

	crossed := filepath.Join(t.TempDir(), "crossed")
	_, _, err = opA.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: x\n    on: agent.b.test\n    module: core.command.ran\n    params: {cmd: \"touch " + crossed + "\"}\n"})
	wantProblem(t, err, http.StatusUnprocessableEntity, "scenario.invalid")
	late := "steps:\n  - name: first\n    on: agent.a.test\n    module: core.command.ran\n    connect: {retries: 0}\n    params: {cmd: \"true\"}\n" +
		"  - name: second\n    on: \"${ steps.first.changed ? 'agent.b.test' : 'agent.a.test' }\"\n    module: core.command.ran\n    connect: {retries: 0}\n    params: {cmd: \"touch " + crossed + "\"}\n"
	r, _, err = opA.RunCreate(ctx, client.RunCreate{Scenario: late})
	if err != nil {
		t.Fatal(err)
	}
	done := waitRun(t, opA, r.ID)
	if done.Phase != client.PhaseFailed || len(done.Steps) != 2 || done.Steps[1].Targets[0].Error == nil || done.Steps[1].Targets[0].Error.Code != "soul.not_found" {
		t.Fatalf("the step naming b's soul: %s\n%s", done.Phase, describeSteps(done.Steps))
	}
	if _, err := os.Stat(crossed); err == nil {
		t.Fatal("b's agent ran a command of project a")
	}
}
