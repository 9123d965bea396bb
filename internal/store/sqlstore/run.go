package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.RunStore = (*Store)(nil)

const runCols = `id, key, digest, name, scenario, input_sealed, input_masked, phase, error_code, error_message, timeout_ms,
	created_by, created_at, started_at, finished_at, outputs, message, state_sealed, owner, heartbeat_at, cancel_requested, mode, epoch, trace_parent, project,
	EXISTS (SELECT 1 FROM run_approvals a WHERE a.run_id = runs.id AND a.status = 'pending')`

func scanRun(row interface{ Scan(...any) error }) (store.Run, error) {
	var r store.Run
	var key, owner sql.NullString
	var inputMasked, outputs string
	var timeoutMS int64
	var started, finished, heartbeat sql.NullTime
	err := row.Scan(&r.ID, &key, &r.Digest, &r.Name, &r.Scenario, &r.InputSealed, &inputMasked, &r.Phase, &r.ErrorCode, &r.ErrorMsg, &timeoutMS,
		&r.CreatedBy, &r.CreatedAt, &started, &finished, &outputs, &r.Message, &r.StateSealed, &owner, &heartbeat, &r.CancelRequested, &r.Mode, &r.Epoch, &r.TraceParent, &r.Project, &r.AwaitingApproval)
	r.Key, r.Owner = key.String, owner.String
	r.InputMasked, r.Outputs = json.RawMessage(inputMasked), json.RawMessage(outputs)
	r.Timeout = time.Duration(timeoutMS) * time.Millisecond
	r.CreatedAt = r.CreatedAt.UTC()
	r.StartedAt, r.FinishedAt, r.HeartbeatAt = timePtr(started), timePtr(finished), timePtr(heartbeat)
	return r, err
}

// runByKey returns the run that createdBy started with key: a re-run key
// belongs to the token that used it, so another token's key names no run.
func (s *Store) runByKey(ctx context.Context, createdBy, key string) (store.Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, s.q(`SELECT `+runCols+` FROM runs WHERE created_by = ? AND key = ?`), createdBy, key))
	if err != nil {
		return store.Run{}, notFound(err, "run", key)
	}
	return r, nil
}

// RunByKey returns the run createdBy started with key.
func (s *Store) RunByKey(ctx context.Context, createdBy, key string) (_ store.Run, err error) {
	defer s.translate(&err)
	return s.runByKey(ctx, createdBy, key)
}

// existing answers a create whose key is already used.
func existing(r store.Run, digest string) (store.Run, bool, error) {
	if r.Digest != digest {
		return store.Run{}, false, &store.Error{Err: store.ErrKeyConflict, Kind: "run", Key: r.Key, Ref: "run " + r.ID}
	}
	return r, false, nil
}

