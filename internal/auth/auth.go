// Package auth holds API tokens and role-based access: how tokens are made
// and hashed, which permissions each built-in role grants, and the
// authenticator that turns a bearer token into a principal.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// Permission is a stable dotted name checked before an operation runs.
type Permission string

// Permissions of the Operator API (DESIGN.md section 3).
const (
	ProviderRead   Permission = "provider.read"
	ProviderCreate Permission = "provider.create"
	ProviderDelete Permission = "provider.delete"
	ProfileRead    Permission = "profile.read"
	ProfileCreate  Permission = "profile.create"
	ProfileDelete  Permission = "profile.delete"
	SoulRead       Permission = "soul.read"
	SoulCreate     Permission = "soul.create"
	SoulDelete     Permission = "soul.delete"
	RunRead        Permission = "run.read"
	RunCreate      Permission = "run.create"
	RunCancel      Permission = "run.cancel"
	AuditRead      Permission = "audit.read"
	TokenManage    Permission = "token.manage"
	// ProjectManage creates, lists and deletes projects.
	ProjectManage Permission = "project.manage"
	// RunApprove approves or rejects a run's step an approval policy
	// holds (never the run's creator); PolicyManage sets the approval
	// policies.
	RunApprove   Permission = "run.approve"
	PolicyManage Permission = "policy.manage"
	MetricsRead  Permission = "metrics.read"
	// DriftCheck starts drift checks of souls' seeds; DriftAck
	// acknowledges a soul's drift.
	DriftCheck Permission = "drift.check"
	DriftAck   Permission = "drift.ack"
	// The keeper-side cloud states need these besides run.create: a run
	// whose scenario has such a step is refused without them, and the
	// step fails when its run's creator no longer holds them.
	CloudCreate  Permission = "cloud.create"
	CloudDestroy Permission = "cloud.destroy"
	CloudResize  Permission = "cloud.resize"
	// CredentialManage stores and deletes the secrets of a project's
	// credentials registry (credential:NAME references); nobody reads
	// them back.
	CredentialManage Permission = "credential.manage"
	// CredentialLocal writes references that reach the keeper's machine
	// (file:, env:) or Vault outside a project's prefix: a keeper admin's.
	CredentialLocal Permission = "credential.local"
	// Authenticated needs nothing but a valid token.
	Authenticated Permission = ""
)

var reads = []Permission{ProviderRead, ProfileRead, SoulRead, RunRead, AuditRead}

// all lists every permission, in the order they are documented; admin
// holds all of them, so a new permission is added here.
var all = append(append([]Permission{}, reads...),
	ProviderCreate, ProviderDelete, ProfileCreate, ProfileDelete, SoulCreate, SoulDelete,
	RunCreate, RunCancel, TokenManage, MetricsRead, CloudCreate, CloudDestroy, CloudResize, DriftCheck, DriftAck, ProjectManage, RunApprove, PolicyManage, CredentialManage, CredentialLocal)

// roles maps each built-in role to what it may do.
var roles = map[string]map[Permission]bool{
	"admin":    set(all...),
	"operator": set(append(reads, RunCreate, RunCancel, DriftCheck, DriftAck)...),
	"viewer":   set(reads...),
}

// RoleCustom is the role of a token that carries an explicit permission
// list instead of a built-in role.
const RoleCustom = "custom"

