package keeper_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/client"
)

// TestProjectsRegistry: against a real keeper, an admin creates, lists,
// gets and deletes a project (audited); a deleted project's name is not
// given again; the default project exists and cannot be deleted; an
// operator and a viewer may do none of it.
func TestProjectsRegistry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	admin := adminClient(t, k, filepath.Join(dir, ".keeper"))
	ctx := context.Background()
	if p, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: "team-a", Description: "the A team"}); err != nil || p.Name != "team-a" || p.Description != "the A team" {
		t.Fatalf("create: %+v, %v", p, err)
	}
	_, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: "team-a"})
	wantProblem(t, err, http.StatusConflict, "project.exists")
	_, err = admin.ProjectCreate(ctx, client.ProjectCreate{Name: "Team A!"})
	wantProblem(t, err, http.StatusUnprocessableEntity, "name.invalid")
	l, err := admin.ProjectList(ctx, client.ListOptions{})
	if err != nil || len(l.Items) != 2 || l.Items[0].Name != "default" || l.Items[1].Name != "team-a" {
		t.Fatalf("list: %+v, %v", l, err)
	}
	wantProblem(t, admin.ProjectDelete(ctx, "default"), http.StatusConflict, "project.default")

	for _, role := range []string{"operator", "viewer"} {
		tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: role, Role: role})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New(k.Addr, tok.Token)
		_, err = c.ProjectCreate(ctx, client.ProjectCreate{Name: "mine"})
		wantProblem(t, err, http.StatusForbidden, "auth.forbidden")
		_, err = c.ProjectList(ctx, client.ListOptions{})
		wantProblem(t, err, http.StatusForbidden, "auth.forbidden")
		wantProblem(t, c.ProjectDelete(ctx, "team-a"), http.StatusForbidden, "auth.forbidden")
	}
	if err := admin.ProjectDelete(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	_, err = admin.ProjectGet(ctx, "team-a")
	wantProblem(t, err, http.StatusNotFound, "project.not_found")
	// The name stays with what team-a left (its audit events here): a new
	// project is never given it, or it would read them.
	_, err = admin.ProjectCreate(ctx, client.ProjectCreate{Name: "team-a"})
	wantProblem(t, err, http.StatusConflict, "project.name_retired")
	events, err := admin.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range events.Items {
		if e.Object == "project/team-a" {
			seen[e.Action] = true
		}
	}
	if !seen["project.created"] || !seen["project.deleted"] || len(seen) != 2 {
		t.Fatalf("audit of team-a: %v", seen)
	}
}
