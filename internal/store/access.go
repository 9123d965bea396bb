package store

import (
	"context"
	"time"
)

// DefaultProject always exists; it holds what the keeper held before
// projects.
const DefaultProject = "default"

// Binding kinds: who a role binding is for.
const (
	BindGroup  = "group"
	BindPerson = "person"
)

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