func set(ps ...Permission) map[Permission]bool {
	m := make(map[Permission]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	return m
}

// Roles lists the built-in role names.
func Roles() []string { return []string{"admin", "operator", "viewer"} }

// ValidRole reports whether role is a built-in role.
func ValidRole(role string) bool { _, ok := roles[role]; return ok }

// Can reports whether role grants p.
func Can(role string, p Permission) bool {
	perms, ok := roles[role]
	return ok && (p == Authenticated || perms[p])
}

// All returns every permission the keeper checks, in documented order.
func All() []Permission { return append([]Permission(nil), all...) }

// ValidPermission reports whether p is a permission the keeper checks.
func ValidPermission(p Permission) bool { return roles["admin"][p] }

// Grant is what a token may do: a built-in role, or (role RoleCustom) an
// explicit list of permissions.
type Grant struct {
	Role        string
	Permissions []Permission // only for RoleCustom
}

// GrantOf returns the grant a stored token carries.
func GrantOf(t store.APIToken) Grant {
	g := Grant{Role: t.Role}
	if t.Role == RoleCustom {
		for _, p := range t.Permissions {
			g.Permissions = append(g.Permissions, Permission(p))
		}
	}
	return g
}

// Can reports whether the grant includes p. Authenticated is granted to
// every token; an unknown role grants nothing.
func (g Grant) Can(p Permission) bool {
	if p == Authenticated {
		return true
	}
	if g.Role != RoleCustom {
		return Can(g.Role, p)
	}
	for _, q := range g.Permissions {
		if q == p {
			return true
		}
	}
	return false
}

// Effective returns every permission the grant includes, in documented
// order.
func (g Grant) Effective() []Permission {
	var out []Permission
	for _, p := range all {
		if g.Can(p) {
			out = append(out, p)
		}
	}
	return out
}

// Describe names the grant for messages: "role operator" or
// "permissions run.create, cloud.create".
func (g Grant) Describe() string {
	if g.Role != RoleCustom {
		return "role " + g.Role
	}
	names := make([]string, len(g.Permissions))
	for i, p := range g.Permissions {
		names[i] = string(p)
	}
	if len(names) == 0 {
		return "no permissions"
	}
	return "permissions " + strings.Join(names, ", ")
}

// ParsePermissions checks a requested permission list: every name must be
// a known permission (an *UnknownPermissionError names the first that is
// not), duplicates are dropped, and the result is in documented order.
func ParsePermissions(names []string) ([]Permission, error) {
	want := map[Permission]bool{}
	for i, n := range names {
		p := Permission(strings.TrimSpace(n))
		if !ValidPermission(p) {
			return nil, &UnknownPermissionError{Index: i, Name: n}
		}
		want[p] = true
	}
	var out []Permission
	for _, p := range all {
		if want[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

// UnknownPermissionError is a requested permission the keeper does not
// know.
type UnknownPermissionError struct {
	Index int
	Name  string
}

func (e *UnknownPermissionError) Error() string {
	return fmt.Sprintf("unknown permission %q", e.Name)
}

// ErrForbidden is a principal that lacks a permission; *ForbiddenError
// says which.
var ErrForbidden = errors.New("forbidden")

// ForbiddenError says which permission a token lacks, and why.
type ForbiddenError struct {
	TokenID    string
	Permission Permission
	// Reason is what is wrong: "lacks permission …", "is revoked", …
	Reason string
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("token %s %s", e.TokenID, e.Reason)
}

// Unwrap makes errors.Is(err, ErrForbidden) true.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

// tokenPrefix makes Soul Stack tokens recognisable to secret scanners.
const tokenPrefix = "sst_"

// NewToken returns a new random API token, its id and the hash to store.
func NewToken() (plain, id, hash string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", "", fmt.Errorf("generate token: %w", err)
	}
	plain = tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	id, err = NewID("tok_")
	return plain, id, HashToken(plain), err
}

// NewID returns prefix followed by 24 hex digits: 12 of milliseconds since
// the epoch, then 12 random, so that ids sort by creation time.
func NewID(prefix string) (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate id: %w", err)
	}
	return fmt.Sprintf("%s%012x%s", prefix, time.Now().UnixMilli(), hex.EncodeToString(b)), nil
}

// HashToken returns the hex SHA-256 of a token. Tokens carry 256 random
// bits, so a fast hash is enough; only the hash is ever stored.
func HashToken(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(sum[:])
}

// Principal is the authenticated caller.
type Principal struct {
	TokenID string
	Name    string
	Role    string
	// Grant is what the token may do.
	Grant Grant
	// Person is who signed in with OIDC to get the token; nil for a
	// token minted by hand.
	Person *store.Person
	// Project is the one project the token acts in: its grant holds there
	// alone and other projects' objects do not exist for it. Empty for a
	// keeper-wide token.
	Project string
}

// PrincipalOf is the principal token t authenticates.
func PrincipalOf(t store.APIToken) Principal {
	return Principal{TokenID: t.ID, Name: t.Name, Role: t.Role, Grant: GrantOf(t), Person: t.Person, Project: t.Project}
}

// Effective returns every permission the principal holds, in documented
// order.
func (p Principal) Effective() []Permission {
	var out []Permission
	for _, perm := range p.Grant.Effective() {
		if p.Can(perm) {
			out = append(out, perm)
		}
	}
	return out
}

// KeeperWide reports whether the principal acts in every project.
func (p Principal) KeeperWide() bool { return p.Project == "" }

// keeperWideOnly are the permissions a project's token never holds: they
// act on the keeper, not on one project.
var keeperWideOnly = set(ProjectManage, MetricsRead, PolicyManage, CredentialLocal)

// Can reports whether the principal holds p: its grant's, except the
// keeper-wide permissions for a project's token.
func (p Principal) Can(perm Permission) bool {
	return p.Grant.Can(perm) && (p.KeeperWide() || !keeperWideOnly[perm])
}

// Require returns a *ForbiddenError when the principal lacks perm.
func (p Principal) Require(perm Permission) error {
	if p.Can(perm) {
		return nil
	}
	if p.Grant.Can(perm) {
		return &ForbiddenError{TokenID: p.TokenID, Permission: perm, Reason: "belongs to project " + p.Project + "; " + string(perm) + " needs a keeper-wide token"}
	}
	return &ForbiddenError{TokenID: p.TokenID, Permission: perm, Reason: "(" + p.Grant.Describe() + ") lacks permission " + string(perm)}
}

// Actor is the principal as recorded in the audit log.
func (p Principal) Actor() store.Actor { return store.Actor(p.TokenID) }

// Authentication failures.
var (
	ErrNoToken      = errors.New("no bearer token")
	ErrInvalidToken = errors.New("invalid, expired or revoked token")
)

// Authenticator checks bearer tokens against the registry. It remembers a
// token for CacheTTL, so that a burst of requests costs one lookup; the
// cache is what bounds how late a revocation takes effect: Forget drops a
// revoked token at once on this keeper, and other keepers sharing the
// database stop accepting it within CacheTTL. Expiry is checked on every
// call, cached or not.
type Authenticator struct {
	store    TokenByHash
	now      func() time.Time
	cacheTTL time.Duration

	mu    sync.Mutex
	cache map[string]cached // by token hash
	// forgets counts Forget calls: a lookup that began before one may
	// have read the token before its revocation, so it is not cached.
	forgets uint64
}

type cached struct {
	token store.APIToken
	until time.Time
}

// CacheTTL is how long a verified token is trusted without a lookup.
const CacheTTL = 5 * time.Second

// TokenByHash looks a token up by its hash: what authenticating reads.
type TokenByHash interface {
	TokenGetByHash(ctx context.Context, hash string) (store.APIToken, error)
}

// NewAuthenticator returns an authenticator over s.
func NewAuthenticator(s TokenByHash, now func() time.Time) *Authenticator {
	if now == nil {
		now = time.Now
	}
	return &Authenticator{store: s, now: now, cacheTTL: CacheTTL, cache: map[string]cached{}}
}

// Authenticate returns the principal for an Authorization header value.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (Principal, error) {
	scheme, plain, ok := strings.Cut(strings.TrimSpace(header), " ")
	if header == "" {
		return Principal{}, ErrNoToken
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(plain) == "" {
		return Principal{}, fmt.Errorf("%w: want \"Authorization: Bearer <token>\"", ErrInvalidToken)
	}
	hash := HashToken(strings.TrimSpace(plain))
	now := a.now()
	a.mu.Lock()
	c, hit := a.cache[hash]
	forgets := a.forgets
	a.mu.Unlock()
	if !hit || now.After(c.until) {
		t, err := a.store.TokenGetByHash(ctx, hash)
		if errors.Is(err, store.ErrNotFound) {
			return Principal{}, ErrInvalidToken
		}
		if err != nil {
			return Principal{}, fmt.Errorf("look up token: %w", err)
		}
		c = cached{token: t, until: now.Add(a.cacheTTL)}
		a.mu.Lock()
		if len(a.cache) > 10000 {
			clear(a.cache)
		}
		if a.forgets == forgets {
			a.cache[hash] = c
		}
		a.mu.Unlock()
	}
	if !c.token.Active(now) {
		return Principal{}, ErrInvalidToken
	}
	return PrincipalOf(c.token), nil
}

// Forget is told that the token with the given id was revoked: it drops
// every cached token (the revocation ended the tokens it minted too, which
// the cache cannot tell), and keeps a lookup that was under way from
// caching what it read before.
func (a *Authenticator) Forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgets++
	clear(a.cache)
}

// TokenGetter is the one store method the step-time check needs.
type TokenGetter interface {
	TokenGet(ctx context.Context, id string) (store.APIToken, error)
}

// Checker re-checks a run's creator when a step that needs a permission
// executes: the token is read from the registry each time (no cache), so
// a token revoked, expired or replaced meanwhile is refused at once.
type Checker struct {
	Tokens TokenGetter
	Now    func() time.Time // nil: time.Now
}

// Authorize returns nil when the token tokenID exists, is active and
// holds perm; a *ForbiddenError when it does not; another error when the
// registry cannot be read.
func (c Checker) Authorize(ctx context.Context, tokenID string, perm Permission) error {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	t, err := c.Tokens.TokenGet(ctx, tokenID)
	if errors.Is(err, store.ErrNotFound) {
		return &ForbiddenError{TokenID: tokenID, Permission: perm, Reason: "does not exist; it cannot authorize " + string(perm)}
	}
	if err != nil {
		return fmt.Errorf("look up token %s: %w", tokenID, err)
	}
	switch {
	case t.RevokedAt != nil:
		return &ForbiddenError{TokenID: tokenID, Permission: perm, Reason: "was revoked; it no longer authorizes " + string(perm)}
	case !t.Active(now()):
		return &ForbiddenError{TokenID: tokenID, Permission: perm, Reason: "has expired; it no longer authorizes " + string(perm)}
	}
	g := GrantOf(t)
	if !g.Can(perm) {
		return &ForbiddenError{TokenID: tokenID, Permission: perm, Reason: "(" + g.Describe() + ") lacks permission " + string(perm)}
	}
	return nil
}

// ErrUnknownToken: AuthenticateKnown was given a token this authenticator
// has not verified before.
var ErrUnknownToken = errors.New("token not verified on this keeper before")

// AuthenticateKnown is Authenticate for a token this authenticator has
// already looked up (it is in its memory, even past CacheTTL); any other
// token fails with ErrUnknownToken without a registry lookup. It lets a
// rate-limited client keep using a valid token without giving it a way to
// test guessed ones.
func (a *Authenticator) AuthenticateKnown(ctx context.Context, header string) (Principal, error) {
	scheme, plain, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, ErrUnknownToken
	}
	a.mu.Lock()
	_, known := a.cache[HashToken(strings.TrimSpace(plain))]
	a.mu.Unlock()
	if !known {
		return Principal{}, ErrUnknownToken
	}
	return a.Authenticate(ctx, header)
}
