package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/store"
)

const projectCols = `name, description, created_at, created_by, quota_vms, quota_vcpus, quota_memory_mb, quota_runs`

func scanProject(row interface{ Scan(...any) error }) (store.Project, error) {
	var p store.Project
	err := row.Scan(&p.Name, &p.Description, &p.CreatedAt, &p.CreatedBy, &p.Quota.VMs, &p.Quota.VCPUs, &p.Quota.MemoryMB, &p.Quota.Runs)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

// ProjectCreate inserts a project; a taken name is ErrExists, a deleted
// project's name ErrRetired.
func (s *Store) ProjectCreate(ctx context.Context, params store.ProjectCreateParams) (_ store.Project, err error) {
	defer s.translate(&err)
	p := params.Project
	p.CreatedAt = s.stamp()
	p.CreatedBy = string(params.Actor)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		var retired int
		err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM retired_projects WHERE name = ?`), p.Name).Scan(&retired)
		if err != nil {
			return record{}, fmt.Errorf("insert project %q: %w", p.Name, err)
		}
		if retired > 0 {
			return record{}, &store.Error{Err: store.ErrRetired, Kind: "project", Key: p.Name}
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO projects (`+projectCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), p.Name, p.Description, p.CreatedAt, p.CreatedBy,
			p.Quota.VMs, p.Quota.VCPUs, p.Quota.MemoryMB, p.Quota.Runs)
		if s.dialect.Classify(err) == UniqueViolation {
			return record{}, &store.Error{Err: store.ErrExists, Kind: "project", Key: p.Name}
		}
		if err != nil {
			return record{}, fmt.Errorf("insert project %q: %w", p.Name, err)
		}
		return record{action: "project.created", object: "project/" + p.Name, payload: map[string]any{"name": p.Name, "description": p.Description, "quota": p.Quota}}, nil
	})
	if err != nil {
		return store.Project{}, err
	}
	return s.ProjectGet(ctx, p.Name)
}

// ProjectGet returns the project called name.
func (s *Store) ProjectGet(ctx context.Context, name string) (_ store.Project, err error) {
	defer s.translate(&err)
	p, err := scanProject(s.db.QueryRowContext(ctx, s.q(`SELECT `+projectCols+` FROM projects WHERE name = ?`), name))
	if err != nil {
		return store.Project{}, notFound(err, "project", name)
	}
	return p, nil
}

