package store

import (
	"context"
	"database/sql"
	"time"
)

// The drift states of a soul's seed: what its last check run found.
const (
	// DriftChecking: a check run was started and has not finished.
	DriftChecking = "checking"
	// DriftInSync: the check said nothing would change.
	DriftInSync = "in_sync"
	// DriftDrifted: the check said the seed would change the soul.
	DriftDrifted = "drifted"
	// DriftUnknown: the check could not tell (a step without a check
	// path, a command without a guard), or the check itself failed.
	DriftUnknown = "unknown"
	// DriftUnreachable: the soul could not be reached.
	DriftUnreachable = "unreachable"
)

// The kinds of a drift.
const (
	// DriftCorrective: the seed's last apply succeeded and the soul no
	// longer carries it: it changed behind the keeper's back.
	DriftCorrective = "corrective"
	// DriftPending: the seed was never applied successfully, so the
	// change is still to be made, not a regression.
	DriftPending = "pending"
)

// SoulDrift is what the last check of one seed of one soul found.
type SoulDrift struct {
	SID       string
	SeedID    int64
	State     string
	Kind      string // for drifted: corrective or pending
	RunID     string // the last check run
	Reason    string // what would change, or why it is unknown
	CheckedAt *time.Time
	ChangedAt *time.Time // when State last changed
	AckUntil  *time.Time
	AckReason string
	AckBy     string
	// RemediationRunID is the apply run remediate: auto started for the
	// current drift episode.
	RemediationRunID string
}

// Acknowledged reports whether the drift is acknowledged at now.
func (d SoulDrift) Acknowledged(now time.Time) bool {
	return d.AckUntil != nil && now.Before(*d.AckUntil)
}

// DriftRecordParams records the outcome of a check run of a seed.
type DriftRecordParams struct {
	Drift SoulDrift // SID, SeedID, RunID, State, Kind, Reason, CheckedAt
	Actor Actor
	// Changed, when set, is called inside the transaction that records a
	// change of state, with the state before: what follows the change
	// (remediation, a notification) is queued with it.
	Changed func(ctx context.Context, tx *sql.Tx, before string) error
}

// DriftAckParams acknowledges the drift of a soul's seeds (all of them
// when SeedID is 0) until Until.
type DriftAckParams struct {
	SID    string
	SeedID int64
	Until  time.Time
	Reason string
	Actor  Actor
}

// DriftListParams select souls' drift: those whose SID sorts after After
// (or the one soul SID), at most Limit souls, only those with a seed in
// State when it is set.
type DriftListParams struct {
	State, SID, After string
	Limit             int
	// Project, when set, keeps the souls of that project.
	Project string
}

// DriftStore keeps the souls' drift.
type DriftStore interface {
	// DriftStart marks a seed of a soul as being checked by run runID;
	// the state it had stays until the run reports.
	DriftStart(ctx context.Context, sid string, seedID int64, runID string) error
	// DriftRecord stores what check run p.Drift.RunID found. A run that
	// is not the check the seed waits for (a later check was started
	// since, or no drift check started it) records nothing: ErrNotFound. A
	// change of state is audited (soul.drifted, soul.in_sync,
	// soul.drift_unknown, soul.drift_unreachable) and clears an
	// acknowledgement; the same state again writes no event. It returns
	// the state before.
	DriftRecord(ctx context.Context, p DriftRecordParams) (before string, err error)
	// DriftList returns the drift of the souls p asks for, every seed of
	// each, by SID and seed.
	DriftList(ctx context.Context, p DriftListParams) ([]SoulDrift, error)
	// DriftCounts counts the seeds of souls by state.
	DriftCounts(ctx context.Context) (map[string]int, error)
	// DriftRemediated records the apply run started to remediate the
	// drift found by check run checkRunID (audit
	// soul.drift_remediation_started); ErrNotFound when a later check has
	// been started since.
	DriftRemediated(ctx context.Context, sid string, seedID int64, checkRunID, runID string, actor Actor) error
	// DriftDue returns the active seeds with their own drift schedule
	// that are due at now: never checked, or last checked (or started)
	// at least their interval ago; as (sid, seed id) pairs.
	DriftDue(ctx context.Context, now time.Time) ([]SoulSeed, error)
	// DriftAck acknowledges drift (audit soul.drift_acknowledged) and
	// returns how many seeds it covered; ErrNotFound when none.
	DriftAck(ctx context.Context, p DriftAckParams) (int, error)
}

// The statuses of a webhook delivery.
const (
	DeliveryPending   = "pending"   // queued, or waiting for a retry
	DeliveryDelivered = "delivered" // the receiver answered 2xx
	DeliveryFailed    = "failed"    // every attempt failed
)

// Delivery is one webhook delivery: a notification of one event.
type Delivery struct {
	ID           string
	Notification string
	Event        string
	Object       string
	// Project is the project the event is about; empty for a
	// keeper-wide event.
	Project   string
	Status    string
	Attempts  int
	LastCode  int
	LastError string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// DeliveryStore logs webhook deliveries.
type DeliveryStore interface {
	// DeliveryCreate logs a queued delivery.
	DeliveryCreate(ctx context.Context, d Delivery) error
	// DeliveryAttempt records one attempt's outcome.
	DeliveryAttempt(ctx context.Context, id, status string, code int, errMsg string) error
	// Deliveries lists deliveries, newest first.
	Deliveries(ctx context.Context, p DeliveryListParams) ([]Delivery, error)
}

// DeliveryListParams pages the delivery log.
type DeliveryListParams struct {
	// Before lists the deliveries older than this id (all when empty).
	Before string
	Limit  int
	// Project, when set, keeps the deliveries of that project's events.
	Project string
}
