package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.ApprovalStore = (*Store)(nil)

const approvalCols = `run_id, step_index, step, module, project, policies, why, requested_at, expires_at, status, decided_by, decided_person, decided_at, reason`

func scanApproval(row interface{ Scan(...any) error }) (store.Approval, error) {
	var a store.Approval
	var policies string
	var decided sql.NullTime
	err := row.Scan(&a.RunID, &a.StepIndex, &a.Step, &a.Module, &a.Project, &policies, &a.Why, &a.RequestedAt, &a.ExpiresAt, &a.Status,
		&a.DecidedBy, &a.DecidedPerson, &decided, &a.Reason)
	_ = json.Unmarshal([]byte(policies), &a.Policies)
	a.RequestedAt, a.ExpiresAt, a.DecidedAt = a.RequestedAt.UTC(), a.ExpiresAt.UTC(), timePtr(decided)
	return a, err
}

func (s *Store) approvalIn(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, runID string, stepIndex int) (store.Approval, error) {
	a, err := scanApproval(q.QueryRowContext(ctx, s.q(`SELECT `+approvalCols+` FROM run_approvals WHERE run_id = ? AND step_index = ?`), runID, stepIndex))
	if err != nil {
		return store.Approval{}, notFound(err, "approval", fmt.Sprintf("%s step %d", runID, stepIndex))
	}
	return a, nil
}

// ApprovalRequest stores a pending approval unless the step has one.
func (s *Store) ApprovalRequest(ctx context.Context, a store.Approval, actor store.Actor) (_ store.Approval, err error) {
	defer s.translate(&err)
	if got, err := s.ApprovalGet(ctx, a.RunID, a.StepIndex); err == nil {
		return got, nil
	}
	policies, _ := json.Marshal(orNone(a.Policies))
	err = s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO run_approvals (run_id, step_index, step, module, project, policies, why, requested_at, expires_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			a.RunID, a.StepIndex, a.Step, a.Module, projectOf(a.Project), string(policies), a.Why, s.stamp(), a.ExpiresAt.UTC(), store.ApprovalPending)
		if s.dialect.Classify(err) == UniqueViolation {
			return record{}, &store.Error{Err: store.ErrExists, Kind: "approval", Key: a.RunID}
		}
		if err != nil {
			return record{}, fmt.Errorf("request approval of run %s step %q: %w", a.RunID, a.Step, err)
		}
		return record{action: "run.approval_requested", object: "run/" + a.RunID, payload: map[string]any{
			"run_id": a.RunID, "step": a.Step, "module": a.Module, "policies": orNone(a.Policies), "why": a.Why, "expires_at": a.ExpiresAt.UTC(),
		}, project: projectOf(a.Project)}, nil
	})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return store.Approval{}, err
	}
	return s.ApprovalGet(ctx, a.RunID, a.StepIndex)
}