// ProjectList lists projects by name.
func (s *Store) ProjectList(ctx context.Context, params store.ListParams) (_ []store.Project, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+projectCols+` FROM projects WHERE name > ? ORDER BY name LIMIT ?`), params.After, limitOf(params.Limit))
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	defer rows.Close()
	out := []store.Project{}
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, fmt.Errorf("list projects: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// ProjectDelete deletes a project; the default project stays (ErrInUse).
func (s *Store) ProjectDelete(ctx context.Context, params store.DeleteParams) (err error) {
	defer s.translate(&err)
	if params.Key == store.DefaultProject {
		return &store.Error{Err: store.ErrInUse, Kind: "project", Key: params.Key}
	}
	return s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		_, err := s.lockProject(ctx, tx, params.Key, "project", params.Key)
		if errors.Is(err, store.ErrReferenceMissing) {
			return record{}, &store.Error{Err: store.ErrNotFound, Kind: "project", Key: params.Key}
		}
		if err != nil {
			return record{}, err
		}
		held, err := s.projectHolds(ctx, tx, params.Key)
		if err != nil {
			return record{}, err
		}
		if len(held) > 0 {
			return record{}, &store.Error{Err: store.ErrInUse, Kind: "project", Key: params.Key, Ref: strings.Join(held, ", ")}
		}
		for _, table := range []string{"credentials", "project_ssh_keys"} {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM `+table+` WHERE project = ?`), params.Key); err != nil {
				return record{}, fmt.Errorf("delete project %q's %s: %w", params.Key, table, err)
			}
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM projects WHERE name = ?`), params.Key)
		if err != nil {
			return record{}, fmt.Errorf("delete project %q: %w", params.Key, err)
		}
		if err := deleted(res, "project", params.Key); err != nil {
			return record{}, err
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO retired_projects (name, deleted_at, deleted_by) VALUES (?, ?, ?)`),
			params.Key, s.stamp(), string(params.Actor)); err != nil {
			return record{}, fmt.Errorf("retire the name of project %q: %w", params.Key, err)
		}
		return record{action: "project.deleted", object: "project/" + params.Key, payload: map[string]any{"name": params.Key}}, nil
	})
}

// projectHolds names up to three of the objects that keep project from
// being deleted: providers, profiles, souls not destroyed, runs not
// finished and active tokens.
func (s *Store) projectHolds(ctx context.Context, tx *sql.Tx, project string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, s.q(`SELECT 'provider ' || name FROM providers WHERE project = ?
		UNION ALL SELECT 'profile ' || name FROM profiles WHERE project = ?
		UNION ALL SELECT 'soul ' || sid FROM souls WHERE project = ? AND status <> ?
		UNION ALL SELECT 'run ' || id FROM runs WHERE project = ? AND phase IN (?, ?)
		UNION ALL SELECT 'token ' || id FROM api_tokens WHERE project = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)
		ORDER BY 1 LIMIT 4`),
		project, project, project, store.SoulDestroyed, project, store.PhasePending, store.PhaseRunning, project, s.stamp())
	if err != nil {
		return nil, fmt.Errorf("what project %q holds: %w", project, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("what project %q holds: %w", project, err)
		}
		names = append(names, n)
	}
	if len(names) > 3 {
		names = append(names[:3], "…")
	}
	return names, rows.Err()
}

// ProjectSetQuota replaces a project's quota.
func (s *Store) ProjectSetQuota(ctx context.Context, name string, q store.Quota, actor store.Actor) (_ store.Project, err error) {
	defer s.translate(&err)
	err = s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE projects SET quota_vms = ?, quota_vcpus = ?, quota_memory_mb = ?, quota_runs = ? WHERE name = ?`),
			q.VMs, q.VCPUs, q.MemoryMB, q.Runs, name)
		if err != nil {
			return record{}, fmt.Errorf("set the quota of project %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return record{}, &store.Error{Err: store.ErrNotFound, Kind: "project", Key: name}
		}
		return record{action: "project.quota_set", object: "project/" + name, payload: map[string]any{"name": name, "quota": q}, project: name}, nil
	})
	if err != nil {
		return store.Project{}, err
	}
	return s.ProjectGet(ctx, name)
}

const bindingCols = `project, kind, subject, role, created_at, created_by`

// BindingPut inserts or replaces a role binding.
func (s *Store) BindingPut(ctx context.Context, b store.Binding, actor store.Actor) (_ store.Binding, err error) {
	defer s.translate(&err)
	b.CreatedAt, b.CreatedBy = s.stamp(), string(actor)
	err = s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		if err := s.projectExists(ctx, tx, b.Project, "binding", b.Kind+" "+b.Subject); err != nil {
			return record{}, err
		}
		var prev string
		err := tx.QueryRowContext(ctx, s.q(`SELECT role FROM project_bindings WHERE project = ? AND kind = ? AND subject = ?`), b.Project, b.Kind, b.Subject).Scan(&prev)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO project_bindings (`+bindingCols+`) VALUES (?, ?, ?, ?, ?, ?)`), b.Project, b.Kind, b.Subject, b.Role, b.CreatedAt, b.CreatedBy)
		case err == nil:
			_, err = tx.ExecContext(ctx, s.q(`UPDATE project_bindings SET role = ?, created_at = ?, created_by = ? WHERE project = ? AND kind = ? AND subject = ?`),
				b.Role, b.CreatedAt, b.CreatedBy, b.Project, b.Kind, b.Subject)
		}
		if err != nil {
			return record{}, fmt.Errorf("bind %s %q in project %q: %w", b.Kind, b.Subject, b.Project, err)
		}
		payload := map[string]any{"kind": b.Kind, "subject": b.Subject, "role": b.Role}
		if prev != "" {
			payload["previous_role"] = prev
		}
		return record{action: "binding.put", object: "project/" + b.Project, payload: payload, project: b.Project}, nil
	})
	return b, err
}

// BindingDelete removes a role binding.
func (s *Store) BindingDelete(ctx context.Context, b store.Binding, actor store.Actor) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM project_bindings WHERE project = ? AND kind = ? AND subject = ?`), b.Project, b.Kind, b.Subject)
		if err != nil {
			return record{}, fmt.Errorf("unbind %s %q in project %q: %w", b.Kind, b.Subject, b.Project, err)
		}
		if err := deleted(res, "binding", b.Kind+" "+b.Subject); err != nil {
			return record{}, err
		}
		return record{action: "binding.deleted", object: "project/" + b.Project, payload: map[string]any{"kind": b.Kind, "subject": b.Subject}, project: b.Project}, nil
	})
}

