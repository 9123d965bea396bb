package keeper_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// approvalsConfig holds every command run in project prod for a second
// person; held steps wait 10 s at most.
const approvalsConfig = `mcp:
  allow_writes: true
approvals:
  expires_in: 10s
  policy: |
    @id("prod-commands")
    forbid (principal, action == Action::"core.command.ran", resource == Project::"prod");
`

// TestApprovals: against a real keeper on SQLite and PostgreSQL, with a
// real sshd as a soul of project prod. A keeper.yml policy holds every
// command in prod: the run waits AwaitingApproval and the command does
// not run; its creator cannot approve it (the same token, or another
// token of theirs), a viewer lacks run.approve, another project's admin
// does not see the run; another person approves with a reason and the
// command runs. A rejected run ends Rejected, one nobody decides expires
// Rejected, both without running the command. A run held while its keeper
// stops waits again on the next keeper and goes on once approved. A
// policy set through the API holds a cloud create of more than 5 VMs
// (before any driver is called) and lets a smaller one through; a policy
// that does not parse is refused with where it is wrong. Every decision
// is audited in the project.
func TestApprovals(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append([]string{"--config", keeperConfig(t, dir, approvalsConfig)}, databaseArgs(t, backend)...)
			approvals(t, dir, args)
		})
	}
}

