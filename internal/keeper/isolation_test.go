package keeper_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestProjectIsolation: against a real keeper on SQLite and PostgreSQL,
// with a real sshd carrying one soul of project a and one of project b,
// a project's tokens try to cross into the other project on every
// channel, and each attempt fails as if the other project's objects did
// not exist: REST gets, lists and deletes; creates naming the other
// project; a run naming the other project's soul, refused when it is
// validated and, for a target computed while the run goes, when the step
// runs (the soul of b never sees a command); the run's SSE stream and
// outputs; MCP tools; the audit log; /metrics; tokens minted for a
// project, which cannot reach keeper-wide power.
func TestProjectIsolation(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			k := serve(t, dir, databaseArgs(t, backend)...)
			admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
			projectIsolation(t, k, admin)
		})
	}
}

func projectIsolation(t *testing.T, k *proc, admin *client.Client) {
	ctx := context.Background()
	for _, p := range []string{"a", "b"} {
		if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	// One host per project: a project's hosts are its own (a second
	// project's soul at the same host is refused, TestProjectHostsAreTheirOwn).
	srvB := sshtest.Start(t, sshtest.Options{})
	srv := sshtest.Start(t, sshtest.Options{ClientKey: srvB.ClientKey})
	keyPath := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(keyPath, srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "crossed")
	conn := client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + keyPath}
	for _, so := range []struct {
		sid, project string
		srv          *sshtest.Server
	}{{"web.a.test", "a", srv}, {"web.b.test", "b", srvB}} {
		c := conn
		c.Port = so.srv.Port
		got, err := admin.SoulCreate(ctx, client.SoulCreate{SID: so.sid, Address: so.srv.Addr, Connection: c, Project: so.project})
		if err != nil || got.Project != so.project {
			t.Fatalf("soul %s: %+v, %v", so.sid, got, err)
		}
	}
	for _, p := range []string{"a", "b"} {
		if _, err := admin.ProviderCreate(ctx, client.ProviderCreate{Name: "cloud-" + p, Driver: "local", Project: p, Config: map[string]any{"zone": p}}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ProfileCreate(ctx, client.ProfileCreate{Name: "small-" + p, Provider: "cloud-" + p, Project: p, Spec: map[string]any{"cpus": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	tokenIn := func(project, role string) (*client.Client, *client.TokenCreated) {
		t.Helper()
		tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: project + "-" + role, Role: role, Project: project})
		if err != nil || tok.Project != project {
			t.Fatalf("token %s in %s: %+v, %v", role, project, tok, err)
		}
		c, _ := client.New(k.Addr, tok.Token)
		return c, tok
	}
	adminA, adminATok := tokenIn("a", "admin")
	opA, opATok := tokenIn("a", "operator")
	viewB, viewBTok := tokenIn("b", "viewer")

	// A project's admin holds everything but the keeper-wide permissions.
	for _, p := range adminATok.Permissions {
		if p == "project.manage" || p == "metrics.read" {
			t.Fatalf("a project's admin token holds %s: %v", p, adminATok.Permissions)
		}
	}

	t.Run("rest", func(t *testing.T) {
		souls, err := opA.SoulList(ctx, client.ListOptions{})
		if err != nil || len(souls.Items) != 1 || souls.Items[0].SID != "web.a.test" {
			t.Fatalf("a's souls: %+v, %v", souls, err)
		}
		_, err = opA.SoulGet(ctx, "web.b.test")
		wantProblem(t, err, http.StatusNotFound, "soul.not_found")
		_, err = viewB.ProviderGet(ctx, "cloud-a")
		wantProblem(t, err, http.StatusNotFound, "provider.not_found")
		_, err = viewB.ProfileGet(ctx, "small-a")
		wantProblem(t, err, http.StatusNotFound, "profile.not_found")
		provs, err := viewB.ProviderList(ctx, client.ListOptions{})
		if err != nil || len(provs.Items) != 1 || provs.Items[0].Name != "cloud-b" {
			t.Fatalf("b's providers: %+v, %v", provs, err)
		}
		wantProblem(t, adminA.SoulDelete(ctx, "web.b.test"), http.StatusNotFound, "soul.not_found")
		wantProblem(t, adminA.ProfileDelete(ctx, "small-b"), http.StatusNotFound, "profile.not_found")
		wantProblem(t, adminA.ProviderDelete(ctx, "cloud-b"), http.StatusNotFound, "provider.not_found")
		// Creating into the other project, or using its provider.
		// (A project's token names no file: key: its souls use its own
		// keeper key or credential: references.)
		ownKey := client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port}
		_, err = adminA.SoulCreate(ctx, client.SoulCreate{SID: "sneak.b.test", Address: srv.Addr, Connection: ownKey, Project: "b"})
		wantProblem(t, err, http.StatusNotFound, "project.not_found")
		_, err = adminA.ProfileCreate(ctx, client.ProfileCreate{Name: "sneak", Provider: "cloud-b", Spec: map[string]any{}})
		wantProblem(t, err, http.StatusUnprocessableEntity, "profile.provider_missing")
		// What a project's token creates is its project's.
		so, err := adminA.SoulCreate(ctx, client.SoulCreate{SID: "web2.a.test", Address: srv.Addr, Connection: ownKey})
		if err != nil || so.Project != "a" {
			t.Fatalf("a's new soul: %+v, %v", so, err)
		}
		if _, err := admin.SoulGet(ctx, "web.b.test"); err != nil {
			t.Fatalf("the other project's objects are untouched: %v", err)
		}
		// Tokens: a project's token mints tokens of its project only, and
		// sees no other token.
		_, err = adminA.TokenCreate(ctx, client.TokenCreate{Name: "sneak", Role: "viewer", Project: "b"})
		wantProblem(t, err, http.StatusNotFound, "project.not_found")
		child, err := adminA.TokenCreate(ctx, client.TokenCreate{Name: "child", Role: "admin"})
		if err != nil || child.Project != "a" {
			t.Fatalf("a's admin mints: %+v, %v", child, err)
		}
		toks, err := adminA.TokenList(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks.Items {
			if tk.Project != "a" {
				t.Fatalf("a's admin lists a token of %q: %+v", tk.Project, tk)
			}
		}
		all, err := admin.TokenList(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range all.Items {
			if tk.Project == "" {
				wantProblem(t, adminA.TokenRevoke(ctx, tk.ID), http.StatusNotFound, "token.not_found")
				break
			}
		}
		wantProblem(t, admin.ProjectDelete(ctx, "a"), http.StatusConflict, "project.in_use")
		// The keeper-wide routes.
		_, err = adminA.ProjectList(ctx, client.ListOptions{})
		wantProblem(t, err, http.StatusForbidden, "auth.forbidden")
		_, err = adminA.ProjectCreate(ctx, client.ProjectCreate{Name: "c"})
		wantProblem(t, err, http.StatusForbidden, "auth.forbidden")
	})

	t.Run("run targets", func(t *testing.T) {
		cross := "steps:\n  - name: x\n    on: web.b.test\n    module: core.command.ran\n    params: {cmd: \"touch " + marker + "\"}\n"
		_, _, err := opA.RunCreate(ctx, client.RunCreate{Scenario: cross})
		wantProblem(t, err, http.StatusUnprocessableEntity, "scenario.invalid")
		if !strings.Contains(err.Error(), "not a registered soul") {
			t.Fatalf("validation: %v", err)
		}
		v, err := opA.ScenarioValidate(ctx, client.ScenarioValidate{Scenario: cross})
		if err != nil || v.Valid || len(v.Problems) != 1 || v.Problems[0].Code != "scenario.unknown_soul" {
			t.Fatalf("validate: %+v, %v", v, err)
		}
		// A target computed from an earlier step is known when the step
		// runs: it is refused then, and nothing reaches the soul of b.
		late := "steps:\n  - name: first\n    on: web.a.test\n    module: core.command.ran\n    params: {cmd: \"true\"}\n" +
			"  - name: second\n    on: \"${ steps.first.changed ? 'web.b.test' : 'web.a.test' }\"\n    module: core.command.ran\n    params: {cmd: \"touch " + marker + "\"}\n"
		r, _, err := opA.RunCreate(ctx, client.RunCreate{Scenario: late})
		if err != nil || r.Project != "a" {
			t.Fatalf("run: %+v, %v", r, err)
		}
		done := waitRun(t, opA, r.ID)
		if done.Phase != client.PhaseFailed || len(done.Steps) != 2 || len(done.Steps[1].Targets) != 1 ||
			done.Steps[1].Targets[0].Error == nil || done.Steps[1].Targets[0].Error.Code != "soul.not_found" {
			t.Fatalf("the step that names b's soul: %s %s", done.Phase, describeSteps(done.Steps))
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a command of project a ran on project b's soul")
		}

		// The run, its stream and outputs do not exist for project b.
		_, err = viewB.RunGet(ctx, r.ID)
		wantProblem(t, err, http.StatusNotFound, "run.not_found")
		err = viewB.RunEvents(ctx, r.ID, 0, func(client.RunEvent) error { return nil })
		wantProblem(t, err, http.StatusNotFound, "run.not_found")
		for _, path := range []string{"/v1/runs/" + r.ID + "/events", "/v1/runs/" + r.ID + "/outputs"} {
			status, body := getWith(t, k.Addr+path, viewBTok.Token)
			if status != http.StatusNotFound || problemCode(body) != "run.not_found" {
				t.Fatalf("GET %s as b: %d %s", path, status, body)
			}
		}
		runs, err := viewB.RunList(ctx, client.RunListOptions{})
		if err != nil || len(runs.Items) != 0 {
			t.Fatalf("b's runs: %+v, %v", runs, err)
		}
		_, err = viewB.RunCancel(ctx, r.ID)
		wantProblem(t, err, http.StatusForbidden, "auth.forbidden") // a viewer may not cancel at all
		opB, _ := tokenIn("b", "operator")
		_, err = opB.RunCancel(ctx, r.ID)
		wantProblem(t, err, http.StatusNotFound, "run.not_found")
	})

	t.Run("audit", func(t *testing.T) {
		evs, err := viewB.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
		if err != nil || len(evs.Items) == 0 {
			t.Fatalf("b's audit: %+v, %v", evs, err)
		}
		for _, e := range evs.Items {
			var payload map[string]any
			_ = json.Unmarshal(e.Payload, &payload)
			if payload["project"] != "b" || strings.Contains(string(e.Payload), "web.a.test") || strings.Contains(e.Object, "cloud-a") {
				t.Fatalf("b's viewer reads an event that is not b's: %+v", e)
			}
		}
		_, err = viewB.AuditList(ctx, client.AuditListOptions{Verify: true})
		wantProblem(t, err, http.StatusForbidden, "auth.keeper_wide_required")
		all, err := admin.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
		if err != nil || len(all.Items) <= len(evs.Items) {
			t.Fatalf("the keeper admin sees every event: %d of %d, %v", len(all.Items), len(evs.Items), err)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// metrics.read is keeper-wide: a project's token cannot hold it,
		// so the keeper's figures (every project's) are not its to read.
		_, err := adminA.TokenCreate(ctx, client.TokenCreate{Name: "scraper", Permissions: []string{"metrics.read"}})
		wantProblem(t, err, http.StatusUnprocessableEntity, "token.permission_keeper_wide")
		_, err = admin.TokenCreate(ctx, client.TokenCreate{Name: "scraper", Permissions: []string{"run.read", "metrics.read"}, Project: "a"})
		wantProblem(t, err, http.StatusUnprocessableEntity, "token.permission_keeper_wide")
		status, body := getWith(t, k.Addr+"/metrics", adminATok.Token)
		if status != http.StatusForbidden {
			t.Fatalf("/metrics as a's admin: %d %s", status, body)
		}
	})

	t.Run("cloud drift", func(t *testing.T) {
		// (What a project's cloud drift lists: TestProjectQuotasAndSharing,
		// which has a real driver behind its provider.)
		_, err := viewB.CloudDriftOf(ctx, "cloud-a")
		wantProblem(t, err, http.StatusNotFound, "provider.not_found")
		_, err = viewB.CloudOrphans(ctx, "cloud-a")
		wantProblem(t, err, http.StatusNotFound, "provider.not_found")
	})

	t.Run("mcp", func(t *testing.T) {
		s, err := connectHTTP(ctx, k, opATok.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var souls client.SoulList
		structured(t, callTool(ctx, t, s, "souls_list", map[string]any{}, nil), &souls)
		if len(souls.Items) != 2 || souls.Items[0].Project != "a" || souls.Items[1].Project != "a" {
			t.Fatalf("souls_list as a's operator: %+v", souls)
		}
		refused(t, callTool(ctx, t, s, "soul_get", map[string]any{"sid": "web.b.test"}, nil), "soul.not_found")
		refused(t, callTool(ctx, t, s, "provider_get", map[string]any{"name": "cloud-b"}, nil), "provider.not_found")
		var v client.ScenarioValidation
		structured(t, callTool(ctx, t, s, "scenario_validate", map[string]any{
			"scenario": "steps:\n  - name: x\n    on: web.b.test\n    module: core.command.ran\n    params: {cmd: \"true\"}\n"}, nil), &v)
		if v.Valid || len(v.Problems) != 1 || v.Problems[0].Code != "scenario.unknown_soul" {
			t.Fatalf("scenario_validate as a's operator: %+v", v)
		}
		// a's calls, those that named b's objects included, are a's audit:
		// b's viewer reads none of them, a's admin reads them all.
		calls := func(c *client.Client) (n int) {
			evs, err := c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if e.Action == "mcp.called" && e.ActorAID == opATok.ID {
					n++
				}
			}
			return n
		}
		if inB, inA := calls(viewB), calls(adminA); inB != 0 || inA < 4 {
			t.Fatalf("a's operator's MCP calls: %d in b's audit, %d in a's (want 0 and every call)", inB, inA)
		}
	})
}

// getWith GETs url with a bearer token and returns the status and body.
func getWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}
