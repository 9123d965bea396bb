package store

import (
	"context"
	"time"
)

// Bootstrap token statuses.
const (
	BootstrapIssued = "issued"
	BootstrapUsed   = "used"
	BootstrapBurned = "burned"
)

// BootstrapToken is a one-time token a new VM exchanges for its identity.
// Only its hash is stored.
type BootstrapToken struct {
	ID        string
	SID       string
	Hash      string
	ExpiresAt time.Time
	Status    string
}

// CloudRequest is a create request recorded before the driver is called.
type CloudRequest struct {
	RequestID string
	RunID     string
	Step      string
	Provider  string
	// Project is the run's project; VCPUs and MemoryMB are what each of
	// the Count VMs takes of its quota (0 when the profile does not say).
	Project    string
	VCPUs      int
	MemoryMB   int
	Count      int
	Status     string // requested, created, failed
	VMIDs      []string
	Error      string
	CreatedAt  time.Time
	FinishedAt *time.Time
}

// CloudProvisionParams records what a successful create made, in one
// transaction: the souls (status pending), their bootstrap tokens, the
// request's outcome and the audit event cloud.provisioned.
type CloudProvisionParams struct {
	RequestID string
	// Actor is the run's creator, the actor of cloud.provisioned.
	Actor  Actor
	Souls  []Soul
	Tokens []BootstrapToken
	// Seeds are stored with the souls, status active (their SID names one
	// of Souls).
	Seeds []SoulSeed
	// Audit is the payload of cloud.provisioned (masked before it is
	// stored; it must never hold a plain token).
	Audit map[string]any
}

// CloudDestroyParams records a destroy that the driver completed. The
// cascade touches only souls among SIDs whose provider is Provider and
// whose vm_id is one of VMIDs: a hand-registered soul (no vm_id) or a soul
// of another VM is never marked destroyed.
type CloudDestroyParams struct {
	Provider string
	VMIDs    []string
	SIDs     []string
	// Destroyed are the VMs of VMIDs the driver destroyed in this step;
	// AlreadyGone those it no longer had. Both go into cloud.provisioned,
	// whose "changed" is true when Destroyed is not empty or a registry
	// row moved.
	Destroyed   []string
	AlreadyGone []string
	// Actor is the run's creator, the actor of cloud.provisioned.
	Actor Actor
	// Project is the run's project: the destroy touches only its souls,
	// and its audit event is the project's.
	Project string
	// Audit is extra payload of cloud.provisioned (the counters are added).
	Audit map[string]any
}

// CloudCascade counts what a destroy changed in the registries.
type CloudCascade struct {
	SoulsDestroyed int `json:"souls_destroyed"`
	SeedsOrphaned  int `json:"seeds_orphaned"`
	TokensBurned   int `json:"bootstraps_burned"`
}

// CloudStore keeps the registries in step with the clouds.
type CloudStore interface {
	CloudRequestCreate(ctx context.Context, r CloudRequest) error
	// CloudResize records the size a resize gives a provider's VMs of a
	// project, checked against the project's vCPU and memory quota under
	// its lock, in one transaction, as a create is: a *QuotaError when the
	// VMs' growth exceeds it, and then nothing is recorded. It returns each
	// VM's size before, for CloudResizeUndo when the driver then fails.
	CloudResize(ctx context.Context, p CloudResizeParams) (map[string]Size, error)
	// CloudResizeUndo puts back the sizes CloudResize returned.
	CloudResizeUndo(ctx context.Context, provider string, before map[string]Size) error
	CloudRequestFail(ctx context.Context, requestID, msg string) error
	CloudRequestGet(ctx context.Context, requestID string) (CloudRequest, error)
	// CloudVMsCreated returns those of vmIDs that a completed create
	// request of provider made (the VMs this keeper created there), each
	// with the project of the run that created it.
	CloudVMsCreated(ctx context.Context, provider string, vmIDs []string) (map[string]string, error)
	// CloudProvision stores the outcome of a create (see
	// CloudProvisionParams); an audit failure fails it and nothing is kept.
	CloudProvision(ctx context.Context, p CloudProvisionParams) error
	// CloudDestroy moves souls to destroyed (clearing their certificate
	// serial, which revokes it), their active seeds to orphaned
	// and their bootstrap tokens to burned, and writes cloud.provisioned,
	// in one transaction.
	CloudDestroy(ctx context.Context, p CloudDestroyParams) (CloudCascade, error)
	// SoulsOfProvider lists the souls a provider's VMs back (any status).
	SoulsOfProvider(ctx context.Context, provider string) ([]Soul, error)
	// BootstrapTokens lists a soul's bootstrap tokens (hashes only).
	BootstrapTokens(ctx context.Context, sid string) ([]BootstrapToken, error)
}

// Size is a VM's size as quotas count it.
type Size struct {
	VCPUs    int
	MemoryMB int
}

// CloudResizeParams are the VMs a resize asks a new size for.
type CloudResizeParams struct {
	Project  string
	Provider string
	VMIDs    []string
	// Size is the new size; a zero field keeps what the VMs have.
	Size Size
}
