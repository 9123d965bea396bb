package client

import (
	"context"
	"net/http"
	"time"
)

// The drift states of a soul's seed (and of a soul: its seeds' worst).
const (
	DriftChecking    = "checking"
	DriftInSync      = "in_sync"
	DriftDrifted     = "drifted"
	DriftUnknown     = "unknown"
	DriftUnreachable = "unreachable"
)

// DriftCheck asks for drift checks: every active seed of the souls named,
// of those with a label, or of every soul.
type DriftCheck struct {
	SIDs  []string `json:"sids,omitempty" required:"false" maxItems:"1000" doc:"The souls to check."`
	Label string   `json:"label,omitempty" required:"false" doc:"Check the souls with this attribute, as key=value."`
	All   bool     `json:"all,omitempty" required:"false" doc:"Check every soul that has seeds."`
}

// DriftCheckStarted lists the check runs a drift check started.
type DriftCheckStarted struct {
	Checks []DriftCheckRun `json:"checks"`
	// Skipped are the seeds that could not be checked, and why.
	Skipped []DriftSkipped `json:"skipped"`
}

// DriftCheckRun is one seed's check run.
type DriftCheckRun struct {
	SID    string `json:"sid"`
	SeedID int64  `json:"seed_id"`
	RunID  string `json:"run_id" doc:"The check run (mode check): its steps, targets and diffs say what would change."`
}

// DriftSkipped is a seed a drift check did not start.
type DriftSkipped struct {
	SID    string `json:"sid"`
	SeedID int64  `json:"seed_id"`
	Reason string `json:"reason"`
}

// SeedDrift is what the last check of one seed found.
type SeedDrift struct {
	SeedID int64  `json:"seed_id"`
	State  string `json:"state" enum:"checking,in_sync,drifted,unknown,unreachable"`
	// Kind says, for drifted, whether the soul changed behind the
	// keeper's back (corrective: the seed's last apply succeeded) or the
	// seed was never applied (pending).
	Kind         string     `json:"kind,omitempty" required:"false" enum:"corrective,pending" doc:"For drifted: corrective (the seed's last apply succeeded, the soul changed since) or pending (the seed was never applied)."`
	RunID        string     `json:"run_id" doc:"The last check run."`
	Reason       string     `json:"reason,omitempty" required:"false" doc:"What would change, or why it is unknown or unreachable."`
	CheckedAt    *time.Time `json:"checked_at"`
	ChangedAt    *time.Time `json:"changed_at" doc:"When the state last changed."`
	Acknowledged bool       `json:"acknowledged" doc:"An acknowledgement holds: it raises no notification until the state changes or ack_until passes."`
	AckUntil     *time.Time `json:"ack_until,omitempty" required:"false"`
	AckReason    string     `json:"ack_reason,omitempty" required:"false"`
	AckBy        string     `json:"ack_by,omitempty" required:"false"`
	// RemediationRunID is the apply run a seed with remediate: auto
	// started for this drift episode.
	RemediationRunID string `json:"remediation_run_id,omitempty" required:"false" doc:"The apply run remediate: auto started for this drift episode."`
}

// SoulDrift is a soul's drift: its seeds' worst state and each seed's.
type SoulDrift struct {
	SID   string `json:"sid"`
	State string `json:"state" enum:"checking,in_sync,drifted,unknown,unreachable" doc:"The worst of the seeds' states: drifted, unreachable, unknown, checking, in_sync."`
	// Acknowledged: every drifted seed of the soul is acknowledged.
	Acknowledged bool        `json:"acknowledged"`
	Seeds        []SeedDrift `json:"seeds"`
}

// DriftReport is GET /v1/drift: counts over every soul the caller sees
// (its project's, or every one for a keeper-wide token), and a page.
type DriftReport struct {
	// Counts are souls by state.
	Counts map[string]int `json:"counts" doc:"Souls by state (every soul with a checked seed, not only this page)."`
	Items  []SoulDrift    `json:"items"`
	Next   string         `json:"next"`
}

// DriftAck acknowledges a soul's drift.
type DriftAck struct {
	SID    string `json:"sid" minLength:"1"`
	SeedID int64  `json:"seed_id,omitempty" required:"false" doc:"One seed; all of the soul's when absent."`
	Until  string `json:"until" doc:"Until when: a time (RFC 3339) or how long from now, as a Go duration or in days (7d); at most 90 days ahead."`
	Reason string `json:"reason" minLength:"1" maxLength:"500" doc:"Why, for the audit log."`
}