// RunCreate inserts a run (Pending), writes audit run.started and calls
// Enqueue, all in one transaction.
func (s *Store) RunCreate(ctx context.Context, p store.RunCreateParams) (_ store.Run, _ bool, err error) {
	defer s.translate(&err)
	r := p.Run
	if r.Key != "" {
		if prev, err := s.runByKey(ctx, string(p.Actor), r.Key); err == nil {
			return existing(prev, r.Digest)
		}
	}
	r.Phase = store.PhasePending
	if r.Mode == "" {
		r.Mode = "apply"
	}
	r.CreatedAt = s.stamp()
	r.CreatedBy = string(p.Actor)
	r.Project = projectOf(r.Project)
	err = s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		q, err := s.lockProject(ctx, tx, r.Project, "run", r.ID)
		if err != nil {
			return record{}, err
		}
		if q.Runs > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM runs WHERE project = ? AND phase IN (?, ?)`),
				r.Project, store.PhasePending, store.PhaseRunning).Scan(&n); err != nil {
				return record{}, fmt.Errorf("count the runs of project %q: %w", r.Project, err)
			}
			if n+1 > q.Runs {
				return record{}, &store.QuotaError{Project: r.Project, Resource: "runs", Limit: q.Runs, Used: n, Asked: 1}
			}
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO runs (id, key, digest, name, scenario, input_sealed, input_masked, phase, timeout_ms, created_by, created_at, mode, trace_parent, project)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			r.ID, nullString(r.Key), r.Digest, r.Name, r.Scenario, r.InputSealed, jsonText(r.InputMasked), r.Phase, r.Timeout.Milliseconds(), r.CreatedBy, r.CreatedAt, r.Mode, r.TraceParent, r.Project)
		if s.dialect.Classify(err) == UniqueViolation {
			return record{}, &store.Error{Err: store.ErrExists, Kind: "run", Key: r.Key}
		}
		if err != nil {
			return record{}, fmt.Errorf("insert run: %w", err)
		}
		if p.Enqueue != nil {
			if err := p.Enqueue(ctx, tx); err != nil {
				return record{}, fmt.Errorf("enqueue run %s: %w", r.ID, err)
			}
		}
		// No digest: equal digests would tell any audit reader that two
		// runs had the same input, a guess of a secret input included.
		return record{action: "run.started", object: "run/" + r.ID, payload: map[string]any{
			"id": r.ID, "key": r.Key, "name": r.Name, "mode": r.Mode, "timeout": r.Timeout.String(), "input": r.InputMasked,
		}, project: r.Project, changes: []store.Change{store.RunCreated{ID: r.ID, Project: r.Project, Mode: r.Mode}}}, nil
	})
	if errors.Is(err, store.ErrExists) && r.Key != "" {
		// A concurrent request with the same key won the insert.
		prev, gerr := s.runByKey(ctx, string(p.Actor), r.Key)
		if gerr != nil {
			return store.Run{}, false, gerr
		}
		return existing(prev, r.Digest)
	}
	if err != nil {
		return store.Run{}, false, err
	}
	got, err := s.RunGet(ctx, r.ID)
	return got, true, err
}

// RunGet returns one run.
func (s *Store) RunGet(ctx context.Context, id string) (_ store.Run, err error) {
	defer s.translate(&err)
	r, err := scanRun(s.db.QueryRowContext(ctx, s.q(`SELECT `+runCols+` FROM runs WHERE id = ?`), id))
	if err != nil {
		return store.Run{}, notFound(err, "run", id)
	}
	return r, nil
}

// RunHead returns a run's phase and finish time alone.
func (s *Store) RunHead(ctx context.Context, id string) (_ store.RunHead, err error) {
	defer s.translate(&err)
	var h store.RunHead
	var finished sql.NullTime
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT phase, finished_at, project FROM runs WHERE id = ?`), id).Scan(&h.Phase, &finished, &h.Project); err != nil {
		return store.RunHead{}, notFound(err, "run", id)
	}
	h.FinishedAt = timePtr(finished)
	return h, nil
}

