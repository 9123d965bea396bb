// Package store defines the keeper's registries: record types, the Store
// interface both SQL backends implement, and the sentinel errors callers
// branch on. Every mutation writes its audit event in the same transaction;
// if the audit write fails, the mutation fails and nothing changes.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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

// Provider is a cloud account: a driver, a region and a reference to its
// credentials (never the credentials themselves).
type Provider struct {
	Name           string
	Driver         string
	Region         string
	CredentialsRef string
	FQDNSuffix     string
	Config         json.RawMessage
	CreatedAt      time.Time
	CreatedBy      string
	// Project owns the provider and its credentials; SharedWith are the
	// projects that may read and use it (never manage it).
	Project    string
	SharedWith []string
}

// Profile is a VM spec on top of a provider.
type Profile struct {
	Name      string
	Provider  string
	Spec      json.RawMessage
	CreatedAt time.Time
	CreatedBy string
	// Project owns the profile; SharedWith may read and use it.
	Project    string
	SharedWith []string
}

// Soul statuses.
const (
	SoulPending     = "pending"
	SoulActive      = "active"
	SoulUnreachable = "unreachable"
	SoulDestroyed   = "destroyed"
)

// Connection says how the keeper reaches a soul.
type Connection struct {
	Transport string `json:"transport"`
	User      string `json:"user"`
	Port      int    `json:"port"`
	KeyRef    string `json:"key_ref,omitempty"`
	HostKey   string `json:"host_key,omitempty"` // pinned on first contact
	// AwaitJoin: the soul joins by itself (self_onboard with the agent)
	// and its host key is pinned from what it reports then; SSH waits for
	// that pin instead of trusting the first key presented.
	AwaitJoin bool `json:"await_join,omitempty"`
}

// Soul is a managed host, identified by its SID.
type Soul struct {
	SID          string
	Status       string
	Address      string
	Provider     string
	VMID         string
	PrimaryIP    string
	Attributes   json.RawMessage
	Connection   Connection
	CreatedByAID *string // nil for keeper-internal actions
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// LastSeenAt is when a command last ran on the soul (recorded at most
	// once per run); nil until the first contact.
	LastSeenAt *time.Time
	// LastError is why the step that made the soul unreachable could not
	// reach it; empty while it is reachable.
	LastError string
	// CertSerial is the serial (lowercase hex) of the client certificate
	// the soul holds since it joined, empty when it has none (never
	// joined, or destroyed); CertNotAfter is its expiry, JoinedAt when the
	// soul joined.
	CertSerial   string
	CertNotAfter *time.Time
	JoinedAt     *time.Time
	// Project is the project the soul belongs to: its runs alone reach it.
	Project string
}

// APIToken is an Operator API token. Only the hash of the token is stored.
type APIToken struct {
	ID   string
	Name string
	// Role is a built-in role, or "custom" with Permissions.
	Role string
	// Permissions is the explicit permission list of a custom token
	// (empty for built-in roles).
	Permissions []string
	Hash        string
	CreatedBy   string
	CreatedAt   time.Time
	ExpiresAt   *time.Time
	RevokedAt   *time.Time
	// Person is who the keeper minted the token for at an OIDC sign-in;
	// nil for a token minted by hand.
	Person *Person
	// Project is the one project the token acts in; empty for a
	// keeper-wide token.
	Project string
}

// Person is someone who signed in with OIDC: the issuer and subject of
// their ID token identify them, the name is for people to read.
type Person struct {
	Issuer  string
	Subject string
	Name    string
	// Groups are the groups of the sign-in (its groups claim), from
	// which the token's role came; nil for a token minted before the
	// keeper kept them.
	Groups []string
}

// Key is how a binding, an approval and the self-approval rule name a
// person: issuer and subject.
func (p Person) Key() string { return p.Issuer + " " + p.Subject }

// Active reports whether the token may authenticate at now.
func (t APIToken) Active(now time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || now.Before(*t.ExpiresAt))
}

// ListParams pages through a list in its stable order: items strictly after
// the cursor After (a name, an id or a sequence number), at most Limit.
type ListParams struct {
	Limit int
	After string
	// Project, when set, keeps the objects of that project (and, for
	// providers and profiles, those shared with it).
	Project string
}

// SoulListParams pages through souls by SID, keeping those that match
// every filter set. An empty filter matches every soul.
type SoulListParams struct {
	ListParams
	// Status keeps the souls in that status.
	Status string
	// Provider keeps the souls made by that provider.
	Provider string
	// Label, when set, keeps the souls whose attribute Label.Key is the
	// string Label.Value.
	Label *Label
}

