// Package access decides what a person who signs in may do, and keeps it
// so: the role a sign-in gets (keeper.yml's oidc roles and projects, and
// the bindings made with the API), the token minted for it, and the
// withdrawal of a person's token whose role they no longer hold (a
// binding removed or lowered, keeper.yml changed, OIDC turned off). The
// API's sign-in routes are its HTTP side (internal/api/oidc.go); tokens
// are authenticated by its Authenticator.
package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

// Roles is keeper.yml's say over people's roles.
type Roles struct {
	// Issuer is the OIDC provider whose people these are.
	Issuer string
	// Keeper maps a group to a keeper-wide role; the strongest of a
	// person's wins.
	Keeper map[string]string
	// Projects maps a project to its groups' roles there; bindings made
	// through the API add to them.
	Projects map[string]map[string]string
}

// Store is what access reads and writes of the registry.
type Store interface {
	auth.TokenByHash
	Bindings(ctx context.Context, project string) ([]store.Binding, error)
	TokenList(ctx context.Context, p store.ListParams) ([]store.APIToken, error)
	TokenCreate(ctx context.Context, p store.TokenCreateParams) (store.APIToken, error)
	TokenRevoke(ctx context.Context, p store.DeleteParams) error
	ProjectGet(ctx context.Context, name string) (store.Project, error)
}

// Service is the access subsystem.
type Service struct {
	store Store
	roles *Roles // nil: OIDC sign-in is off
	authn *auth.Authenticator
	now   func() time.Time
	log   *slog.Logger
}

// New returns the access service; roles nil means OIDC sign-in is off (and
// every person's token lapses); it logs and reads the time with b.
func New(st Store, roles *Roles, b base.Base) *Service {
	b.Init()
	now, log := b.Clock.Now, b.Log
	return &Service{store: st, roles: roles, authn: auth.NewAuthenticator(st, now), now: now, log: log}
}

// Authenticator authenticates API tokens; told of every revocation access
// makes.
func (s *Service) Authenticator() *auth.Authenticator { return s.authn }

// Rank orders the roles a person may get, weakest first.
var Rank = map[string]int{"viewer": 1, "operator": 2, "admin": 3}

// Grant is what a sign-in gets: a role, in one project or (Project empty)
// keeper-wide.
type Grant struct {
	Role, Project string
}

// NoRoleError: the person has no role where they asked for one (or their
// role changed while they signed in); nothing was minted.
type NoRoleError struct{ Reason string }

func (e *NoRoleError) Error() string { return e.Reason }

// KeeperRole is the strongest keeper-wide role the groups map to, or "".
func (s *Service) KeeperRole(groups []string) string {
	best := ""
	if s.roles == nil {
		return best
	}
	for _, g := range groups {
		if r := s.roles.Keeper[g]; Rank[r] > Rank[best] {
			best = r
		}
	}
	return best
}

// ProjectRoles is the strongest role the person has in each project:
// through their groups in keeper.yml's projects, and through the bindings
// made with the API (of their groups, or of them by issuer and subject).
func (s *Service) ProjectRoles(ctx context.Context, person store.Person, groups []string) (map[string]string, error) {
	bindings, err := s.store.Bindings(ctx, "")
	if err != nil {
		return nil, err
	}
	return s.projectRolesIn(bindings, person, groups), nil
}

func (s *Service) projectRolesIn(bindings []store.Binding, person store.Person, groups []string) map[string]string {
	out := map[string]string{}
	grant := func(project, role string) {
		if Rank[role] > Rank[out[project]] {
			out[project] = role
		}
	}
	if s.roles != nil {
		for project, byGroup := range s.roles.Projects {
			for _, g := range groups {
				grant(project, byGroup[g])
			}
		}
	}
	me := person.Key()
	for _, b := range bindings {
		if b.Kind == store.BindPerson && b.Subject == me || b.Kind == store.BindGroup && slices.Contains(groups, b.Subject) {
			grant(b.Project, b.Role)
		}
	}
	delete(out, "")
	return out
}

// SignIn is what the person gets at this sign-in. Asked for a project,
// their role there (a keeper-wide role counts in every project); else
// their keeper-wide role, or, without one, their role in the first project
// (by name) they have one in. Nothing: a *NoRoleError.
func (s *Service) SignIn(ctx context.Context, person store.Person, groups []string, project string) (Grant, error) {
	keeper := s.KeeperRole(groups)
	roles, err := s.ProjectRoles(ctx, person, groups)
	if err != nil {
		return Grant{}, err
	}
	if project != "" {
		none := &NoRoleError{Reason: fmt.Sprintf("you have no role in project %q", project)}
		if _, err := s.store.ProjectGet(ctx, project); err != nil {
			return Grant{}, none
		}
		role := roles[project]
		if Rank[keeper] > Rank[role] {
			role = keeper
		}
		if role == "" {
			return Grant{}, none
		}
		return Grant{Role: role, Project: project}, nil
	}
	if keeper != "" {
		return Grant{Role: keeper}, nil
	}
	names := make([]string, 0, len(roles))
	for p := range roles {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		if _, err := s.store.ProjectGet(ctx, p); err == nil {
			return Grant{Role: roles[p], Project: p}, nil
		}
	}
	return Grant{}, &NoRoleError{Reason: fmt.Sprintf("none of your groups (%s) has a role on this keeper", strings.Join(groups, ", "))}
}

