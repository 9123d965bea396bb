package api

import (
	"context"
	"net/http"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
)

// Projects confine what a caller sees and does (DESIGN.md section 13). A
// project's token or session sees its project's objects alone: every
// other project's provider, profile, soul, run, token and audit event is
// 404 to it, as if it did not exist, on every route (MCP and the web UI
// call these routes too), and what it creates goes into its project. A
// keeper-wide token sees every project and creates in the one the body
// names (the default project when it names none).

// scopeOf is the project the caller is confined to; empty when it is
// keeper-wide.
func scopeOf(ctx context.Context) string { return principal(ctx).Project }

// sees reports whether the caller may see (and use) an object of project
// that is shared with shared.
func sees(ctx context.Context, project string, shared []string) bool {
	return module.Visible(project, shared, scopeOf(ctx))
}

// manages reports whether the caller may change an object of project: a
// share lets another project use it, never manage it.
func manages(ctx context.Context, project string) bool {
	p := scopeOf(ctx)
	return p == "" || p == project
}

// hidden is the answer about an object the caller may not see: the same
// 404 as one that does not exist.
func hidden(kind, key string) error {
	return &store.Error{Err: store.ErrNotFound, Kind: kind, Key: key}
}

// createIn returns the project a create by the caller goes into: asked
// (the default project when empty) for a keeper-wide caller; its own
// project for a project's caller, which cannot name another (404: it does
// not exist for it).
func createIn(ctx context.Context, asked string) (string, error) {
	p := scopeOf(ctx)
	switch {
	case p == "" && asked == "":
		return store.DefaultProject, nil
	case p == "":
		return asked, nil
	case asked == "" || asked == p:
		return p, nil
	}
	return "", problem(http.StatusNotFound, "project.not_found", "project \""+asked+"\" does not exist",
		client.ProblemError{Location: "body.project", Message: "does not exist"})
}

// listScope is the project filter of the caller's lists: its project, or
// none for a keeper-wide caller.
func listScope(ctx context.Context, in *ListInput) store.ListParams {
	return store.ListParams{Limit: in.Limit + 1, After: in.After, Project: scopeOf(ctx)}
}

// grantHolds lists what a token of grant g in project would hold: a
// project's token never holds the keeper-wide permissions.
func grantHolds(g auth.Grant, project string) []auth.Permission {
	return auth.Principal{Grant: g, Project: project}.Effective()
}
