package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.DriftStore = (*Store)(nil)

const driftCols = `sid, seed_id, state, kind, run_id, reason, checked_at, changed_at, ack_until, ack_reason, ack_by, remediation_run_id`

func scanDrift(row interface{ Scan(...any) error }) (store.SoulDrift, error) {
	var d store.SoulDrift
	var checked, changed, ack sql.NullTime
	err := row.Scan(&d.SID, &d.SeedID, &d.State, &d.Kind, &d.RunID, &d.Reason, &checked, &changed, &ack, &d.AckReason, &d.AckBy, &d.RemediationRunID)
	d.CheckedAt, d.ChangedAt, d.AckUntil = timePtr(checked), timePtr(changed), timePtr(ack)
	return d, err
}

// DriftStart marks a seed as being checked by runID. A seed never checked
// before is checking; one checked before keeps its state (what the last
// finished check found) with the new run's id.
func (s *Store) DriftStart(ctx context.Context, sid string, seedID int64, runID string) (err error) {
	defer s.translate(&err)
	_, err = s.db.ExecContext(ctx, s.q(`INSERT INTO soul_drift (sid, seed_id, state, run_id, changed_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (sid, seed_id) DO UPDATE SET run_id = excluded.run_id`), sid, seedID, store.DriftChecking, runID, s.stamp())
	if err != nil {
		return fmt.Errorf("start the drift check of %s seed %d: %w", sid, seedID, err)
	}
	return nil
}

// driftActions are the audit actions of entering each state.
var driftActions = map[string]string{
	store.DriftInSync:      "soul.in_sync",
	store.DriftDrifted:     "soul.drifted",
	store.DriftUnknown:     "soul.drift_unknown",
	store.DriftUnreachable: "soul.drift_unreachable",
}

// DriftRecord stores a finished check. The common case, the same state
// again, is one UPDATE and no audit event; a change of state takes the
// audit chain's transaction.
func (s *Store) DriftRecord(ctx context.Context, p store.DriftRecordParams) (before string, err error) {
	defer s.translate(&err)
	d := p.Drift
	at := s.stamp()
	if d.CheckedAt == nil {
		d.CheckedAt = &at
	}
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE soul_drift SET kind = ?, reason = ?, checked_at = ?
		WHERE sid = ? AND seed_id = ? AND run_id = ? AND state = ?`), d.Kind, d.Reason, d.CheckedAt.UTC(), d.SID, d.SeedID, d.RunID, d.State)
	if err != nil {
		return "", fmt.Errorf("record the drift of %s seed %d: %w", d.SID, d.SeedID, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return d.State, nil
	}
	err = s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		var runID string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT state, run_id FROM soul_drift WHERE sid = ? AND seed_id = ?`), d.SID, d.SeedID).Scan(&before, &runID); err != nil {
			return record{}, notFound(err, "drift", fmt.Sprintf("%s/%d", d.SID, d.SeedID))
		}
		if runID != d.RunID {
			// Not the check this seed waits for (a later check was started,
			// or the run was never one the drift service started): nothing
			// is recorded, and nothing follows from it.
			return record{}, &store.Error{Err: store.ErrNotFound, Kind: "drift check", Key: d.RunID, Ref: fmt.Sprintf("%s seed %d waits for run %q", d.SID, d.SeedID, runID)}
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE soul_drift SET state = ?, kind = ?, reason = ?, checked_at = ?, changed_at = ?,
			ack_until = NULL, ack_reason = '', ack_by = '', remediation_run_id = '' WHERE sid = ? AND seed_id = ?`),
			d.State, d.Kind, d.Reason, d.CheckedAt.UTC(), at, d.SID, d.SeedID); err != nil {
			return record{}, fmt.Errorf("record the drift of %s seed %d: %w", d.SID, d.SeedID, err)
		}
		action := driftActions[d.State]
		if action == "" {
			return record{}, fmt.Errorf("drift state %q is not one a check records", d.State)
		}
		if p.Changed != nil && before != d.State {
			if err := p.Changed(ctx, tx, before); err != nil {
				return record{}, fmt.Errorf("queue what follows the drift of %s seed %d: %w", d.SID, d.SeedID, err)
			}
		}
		var changes []store.Change
		if before != d.State {
			changes = []store.Change{store.DriftChanged{SID: d.SID, SeedID: d.SeedID, From: before, To: d.State}}
		}
		return record{action: action, object: "soul/" + d.SID, payload: map[string]any{
			"sid": d.SID, "seed_id": d.SeedID, "run_id": d.RunID, "from": before, "to": d.State, "kind": d.Kind, "reason": d.Reason,
		}, changes: changes}, nil
	})
	return before, err
}

// DriftList returns the drift of the souls p selects, by SID.
func (s *Store) DriftList(ctx context.Context, p store.DriftListParams) (_ []store.SoulDrift, err error) {
	defer s.translate(&err)
	// The souls of the page first (every seed of each comes with it).
	q := `SELECT DISTINCT sid FROM soul_drift WHERE sid > ?`
	args := []any{p.After}
	if p.SID != "" {
		q += ` AND sid = ?`
		args = append(args, p.SID)
	}
	if p.State != "" {
		q += ` AND state = ?`
		args = append(args, p.State)
	}
	if p.Project != "" {
		q += ` AND sid IN (SELECT sid FROM souls WHERE project = ?)`
		args = append(args, p.Project)
	}
	q += ` ORDER BY sid LIMIT ?`
	args = append(args, limitOf(p.Limit))
	rows, err := s.db.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list drift: %w", err)
	}
	var sids []any
	for rows.Next() {
		var sid string
		if err := rows.Scan(&sid); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list drift: %w", err)
		}
		sids = append(sids, sid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := []store.SoulDrift{}
	if len(sids) == 0 {
		return out, nil
	}
	q = `SELECT ` + driftCols + ` FROM soul_drift WHERE sid IN (?` + repeatPlaceholders(len(sids)-1) + `) ORDER BY sid, seed_id`
	rows, err = s.db.QueryContext(ctx, s.q(q), sids...)
	if err != nil {
		return nil, fmt.Errorf("list drift: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanDrift(rows)
		if err != nil {
			return nil, fmt.Errorf("list drift: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func repeatPlaceholders(n int) string {
	b := make([]byte, 0, 3*n)
	for range n {
		b = append(b, ", ?"...)
	}
	return string(b)
}

// DriftCounts counts seeds by state.
func (s *Store) DriftCounts(ctx context.Context) (_ map[string]int, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, `SELECT state, COUNT(*) FROM soul_drift GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count drift: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count drift: %w", err)
		}
		out[state] = n
	}
	return out, rows.Err()
}

