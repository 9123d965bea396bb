// Package store defines the keeper's registries: record types, the Store
// interface both SQL backends implement, and the sentinel errors callers
// branch on. Every mutation writes its audit event in the same transaction;
// if the audit write fails, the mutation fails and nothing changes.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/internal/audit"
)

// Sentinel errors. Store methods wrap them in *Error, which names the kind
// of object and its key; test with errors.Is. These are the only errors
// callers branch on: an implementation translates its database's errors
// to them itself (a connection refused is ErrUnavailable, a full disk
// ErrStorageFull) and never makes callers inspect driver errors.
var (
	ErrNotFound         = errors.New("not found")
	ErrExists           = errors.New("already exists")
	ErrInUse            = errors.New("in use")
	ErrReferenceMissing = errors.New("referenced object does not exist")
	ErrRevoked          = errors.New("already revoked")
	ErrLastAdmin        = errors.New("last active admin token")
	// ErrRetired: the name was a deleted object's, and is not given
	// again (a project's: its records keep the name).
	ErrRetired = errors.New("the name of a deleted object")
	// ErrHostTaken: the host (its address and port, or its pinned host
	// key) is another project's soul's; a project's hosts are its own.
	ErrHostTaken = errors.New("the host is another project's soul")
	// ErrActiveAdmin: an active admin token exists, so none is minted
	// from the host.
	ErrActiveAdmin = errors.New("an active admin token exists")
	// ErrUnavailable: the database cannot be reached now (down,
	// restarting, connection refused or cut); nothing was changed and the
	// same call may succeed in a moment.
	ErrUnavailable = errors.New("the database is unavailable")
	// ErrStorageFull: the database has no space left to write; nothing
	// was changed.
	ErrStorageFull = errors.New("the database's storage is full")
)

// ErrQuotaExceeded: the create would take its project past a quota;
// *QuotaError says which.
var ErrQuotaExceeded = errors.New("quota exceeded")

// QuotaError is a create refused by its project's quota: Asked more of
// Resource (vms, vcpus, memory_mb, runs) while Used of Limit are taken.
type QuotaError struct {
	Project  string
	Resource string
	Limit    int
	Used     int
	Asked    int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("project %q: quota of %d %s exceeded: %d in use, %d more asked", e.Project, e.Limit, e.Resource, e.Used, e.Asked)
}

// Unwrap makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// Error is a store failure about one object: Kind is "provider", "profile",
// "soul" or "token"; Key is its name or id; Ref is the missing or dependent
// object where there is one.
type Error struct {
	Err  error
	Kind string
	Key  string
	Ref  string
}

func (e *Error) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("%s %q: %v: %s", e.Kind, e.Key, e.Err, e.Ref)
	}
	return fmt.Sprintf("%s %q: %v", e.Kind, e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ListParams pages through a list in its stable order: items strictly after
// the cursor After (a name, an id or a sequence number), at most Limit.
type ListParams struct {
	Limit int
	After string
	// Project, when set, keeps the objects of that project (and, for
	// providers and profiles, those shared with it).
	Project string
}

// Actor is who performs a mutation: an API token id, or "keeper" for
// keeper-internal actions. It is recorded as the audit event's actor_aid.
type Actor string

// ActorKeeper is the actor of keeper-internal actions.
const ActorKeeper Actor = "keeper"

// ActorHost is the actor of commands run on the keeper's host against its
// database directly (keeper token bootstrap): host access is trusted.
const ActorHost Actor = "host"

// ActorOIDC is the actor of what the keeper does at a person's OIDC
// sign-in (the token it mints for them; the event names the person).
const ActorOIDC Actor = "oidc"

// DeleteParams deletes the object named Key.
type DeleteParams struct {
	Key   string
	Actor Actor
}

// Store is the registries' persistence. Implementations: store/sqlite and
// store/postgres; both pass store/storetest.
type Store interface {
	RunStore
	CloudStore
	JoinStore
	SessionStore
	DriftStore
	DeliveryStore
	ProjectStore
	ApprovalStore
	CredentialStore

	ProviderCreate(ctx context.Context, p ProviderCreateParams) (Provider, error)
	ProviderGet(ctx context.Context, name string) (Provider, error)
	ProviderList(ctx context.Context, p ListParams) ([]Provider, error)
	// ProviderDelete fails with ErrInUse while profiles use the provider.
	ProviderDelete(ctx context.Context, p DeleteParams) error

	// ProfileCreate fails with ErrReferenceMissing if the provider does not exist.
	ProfileCreate(ctx context.Context, p ProfileCreateParams) (Profile, error)
	ProfileGet(ctx context.Context, name string) (Profile, error)
	ProfileList(ctx context.Context, p ListParams) ([]Profile, error)
	ProfileDelete(ctx context.Context, p DeleteParams) error

	SoulCreate(ctx context.Context, p SoulCreateParams) (Soul, error)
	SoulGet(ctx context.Context, sid string) (Soul, error)
	SoulList(ctx context.Context, p ListParams) ([]Soul, error)
	// SoulSearch is SoulList keeping only the souls that match p's filters.
	SoulSearch(ctx context.Context, p SoulListParams) ([]Soul, error)
	SoulDelete(ctx context.Context, p DeleteParams) error
	// SoulPinHostKey records the host key first seen for a soul (audit
	// soul.host_key_pinned). It never replaces a pinned key: a soul that
	// already has one gets ErrExists.
	SoulPinHostKey(ctx context.Context, p SoulHostKeyParams) error
	// SoulContact records what a step learned about reaching souls: a
	// reached soul that was pending or unreachable becomes active (audit
	// soul.activated) and an active one has its last_seen_at advanced
	// (no audit); an unreachable soul that was pending or active becomes
	// unreachable with its last_error (audit soul.unreachable). Destroyed,
	// deleted and unchanged souls are left alone, with no audit event. It
	// returns the status changes it made.
	SoulContact(ctx context.Context, p SoulContactParams) ([]SoulTransition, error)

	TokenCreate(ctx context.Context, p TokenCreateParams) (APIToken, error)
	// TokenBootstrap creates the token only if no API token exists yet, and
	// reports whether it did.
	TokenBootstrap(ctx context.Context, p TokenCreateParams) (bool, error)
	// TokenAdminBootstrap creates an admin token when no active (unrevoked,
	// unexpired) admin token exists, or with Force in any case; otherwise
	// it fails with ErrActiveAdmin naming an active admin token.
	TokenAdminBootstrap(ctx context.Context, p TokenAdminParams) (APIToken, error)
	TokenGetByHash(ctx context.Context, hash string) (APIToken, error)
	// TokenGet returns a token by id, revoked or not.
	TokenGet(ctx context.Context, id string) (APIToken, error)
	TokenList(ctx context.Context, p ListParams) ([]APIToken, error)
	// TokenRevoke fails with ErrRevoked for a revoked token and with
	// ErrLastAdmin when it would leave no active admin token.
	TokenRevoke(ctx context.Context, p DeleteParams) error

	// AuditRecord appends an audit event by itself.
	AuditRecord(ctx context.Context, p AuditParams) error
	AuditList(ctx context.Context, p AuditListParams) ([]audit.Event, error)
	// AuditScan calls fn for every audit event in sequence order and returns
	// the chain head recorded at the start of the scan.
	AuditScan(ctx context.Context, fn func(audit.Event) error) (audit.Head, error)

	// DeploymentID returns the id of the keeper deployment this database
	// is the registry of: made once by a migration, never changed, the
	// same for every keeper that uses the database.
	DeploymentID(ctx context.Context) (string, error)

	Ping(ctx context.Context) error
	Close() error
}