func approvals(t *testing.T, dir string, args []string) {
	ctx := context.Background()
	k := serve(t, dir, args...)
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	for _, p := range []string{"prod", "dev"} {
		if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	srv := sshtest.Start(t, sshtest.Options{})
	addSoulIn(t, admin, "db.prod.test", "prod", srv)
	tokens := map[string]string{}
	mint := func(name, role, project string) *client.Client {
		tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: name, Role: role, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok.Token
		c, _ := client.New(k.Addr, tok.Token)
		return c
	}
	creator := mint("creator", "admin", "prod") // an admin: it holds run.approve, and still may not approve its own run
	approver := mint("approver", "admin", "prod")
	viewer := mint("viewer", "viewer", "prod")
	outsider := mint("outsider", "admin", "dev")
	marker := filepath.Join(t.TempDir(), "ran")
	start := func(c *client.Client, file string) *client.Run {
		t.Helper()
		r, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: migrate\n    on: db.prod.test\n    module: core.command.ran\n    params: {cmd: \"touch " + file + "\"}\n"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	awaiting := func(c *client.Client, id string) *client.Run {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			r, err := c.RunGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Phase == client.PhaseAwaitingApproval {
				return r
			}
			if client.Terminal(r.Phase) {
				t.Fatalf("run %s ended %s before it was held: %s", id, r.Phase, r.Message)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("run %s was never AwaitingApproval", id)
		return nil
	}

	// Held, then approved by another person.
	r := start(creator, marker)
	held := awaiting(creator, r.ID)
	if len(held.Approvals) != 1 || held.Approvals[0].Status != "pending" || held.Approvals[0].Policies[0] != "prod-commands" || held.Approvals[0].Step != "migrate" {
		t.Fatalf("the held run's approvals: %+v", held.Approvals)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the held step ran before anyone approved it")
	}
	if l, err := creator.RunList(ctx, client.RunListOptions{}); err != nil || len(l.Items) != 1 || l.Items[0].Phase != client.PhaseAwaitingApproval {
		t.Fatalf("runs list: %+v, %v", l, err)
	}
	_, err := creator.RunApprove(ctx, r.ID, "looks fine to me")
	wantProblem(t, err, http.StatusForbidden, "run.self_approval")
	// Nor with a token it mints for the purpose, or one that token mints.
	second, err := creator.TokenCreate(ctx, client.TokenCreate{Name: "second", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	secondC, _ := client.New(k.Addr, second.Token)
	_, err = secondC.RunApprove(ctx, r.ID, "it is me, but another token")
	wantProblem(t, err, http.StatusForbidden, "run.self_approval")
	third, err := secondC.TokenCreate(ctx, client.TokenCreate{Name: "third", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	thirdC, _ := client.New(k.Addr, third.Token)
	_, err = thirdC.RunApprove(ctx, r.ID, "two tokens away")
	wantProblem(t, err, http.StatusForbidden, "run.self_approval")
	_, err = viewer.RunApprove(ctx, r.ID, "ok")
	wantProblem(t, err, http.StatusForbidden, "auth.forbidden")
	_, err = outsider.RunApprove(ctx, r.ID, "ok")
	wantProblem(t, err, http.StatusNotFound, "run.not_found")
	// Approved with soulctl, as a person would.
	approve := exec.Command(soulctlBinary(t), "runs", "approve", r.ID, "--reason", "change ticket 42")
	approve.Env = append(os.Environ(), "SOULSTACK_KEEPER="+k.Addr, "SOULSTACK_TOKEN="+tokens["approver"])
	if out, err := approve.CombinedOutput(); err != nil || !strings.Contains(string(out), "approved") {
		t.Fatalf("soulctl runs approve: %v\n%s", err, out)
	}
	done := waitRun(t, creator, r.ID)
	if done.Phase != client.PhaseSucceeded || len(done.Approvals) != 1 || done.Approvals[0].Status != "approved" || done.Approvals[0].Reason != "change ticket 42" {
		t.Fatalf("after the approval: %s %+v", done.Phase, done.Approvals)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved step did not run: %v", err)
	}
	_, err = approver.RunApprove(ctx, r.ID, "again")
	wantProblem(t, err, http.StatusConflict, "run.not_awaiting_approval")

	// Rejected: the run ends Rejected and the command never runs.
	rejectedMarker := filepath.Join(t.TempDir(), "rejected")
	r = start(creator, rejectedMarker)
	awaiting(creator, r.ID)
	// Rejected over MCP.
	own, err := connectHTTP(ctx, k, tokens["creator"], nil)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, callTool(ctx, t, own, "run_reject", map[string]any{"id": r.ID, "reason": "mine"}, nil), "run.self_approval")
	own.Close()
	session, err := connectHTTP(ctx, k, tokens["approver"], nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := callTool(ctx, t, session, "run_reject", map[string]any{"id": r.ID, "reason": "not during the freeze"}, nil); res.IsError {
		t.Fatalf("run_reject: %s", resultText(res))
	}
	session.Close()
	done = waitRun(t, creator, r.ID)
	if done.Phase != client.PhaseRejected || done.Error == nil || done.Error.Code != "run.rejected" || !strings.Contains(done.Error.Message, "not during the freeze") {
		t.Fatalf("after the rejection: %s %+v", done.Phase, done.Error)
	}
	// Nobody decides: it expires (10 s).
	r = start(creator, rejectedMarker)
	done = waitRun(t, creator, r.ID)
	if done.Phase != client.PhaseRejected || done.Error == nil || done.Error.Code != "run.approval_expired" {
		t.Fatalf("undecided: %s %+v", done.Phase, done.Error)
	}
	if _, err := os.Stat(rejectedMarker); err == nil {
		t.Fatal("a rejected or expired step ran")
	}

	// A keeper that stops while a run waits hands it back; the next one
	// holds it again, and it goes on once approved.
	resumedMarker := filepath.Join(t.TempDir(), "resumed")
	r = start(creator, resumedMarker)
	awaiting(creator, r.ID)
	k.Terminate(t)
	k = serve(t, dir, args...)
	again, _ := client.New(k.Addr, tokens["approver"])
	creatorAgain, _ := client.New(k.Addr, tokens["creator"])
	awaiting(creatorAgain, r.ID)
	if _, err := again.RunApprove(ctx, r.ID, "after the restart"); err != nil {
		t.Fatal(err)
	}
	if done := waitRun(t, creatorAgain, r.ID); done.Phase != client.PhaseSucceeded {
		t.Fatalf("resumed after the approval: %s %s", done.Phase, done.Message)
	}
	if _, err := os.Stat(resumedMarker); err != nil {
		t.Fatalf("the resumed step did not run: %v", err)
	}

	// A policy through the API: cloud creates of more than 5 VMs.
	adminAgain := adminClient(t, k, filepath.Join(dir, ".keeper"))
	_, err = adminAgain.ApprovalPolicySet(ctx, "forbid (principal, action, resource) when { context.nope }")
	wantProblem(t, err, http.StatusUnprocessableEntity, "approval.policy_invalid")
	_, err = adminAgain.ApprovalPolicySet(ctx, "permit (principal, action, resource);")
	wantProblem(t, err, http.StatusUnprocessableEntity, "approval.policy_invalid")
	_, err = adminAgain.ApprovalPolicySet(ctx, "forbid (principal, action, resource)")
	wantProblem(t, err, http.StatusUnprocessableEntity, "approval.policy_invalid")
	if _, err := adminAgain.ApprovalPolicySet(ctx, "@id(\"big-create\")\nforbid (principal, action == Action::\"core.cloud.created\", resource)\nwhen { context.params has count && context.params.count > 5 };\n"); err != nil {
		t.Fatal(err)
	}
	_, err = again.ApprovalPolicySet(ctx, "")
	wantProblem(t, err, http.StatusForbidden, "auth.forbidden") // a project's admin: keeper-wide only
	big, _, err := adminAgain.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: vms\n    on: keeper\n    module: core.cloud.created\n    params: {provider: nowhere, count: 6}\n"})
	if err != nil {
		t.Fatal(err)
	}
	held = awaiting(adminAgain, big.ID)
	if held.Approvals[0].Policies[0] != "big-create" {
		t.Fatalf("the big create is held by %+v", held.Approvals)
	}
	small, _ := cloudStep(t, adminAgain, "core.cloud.created", "{provider: nowhere, count: 1}")
	if small.Phase != client.PhaseFailed || !strings.Contains(describeSteps(small.Steps), "provider.not_found") {
		t.Fatalf("a small create is not held (and fails on its missing provider): %s\n%s", small.Phase, describeSteps(small.Steps))
	}
	if _, err := again.RunReject(ctx, big.ID, "no"); err != nil {
		// A prod token cannot see a default-project run: 404.
		wantProblem(t, err, http.StatusNotFound, "run.not_found")
	} else {
		t.Fatal("a prod token decided a run of the default project")
	}

	evs, err := again.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range evs.Items {
		seen[e.Action]++
	}
	if seen["run.approval_requested"] != 4 || seen["run.approved"] != 2 || seen["run.rejected"] != 1 || seen["run.approval_expired"] != 1 {
		t.Fatalf("prod's audit of approvals: %v", seen)
	}
}

// TestUIApprovals: in real Chromium, the run's page of a run held for
// approval shows the hold, its project and the signed-in project (whose
// souls page lists the project's souls alone); the
// run's creator who clicks Approve is refused (run.self_approval, shown
// on the page) and the step does not run; another person of the project
// types a reason and clicks Approve, and the page follows the run to
// Succeeded.
func TestUIApprovals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir, "--config", keeperConfig(t, dir, "approvals:\n  expires_in: 2m\n  policy: |\n    @id(\"prod-commands\")\n    forbid (principal, action == Action::\"core.command.ran\", resource == Project::\"prod\");\n"))
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	ctx := context.Background()
	if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: "prod"}); err != nil {
		t.Fatal(err)
	}
	srv := sshtest.Start(t, sshtest.Options{})
	addSoulIn(t, admin, "db.prod.test", "prod", srv)
	addSoul(t, admin, "web.default.test", sshtest.Start(t, sshtest.Options{})) // a project's hosts are its own
	mint := func(name string) string {
		tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: name, Role: "admin", Project: "prod"})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	creatorTok, approverTok := mint("creator"), mint("approver")
	creator, _ := client.New(k.Addr, creatorTok)
	marker := filepath.Join(t.TempDir(), "ran")
	r, _, err := creator.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: migrate\n    on: db.prod.test\n    module: core.command.ran\n    params: {cmd: \"touch " + marker + "\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	shots := filepath.Join(os.TempDir(), "soulstack-ui-shots")
	_ = os.MkdirAll(shots, 0o755)

	own := newBrowser(t, k.Addr, shots)
	own.signIn(creatorTok)
	own.open("#/runs/"+r.ID, "#approve")
	if got := get(own, chromedp.Text(chromedp.CSS("#who-project"))); !strings.Contains(got, "prod") {
		t.Fatalf("the header says %q", got)
	}
	own.run(chromedp.SendKeys(chromedp.CSS("#approval-reason"), "my own change"), chromedp.Click(chromedp.CSS("#approve")),
		chromedp.WaitVisible(chromedp.CSS(".error")))
	if html := own.mainHTML(); !strings.Contains(html, "run.self_approval") {
		t.Fatalf("the creator's approval: %s", html)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the creator's own approval let the step run")
	}

	b := newBrowser(t, k.Addr, shots)
	b.signIn(approverTok)
	b.open("#/runs/"+r.ID, "#approve")
	// The head is drawn again at each of the run's events: read it once
	// it says so.
	get(b, chromedp.Poll[bool](`(document.querySelector('#run-project') || {}).textContent === 'prod'`))
	if got := get(b, chromedp.Text(chromedp.CSS("#approvals"))); !strings.Contains(got, "prod-commands") {
		t.Fatalf("the hold is shown as %q", got)
	}
	b.screenshot("run-awaiting-approval")
	b.run(chromedp.SendKeys(chromedp.CSS("#approval-reason"), "change ticket 7"), chromedp.Click(chromedp.CSS("#approve")),
		chromedp.WaitVisible(chromedp.CSS(`#run-phase[data-phase="Succeeded"]`)))
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved step did not run: %v", err)
	}
	// The signed-in project is all the UI shows: prod's soul, not the
	// default project's.
	b.open("#/souls", `#souls tr[data-key="db.prod.test"]`)
	if html := b.mainHTML(); strings.Contains(html, "web.default.test") {
		t.Fatal("a prod session's souls page shows the default project's soul")
	}
	done, err := creator.RunGet(ctx, r.ID)
	if err != nil || len(done.Approvals) != 1 || done.Approvals[0].Reason != "change ticket 7" || done.Approvals[0].Status != "approved" {
		t.Fatalf("the run after the UI's approval: %+v, %v", done, err)
	}
}