// RunList lists runs newest first, filtered by phase and name.
func (s *Store) RunList(ctx context.Context, p store.RunListParams) (_ []store.Run, err error) {
	defer s.translate(&err)
	after := p.After
	if after == "" {
		after = "~" // sorts after every id
	}
	query, args := `SELECT `+runCols+` FROM runs WHERE id < ?`, []any{after}
	const awaiting = `id IN (SELECT run_id FROM run_approvals WHERE status = 'pending')`
	switch p.Phase {
	case "":
	case store.PhaseAwaitingApproval: // Running, held by an approval
		query, args = query+` AND phase = ? AND `+awaiting, append(args, store.PhaseRunning)
	case store.PhaseRunning:
		query, args = query+` AND phase = ? AND NOT `+awaiting, append(args, store.PhaseRunning)
	case store.PhaseRejected: // Failed, for the approval
		query, args = query+` AND phase = ? AND error_code IN (?, ?)`, append(args, store.PhaseFailed, store.CodeRejected, store.CodeApprovalExpired)
	case store.PhaseFailed:
		query, args = query+` AND phase = ? AND error_code NOT IN (?, ?)`, append(args, store.PhaseFailed, store.CodeRejected, store.CodeApprovalExpired)
	default:
		query, args = query+` AND phase = ?`, append(args, p.Phase)
	}
	if p.NameContains != "" {
		query, args = query+` AND LOWER(name) LIKE LOWER(?) ESCAPE '\'`, append(args, "%"+likeEscaper.Replace(p.NameContains)+"%")
	}
	if !p.CreatedSince.IsZero() {
		query, args = query+` AND created_at >= ?`, append(args, p.CreatedSince.UTC())
	}
	if cond, a := inProject(p.Project, ""); cond != "" {
		query, args = query+cond, append(args, a...)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query+` ORDER BY id DESC LIMIT ?`), append(args, limitOf(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	out := []store.Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// likeEscaper makes a text match itself in a LIKE pattern with ESCAPE '\'.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// RunSteps returns a run's steps and targets in order.
func (s *Store) RunSteps(ctx context.Context, id string) (_ []store.RunStep, _ []store.RunTarget, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, step_index, name, module, status, started_at, finished_at FROM run_steps WHERE run_id = ? ORDER BY step_index`), id)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s steps: %w", id, err)
	}
	defer rows.Close()
	steps := []store.RunStep{}
	for rows.Next() {
		var st store.RunStep
		var started, finished sql.NullTime
		if err := rows.Scan(&st.RunID, &st.Index, &st.Name, &st.Module, &st.Status, &started, &finished); err != nil {
			return nil, nil, fmt.Errorf("run %s steps: %w", id, err)
		}
		st.StartedAt, st.FinishedAt = timePtr(started), timePtr(finished)
		steps = append(steps, st)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	trows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, step_index, sid, status, changed, output, error_code, error_message, attempts, duration_ms, unknown, changes FROM run_targets WHERE run_id = ? ORDER BY step_index, sid`), id)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s targets: %w", id, err)
	}
	defer trows.Close()
	targets := []store.RunTarget{}
	for trows.Next() {
		var t store.RunTarget
		var output, changes string
		if err := trows.Scan(&t.RunID, &t.StepIndex, &t.SID, &t.Status, &t.Changed, &output, &t.ErrorCode, &t.ErrorMsg, &t.Attempts, &t.DurationMS, &t.Unknown, &changes); err != nil {
			return nil, nil, fmt.Errorf("run %s targets: %w", id, err)
		}
		t.Output = json.RawMessage(output)
		if changes != "null" {
			t.Changes = json.RawMessage(changes)
		}
		targets = append(targets, t)
	}
	return steps, targets, trows.Err()
}

// liveOwner is the SQL condition "the run has a live owner other than
// the claimer": its keeper row beat at or after the stale time, or it
// claimed the run since then (a keeper's first claim may come before its
// first beat is visible). Arguments: claimer, stale time, stale time.
const liveOwner = `owner IS NOT NULL AND owner <> ? AND ((heartbeat_at IS NOT NULL AND heartbeat_at >= ?) OR EXISTS (SELECT 1 FROM keepers k WHERE k.id = runs.owner AND k.heartbeat_at >= ?))`

// RunClaim takes the run's lease for owner, starting a new execution
// (epoch + 1).
func (s *Store) RunClaim(ctx context.Context, id, owner string, staleBefore time.Time) (_ store.Run, _ bool, err error) {
	defer s.translate(&err)
	now, stale := s.stamp(), staleBefore.UTC()
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE runs SET owner = ?, heartbeat_at = ?, epoch = epoch + 1, phase = ?, started_at = COALESCE(started_at, ?)
		WHERE id = ? AND phase IN (?, ?) AND NOT (`+liveOwner+`)`),
		owner, now, store.PhaseRunning, now, id, store.PhasePending, store.PhaseRunning, owner, stale, stale)
	if err != nil {
		return store.Run{}, false, fmt.Errorf("claim run %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Run{}, false, err
	}
	r, err := s.RunGet(ctx, id)
	return r, n == 1, err
}

// KeeperBeat renews keeper owner's heartbeat row.
func (s *Store) KeeperBeat(ctx context.Context, owner string) (err error) {
	defer s.translate(&err)
	now := s.stamp()
	_, err = s.db.ExecContext(ctx, s.q(`INSERT INTO keepers (id, started_at, heartbeat_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`), owner, now, now)
	if err != nil {
		return fmt.Errorf("keeper heartbeat: %w", err)
	}
	return nil
}

// RunsHeld lists the Running runs owner holds and their cancel requests.
func (s *Store) RunsHeld(ctx context.Context, owner string) (_ map[string]bool, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, cancel_requested FROM runs WHERE owner = ? AND phase = ?`), owner, store.PhaseRunning)
	if err != nil {
		return nil, fmt.Errorf("runs held by %s: %w", owner, err)
	}
	defer rows.Close()
	held := map[string]bool{}
	for rows.Next() {
		var id string
		var cancel bool
		if err := rows.Scan(&id, &cancel); err != nil {
			return nil, err
		}
		held[id] = cancel
	}
	return held, rows.Err()
}

