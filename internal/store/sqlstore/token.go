package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

const tokenCols = `id, name, role, permissions, hash, created_by, created_at, expires_at, revoked_at, person_issuer, person_subject, person_name, project, person_groups`

func scanToken(row interface{ Scan(...any) error }) (store.APIToken, error) {
	var t store.APIToken
	var expires, revoked sql.NullTime
	var perms string
	var person store.Person
	var groups sql.NullString
	err := row.Scan(&t.ID, &t.Name, &t.Role, &perms, &t.Hash, &t.CreatedBy, &t.CreatedAt, &expires, &revoked, &person.Issuer, &person.Subject, &person.Name, &t.Project, &groups)
	if person.Issuer != "" {
		if groups.Valid {
			person.Groups = []string{}
			if jerr := json.Unmarshal([]byte(groups.String), &person.Groups); jerr != nil && err == nil {
				err = fmt.Errorf("token %s: its groups: %w", t.ID, jerr)
			}
		}
		t.Person = &person
	}
	if perms != "" {
		t.Permissions = strings.Split(perms, ",")
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt, t.RevokedAt = timePtr(expires), timePtr(revoked)
	return t, err
}

func (s *Store) insertToken(ctx context.Context, tx *sql.Tx, t store.APIToken) (record, error) {
	var person store.Person
	var groups sql.NullString
	if t.Person != nil {
		person = *t.Person
		g := person.Groups
		if g == nil {
			g = []string{} // [] when none, never null: null is a token from before groups were kept
		}
		b, err := json.Marshal(g)
		if err != nil {
			return record{}, err
		}
		groups = sql.NullString{String: string(b), Valid: true}
	}
	_, err := tx.ExecContext(ctx, s.q(`INSERT INTO api_tokens (`+tokenCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		t.ID, t.Name, t.Role, strings.Join(t.Permissions, ","), t.Hash, t.CreatedBy, t.CreatedAt, nullTime(t.ExpiresAt), nullTime(t.RevokedAt),
		person.Issuer, person.Subject, person.Name, t.Project, groups)
	if s.dialect.Classify(err) == UniqueViolation {
		return record{}, &store.Error{Err: store.ErrExists, Kind: "token", Key: t.ID}
	}
	if err != nil {
		return record{}, fmt.Errorf("insert token %q: %w", t.Name, err)
	}
	payload := map[string]any{"id": t.ID, "name": t.Name, "role": t.Role}
	if len(t.Permissions) > 0 {
		payload["permissions"] = t.Permissions
	}
	if t.ExpiresAt != nil {
		payload["expires_at"] = t.ExpiresAt.UTC()
	}
	if t.Person != nil {
		payload["person"] = map[string]any{"issuer": t.Person.Issuer, "subject": t.Person.Subject, "name": t.Person.Name}
	}
	if t.Project != "" {
		if err := s.projectExists(ctx, tx, t.Project, "token", t.Name); err != nil {
			return record{}, err
		}
	}
	return record{action: "token.created", object: "token/" + t.ID, payload: payload, project: t.Project}, nil
}

// TokenCreate stores a new API token's hash.
func (s *Store) TokenCreate(ctx context.Context, params store.TokenCreateParams) (_ store.APIToken, err error) {
	defer s.translate(&err)
	t := params.Token
	t.CreatedAt = s.stamp()
	t.CreatedBy = string(params.Actor)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) { return s.insertToken(ctx, tx, t) })
	if err != nil {
		return store.APIToken{}, err
	}
	return s.tokenGet(ctx, t.ID)
}