// Mint mints a token for a person who signed in with g, expiring after
// ttl (audit token.created by oidc, naming the person). A binding changed
// while the sign-in read the old ones is caught here: the token is revoked
// at once and the answer is a *NoRoleError.
func (s *Service) Mint(ctx context.Context, person store.Person, groups []string, g Grant, ttl time.Duration) (store.APIToken, string, error) {
	plain, id, hash, err := auth.NewToken()
	if err != nil {
		return store.APIToken{}, "", err
	}
	expires := s.now().Add(ttl)
	person.Groups = groups
	t, err := s.store.TokenCreate(ctx, store.TokenCreateParams{
		Token: store.APIToken{ID: id, Name: tokenName(person), Role: g.Role, Hash: hash, ExpiresAt: &expires, Person: &person, Project: g.Project},
		Actor: store.ActorOIDC,
	})
	if err != nil {
		return store.APIToken{}, "", err
	}
	// The change's own sweep ran before this token existed.
	bindings, err := s.store.Bindings(ctx, "")
	if err == nil && s.lapsed(t, bindings, s.now()) {
		err = s.store.TokenRevoke(ctx, store.DeleteParams{Key: t.ID, Actor: store.ActorOIDC})
		if err == nil {
			err = &NoRoleError{Reason: "your role changed while you signed in; sign in again"}
		}
	}
	if err != nil {
		return store.APIToken{}, "", err
	}
	s.log.Info("OIDC sign-in", "token_id", t.ID, "issuer", person.Issuer, "subject", person.Subject, "role", g.Role, "project", g.Project, "groups", groups)
	return t, plain, nil
}

// roleNow is the role a person's token would get if its person signed in
// again now with the groups of the sign-in that minted it; "" when nothing
// gives it one, or when OIDC sign-in is off or trusts another issuer now.
func (s *Service) roleNow(t store.APIToken, bindings []store.Binding) string {
	if s.roles == nil || t.Person == nil || t.Person.Issuer != s.roles.Issuer {
		return ""
	}
	role := s.KeeperRole(t.Person.Groups)
	if t.Project != "" {
		if r := s.projectRolesIn(bindings, *t.Person, t.Person.Groups)[t.Project]; Rank[r] > Rank[role] {
			role = r
		}
	}
	return role
}

// lapsed reports whether t is a person's token whose role is no longer
// held (roleNow ranks below it). A token minted by hand, or before the
// keeper kept the sign-in's groups, is never lapsed: it lives until it
// expires or is revoked.
func (s *Service) lapsed(t store.APIToken, bindings []store.Binding, now time.Time) bool {
	if t.Person == nil || t.Person.Groups == nil || !t.Active(now) {
		return false
	}
	return Rank[s.roleNow(t, bindings)] < Rank[t.Role]
}

// WithdrawLapsed revokes the person tokens of project (every project's and
// the keeper-wide ones when project is "") whose role their person no
// longer holds. A person's token expires with their access, not only with
// its oidc.token_ttl. The keeper calls it when it starts and after every
// binding change; each revocation is audited (token.revoked by actor). It
// returns how many it revoked; the error is the first that kept it from
// revoking one.
func (s *Service) WithdrawLapsed(ctx context.Context, project string, actor store.Actor) (int, error) {
	bindings, err := s.store.Bindings(ctx, "")
	if err != nil {
		return 0, err
	}
	var first error
	n, after := 0, ""
	for {
		page, err := s.store.TokenList(ctx, store.ListParams{Limit: 500, After: after, Project: project})
		if err != nil {
			return n, err
		}
		now := s.now()
		for _, t := range page {
			if !s.lapsed(t, bindings, now) {
				continue
			}
			err := s.store.TokenRevoke(ctx, store.DeleteParams{Key: t.ID, Actor: actor})
			s.authn.Forget(t.ID)
			switch {
			case errors.Is(err, store.ErrRevoked):
			case err != nil:
				s.log.Error("a person's access was withdrawn but their token could not be revoked", "token_id", t.ID, "err", err)
				if first == nil {
					first = fmt.Errorf("revoke token %s: %w", t.ID, err)
				}
			default:
				n++
				s.log.Info("a person's access was withdrawn: their token is revoked", "token_id", t.ID,
					"issuer", t.Person.Issuer, "subject", t.Person.Subject, "role", t.Role, "project", t.Project)
			}
		}
		if len(page) < 500 {
			return n, first
		}
		after = page[len(page)-1].ID
	}
}

// tokenName is a DNS label for the person's token: oidc- and the readable
// part of their name.
func tokenName(p store.Person) string {
	label := strings.ToLower(p.Name)
	if at := strings.IndexByte(label, '@'); at > 0 {
		label = label[:at]
	}
	label = strings.Trim(nonLabel.ReplaceAllString(label, "-"), "-")
	if label == "" {
		label = "person"
	}
	name := "oidc-" + label
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

var nonLabel = regexp.MustCompile(`[^a-z0-9-]+`)