// Label is an attribute key and the string value it must have.
type Label struct {
	Key   string
	Value string
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

// Project is a team's share of the keeper: its providers, profiles, souls
// and runs belong to it as isolation arrives (DESIGN.md section 13).
type Project struct {
	Name        string
	Description string
	CreatedAt   time.Time
	CreatedBy   string
	Quota       Quota
}

// Quota bounds what a project holds at once; 0 is no limit.
type Quota struct {
	VMs      int `json:"vms"`
	VCPUs    int `json:"vcpus"`
	MemoryMB int `json:"memory_mb"`
	Runs     int `json:"runs"`
}

// DefaultProject always exists; it holds what the keeper held before
// projects.
const DefaultProject = "default"

// ProjectCreateParams creates a project.
type ProjectCreateParams struct {
	Project Project
	Actor   Actor
}

// ProjectStore holds the projects.
type ProjectStore interface {
	// ProjectCreate stores a project (audit project.created); a taken name
	// is ErrExists.
	ProjectCreate(ctx context.Context, p ProjectCreateParams) (Project, error)
	ProjectGet(ctx context.Context, name string) (Project, error)
	ProjectList(ctx context.Context, p ListParams) ([]Project, error)
	// ProjectDelete deletes an empty project (audit project.deleted): the
	// default project, and one that still holds a provider, profile, soul
	// not destroyed, run not finished or active token, is ErrInUse naming
	// what it holds.
	ProjectDelete(ctx context.Context, p DeleteParams) error
	// ProjectSetQuota replaces a project's quota (audit project.quota_set).
	ProjectSetQuota(ctx context.Context, name string, q Quota, actor Actor) (Project, error)

	// BindingPut binds a group or person to a role in a project, replacing
	// the role they had there (audit binding.put); an unknown project is
	// ErrReferenceMissing.
	BindingPut(ctx context.Context, b Binding, actor Actor) (Binding, error)
	// BindingDelete removes a binding (audit binding.deleted); ErrNotFound
	// when there is none.
	BindingDelete(ctx context.Context, b Binding, actor Actor) error
	// Bindings lists the bindings of a project, or of every project for
	// project "", by project, kind and subject.
	Bindings(ctx context.Context, project string) ([]Binding, error)

	// ShareAdd shares a provider or profile with a project (audit
	// share.added); ShareRemove takes it back (audit share.removed).
	ShareAdd(ctx context.Context, sh Share, actor Actor) error
	ShareRemove(ctx context.Context, sh Share, actor Actor) error
}

// Credential is a secret in a project's credentials registry, referenced
// by its providers and souls as credential:NAME. Sealed is the value
// sealed with the data key; the store neither seals nor opens it.
type Credential struct {
	Project   string
	Name      string
	Sealed    string
	CreatedAt time.Time
	CreatedBy string
}

// ProjectSSHKey is a project's own keeper SSH key: the private key sealed
// with the data key and its authorized_keys line.
type ProjectSSHKey struct {
	Project   string
	Sealed    string
	PublicKey string
	CreatedAt time.Time
}

// CredentialStore holds the projects' own secrets.
type CredentialStore interface {
	// CredentialPut stores or replaces a credential (audit
	// credential.put, naming it, never its value); an unknown project is
	// ErrReferenceMissing.
	CredentialPut(ctx context.Context, c Credential, actor Actor) (Credential, error)
	// CredentialGet returns project's credential called name, or
	// ErrNotFound: never another project's.
	CredentialGet(ctx context.Context, project, name string) (Credential, error)
	// CredentialList lists a project's credentials (every project's for
	// project ""), by project and name; Sealed is empty.
	CredentialList(ctx context.Context, project string) ([]Credential, error)
	// CredentialDelete deletes one (audit credential.deleted); ErrNotFound
	// when there is none.
	CredentialDelete(ctx context.Context, project, name string, actor Actor) error
	// SecretFileMark records that run runID wrote path on soul sid from
	// secret content; SecretFileClear that a run wrote it from content
	// that is not; SecretFileMarked returns the run that marked it, "" when
	// none did.
	SecretFileMark(ctx context.Context, sid, path, runID string) error
	SecretFileClear(ctx context.Context, sid, path string) error
	SecretFileMarked(ctx context.Context, sid, path string) (string, error)
	// ProjectSSHKeyEnsure returns the project's SSH key, storing k as it
	// when it has none yet (audit project.ssh_key_created): keepers racing
	// to make one all get the one stored first.
	ProjectSSHKeyEnsure(ctx context.Context, k ProjectSSHKey) (ProjectSSHKey, error)
}

// Binding kinds: who a role binding is for.
const (
	BindGroup  = "group"
	BindPerson = "person"
)

// Binding gives a group (a value of the OIDC groups claim) or a person
// (issuer and subject, joined by a space) a role in a project.
type Binding struct {
	Project   string
	Kind      string
	Subject   string
	Role      string
	CreatedAt time.Time
	CreatedBy string
}

// Share is a provider or profile (Kind "provider" or "profile") shared
// with Project.
type Share struct {
	Kind    string
	Name    string
	Project string
}

// ProviderCreateParams creates a provider.
type ProviderCreateParams struct {
	Provider Provider
	Actor    Actor
}

// ProfileCreateParams creates a profile; its provider must exist.
type ProfileCreateParams struct {
	Profile Profile
	Actor   Actor
}

// SoulCreateParams registers a soul.
type SoulCreateParams struct {
	Soul  Soul
	Actor Actor
}

// DeleteParams deletes the object named Key.
type DeleteParams struct {
	Key   string
	Actor Actor
}

// TokenCreateParams stores a new API token (its hash only).
type TokenCreateParams struct {
	Token APIToken
	Actor Actor
}

// TokenAdminParams mints an admin token from the host.
type TokenAdminParams struct {
	Token APIToken // its Role is admin
	Actor Actor
	// Force mints it even while an active admin token exists.
	Force bool
}

// AuditListParams pages through the audit log in sequence order.
type AuditListParams struct {
	Limit    int
	AfterSeq int64
	// Project, when set, keeps the events about that project.
	Project string
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

// SoulHostKeyParams pins a soul's SSH host key on first contact.
type SoulHostKeyParams struct {
	SID     string
	HostKey string // authorized_keys format
	Actor   Actor
}

// SoulContactParams is the outcome of one step's contact with souls.
type SoulContactParams struct {
	// Reached are the SIDs a command ran on over an established connection.
	Reached []string
	// Unreachable are the souls no connection could be set up to.
	Unreachable []UnreachableSoul
	// RunID is the run whose step made the contact, for the audit payload.
	RunID string
	// Actor is the run's creator.
	Actor Actor
}

// UnreachableSoul is a soul a step could not reach: the error's stable
// code and its message (the soul's last_error).
type UnreachableSoul struct {
	SID   string
	Code  string
	Error string
}

// SoulTransition is one status change SoulContact made.
type SoulTransition struct {
	SID  string
	From string
	To   string
	At   time.Time
}

// AuditParams records an event that goes with no registry change, such as
// a refused host key.
type AuditParams struct {
	Actor   Actor
	Action  string
	Object  string
	Payload any
	// Project is the project the event is about; empty for keeper-wide.
	Project string
}

// WebSession is a web UI session: the hashes of its opaque cookie id and
// of the key its page holds, the API token that signed in, and when it
// ends (ExpiresAt) or ended being used (LastSeenAt, for the idle timeout).
type WebSession struct {
	Hash       string
	KeyHash    string
	TokenID    string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastSeenAt time.Time
}

// SessionStore holds the web UI's sessions. Revoking a token deletes its
// sessions (TokenRevoke).
type SessionStore interface {
	// SessionCreate stores a session (audit session.created) and deletes
	// those past their expiry.
	SessionCreate(ctx context.Context, s WebSession) error
	// SessionGet returns the session whose id hashes to hash, or
	// ErrNotFound.
	SessionGet(ctx context.Context, hash string) (WebSession, error)
	// SessionTouch records that the session was used at at (no audit).
	SessionTouch(ctx context.Context, hash string, at time.Time) error
	// SessionDelete deletes a session (audit session.deleted by actor);
	// an unknown one is ErrNotFound.
	SessionDelete(ctx context.Context, hash string, actor Actor) error
	// OIDCCodePut stores a soulctl login's one-time code (its hash) with
	// what it stands for, sealed, until expires; expired codes go.
	OIDCCodePut(ctx context.Context, hash, sealed string, expires time.Time) error
	// OIDCCodeTake deletes the code and returns what it stood for, once:
	// ErrNotFound for a code unknown, taken already or expired at now.
	OIDCCodeTake(ctx context.Context, hash string, now time.Time) (string, error)
}
