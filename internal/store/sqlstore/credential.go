package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.CredentialStore = (*Store)(nil)

// CredentialPut stores or replaces a project's credential.
func (s *Store) CredentialPut(ctx context.Context, c store.Credential, actor store.Actor) (_ store.Credential, err error) {
	defer s.translate(&err)
	c.CreatedAt = s.stamp()
	c.CreatedBy = string(actor)
	err = s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		if err := s.projectExists(ctx, tx, c.Project, "credential", c.Name); err != nil {
			return record{}, err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM credentials WHERE project = ? AND name = ?`), c.Project, c.Name); err != nil {
			return record{}, fmt.Errorf("replace credential %q: %w", c.Name, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO credentials (project, name, sealed, created_at, created_by) VALUES (?, ?, ?, ?, ?)`),
			c.Project, c.Name, c.Sealed, c.CreatedAt, c.CreatedBy); err != nil {
			return record{}, fmt.Errorf("insert credential %q: %w", c.Name, err)
		}
		return record{action: "credential.put", object: "credential/" + c.Project + "/" + c.Name, project: c.Project,
			payload: map[string]any{"name": c.Name}}, nil
	})
	if err != nil {
		return store.Credential{}, err
	}
	c.Sealed = ""
	return c, nil
}

// CredentialGet returns one credential of project.
func (s *Store) CredentialGet(ctx context.Context, project, name string) (_ store.Credential, err error) {
	defer s.translate(&err)
	c := store.Credential{Project: project, Name: name}
	err = s.db.QueryRowContext(ctx, s.q(`SELECT sealed, created_at, created_by FROM credentials WHERE project = ? AND name = ?`), project, name).
		Scan(&c.Sealed, &c.CreatedAt, &c.CreatedBy)
	if err != nil {
		return store.Credential{}, notFound(err, "credential", name)
	}
	c.CreatedAt = c.CreatedAt.UTC()
	return c, nil
}

// CredentialList lists credentials without their values.
func (s *Store) CredentialList(ctx context.Context, project string) (_ []store.Credential, err error) {
	defer s.translate(&err)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT project, name, created_at, created_by FROM credentials WHERE ? = '' OR project = ? ORDER BY project, name`), project, project)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	defer rows.Close()
	out := []store.Credential{}
	for rows.Next() {
		var c store.Credential
		if err := rows.Scan(&c.Project, &c.Name, &c.CreatedAt, &c.CreatedBy); err != nil {
			return nil, fmt.Errorf("list credentials: %w", err)
		}
		c.CreatedAt = c.CreatedAt.UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// CredentialDelete deletes one credential of project.
func (s *Store) CredentialDelete(ctx context.Context, project, name string, actor store.Actor) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM credentials WHERE project = ? AND name = ?`), project, name)
		if err != nil {
			return record{}, fmt.Errorf("delete credential %q: %w", name, err)
		}
		if err := deleted(res, "credential", name); err != nil {
			return record{}, err
		}
		return record{action: "credential.deleted", object: "credential/" + project + "/" + name, project: project,
			payload: map[string]any{"name": name}}, nil
	})
}

// ProjectSSHKeyEnsure returns the project's key, storing k first when
// there is none.
func (s *Store) ProjectSSHKeyEnsure(ctx context.Context, k store.ProjectSSHKey) (_ store.ProjectSSHKey, err error) {
	defer s.translate(&err)
	get := func() (store.ProjectSSHKey, error) {
		got := store.ProjectSSHKey{Project: k.Project}
		err := s.db.QueryRowContext(ctx, s.q(`SELECT sealed, public_key, created_at FROM project_ssh_keys WHERE project = ?`), k.Project).
			Scan(&got.Sealed, &got.PublicKey, &got.CreatedAt)
		got.CreatedAt = got.CreatedAt.UTC()
		return got, err
	}
	got, err := get()
	if err == nil {
		return got, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.ProjectSSHKey{}, fmt.Errorf("read project %q's ssh key: %w", k.Project, err)
	}
	k.CreatedAt = s.stamp()
	err = s.mutate(ctx, store.ActorKeeper, func(tx *sql.Tx) (record, error) {
		if err := s.projectExists(ctx, tx, k.Project, "ssh key", k.Project); err != nil {
			return record{}, err
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM project_ssh_keys WHERE project = ?`), k.Project).Scan(&n); err != nil {
			return record{}, fmt.Errorf("read project %q's ssh key: %w", k.Project, err)
		}
		if n > 0 {
			return record{}, errNothingToDo
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO project_ssh_keys (project, sealed, public_key, created_at) VALUES (?, ?, ?, ?)`),
			k.Project, k.Sealed, k.PublicKey, k.CreatedAt); err != nil {
			return record{}, fmt.Errorf("insert project %q's ssh key: %w", k.Project, err)
		}
		return record{action: "project.ssh_key_created", object: "project/" + k.Project, project: k.Project,
			payload: map[string]any{"public_key": k.PublicKey}}, nil
	})
	if err != nil && !errors.Is(err, errNothingToDo) {
		if s.dialect.Classify(err) != UniqueViolation {
			return store.ProjectSSHKey{}, err
		}
	}
	return get()
}

// SecretFileMark records a file written from secret content.
func (s *Store) SecretFileMark(ctx context.Context, sid, path, runID string) (err error) {
	defer s.translate(&err)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM secret_files WHERE sid = ? AND path = ?`), sid, path); err != nil {
		return fmt.Errorf("mark %s on %s: %w", path, sid, err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO secret_files (sid, path, run_id, marked_at) VALUES (?, ?, ?, ?)`), sid, path, runID, s.stamp()); err != nil {
		return fmt.Errorf("mark %s on %s: %w", path, sid, err)
	}
	return tx.Commit()
}

// SecretFileClear forgets a mark.
func (s *Store) SecretFileClear(ctx context.Context, sid, path string) (err error) {
	defer s.translate(&err)
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM secret_files WHERE sid = ? AND path = ?`), sid, path); err != nil {
		return fmt.Errorf("clear %s on %s: %w", path, sid, err)
	}
	return nil
}

// SecretFileMarked returns the run that marked a file, or "".
func (s *Store) SecretFileMarked(ctx context.Context, sid, path string) (_ string, err error) {
	defer s.translate(&err)
	var run string
	err = s.db.QueryRowContext(ctx, s.q(`SELECT run_id FROM secret_files WHERE sid = ? AND path = ?`), sid, path).Scan(&run)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look up %s on %s: %w", path, sid, err)
	}
	return run, nil
}
