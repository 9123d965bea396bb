package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.CloudStore = (*Store)(nil)

// CloudRequestCreate records a create request before the driver is
// called, after counting it against its project's quota under the
// project's row lock: two concurrent creates cannot both fit in what is
// left, and a refused one (*store.QuotaError) records nothing.
func (s *Store) CloudRequestCreate(ctx context.Context, r store.CloudRequest) (err error) {
	defer s.translate(&err)
	r.Project = projectOf(r.Project)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	q, err := s.lockProject(ctx, tx, r.Project, "cloud_request", r.RequestID)
	if err != nil {
		return err
	}
	if q.VMs > 0 || q.VCPUs > 0 || q.MemoryMB > 0 {
		var used store.Quota
		// VMs alive, and VMs of requests in flight (of runs not finished:
		// a crashed run's request does not hold the quota for ever).
		err := tx.QueryRowContext(ctx, s.q(`SELECT
			(SELECT COUNT(*) FROM souls WHERE project = ? AND vm_id <> '' AND status <> ?) +
			(SELECT COALESCE(SUM(count), 0) FROM cloud_requests WHERE project = ? AND status = 'requested' AND run_id IN (SELECT id FROM runs WHERE phase IN (?, ?))),
			(SELECT COALESCE(SUM(vcpus), 0) FROM souls WHERE project = ? AND vm_id <> '' AND status <> ?) +
			(SELECT COALESCE(SUM(count * vcpus), 0) FROM cloud_requests WHERE project = ? AND status = 'requested' AND run_id IN (SELECT id FROM runs WHERE phase IN (?, ?))),
			(SELECT COALESCE(SUM(memory_mb), 0) FROM souls WHERE project = ? AND vm_id <> '' AND status <> ?) +
			(SELECT COALESCE(SUM(count * memory_mb), 0) FROM cloud_requests WHERE project = ? AND status = 'requested' AND run_id IN (SELECT id FROM runs WHERE phase IN (?, ?)))`),
			r.Project, store.SoulDestroyed, r.Project, store.PhasePending, store.PhaseRunning,
			r.Project, store.SoulDestroyed, r.Project, store.PhasePending, store.PhaseRunning,
			r.Project, store.SoulDestroyed, r.Project, store.PhasePending, store.PhaseRunning).Scan(&used.VMs, &used.VCPUs, &used.MemoryMB)
		if err != nil {
			return fmt.Errorf("count the VMs of project %q: %w", r.Project, err)
		}
		for _, c := range []struct {
			resource          string
			limit, used, more int
		}{{"vms", q.VMs, used.VMs, r.Count}, {"vcpus", q.VCPUs, used.VCPUs, r.Count * r.VCPUs}, {"memory_mb", q.MemoryMB, used.MemoryMB, r.Count * r.MemoryMB}} {
			if c.limit > 0 && c.used+c.more > c.limit {
				return &store.QuotaError{Project: r.Project, Resource: c.resource, Limit: c.limit, Used: c.used, Asked: c.more}
			}
		}
	}
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO cloud_requests (request_id, run_id, step, provider, count, status, created_at, project, vcpus, memory_mb) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.RequestID, r.RunID, r.Step, r.Provider, r.Count, "requested", s.stamp(), r.Project, r.VCPUs, r.MemoryMB)
	if err != nil {
		return fmt.Errorf("record cloud request %s: %w", r.RequestID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record cloud request %s: %w", r.RequestID, err)
	}
	return nil
}