// DriftChecks starts drift checks.
func (c *Client) DriftChecks(ctx context.Context, in DriftCheck) (*DriftCheckStarted, error) {
	return call[DriftCheckStarted](ctx, c, http.MethodPost, "/v1/drift/checks", nil, in)
}

// Drift returns the drift report: state filters by soul state.
func (c *Client) Drift(ctx context.Context, state string, o ListOptions) (*DriftReport, error) {
	q := o.query()
	if state != "" {
		q.Set("state", state)
	}
	return call[DriftReport](ctx, c, http.MethodGet, "/v1/drift", q, nil)
}

// DriftOf returns one soul's drift (nil when it was never checked).
func (c *Client) DriftOf(ctx context.Context, sid string) (*SoulDrift, error) {
	q := ListOptions{Limit: 1}.query()
	q.Set("sid", sid)
	r, err := call[DriftReport](ctx, c, http.MethodGet, "/v1/drift", q, nil)
	if err != nil || len(r.Items) == 0 {
		return nil, err
	}
	return &r.Items[0], nil
}

// DriftAcknowledge acknowledges drift.
func (c *Client) DriftAcknowledge(ctx context.Context, in DriftAck) (*SoulDrift, error) {
	return call[SoulDrift](ctx, c, http.MethodPost, "/v1/drift/ack", nil, in)
}

// Delivery is one outgoing webhook delivery.
type Delivery struct {
	ID           string    `json:"id"`
	Notification string    `json:"notification" doc:"The notification of keeper.yml it went to."`
	Event        string    `json:"event"`
	Object       string    `json:"object"`
	Project      string    `json:"project,omitempty" required:"false" doc:"The project the event is about; absent for a keeper-wide event."`
	Status       string    `json:"status" enum:"pending,delivered,failed" doc:"pending: queued or waiting to retry; delivered: the receiver answered 2xx; failed: every attempt failed."`
	Attempts     int       `json:"attempts"`
	LastCode     int       `json:"last_code,omitempty" required:"false" doc:"The receiver's last HTTP status (0: no answer)."`
	LastError    string    `json:"last_error,omitempty" required:"false"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// DeliveryList is a page of deliveries, newest first.
type DeliveryList struct {
	Items []Delivery `json:"items"`
	Next  string     `json:"next"`
}

// Deliveries lists webhook deliveries, newest first.
func (c *Client) Deliveries(ctx context.Context, o ListOptions) (*DeliveryList, error) {
	return call[DeliveryList](ctx, c, http.MethodGet, "/v1/notifications/deliveries", o.query(), nil)
}

// CloudDrift is one provider's VMs as the driver lists them against the
// souls the registry holds for them.
type CloudDrift struct {
	Provider string `json:"provider"`
	// Listable is false when the driver cannot list its VMs: nothing can
	// be said of this provider.
	Listable bool `json:"listable"`
	// Missing are souls whose VM the driver no longer lists.
	Missing []CloudVM `json:"missing" doc:"Live souls whose VM the driver no longer lists (deleted behind the keeper's back)."`
	// Stopped are souls whose VM is not running.
	Stopped []CloudVM `json:"stopped" doc:"Live souls whose VM the driver reports in a state other than running."`
	// Resized are souls whose VM's size differs from the one it was
	// registered with.
	Resized []CloudVM `json:"resized" doc:"Live souls whose VM's size (cpus, memory, server or instance type, flavor) differs from what it was registered with."`
	// Orphans are VMs with this deployment's tags and no soul.
	Orphans []Orphan `json:"orphans" doc:"VMs this deployment made that no live soul owns (soulctl cloud orphans)."`
}

// CloudVM is a soul's VM in a cloud drift report.
type CloudVM struct {
	SID  string `json:"sid"`
	VMID string `json:"vm_id"`
	// What differs: the VM's state, or the size key with the registered
	// and the current value.
	State      string `json:"state,omitempty" required:"false"`
	Key        string `json:"key,omitempty" required:"false"`
	Registered string `json:"registered,omitempty" required:"false"`
	Now        string `json:"now,omitempty" required:"false"`
}

// CloudDriftReport is GET /v1/drift/cloud.
type CloudDriftReport struct {
	Providers []CloudDrift `json:"providers"`
}

// CloudDriftOf reports the cloud drift of provider (every provider when
// empty).
func (c *Client) CloudDriftOf(ctx context.Context, provider string) (*CloudDriftReport, error) {
	q := ListOptions{}.query()
	if provider != "" {
		q.Set("provider", provider)
	}
	return call[CloudDriftReport](ctx, c, http.MethodGet, "/v1/drift/cloud", q, nil)
}