// Bindings lists role bindings by project, kind and subject.
func (s *Store) Bindings(ctx context.Context, project string) (_ []store.Binding, err error) {
	defer s.translate(&err)
	cond, args := inProject(project, "")
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+bindingCols+` FROM project_bindings WHERE 1 = 1`+cond+` ORDER BY project, kind, subject`), args...)
	if err != nil {
		return nil, fmt.Errorf("list bindings: %w", err)
	}
	defer rows.Close()
	out := []store.Binding{}
	for rows.Next() {
		var b store.Binding
		if err := rows.Scan(&b.Project, &b.Kind, &b.Subject, &b.Role, &b.CreatedAt, &b.CreatedBy); err != nil {
			return nil, fmt.Errorf("list bindings: %w", err)
		}
		b.CreatedAt = b.CreatedAt.UTC()
		out = append(out, b)
	}
	return out, rows.Err()
}

// ShareAdd shares a provider or profile with a project; sharing it again
// changes nothing but is audited.
func (s *Store) ShareAdd(ctx context.Context, sh store.Share, actor store.Actor) (err error) {
	defer s.translate(&err)
	table := sh.Kind + "s"
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		owner, err := s.objectProject(ctx, tx, table, "name", sh.Name)
		if err != nil {
			return record{}, notFound(err, sh.Kind, sh.Name)
		}
		if err := s.projectExists(ctx, tx, sh.Project, sh.Kind, sh.Name); err != nil {
			return record{}, err
		}
		if owner == sh.Project {
			return record{}, &store.Error{Err: store.ErrExists, Kind: sh.Kind, Key: sh.Name, Ref: "project " + sh.Project + " owns it"}
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM project_shares WHERE kind = ? AND name = ? AND project = ?`), sh.Kind, sh.Name, sh.Project).Scan(&n); err != nil {
			return record{}, fmt.Errorf("look up share: %w", err)
		}
		if n == 0 {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO project_shares (kind, name, project, created_at, created_by) VALUES (?, ?, ?, ?, ?)`),
				sh.Kind, sh.Name, sh.Project, s.stamp(), string(actor)); err != nil {
				return record{}, fmt.Errorf("share %s %q: %w", sh.Kind, sh.Name, err)
			}
		}
		return record{action: "share.added", object: sh.Kind + "/" + sh.Name, payload: map[string]any{"kind": sh.Kind, "name": sh.Name, "with": sh.Project}, project: owner}, nil
	})
}

// ShareRemove takes a share back; ErrNotFound when there is none.
func (s *Store) ShareRemove(ctx context.Context, sh store.Share, actor store.Actor) (err error) {
	defer s.translate(&err)
	table := sh.Kind + "s"
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		owner, err := s.objectProject(ctx, tx, table, "name", sh.Name)
		if err != nil {
			return record{}, notFound(err, sh.Kind, sh.Name)
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM project_shares WHERE kind = ? AND name = ? AND project = ?`), sh.Kind, sh.Name, sh.Project)
		if err != nil {
			return record{}, fmt.Errorf("unshare %s %q: %w", sh.Kind, sh.Name, err)
		}
		if err := deleted(res, "share", sh.Kind+" "+sh.Name+" with "+sh.Project); err != nil {
			return record{}, err
		}
		return record{action: "share.removed", object: sh.Kind + "/" + sh.Name, payload: map[string]any{"kind": sh.Kind, "name": sh.Name, "with": sh.Project}, project: owner}, nil
	})
}