// CloudResize checks and records a resize's new sizes (see store.CloudStore).
func (s *Store) CloudResize(ctx context.Context, p store.CloudResizeParams) (_ map[string]store.Size, err error) {
	defer s.translate(&err)
	p.Project = projectOf(p.Project)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	q, err := s.lockProject(ctx, tx, p.Project, "cloud_resize", p.Provider)
	if err != nil {
		return nil, err
	}
	before := map[string]store.Size{}
	var grow store.Size
	for _, id := range p.VMIDs {
		var cur store.Size
		err := tx.QueryRowContext(ctx, s.q(`SELECT vcpus, memory_mb FROM souls WHERE provider = ? AND vm_id = ? AND project = ? AND status <> ?`), p.Provider, id, p.Project, store.SoulDestroyed).
			Scan(&cur.VCPUs, &cur.MemoryMB)
		if errors.Is(err, sql.ErrNoRows) {
			continue // a VM no soul holds counts toward no quota
		}
		if err != nil {
			return nil, fmt.Errorf("size of VM %s: %w", id, err)
		}
		before[id] = cur
		if p.Size.VCPUs > 0 {
			grow.VCPUs += p.Size.VCPUs - cur.VCPUs
		}
		if p.Size.MemoryMB > 0 {
			grow.MemoryMB += p.Size.MemoryMB - cur.MemoryMB
		}
	}
	if (q.VCPUs > 0 && grow.VCPUs > 0) || (q.MemoryMB > 0 && grow.MemoryMB > 0) {
		var used store.Quota
		err := tx.QueryRowContext(ctx, s.q(`SELECT
			(SELECT COALESCE(SUM(vcpus), 0) FROM souls WHERE project = ? AND vm_id <> '' AND status <> ?) +
			(SELECT COALESCE(SUM(count * vcpus), 0) FROM cloud_requests WHERE project = ? AND status = 'requested' AND run_id IN (SELECT id FROM runs WHERE phase IN (?, ?))),
			(SELECT COALESCE(SUM(memory_mb), 0) FROM souls WHERE project = ? AND vm_id <> '' AND status <> ?) +
			(SELECT COALESCE(SUM(count * memory_mb), 0) FROM cloud_requests WHERE project = ? AND status = 'requested' AND run_id IN (SELECT id FROM runs WHERE phase IN (?, ?)))`),
			p.Project, store.SoulDestroyed, p.Project, store.PhasePending, store.PhaseRunning,
			p.Project, store.SoulDestroyed, p.Project, store.PhasePending, store.PhaseRunning).Scan(&used.VCPUs, &used.MemoryMB)
		if err != nil {
			return nil, fmt.Errorf("count the VMs of project %q: %w", p.Project, err)
		}
		for _, c := range []struct {
			resource          string
			limit, used, more int
		}{{"vcpus", q.VCPUs, used.VCPUs, grow.VCPUs}, {"memory_mb", q.MemoryMB, used.MemoryMB, grow.MemoryMB}} {
			if c.limit > 0 && c.more > 0 && c.used+c.more > c.limit {
				return nil, &store.QuotaError{Project: p.Project, Resource: c.resource, Limit: c.limit, Used: c.used, Asked: c.more}
			}
		}
	}
	for id := range before {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE souls SET vcpus = CASE WHEN ? > 0 THEN ? ELSE vcpus END, memory_mb = CASE WHEN ? > 0 THEN ? ELSE memory_mb END
			WHERE provider = ? AND vm_id = ? AND project = ? AND status <> ?`), p.Size.VCPUs, p.Size.VCPUs, p.Size.MemoryMB, p.Size.MemoryMB, p.Provider, id, p.Project, store.SoulDestroyed); err != nil {
			return nil, fmt.Errorf("record the size of VM %s: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("record the resize: %w", err)
	}
	return before, nil
}

// CloudResizeUndo puts back the sizes CloudResize replaced.
func (s *Store) CloudResizeUndo(ctx context.Context, provider string, before map[string]store.Size) (err error) {
	defer s.translate(&err)
	for id, sz := range before {
		if _, err := s.db.ExecContext(ctx, s.q(`UPDATE souls SET vcpus = ?, memory_mb = ? WHERE provider = ? AND vm_id = ? AND status <> ?`),
			sz.VCPUs, sz.MemoryMB, provider, id, store.SoulDestroyed); err != nil {
			return fmt.Errorf("restore the size of VM %s: %w", id, err)
		}
	}
	return nil
}

// CloudRequestFail records that a create request failed.
func (s *Store) CloudRequestFail(ctx context.Context, requestID, msg string) (err error) {
	defer s.translate(&err)
	_, err = s.db.ExecContext(ctx, s.q(`UPDATE cloud_requests SET status = 'failed', error = ?, finished_at = ? WHERE request_id = ?`), msg, s.stamp(), requestID)
	if err != nil {
		return fmt.Errorf("record cloud request %s failure: %w", requestID, err)
	}
	return nil
}

// CloudRequestGet returns one request.
func (s *Store) CloudRequestGet(ctx context.Context, requestID string) (_ store.CloudRequest, err error) {
	defer s.translate(&err)
	var r store.CloudRequest
	var ids string
	var finished sql.NullTime
	err = s.db.QueryRowContext(ctx, s.q(`SELECT request_id, run_id, step, provider, count, status, vm_ids, error, created_at, finished_at FROM cloud_requests WHERE request_id = ?`), requestID).
		Scan(&r.RequestID, &r.RunID, &r.Step, &r.Provider, &r.Count, &r.Status, &ids, &r.Error, &r.CreatedAt, &finished)
	if err != nil {
		return r, notFound(err, "cloud_request", requestID)
	}
	_ = json.Unmarshal([]byte(ids), &r.VMIDs)
	r.CreatedAt, r.FinishedAt = r.CreatedAt.UTC(), timePtr(finished)
	return r, nil
}

// CloudVMsCreated returns those of vmIDs that a completed create request
// of provider recorded.
func (s *Store) CloudVMsCreated(ctx context.Context, provider string, vmIDs []string) (_ map[string]string, err error) {
	defer s.translate(&err)
	want := map[string]bool{}
	for _, id := range vmIDs {
		want[id] = true
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT vm_ids, project FROM cloud_requests WHERE provider = ? AND status = 'created'`), provider)
	if err != nil {
		return nil, fmt.Errorf("created VMs of provider %q: %w", provider, err)
	}
	defer rows.Close()
	found := map[string]string{}
	for rows.Next() {
		var raw, project string
		if err := rows.Scan(&raw, &project); err != nil {
			return nil, fmt.Errorf("created VMs of provider %q: %w", provider, err)
		}
		var ids []string
		if err := json.Unmarshal([]byte(raw), &ids); err != nil {
			return nil, fmt.Errorf("created VMs of provider %q: decode %q: %w", provider, raw, err)
		}
		for _, id := range ids {
			if want[id] {
				found[id] = project
			}
		}
	}
	return found, rows.Err()
}