// RunRelease drops owner's lease: the run has no owner, so any keeper
// takes it over at once.
func (s *Store) RunRelease(ctx context.Context, id, owner string) (err error) {
	defer s.translate(&err)
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE runs SET owner = NULL WHERE id = ? AND owner = ? AND phase = ?`), id, owner, store.PhaseRunning)
	if err != nil {
		return fmt.Errorf("release run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &store.Error{Err: store.ErrLeaseLost, Kind: "run", Key: id}
	}
	return nil
}

// RunCommandRecord stores a command's write-ahead record, if owner holds
// the run in the record's epoch.
func (s *Store) RunCommandRecord(ctx context.Context, owner string, c store.RunCommand) (err error) {
	defer s.translate(&err)
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO run_commands (run_id, id, step_index, sid, attempt, n, epoch, digest, transport, sent_at)
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM runs WHERE id = ? AND owner = ? AND epoch = ? AND phase = ?)
		ON CONFLICT (run_id, id) DO UPDATE SET epoch = excluded.epoch, digest = excluded.digest, transport = excluded.transport, sent_at = excluded.sent_at`),
		c.RunID, c.ID, c.StepIndex, c.SID, c.Attempt, c.N, c.Epoch, c.Digest, c.Transport, s.stamp(), c.RunID, owner, c.Epoch, store.PhaseRunning)
	if err != nil {
		return fmt.Errorf("record command %s: %w", c.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &store.Error{Err: store.ErrLeaseLost, Kind: "run", Key: c.RunID}
	}
	return nil
}

// RunCommands lists a run's command records by id.
func (s *Store) RunCommands(ctx context.Context, runID string) (_ []store.RunCommand, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, id, step_index, sid, attempt, n, epoch, digest, transport, sent_at FROM run_commands WHERE run_id = ? ORDER BY id`), runID)
	if err != nil {
		return nil, fmt.Errorf("commands of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []store.RunCommand
	for rows.Next() {
		var c store.RunCommand
		if err := rows.Scan(&c.RunID, &c.ID, &c.StepIndex, &c.SID, &c.Attempt, &c.N, &c.Epoch, &c.Digest, &c.Transport, &c.SentAt); err != nil {
			return nil, err
		}
		c.SentAt = c.SentAt.UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// RunStepSave inserts or updates a step's state.
func (s *Store) RunStepSave(ctx context.Context, st store.RunStep) (err error) {
	defer s.translate(&err)
	_, err = s.db.ExecContext(ctx, s.q(`INSERT INTO run_steps (run_id, step_index, name, module, status, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id, step_index) DO UPDATE SET status = excluded.status, started_at = COALESCE(run_steps.started_at, excluded.started_at), finished_at = excluded.finished_at`),
		st.RunID, st.Index, st.Name, st.Module, st.Status, nullTime(st.StartedAt), nullTime(st.FinishedAt))
	if err != nil {
		return fmt.Errorf("save step %d of run %s: %w", st.Index, st.RunID, err)
	}
	return nil
}

const saveTargetSQL = `INSERT INTO run_targets (run_id, step_index, sid, status, changed, output, error_code, error_message, attempts, duration_ms, unknown, changes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id, step_index, sid) DO UPDATE SET status = excluded.status, changed = excluded.changed, output = excluded.output,
		error_code = excluded.error_code, error_message = excluded.error_message, attempts = excluded.attempts, duration_ms = excluded.duration_ms,
		unknown = excluded.unknown, changes = excluded.changes`

func targetArgs(t store.RunTarget) []any {
	output := string(t.Output)
	if output == "" {
		output = "null"
	}
	changes := string(t.Changes)
	if changes == "" {
		changes = "null"
	}
	return []any{t.RunID, t.StepIndex, t.SID, t.Status, t.Changed, output, t.ErrorCode, t.ErrorMsg, t.Attempts, t.DurationMS, t.Unknown, changes}
}

// RunTargetSave inserts or replaces one target's result.
func (s *Store) RunTargetSave(ctx context.Context, t store.RunTarget) (err error) {
	defer s.translate(&err)
	if _, err := s.db.ExecContext(ctx, s.q(saveTargetSQL), targetArgs(t)...); err != nil {
		return fmt.Errorf("save target %s of run %s: %w", t.SID, t.RunID, err)
	}
	return nil
}

// RunTargetsSave inserts or replaces several targets' results in one
// transaction.
func (s *Store) RunTargetsSave(ctx context.Context, ts []store.RunTarget) (err error) {
	defer s.translate(&err)
	if len(ts) == 0 {
		return nil
	}
	return s.batch(ctx, "save targets", saveTargetSQL, len(ts), func(i int) ([]any, string) {
		return targetArgs(ts[i]), fmt.Sprintf("save target %s of run %s", ts[i].SID, ts[i].RunID)
	})
}

// batch executes query once per row (args(i) gives its arguments and the
// words of its error) through one prepared statement in one transaction,
// committed only when every row is written.
func (s *Store) batch(ctx context.Context, what, query string, n int, args func(i int) ([]any, string)) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", what, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	stmt, err := tx.PrepareContext(ctx, s.q(query))
	if err != nil {
		return fmt.Errorf("%s: prepare: %w", what, err)
	}
	defer stmt.Close()
	for i := range n {
		a, words := args(i)
		if _, err := stmt.ExecContext(ctx, a...); err != nil {
			return fmt.Errorf("%s (batch of %d, none stored): %w", words, n, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit a batch of %d: %w", what, n, err)
	}
	return nil
}

// RunStateSave stores the sealed state of finished steps.
func (s *Store) RunStateSave(ctx context.Context, id, owner, sealed string) (err error) {
	defer s.translate(&err)
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE runs SET state_sealed = ? WHERE id = ? AND owner = ?`), sealed, id, owner)
	if err != nil {
		return fmt.Errorf("save state of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &store.Error{Err: store.ErrLeaseLost, Kind: "run", Key: id}
	}
	return nil
}

