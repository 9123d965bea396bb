package api

import (
	"context"
	"time"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/store"
)

// The API reads and writes the registry through these parts, each as
// narrow as the routes that use it; the keeper hands the one store to
// each (StoresOf).

// RegistryStore is the cloud registry: providers and profiles, and their shares between projects.
type RegistryStore interface {
	ProviderGet(ctx context.Context, name string) (store.Provider, error)
	ProviderList(ctx context.Context, p store.ListParams) ([]store.Provider, error)
	ProviderCreate(ctx context.Context, p store.ProviderCreateParams) (store.Provider, error)
	ProviderDelete(ctx context.Context, p store.DeleteParams) error
	ProfileGet(ctx context.Context, name string) (store.Profile, error)
	ProfileList(ctx context.Context, p store.ListParams) ([]store.Profile, error)
	ProfileCreate(ctx context.Context, p store.ProfileCreateParams) (store.Profile, error)
	ProfileDelete(ctx context.Context, p store.DeleteParams) error
	ShareAdd(ctx context.Context, sh store.Share, actor store.Actor) error
	ShareRemove(ctx context.Context, sh store.Share, actor store.Actor) error
}

// SoulStore is souls, their joining and certificates, and their seeds.
type SoulStore interface {
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	SoulSearch(ctx context.Context, p store.SoulListParams) ([]store.Soul, error)
	SoulCreate(ctx context.Context, p store.SoulCreateParams) (store.Soul, error)
	SoulDelete(ctx context.Context, p store.DeleteParams) error
	SoulJoin(ctx context.Context, p store.SoulJoinParams) (store.Soul, error)
	SoulRenewCert(ctx context.Context, p store.SoulRenewParams) (store.Soul, error)
	RenewCheck(ctx context.Context, p store.SoulRenewParams) error
	JoinCheck(ctx context.Context, p store.SoulJoinParams) error
	Seeds(ctx context.Context, sid string) ([]store.SoulSeed, error)
	SeedAdd(ctx context.Context, p store.SeedAddParams) (store.SoulSeed, error)
}

// RunStore is runs as stored: read, listed, their steps, events and approvals, cancelled.
type RunStore interface {
	RunGet(ctx context.Context, id string) (store.Run, error)
	RunHead(ctx context.Context, id string) (store.RunHead, error)
	RunList(ctx context.Context, p store.RunListParams) ([]store.Run, error)
	RunSteps(ctx context.Context, id string) ([]store.RunStep, []store.RunTarget, error)
	RunEvents(ctx context.Context, id string, afterSeq int64, limit int) ([]store.RunEvent, error)
	RunCancel(ctx context.Context, p store.DeleteParams) (store.Run, error)
	Approvals(ctx context.Context, runID string) ([]store.Approval, error)
}

// TokenStore is API tokens, web UI sessions and soulctl login codes.
type TokenStore interface {
	TokenGet(ctx context.Context, id string) (store.APIToken, error)
	TokenList(ctx context.Context, p store.ListParams) ([]store.APIToken, error)
	TokenCreate(ctx context.Context, p store.TokenCreateParams) (store.APIToken, error)
	TokenRevoke(ctx context.Context, p store.DeleteParams) error
	SessionGet(ctx context.Context, hash string) (store.WebSession, error)
	SessionCreate(ctx context.Context, s store.WebSession) error
	SessionTouch(ctx context.Context, hash string, at time.Time) error
	SessionDelete(ctx context.Context, hash string, actor store.Actor) error
	OIDCCodePut(ctx context.Context, hash, sealed string, expires time.Time) error
	OIDCCodeTake(ctx context.Context, hash string, now time.Time) (string, error)
}

// ProjectStore is projects, their role bindings, quotas and credentials.
type ProjectStore interface {
	ProjectGet(ctx context.Context, name string) (store.Project, error)
	ProjectList(ctx context.Context, p store.ListParams) ([]store.Project, error)
	ProjectCreate(ctx context.Context, p store.ProjectCreateParams) (store.Project, error)
	ProjectDelete(ctx context.Context, p store.DeleteParams) error
	ProjectSetQuota(ctx context.Context, name string, q store.Quota, actor store.Actor) (store.Project, error)
	Bindings(ctx context.Context, project string) ([]store.Binding, error)
	BindingPut(ctx context.Context, b store.Binding, actor store.Actor) (store.Binding, error)
	BindingDelete(ctx context.Context, b store.Binding, actor store.Actor) error
	CredentialPut(ctx context.Context, c store.Credential, actor store.Actor) (store.Credential, error)
	CredentialList(ctx context.Context, project string) ([]store.Credential, error)
	CredentialDelete(ctx context.Context, project, name string, actor store.Actor) error
}

// AuditStore is the audit log, the webhook delivery log, and the database's health.
type AuditStore interface {
	AuditRecord(ctx context.Context, p store.AuditParams) error
	AuditList(ctx context.Context, p store.AuditListParams) ([]audit.Event, error)
	Deliveries(ctx context.Context, p store.DeliveryListParams) ([]store.Delivery, error)
	Ping(ctx context.Context) error
}

// Stores are the parts of the registry the API uses.
type Stores struct {
	Registry RegistryStore
	Souls    SoulStore
	Runs     RunStore
	Tokens   TokenStore
	Projects ProjectStore
	Audit    AuditStore
}

// StoresOf is one store, which implements every part, as the API's parts.
func StoresOf(st interface {
	RegistryStore
	SoulStore
	RunStore
	TokenStore
	ProjectStore
	AuditStore
}) Stores {
	return Stores{Registry: st, Souls: st, Runs: st, Tokens: st, Projects: st, Audit: st}
}