// CloudProvision stores the souls and tokens of a create with its audit.
func (s *Store) CloudProvision(ctx context.Context, p store.CloudProvisionParams) (err error) {
	defer s.translate(&err)
	now := s.stamp()
	actor := p.Actor
	if actor == "" {
		actor = store.ActorKeeper
	}
	seeds := make([]store.SoulSeed, len(p.Seeds))
	for i, sd := range p.Seeds {
		if sd.Input, err = s.seal(fmt.Sprintf("input of a seed of soul %q", sd.SID), sd.Input, sd.Secret); err != nil {
			return err
		}
		seeds[i] = sd
	}
	p.Seeds = seeds
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		// The souls belong to the request's project and take what it
		// counted of the quota.
		project, vcpus, memory := store.DefaultProject, 0, 0
		err := tx.QueryRowContext(ctx, s.q(`SELECT project, vcpus, memory_mb FROM cloud_requests WHERE request_id = ?`), p.RequestID).Scan(&project, &vcpus, &memory)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return record{}, fmt.Errorf("read cloud request %s: %w", p.RequestID, err)
		}
		var vmIDs, sids []string
		for _, so := range p.Souls {
			conn, err := json.Marshal(so.Connection)
			if err != nil {
				return record{}, err
			}
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO souls (`+soulCols+`, project, vcpus, memory_mb) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				so.SID, store.SoulPending, so.Address, nullString(so.Provider), so.VMID, so.PrimaryIP, jsonText(so.Attributes), string(conn), nil, now, now, project, vcpus, memory)
			if s.dialect.Classify(err) == UniqueViolation {
				return record{}, &store.Error{Err: store.ErrExists, Kind: "soul", Key: so.SID}
			}
			if err != nil {
				return record{}, fmt.Errorf("insert soul %q: %w", so.SID, err)
			}
			vmIDs, sids = append(vmIDs, so.VMID), append(sids, so.SID)
		}
		for _, t := range p.Tokens {
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO bootstrap_tokens (id, sid, hash, expires_at, status) VALUES (?, ?, ?, ?, ?)`),
				t.ID, t.SID, t.Hash, t.ExpiresAt.UTC(), store.BootstrapIssued)
			if err != nil {
				return record{}, fmt.Errorf("insert bootstrap token of %q: %w", t.SID, err)
			}
		}
		for _, sd := range p.Seeds {
			if _, err := s.insertSeed(ctx, tx, sd, now); err != nil {
				return record{}, err
			}
		}
		ids, _ := json.Marshal(vmIDs)
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE cloud_requests SET status = 'created', vm_ids = ?, finished_at = ? WHERE request_id = ?`), string(ids), now, p.RequestID); err != nil {
			return record{}, fmt.Errorf("record cloud request %s: %w", p.RequestID, err)
		}
		payload := map[string]any{"action": "created", "request_id": p.RequestID, "vm_ids": vmIDs, "sids": sids, "bootstraps_issued": len(p.Tokens)}
		if len(p.Seeds) > 0 {
			payload["seeds_added"] = len(p.Seeds)
		}
		for k, v := range p.Audit {
			payload[k] = v
		}
		return record{action: "cloud.provisioned", object: "provider/" + providerOf(p.Souls), payload: payload, project: project,
			changes: []store.Change{store.CloudProvisioned{Provider: providerOf(p.Souls), Project: project, SIDs: sids}}}, nil
	})
}