// DriftAck acknowledges the drift of a soul's seeds.
func (s *Store) DriftAck(ctx context.Context, p store.DriftAckParams) (n int, err error) {
	defer s.translate(&err)
	err = s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		q := `UPDATE soul_drift SET ack_until = ?, ack_reason = ?, ack_by = ? WHERE sid = ?`
		args := []any{p.Until.UTC(), p.Reason, string(p.Actor), p.SID}
		if p.SeedID != 0 {
			q += ` AND seed_id = ?`
			args = append(args, p.SeedID)
		}
		res, err := tx.ExecContext(ctx, s.q(q), args...)
		if err != nil {
			return record{}, fmt.Errorf("acknowledge the drift of %s: %w", p.SID, err)
		}
		c, _ := res.RowsAffected()
		if c == 0 {
			key := p.SID
			if p.SeedID != 0 {
				key = fmt.Sprintf("%s seed %d", p.SID, p.SeedID)
			}
			return record{}, &store.Error{Err: store.ErrNotFound, Kind: "drift", Key: key}
		}
		n = int(c)
		return record{action: "soul.drift_acknowledged", object: "soul/" + p.SID, payload: map[string]any{
			"sid": p.SID, "seed_id": p.SeedID, "until": p.Until.UTC(), "reason": p.Reason, "seeds": n,
		}}, nil
	})
	return n, err
}

// DriftRemediated records a remediation run for the drift check runID
// found.
func (s *Store) DriftRemediated(ctx context.Context, sid string, seedID int64, checkRunID, runID string, actor store.Actor) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE soul_drift SET remediation_run_id = ? WHERE sid = ? AND seed_id = ? AND run_id = ?`), runID, sid, seedID, checkRunID)
		if err != nil {
			return record{}, fmt.Errorf("record the remediation of %s seed %d: %w", sid, seedID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return record{}, &store.Error{Err: store.ErrNotFound, Kind: "drift", Key: fmt.Sprintf("%s seed %d check %s", sid, seedID, checkRunID)}
		}
		return record{action: "soul.drift_remediation_started", object: "soul/" + sid, payload: map[string]any{
			"sid": sid, "seed_id": seedID, "check_run_id": checkRunID, "run_id": runID}}, nil
	})
}

// DriftDue returns the seeds with their own schedule that are due.
func (s *Store) DriftDue(ctx context.Context, now time.Time) (_ []store.SoulSeed, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT sd.sid, sd.id, sd.drift_every_ms, d.checked_at, d.changed_at, d.state FROM soul_seeds sd
		LEFT JOIN soul_drift d ON d.sid = sd.sid AND d.seed_id = sd.id
		WHERE sd.status = ? AND sd.drift_every_ms > 0 ORDER BY sd.sid, sd.id`), store.SeedActive)
	if err != nil {
		return nil, fmt.Errorf("due drift checks: %w", err)
	}
	defer rows.Close()
	var out []store.SoulSeed
	for rows.Next() {
		var sd store.SoulSeed
		var everyMS int64
		var checked, changed sql.NullTime
		var state sql.NullString
		if err := rows.Scan(&sd.SID, &sd.ID, &everyMS, &checked, &changed, &state); err != nil {
			return nil, fmt.Errorf("due drift checks: %w", err)
		}
		sd.DriftEvery = time.Duration(everyMS) * time.Millisecond
		last := checked
		if state.String == store.DriftChecking && changed.Valid {
			last = changed // started, never finished: the start counts
		}
		if !last.Valid || !now.Before(last.Time.Add(sd.DriftEvery)) {
			out = append(out, sd)
		}
	}
	return out, rows.Err()
}
