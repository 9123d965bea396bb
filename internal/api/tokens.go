package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

func tokenWire(t store.APIToken, now func() bool) client.Token {
	return client.Token{ID: t.ID, Name: t.Name, Role: t.Role, Permissions: permissionNames(auth.PrincipalOf(t).Effective()),
		CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, Active: now(), Person: personWire(t.Person), Project: t.Project}
}

// tokenCreatedWire is a new token's answer: the one carrying its plain text.
func tokenCreatedWire(t store.APIToken, plain string) client.TokenCreated {
	return client.TokenCreated{ID: t.ID, Name: t.Name, Role: t.Role, Permissions: permissionNames(auth.PrincipalOf(t).Effective()),
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Token: plain, Project: t.Project}
}

// grantFor checks what a new token of project asks for: exactly one of a
// built-in role and an explicit permission list, every permission known,
// and nothing the caller does not hold itself (no escalation through
// token.manage; a project's token never holds the keeper-wide ones).
func grantFor(caller auth.Principal, project string, b client.TokenCreate) (auth.Grant, error) {
	var g auth.Grant
	switch {
	case b.Role != "" && b.Permissions != nil:
		return g, invalid("token.grant_ambiguous", "body.permissions", "give either role or permissions, not both")
	case b.Permissions != nil:
		perms, err := auth.ParsePermissions(b.Permissions)
		if err != nil {
			return g, err
		}
		if len(perms) == 0 {
			return g, invalid("token.permissions_empty", "body.permissions", "names no permission; a token needs at least one")
		}
		g = auth.Grant{Role: auth.RoleCustom, Permissions: perms}
	case b.Role == "":
		return g, invalid("token.grant_missing", "body.role", "give a role (%s) or a permissions list", strings.Join(auth.Roles(), ", "))
	case !auth.ValidRole(b.Role):
		return g, invalid("token.role_unknown", "body.role", "unknown role %q; roles are %s, or give a permissions list", b.Role, strings.Join(auth.Roles(), ", "))
	default:
		g = auth.Grant{Role: b.Role}
	}
	if g.Role == auth.RoleCustom {
		for i, p := range g.Permissions {
			if !slices.Contains(grantHolds(g, project), p) {
				return g, invalid("token.permission_keeper_wide", fmt.Sprintf("body.permissions[%d]", i), "%s acts on the whole keeper; a token of project %s cannot hold it", p, project)
			}
		}
	}
	for _, p := range grantHolds(g, project) {
		if err := caller.Require(p); err != nil {
			var fe *auth.ForbiddenError
			if errors.As(err, &fe) {
				fe.Reason += "; a token can grant only permissions it holds itself"
			}
			return g, err
		}
	}
	return g, nil
}

// mintedExpiry is when a token the caller mints expires: when asked, but
// no later than the caller's own token (which also revokes it with
// itself, store.TokenRevoke), so that a person's access ends with theirs.
func (s *Server) mintedExpiry(ctx context.Context, asked *time.Time) (*time.Time, error) {
	minter, err := s.tokenStore.TokenGet(ctx, principal(ctx).TokenID)
	if err != nil {
		return nil, err
	}
	if minter.ExpiresAt != nil && (asked == nil || asked.After(*minter.ExpiresAt)) {
		return minter.ExpiresAt, nil
	}
	return asked, nil
}

func (s *Server) registerTokens() {
	tags := []string{"tokens"}
	register(s, huma.Operation{
		OperationID: "token-create", Method: http.MethodPost, Path: "/v1/tokens", Tags: tags,
		Summary: "Issue an API token",
		Description: "The plain token is in this response only; the keeper stores its hash. The token gets a built-in role " +
			"or an explicit permission list (role custom); 422 token.permission_unknown names an unknown permission, and " +
			"403 auth.forbidden refuses a permission the caller does not hold itself.",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
	}, auth.TokenManage, false, func(ctx context.Context, in *struct{ Body client.TokenCreate }) (*struct{ Body client.TokenCreated }, error) {
		b := in.Body
		if err := checkName("body.name", b.Name); err != nil {
			return nil, err
		}
		project := ""
		if b.Project != "" || !principal(ctx).KeeperWide() {
			p, err := createIn(ctx, b.Project)
			if err != nil {
				return nil, err
			}
			project = p
		}
		g, err := grantFor(principal(ctx), project, b)
		if err != nil {
			return nil, err
		}
		if b.ExpiresAt != nil && !b.ExpiresAt.After(s.now()) {
			return nil, invalid("token.expiry_past", "body.expires_at", "is not in the future")
		}
		if b.ExpiresAt, err = s.mintedExpiry(ctx, b.ExpiresAt); err != nil {
			return nil, err
		}
		plain, id, hash, err := auth.NewToken()
		if err != nil {
			return nil, err
		}
		t, err := s.tokenStore.TokenCreate(ctx, store.TokenCreateParams{
			Token: store.APIToken{ID: id, Name: b.Name, Role: g.Role, Permissions: permissionNames(g.Permissions), Hash: hash, ExpiresAt: b.ExpiresAt, Project: project},
			Actor: principal(ctx).Actor(),
		})
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.TokenCreated }{Body: tokenCreatedWire(t, plain)}, nil
	})
	s.registerTokenListRevoke()
}

// registerTokenListRevoke registers listing and revoking tokens.
func (s *Server) registerTokenListRevoke() {
	tags := []string{"tokens"}
	register(s, huma.Operation{
		OperationID: "token-list", Method: http.MethodGet, Path: "/v1/tokens", Tags: tags,
		Summary: "List API tokens (never the tokens themselves)",
	}, auth.TokenManage, false, func(ctx context.Context, in *ListInput) (*struct{ Body client.TokenList }, error) {
		ts, err := s.tokenStore.TokenList(ctx, listScope(ctx, in))
		if err != nil {
			return nil, err
		}
		ts, next := page(ts, in.Limit, func(t store.APIToken) string { return t.ID })
		now := s.now()
		out := &struct{ Body client.TokenList }{Body: client.TokenList{Items: make([]client.Token, 0, len(ts)), Next: next}}
		for _, t := range ts {
			out.Body.Items = append(out.Body.Items, tokenWire(t, func() bool { return t.Active(now) }))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "token-revoke", Method: http.MethodDelete, Path: "/v1/tokens/{id}", Tags: tags,
		Summary: "Revoke an API token", Description: "Refused with 409 token.last_admin for the last active admin token.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, auth.TokenManage, false, func(ctx context.Context, in *struct {
		ID string `path:"id" doc:"The token's id (tok_…)."`
	}) (*struct{}, error) {
		t, err := s.tokenStore.TokenGet(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if !manages(ctx, t.Project) || t.Project == "" && !principal(ctx).KeeperWide() {
			return nil, hidden("token", in.ID)
		}
		if err := s.tokenStore.TokenRevoke(ctx, store.DeleteParams{Key: in.ID, Actor: principal(ctx).Actor()}); err != nil {
			return nil, err
		}
		s.authn.Forget(in.ID)
		return nil, nil
	})
}