func providerOf(souls []store.Soul) string {
	if len(souls) == 0 {
		return ""
	}
	return souls[0].Provider
}

// placeholders returns "?, ?, …" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// CloudDestroy runs the destroy cascade in one transaction.
func (s *Store) CloudDestroy(ctx context.Context, p store.CloudDestroyParams) (_ store.CloudCascade, err error) {
	defer s.translate(&err)
	var c store.CloudCascade
	now := s.stamp()
	err = s.mutate(ctx, p.Actor, func(tx *sql.Tx) (record, error) {
		c = store.CloudCascade{}
		var changes []store.Change
		if len(p.SIDs) > 0 && len(p.VMIDs) > 0 {
			// paired selects the given souls that really are this
			// provider's VMs among vm_ids; everything below is limited to
			// them.
			paired := `sid IN (` + placeholders(len(p.SIDs)) + `) AND provider = ? AND project = ? AND vm_id <> '' AND vm_id IN (` + placeholders(len(p.VMIDs)) + `)`
			var pairedArgs []any
			for _, sid := range p.SIDs {
				pairedArgs = append(pairedArgs, sid)
			}
			pairedArgs = append(pairedArgs, p.Provider, projectOf(p.Project))
			for _, id := range p.VMIDs {
				pairedArgs = append(pairedArgs, id)
			}
			gone, err := s.soulsWhere(ctx, tx, paired+` AND status <> ?`, append(pairedArgs, store.SoulDestroyed)...)
			if err != nil {
				return record{}, fmt.Errorf("destroy souls: %w", err)
			}
			args := append([]any{store.SoulDestroyed, now}, pairedArgs...)
			args = append(args, store.SoulDestroyed)
			res, err := tx.ExecContext(ctx, s.q(`UPDATE souls SET status = ?, updated_at = ?, cert_serial = '' WHERE `+paired+` AND status <> ?`), args...)
			if err != nil {
				return record{}, fmt.Errorf("destroy souls: %w", err)
			}
			n, _ := res.RowsAffected()
			c.SoulsDestroyed = int(n)
			for _, so := range gone {
				changes = append(changes, store.SoulGone{Soul: so, Destroyed: true})
			}
			args = append([]any{"orphaned"}, pairedArgs...)
			res, err = tx.ExecContext(ctx, s.q(`UPDATE soul_seeds SET status = ? WHERE sid IN (SELECT sid FROM souls WHERE `+paired+`) AND status = 'active'`), args...)
			if err != nil {
				return record{}, fmt.Errorf("orphan soul seeds: %w", err)
			}
			n, _ = res.RowsAffected()
			c.SeedsOrphaned = int(n)
			args = append([]any{store.BootstrapBurned}, pairedArgs...)
			args = append(args, store.BootstrapBurned)
			res, err = tx.ExecContext(ctx, s.q(`UPDATE bootstrap_tokens SET status = ? WHERE sid IN (SELECT sid FROM souls WHERE `+paired+`) AND status <> ?`), args...)
			if err != nil {
				return record{}, fmt.Errorf("burn bootstrap tokens: %w", err)
			}
			n, _ = res.RowsAffected()
			c.TokensBurned = int(n)
		}
		payload := map[string]any{"action": "destroyed", "provider": p.Provider, "vm_ids": p.VMIDs, "sids": p.SIDs,
			"destroyed_now": nonNil(p.Destroyed), "already_gone": nonNil(p.AlreadyGone),
			"changed":         len(p.Destroyed) > 0 || c.SoulsDestroyed+c.SeedsOrphaned+c.TokensBurned > 0,
			"souls_destroyed": c.SoulsDestroyed, "seeds_orphaned": c.SeedsOrphaned, "bootstraps_burned": c.TokensBurned}
		for k, v := range p.Audit {
			payload[k] = v
		}
		changes = append(changes, store.CloudDestroyed{Provider: p.Provider, Project: projectOf(p.Project), Destroyed: p.Destroyed, AlreadyGone: p.AlreadyGone})
		return record{action: "cloud.provisioned", object: "provider/" + p.Provider, payload: payload, changes: changes, project: projectOf(p.Project)}, nil
	})
	return c, err
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// querier is a database or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// soulsWhere reads the souls matching cond (a condition on the souls
// table with args) through q, by SID.
func (s *Store) soulsWhere(ctx context.Context, q querier, cond string, args ...any) ([]store.Soul, error) {
	rows, err := q.QueryContext(ctx, s.q(`SELECT `+soulSelectCols+` FROM souls WHERE `+cond+` ORDER BY sid`), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Soul{}
	for rows.Next() {
		so, err := scanSoul(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, so)
	}
	return out, rows.Err()
}

// SoulsOfProvider lists a provider's souls by SID.
func (s *Store) SoulsOfProvider(ctx context.Context, provider string) (_ []store.Soul, err error) {
	defer s.translate(&err)
	souls, err := s.soulsWhere(ctx, s.db, `provider = ?`, provider)
	if err != nil {
		return nil, fmt.Errorf("souls of provider %q: %w", provider, err)
	}
	return souls, nil
}

// BootstrapTokens lists a soul's bootstrap tokens.
func (s *Store) BootstrapTokens(ctx context.Context, sid string) (_ []store.BootstrapToken, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, sid, hash, expires_at, status FROM bootstrap_tokens WHERE sid = ? ORDER BY id`), sid)
	if err != nil {
		return nil, fmt.Errorf("bootstrap tokens of %q: %w", sid, err)
	}
	defer rows.Close()
	var out []store.BootstrapToken
	for rows.Next() {
		var t store.BootstrapToken
		if err := rows.Scan(&t.ID, &t.SID, &t.Hash, &t.ExpiresAt, &t.Status); err != nil {
			return nil, err
		}
		t.ExpiresAt = t.ExpiresAt.UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}
