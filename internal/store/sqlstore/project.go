package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/soulstack/soulstack/internal/store"
)

const projectCols = `name, description, created_at, created_by`

func scanProject(row interface{ Scan(...any) error }) (store.Project, error) {
	var p store.Project
	err := row.Scan(&p.Name, &p.Description, &p.CreatedAt, &p.CreatedBy)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

// ProjectCreate inserts a project; a taken name is ErrExists.
func (s *Store) ProjectCreate(ctx context.Context, params store.ProjectCreateParams) (_ store.Project, err error) {
	defer s.translate(&err)
	p := params.Project
	p.CreatedAt = s.stamp()
	p.CreatedBy = string(params.Actor)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO projects (`+projectCols+`) VALUES (?, ?, ?, ?)`), p.Name, p.Description, p.CreatedAt, p.CreatedBy)
		if s.dialect.Classify(err) == UniqueViolation {
			return record{}, &store.Error{Err: store.ErrExists, Kind: "project", Key: p.Name}
		}
		if err != nil {
			return record{}, fmt.Errorf("insert project %q: %w", p.Name, err)
		}
		return record{action: "project.created", object: "project/" + p.Name, payload: map[string]any{"name": p.Name, "description": p.Description}}, nil
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
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM projects WHERE name = ?`), params.Key)
		if err != nil {
			return record{}, fmt.Errorf("delete project %q: %w", params.Key, err)
		}
		if err := deleted(res, "project", params.Key); err != nil {
			return record{}, err
		}
		return record{action: "project.deleted", object: "project/" + params.Key, payload: map[string]any{"name": params.Key}}, nil
	})
}