func orNone(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// ApprovalGet returns one step's approval.
func (s *Store) ApprovalGet(ctx context.Context, runID string, stepIndex int) (_ store.Approval, err error) {
	defer s.translate(&err)
	return s.approvalIn(ctx, s.db, runID, stepIndex)
}

// Approvals lists a run's approvals by step.
func (s *Store) Approvals(ctx context.Context, runID string) (_ []store.Approval, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+approvalCols+` FROM run_approvals WHERE run_id = ? ORDER BY step_index`), runID)
	if err != nil {
		return nil, fmt.Errorf("list approvals of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := []store.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("list approvals of run %s: %w", runID, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// ApprovalDecide approves or rejects the run's pending approval.
func (s *Store) ApprovalDecide(ctx context.Context, d store.ApprovalDecision) (_ store.Approval, err error) {
	defer s.translate(&err)
	var a store.Approval
	expired := false
	err = s.mutate(ctx, d.Actor, func(tx *sql.Tx) (record, error) {
		var err error
		a, err = scanApproval(tx.QueryRowContext(ctx, s.q(`SELECT `+approvalCols+` FROM run_approvals WHERE run_id = ? AND status = ?`), d.RunID, store.ApprovalPending))
		if errors.Is(err, sql.ErrNoRows) {
			return record{}, &store.Error{Err: store.ErrNotPending, Kind: "run", Key: d.RunID}
		}
		if err != nil {
			return record{}, fmt.Errorf("read the approval of run %s: %w", d.RunID, err)
		}
		now := s.stamp()
		status, action := store.ApprovalRejected, "run.rejected"
		switch {
		case !now.Before(a.ExpiresAt):
			// Too late: it expires now, whoever asked.
			status, action, expired = store.ApprovalExpired, "run.approval_expired", true
		case d.Approve:
			status, action = store.ApprovalApproved, "run.approved"
		}
		by, person, reason := string(d.Actor), d.Person, d.Reason
		if expired {
			by, person, reason = string(store.ActorKeeper), "", "expired before "+string(d.Actor)+" decided"
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE run_approvals SET status = ?, decided_by = ?, decided_person = ?, decided_at = ?, reason = ? WHERE run_id = ? AND step_index = ? AND status = ?`),
			status, by, person, now, reason, a.RunID, a.StepIndex, store.ApprovalPending); err != nil {
			return record{}, fmt.Errorf("decide the approval of run %s: %w", d.RunID, err)
		}
		a.Status, a.DecidedBy, a.DecidedPerson, a.DecidedAt, a.Reason = status, by, person, &now, reason
		return record{action: action, object: "run/" + a.RunID, payload: map[string]any{
			"run_id": a.RunID, "step": a.Step, "module": a.Module, "reason": reason, "person": person,
		}, project: a.Project}, nil
	})
	if err != nil {
		return store.Approval{}, err
	}
	if expired {
		return a, &store.Error{Err: store.ErrNotPending, Kind: "run", Key: d.RunID, Ref: "expired"}
	}
	return a, nil
}

// ApprovalExpire expires a step's approval that is still pending.
func (s *Store) ApprovalExpire(ctx context.Context, runID string, stepIndex int) (_ store.Approval, err error) {
	defer s.translate(&err)
	err = s.mutate(ctx, store.ActorKeeper, func(tx *sql.Tx) (record, error) {
		a, err := s.approvalIn(ctx, tx, runID, stepIndex)
		if err != nil {
			return record{}, err
		}
		if a.Status != store.ApprovalPending {
			return record{}, errNothing
		}
		now := s.stamp()
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE run_approvals SET status = ?, decided_by = ?, decided_at = ?, reason = ? WHERE run_id = ? AND step_index = ? AND status = ?`),
			store.ApprovalExpired, string(store.ActorKeeper), now, "nobody decided before it expired", runID, stepIndex, store.ApprovalPending); err != nil {
			return record{}, fmt.Errorf("expire the approval of run %s: %w", runID, err)
		}
		return record{action: "run.approval_expired", object: "run/" + runID, payload: map[string]any{"run_id": runID, "step": a.Step, "module": a.Module}, project: a.Project}, nil
	})
	if err != nil && !errors.Is(err, errNothing) {
		return store.Approval{}, err
	}
	return s.ApprovalGet(ctx, runID, stepIndex)
}

// errNothing ends a mutation that has nothing to change: nothing is
// written, no event either.
var errNothing = errors.New("nothing to change")

// ApprovalPolicy returns the policy set through the API.
func (s *Store) ApprovalPolicy(ctx context.Context) (_ string, err error) {
	defer s.translate(&err)
	var p string
	err = s.db.QueryRowContext(ctx, `SELECT policy FROM approval_policy WHERE id = 1`).Scan(&p)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return p, err
}

// ApprovalPolicySet replaces the policy set through the API.
func (s *Store) ApprovalPolicySet(ctx context.Context, policy string, actor store.Actor) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		now := s.stamp()
		res, err := tx.ExecContext(ctx, s.q(`UPDATE approval_policy SET policy = ?, updated_at = ?, updated_by = ? WHERE id = 1`), policy, now, string(actor))
		if err != nil {
			return record{}, fmt.Errorf("set the approval policy: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO approval_policy (id, policy, updated_at, updated_by) VALUES (1, ?, ?, ?)`), policy, now, string(actor)); err != nil {
				return record{}, fmt.Errorf("set the approval policy: %w", err)
			}
		}
		return record{action: "approval.policy_set", object: "approval_policy", payload: map[string]any{"policy": policy}}, nil
	})
}
