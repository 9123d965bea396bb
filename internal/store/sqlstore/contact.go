package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// errUnchanged ends a mutation that turned out to change nothing: its
// transaction rolls back and no audit event is written.
var errUnchanged = errors.New("unchanged")

// seenBatch bounds the SIDs of one last_seen_at statement (placeholders).
const seenBatch = 500

// SoulContact records what a step learned about reaching souls. The common
// case, active souls reached again, is one UPDATE per step with no audit
// event; only status changes take a transaction with the audit chain.
func (s *Store) SoulContact(ctx context.Context, p store.SoulContactParams) (_ []store.SoulTransition, err error) {
	defer s.translate(&err)
	var out []store.SoulTransition
	if len(p.Reached) > 0 {
		at := s.stamp()
		seen, err := s.seenActive(ctx, p.Reached, at)
		if err != nil {
			return out, err
		}
		for _, sid := range p.Reached {
			if seen[sid] {
				continue
			}
			tr, err := s.soulTransition(ctx, p, sid, store.SoulActive, at, "", "")
			if err != nil {
				return out, err
			}
			if tr != nil {
				out = append(out, *tr)
			}
		}
	}
	for _, u := range p.Unreachable {
		tr, err := s.soulTransition(ctx, p, u.SID, store.SoulUnreachable, s.stamp(), u.Code, u.Error)
		if err != nil {
			return out, err
		}
		if tr != nil {
			out = append(out, *tr)
		}
	}
	for sid, x := range p.Executors {
		if _, err := s.db.ExecContext(ctx, s.q(`UPDATE souls SET executor = ? WHERE sid = ? AND executor <> ?`), x, sid, x); err != nil {
			return out, fmt.Errorf("record how soul %q runs commands: %w", sid, err)
		}
	}
	return out, nil
}

// seenActive advances last_seen_at of the active souls among sids and
// returns which they were.
func (s *Store) seenActive(ctx context.Context, sids []string, at time.Time) (map[string]bool, error) {
	seen := make(map[string]bool, len(sids))
	for len(sids) > 0 {
		n := min(len(sids), seenBatch)
		batch := sids[:n]
		sids = sids[n:]
		args := make([]any, 0, n+2)
		args = append(args, at, store.SoulActive)
		for _, sid := range batch {
			args = append(args, sid)
		}
		q := `UPDATE souls SET last_seen_at = ? WHERE status = ? AND sid IN (?` + strings.Repeat(`, ?`, n-1) + `) RETURNING sid`
		rows, err := s.db.QueryContext(ctx, s.q(q), args...)
		if err != nil {
			return nil, fmt.Errorf("record contact with souls: %w", err)
		}
		for rows.Next() {
			var sid string
			if err := rows.Scan(&sid); err != nil {
				rows.Close()
				return nil, fmt.Errorf("record contact with souls: %w", err)
			}
			seen[sid] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("record contact with souls: %w", err)
		}
	}
	return seen, nil
}

// soulTransition moves one soul to status to (active or unreachable) with
// its audit event, unless it is already there, destroyed or gone; then it
// returns nil.
func (s *Store) soulTransition(ctx context.Context, p store.SoulContactParams, sid, to string, at time.Time, code, msg string) (*store.SoulTransition, error) {
	actor := p.Actor
	if actor == "" {
		actor = store.ActorKeeper
	}
	var tr *store.SoulTransition
	err := s.mutate(ctx, actor, func(tx *sql.Tx) (record, error) {
		var from string
		err := tx.QueryRowContext(ctx, s.q(`SELECT status FROM souls WHERE sid = ?`), sid).Scan(&from)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && (from == to || from == store.SoulDestroyed)) {
			return record{}, errUnchanged
		}
		if err != nil {
			return record{}, fmt.Errorf("soul %q: %w", sid, err)
		}
		payload := map[string]any{"sid": sid, "from": from, "to": to, "run_id": p.RunID}
		action := "soul.activated"
		if to == store.SoulActive {
			_, err = tx.ExecContext(ctx, s.q(`UPDATE souls SET status = ?, last_seen_at = ?, last_error = '', updated_at = ? WHERE sid = ? AND status = ?`), to, at, at, sid, from)
		} else {
			action = "soul.unreachable"
			payload["code"], payload["error"] = code, msg
			_, err = tx.ExecContext(ctx, s.q(`UPDATE souls SET status = ?, last_error = ?, updated_at = ? WHERE sid = ? AND status = ?`), to, msg, at, sid, from)
		}
		if err != nil {
			return record{}, fmt.Errorf("soul %q: set status %s: %w", sid, to, err)
		}
		tr = &store.SoulTransition{SID: sid, From: from, To: to, At: at}
		return record{action: action, object: "soul/" + sid, payload: payload}, nil
	})
	if errors.Is(err, errUnchanged) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return tr, nil
}