// TokenBootstrap stores the token only if the registry has no API token.
func (s *Store) TokenBootstrap(ctx context.Context, params store.TokenCreateParams) (_ bool, err error) {
	defer s.translate(&err)
	t := params.Token
	t.CreatedAt = s.stamp()
	t.CreatedBy = string(params.Actor)
	created := false
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_tokens`).Scan(&n); err != nil {
			return record{}, fmt.Errorf("count tokens: %w", err)
		}
		if n > 0 {
			return record{}, errNothingToDo
		}
		created = true
		return s.insertToken(ctx, tx, t)
	})
	if err == errNothingToDo {
		return false, nil
	}
	return created && err == nil, err
}

// TokenAdminBootstrap stores an admin token minted from the host when no
// active admin token exists (or with Force), in one transaction with the
// check, so that two concurrent bootstraps mint one token.
func (s *Store) TokenAdminBootstrap(ctx context.Context, params store.TokenAdminParams) (_ store.APIToken, err error) {
	defer s.translate(&err)
	t := params.Token
	t.Role = "admin"
	t.CreatedAt = s.stamp()
	t.CreatedBy = string(params.Actor)
	err = s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		var active []string
		rows, err := tx.QueryContext(ctx, s.q(`SELECT id FROM api_tokens WHERE role = 'admin' AND project = '' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) ORDER BY id`), t.CreatedAt)
		if err != nil {
			return record{}, fmt.Errorf("list active admin tokens: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return record{}, fmt.Errorf("list active admin tokens: %w", err)
			}
			active = append(active, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return record{}, fmt.Errorf("list active admin tokens: %w", err)
		}
		if len(active) > 0 && !params.Force {
			return record{}, &store.Error{Err: store.ErrActiveAdmin, Kind: "token", Key: active[0]}
		}
		rec, err := s.insertToken(ctx, tx, t)
		if err != nil {
			return record{}, err
		}
		payload, ok := rec.payload.(map[string]any)
		if !ok {
			payload = map[string]any{}
			rec.payload = payload
		}
		payload["bootstrap"] = true
		payload["force"] = params.Force
		if params.Force {
			payload["active_admins"] = active
		}
		return rec, nil
	})
	if err != nil {
		return store.APIToken{}, err
	}
	return s.tokenGet(ctx, t.ID)
}

// errNothingToDo rolls back a mutation that turned out to be unnecessary.
var errNothingToDo = fmt.Errorf("nothing to do")

func (s *Store) tokenGet(ctx context.Context, id string) (store.APIToken, error) {
	t, err := scanToken(s.db.QueryRowContext(ctx, s.q(`SELECT `+tokenCols+` FROM api_tokens WHERE id = ?`), id))
	if err != nil {
		return store.APIToken{}, notFound(err, "token", id)
	}
	return t, nil
}

// TokenGet returns the token with the given id, revoked or not.
func (s *Store) TokenGet(ctx context.Context, id string) (_ store.APIToken, err error) {
	defer s.translate(&err)
	return s.tokenGet(ctx, id)
}

// TokenGetByHash returns the token whose hash is hash, revoked or not.
func (s *Store) TokenGetByHash(ctx context.Context, hash string) (_ store.APIToken, err error) {
	defer s.translate(&err)
	t, err := scanToken(s.db.QueryRowContext(ctx, s.q(`SELECT `+tokenCols+` FROM api_tokens WHERE hash = ?`), hash))
	if err != nil {
		return store.APIToken{}, notFound(err, "token", "(by hash)")
	}
	return t, nil
}

// TokenList lists tokens by id, which sorts by creation time.
func (s *Store) TokenList(ctx context.Context, params store.ListParams) (_ []store.APIToken, err error) {
	defer s.translate(&err)
	cond, args := inProject(params.Project, "")
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+tokenCols+` FROM api_tokens WHERE id > ?`+cond+` ORDER BY id LIMIT ?`),
		append(append([]any{params.After}, args...), limitOf(params.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	out := []store.APIToken{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TokenRevoke marks a token revoked, and with it every active token it
// minted, directly or through tokens it minted: whoever held it could have
// kept them. It refuses a revocation that would leave no active
// keeper-wide admin token, which would lock every operator out.
func (s *Store) TokenRevoke(ctx context.Context, params store.DeleteParams) (err error) {
	defer s.translate(&err)
	now := s.stamp()
	return s.mutate(ctx, params.Actor, func(tx *sql.Tx) (record, error) {
		t, err := scanToken(tx.QueryRowContext(ctx, s.q(`SELECT `+tokenCols+` FROM api_tokens WHERE id = ?`), params.Key))
		if err != nil {
			return record{}, notFound(err, "token", params.Key)
		}
		if t.RevokedAt != nil {
			return record{}, &store.Error{Err: store.ErrRevoked, Kind: "token", Key: params.Key}
		}
		minted, err := s.mintedBy(ctx, tx, t.ID, now)
		if err != nil {
			return record{}, err
		}
		ids := append([]string{t.ID}, minted...)
		// Would it take the last active keeper-wide admin token?
		const activeAdmin = `role = 'admin' AND project = '' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`
		var admins, ending int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM api_tokens WHERE `+activeAdmin), now).Scan(&admins); err != nil {
			return record{}, fmt.Errorf("count admin tokens: %w", err)
		}
		for _, id := range ids {
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM api_tokens WHERE id = ? AND `+activeAdmin), id, now).Scan(&n); err != nil {
				return record{}, fmt.Errorf("count admin tokens: %w", err)
			}
			ending += n
		}
		if ending > 0 && ending >= admins {
			e := &store.Error{Err: store.ErrLastAdmin, Kind: "token", Key: params.Key}
			if len(minted) > 0 {
				e.Ref = fmt.Sprintf("with the %d token(s) it minted, which are revoked with it", len(minted))
			}
			return record{}, e
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE api_tokens SET revoked_at = ? WHERE id = ?`), now, id); err != nil {
				return record{}, fmt.Errorf("revoke token %q: %w", id, err)
			}
			// Its web UI sessions end with it.
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM web_sessions WHERE token_id = ?`), id); err != nil {
				return record{}, fmt.Errorf("end the sessions of token %q: %w", id, err)
			}
		}
		payload := map[string]any{"id": t.ID, "name": t.Name, "role": t.Role}
		if len(minted) > 0 {
			payload["minted_revoked"] = minted
		}
		return record{action: "token.revoked", object: "token/" + t.ID, payload: payload, project: t.Project}, nil
	})
}

// mintedBy lists the active tokens id minted, directly or through tokens
// it minted, in the order found.
func (s *Store) mintedBy(ctx context.Context, tx *sql.Tx, id string, now time.Time) ([]string, error) {
	var out []string
	seen := map[string]bool{id: true}
	for frontier := []string{id}; len(frontier) > 0 && len(out) < 100000; {
		var next []string
		for _, parent := range frontier {
			rows, err := tx.QueryContext(ctx, s.q(`SELECT id FROM api_tokens WHERE created_by = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) ORDER BY id`), parent, now)
			if err != nil {
				return nil, fmt.Errorf("tokens minted by %q: %w", parent, err)
			}
			for rows.Next() {
				var child string
				if err := rows.Scan(&child); err != nil {
					rows.Close()
					return nil, fmt.Errorf("tokens minted by %q: %w", parent, err)
				}
				if !seen[child] {
					seen[child] = true
					next = append(next, child)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
		out = append(out, next...)
		frontier = next
	}
	return out, nil
}
