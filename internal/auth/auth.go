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
	// Authenticated needs nothing but a valid token.
	Authenticated Permission = ""
)

var reads = []Permission{ProviderRead, ProfileRead, SoulRead, RunRead, AuditRead}

// roles maps each built-in role to what it may do.
var roles = map[string]map[Permission]bool{
	"admin":    set(append(reads, ProviderCreate, ProviderDelete, ProfileCreate, ProfileDelete, SoulCreate, SoulDelete, RunCreate, RunCancel, TokenManage)...),
	"operator": set(append(reads, RunCreate, RunCancel)...),
	"viewer":   set(reads...),
}

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
	store    store.Store
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

// NewAuthenticator returns an authenticator over s.
func NewAuthenticator(s store.Store, now func() time.Time) *Authenticator {
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
	return Principal{TokenID: c.token.ID, Name: c.token.Name, Role: c.token.Role}, nil
}

// Forget drops the cached entry of the token with the given id, and keeps
// a lookup that was under way from caching what it read before.
func (a *Authenticator) Forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgets++
	for h, c := range a.cache {
		if c.token.ID == id {
			delete(a.cache, h)
		}
	}
}