// RunFinish ends the run with its audit event.
func (s *Store) RunFinish(ctx context.Context, p store.RunFinishParams) (err error) {
	defer s.translate(&err)
	now := s.stamp()
	// The run's creator is the actor of run.finished: the keeper only
	// carries out what that token asked for. created_by never changes, so
	// reading it before the transaction is safe.
	actor := store.ActorKeeper
	var creator, project, mode string
	var created time.Time
	var started sql.NullTime
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT created_by, project, mode, created_at, started_at FROM runs WHERE id = ?`), p.ID).Scan(&creator, &project, &mode, &created, &started); err == nil && creator != "" {
		actor = store.Actor(creator)
	}
	done := store.RunFinished{ID: p.ID, Project: project, Mode: mode, Phase: p.Phase, ErrorCode: p.ErrorCode, CreatedAt: created.UTC(), FinishedAt: now}
	if started.Valid {
		done.StartedAt = started.Time.UTC()
	}
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		q := `UPDATE runs SET phase = ?, error_code = ?, error_message = ?, outputs = ?, message = ?, finished_at = ?, started_at = COALESCE(started_at, ?) WHERE id = ? AND phase IN (?, ?)`
		args := []any{p.Phase, p.ErrorCode, p.ErrorMsg, jsonText(p.Outputs), p.Message, now, now, p.ID, store.PhasePending, store.PhaseRunning}
		if p.Owner != "" {
			q += ` AND owner = ?`
			args = append(args, p.Owner)
		}
		res, err := tx.ExecContext(ctx, s.q(q), args...)
		if err != nil {
			return record{}, fmt.Errorf("finish run %s: %w", p.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return record{}, &store.Error{Err: store.ErrLeaseLost, Kind: "run", Key: p.ID}
		}
		if p.Enqueue != nil {
			if err := p.Enqueue(ctx, tx); err != nil {
				return record{}, fmt.Errorf("queue what follows run %s: %w", p.ID, err)
			}
		}
		payload := map[string]any{"id": p.ID, "phase": p.Phase}
		if p.ErrorCode != "" {
			payload["error"] = map[string]any{"code": p.ErrorCode, "message": p.ErrorMsg}
		}
		return record{action: "run.finished", object: "run/" + p.ID, payload: payload, project: project,
			changes: []store.Change{done}}, nil
	})
}

// RunCancel records a cancel request; a Pending run ends Cancelled at once.
func (s *Store) RunCancel(ctx context.Context, p store.DeleteParams) (_ store.Run, err error) {
	defer s.translate(&err)
	now := s.stamp()
	err = s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		var phase, createdBy, project string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT phase, created_by, project FROM runs WHERE id = ?`), p.Key).Scan(&phase, &createdBy, &project); err != nil {
			return record{}, notFound(err, "run", p.Key)
		}
		if store.Terminal(phase) {
			return record{}, &store.Error{Err: store.ErrFinished, Kind: "run", Key: p.Key, Ref: phase}
		}
		if phase == store.PhasePending {
			// A run that did not succeed has its error as its message.
			msg := "cancelled by " + string(p.Actor) + " before it started"
			_, err := tx.ExecContext(ctx, s.q(`UPDATE runs SET cancel_requested = ?, phase = ?, error_code = ?, error_message = ?, message = ?, finished_at = ? WHERE id = ?`),
				true, store.PhaseCancelled, "run.cancelled", msg, "run.cancelled: "+msg, now, p.Key)
			if err != nil {
				return record{}, fmt.Errorf("cancel run %s: %w", p.Key, err)
			}
		} else if _, err := tx.ExecContext(ctx, s.q(`UPDATE runs SET cancel_requested = ? WHERE id = ?`), true, p.Key); err != nil {
			return record{}, fmt.Errorf("cancel run %s: %w", p.Key, err)
		}
		return record{action: "run.cancelled", object: "run/" + p.Key, payload: map[string]any{"id": p.Key, "phase_at_request": phase, "created_by": createdBy}, project: project}, nil
	})
	if err != nil {
		return store.Run{}, err
	}
	return s.RunGet(ctx, p.Key)
}

