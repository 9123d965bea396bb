package store

import (
	"encoding/json"
	"time"
)

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
	// Executor is how the keeper last ran commands on the soul: "agent",
	// "ssh: executor" or "ssh: shell (<why>)"; empty before the first.
	Executor string
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

// SoulCreateParams registers a soul.
type SoulCreateParams struct {
	Soul  Soul
	Actor Actor
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
	// Executors are the souls (by SID) whose way of running commands
	// (Soul.Executor) this step found changed.
	Executors map[string]string
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

// Counts is what the registries hold at one moment, for metrics: runs not
// finished by phase (Pending, Running, AwaitingApproval) and souls by
// project and status.
type Counts struct {
	Runs  map[string]int
	Souls map[SoulCountKey]int
}

// SoulCountKey groups souls for Counts.
type SoulCountKey struct{ Project, Status string }
