package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// SessionCreate stores a web UI session with session.created, and deletes
// the sessions that have expired.
func (s *Store) SessionCreate(ctx context.Context, ws store.WebSession) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, store.Actor(ws.TokenID), func(tx *sql.Tx) (record, error) {
		// Sessions past their expiry go as new ones come: the table holds
		// at most the sessions of the last SessionTTL.
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM web_sessions WHERE expires_at <= ?`), ws.CreatedAt.UTC()); err != nil {
			return record{}, fmt.Errorf("delete expired sessions: %w", err)
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO web_sessions (hash, key_hash, token_id, created_at, expires_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?)`),
			ws.Hash, ws.KeyHash, ws.TokenID, ws.CreatedAt.UTC(), ws.ExpiresAt.UTC(), ws.LastSeenAt.UTC())
		if s.dialect.Classify(err) == ForeignKeyViolation {
			return record{}, &store.Error{Err: store.ErrNotFound, Kind: "token", Key: ws.TokenID}
		}
		if err != nil {
			return record{}, fmt.Errorf("store session: %w", err)
		}
		return record{action: "session.created", object: "token/" + ws.TokenID, payload: map[string]any{
			"token_id": ws.TokenID, "expires_at": ws.ExpiresAt.UTC().Format(time.RFC3339)}}, nil
	})
}

// SessionGet returns the session whose id hashes to hash.
func (s *Store) SessionGet(ctx context.Context, hash string) (_ store.WebSession, err error) {
	defer s.translate(&err)
	var ws store.WebSession
	err = s.db.QueryRowContext(ctx, s.q(`SELECT hash, key_hash, token_id, created_at, expires_at, last_seen_at FROM web_sessions WHERE hash = ?`), hash).
		Scan(&ws.Hash, &ws.KeyHash, &ws.TokenID, &ws.CreatedAt, &ws.ExpiresAt, &ws.LastSeenAt)
	if errors.Is(err, sql.ErrNoRows) {
		return ws, &store.Error{Err: store.ErrNotFound, Kind: "session", Key: "(hidden)"}
	}
	if err != nil {
		return ws, fmt.Errorf("look up session: %w", err)
	}
	ws.CreatedAt, ws.ExpiresAt, ws.LastSeenAt = ws.CreatedAt.UTC(), ws.ExpiresAt.UTC(), ws.LastSeenAt.UTC()
	return ws, nil
}

// SessionTouch advances a session's last use.
func (s *Store) SessionTouch(ctx context.Context, hash string, at time.Time) (err error) {
	defer s.translate(&err)
	_, err = s.db.ExecContext(ctx, s.q(`UPDATE web_sessions SET last_seen_at = ? WHERE hash = ?`), at.UTC(), hash)
	return err
}

// SessionDelete deletes a session with session.deleted.
func (s *Store) SessionDelete(ctx context.Context, hash string, actor store.Actor) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		var tokenID string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT token_id FROM web_sessions WHERE hash = ?`), hash).Scan(&tokenID); err != nil {
			return record{}, notFound(err, "session", "(hidden)")
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM web_sessions WHERE hash = ?`), hash); err != nil {
			return record{}, fmt.Errorf("delete session: %w", err)
		}
		return record{action: "session.deleted", object: "token/" + tokenID, payload: map[string]any{"token_id": tokenID}}, nil
	})
}

// OIDCCodePut stores a one-time login code and deletes the expired ones.
// No audit: the code is a step of a sign-in, whose token.created is.
func (s *Store) OIDCCodePut(ctx context.Context, hash, sealed string, expires time.Time) (err error) {
	defer s.translate(&err)
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM oidc_codes WHERE expires_at <= ?`), s.stamp()); err != nil {
		return fmt.Errorf("delete expired login codes: %w", err)
	}
	_, err = s.db.ExecContext(ctx, s.q(`INSERT INTO oidc_codes (hash, sealed, expires_at) VALUES (?, ?, ?)`), hash, sealed, expires.UTC())
	return err
}

// OIDCCodeTake deletes a live code and returns what it stood for; the
// DELETE decides, so that two exchanges of one code get it once.
func (s *Store) OIDCCodeTake(ctx context.Context, hash string, now time.Time) (_ string, err error) {
	defer s.translate(&err)
	var sealed string
	err = s.db.QueryRowContext(ctx, s.q(`DELETE FROM oidc_codes WHERE hash = ? AND expires_at > ? RETURNING sealed`), hash, now.UTC()).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", &store.Error{Err: store.ErrNotFound, Kind: "login code", Key: "(hidden)"}
	}
	return sealed, err
}
