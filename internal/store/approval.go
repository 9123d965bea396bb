package store

import (
	"context"
	"errors"
	"time"
)

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
)

// ErrNotPending: the run has no step waiting for approval (none asked, or
// it was decided already).
var ErrNotPending = errors.New("no approval is pending")

// Approval is a step an approval policy holds until a person other than
// the run's creator approves or rejects it, or it expires.
type Approval struct {
	RunID     string
	StepIndex int
	Step      string
	Module    string
	Project   string
	// Policies are the ids of the policies that hold the step; Why says
	// it for people.
	Policies    []string
	Why         string
	RequestedAt time.Time
	ExpiresAt   time.Time
	Status      string
	// DecidedBy is the token that approved or rejected it ("keeper" for
	// an expiry), DecidedPerson the person holding it, Reason theirs.
	DecidedBy     string
	DecidedPerson string
	DecidedAt     *time.Time
	Reason        string
}

// ApprovalDecision approves or rejects the pending approval of a run.
type ApprovalDecision struct {
	RunID   string
	Approve bool
	Reason  string
	Actor   Actor
	// Person is the deciding token's person ("issuer subject"), empty for
	// a token minted by hand.
	Person string
}

// ApprovalStore keeps the approvals runs wait for.
type ApprovalStore interface {
	// ApprovalRequest stores a pending approval for the step unless one
	// is stored already (audit run.approval_requested when it is new) and
	// returns the stored one.
	ApprovalRequest(ctx context.Context, a Approval, actor Actor) (Approval, error)
	// ApprovalGet returns the approval of a run's step, or ErrNotFound.
	ApprovalGet(ctx context.Context, runID string, stepIndex int) (Approval, error)
	// Approvals lists a run's approvals by step.
	Approvals(ctx context.Context, runID string) ([]Approval, error)
	// ApprovalDecide decides the run's pending approval (audit
	// run.approved or run.rejected); ErrNotPending when none is pending,
	// and a pending one past its expiry is expired instead (audit
	// run.approval_expired, then ErrNotPending).
	ApprovalDecide(ctx context.Context, d ApprovalDecision) (Approval, error)
	// ApprovalExpire marks the step's approval expired if it is still
	// pending (audit run.approval_expired by keeper).
	ApprovalExpire(ctx context.Context, runID string, stepIndex int) (Approval, error)
	// ApprovalPolicy returns the policy set through the API ("" when
	// none); ApprovalPolicySet replaces it (audit approval.policy_set).
	ApprovalPolicy(ctx context.Context) (string, error)
	ApprovalPolicySet(ctx context.Context, policy string, actor Actor) error
}