const appendEventSQL = `INSERT INTO run_events (run_id, seq, at, kind, step, sid, data) VALUES (?, ?, ?, ?, ?, ?, ?)`

func eventArgs(e store.RunEvent) []any {
	return []any{e.RunID, e.Seq, e.At.UTC().Truncate(time.Microsecond), e.Kind, e.Step, e.SID, jsonText(e.Data)}
}

// RunEventAppend stores one event; the caller numbers them.
func (s *Store) RunEventAppend(ctx context.Context, e store.RunEvent) (err error) {
	defer s.translate(&err)
	if _, err := s.db.ExecContext(ctx, s.q(appendEventSQL), eventArgs(e)...); err != nil {
		return fmt.Errorf("append event %d of run %s: %w", e.Seq, e.RunID, err)
	}
	return nil
}

// RunEventsAppend stores several events in one transaction, in the order
// given; the caller numbers them.
func (s *Store) RunEventsAppend(ctx context.Context, es []store.RunEvent) (err error) {
	defer s.translate(&err)
	if len(es) == 0 {
		return nil
	}
	return s.batch(ctx, "append events", appendEventSQL, len(es), func(i int) ([]any, string) {
		return eventArgs(es[i]), fmt.Sprintf("append event %d of run %s", es[i].Seq, es[i].RunID)
	})
}

// RunEvents returns events after afterSeq in order.
func (s *Store) RunEvents(ctx context.Context, id string, afterSeq int64, limit int) (_ []store.RunEvent, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, seq, at, kind, step, sid, data FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`), id, afterSeq, limitOf(limit))
	if err != nil {
		return nil, fmt.Errorf("events of run %s: %w", id, err)
	}
	defer rows.Close()
	out := []store.RunEvent{}
	for rows.Next() {
		var e store.RunEvent
		var data string
		if err := rows.Scan(&e.RunID, &e.Seq, &e.At, &e.Kind, &e.Step, &e.SID, &data); err != nil {
			return nil, fmt.Errorf("events of run %s: %w", id, err)
		}
		e.At = e.At.UTC()
		e.Data = json.RawMessage(data)
		out = append(out, e)
	}
	return out, rows.Err()
}

// RunsOrphaned lists Running runs that lost their executor.
func (s *Store) RunsOrphaned(ctx context.Context, owner string, staleBefore time.Time) (_ []string, err error) {
	defer s.translate(&err)
	stale := staleBefore.UTC()
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id FROM runs WHERE phase = ? AND NOT (`+liveOwner+`) ORDER BY id`), store.PhaseRunning, owner, stale, stale)
	if err != nil {
		return nil, fmt.Errorf("orphaned runs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
