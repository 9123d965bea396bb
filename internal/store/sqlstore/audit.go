package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/store"
)

const auditCols = `seq, at, actor_aid, action, object, payload, prev_hash, hash`

func scanEvent(row interface{ Scan(...any) error }) (audit.Event, error) {
	var e audit.Event
	err := row.Scan(&e.Seq, &e.At, &e.ActorAID, &e.Action, &e.Object, &e.Payload, &e.PrevHash, &e.Hash)
	e.At = e.At.UTC()
	return e, err
}

// AuditList returns audit events after AfterSeq in sequence order.
func (s *Store) AuditList(ctx context.Context, params store.AuditListParams) (_ []audit.Event, err error) {
	defer s.translate(&err)
	cond, args := inProject(params.Project, "")
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+auditCols+` FROM audit_events WHERE seq > ?`+cond+` ORDER BY seq LIMIT ?`),
		append(append([]any{params.AfterSeq}, args...), limitOf(params.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	defer rows.Close()
	out := []audit.Event{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list audit events: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// AuditScan reads the head and every event in one read-only snapshot.
func (s *Store) AuditScan(ctx context.Context, fn func(audit.Event) error) (_ audit.Head, err error) {
	defer s.translate(&err)
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: s.dialect.SnapshotIsolation})
	if err != nil {
		return audit.Head{}, fmt.Errorf("begin audit scan: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	head, err := readHead(ctx, tx)
	if err != nil {
		return head, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+auditCols+` FROM audit_events ORDER BY seq`)
	if err != nil {
		return head, fmt.Errorf("scan audit events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return head, fmt.Errorf("scan audit events: %w", err)
		}
		if err := fn(e); err != nil {
			return head, err
		}
	}
	return head, rows.Err()
}

// AuditHead returns the chain head as the database records it.
func (s *Store) AuditHead(ctx context.Context) (_ audit.Head, err error) {
	defer s.translate(&err)
	return readHead(ctx, s.db)
}

func readHead(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (audit.Head, error) {
	var head audit.Head
	err := q.QueryRowContext(ctx, `SELECT seq, hash, keyed_from FROM audit_head WHERE id = 1`).Scan(&head.Seq, &head.Hash, &head.KeyedFrom)
	if errors.Is(err, sql.ErrNoRows) {
		return audit.Head{Missing: true}, nil
	}
	if err != nil {
		return head, fmt.Errorf("read audit head: %w", err)
	}
	return head, nil
}

// AuditRecord appends an event that goes with no registry change.
func (s *Store) AuditRecord(ctx context.Context, p store.AuditParams) (err error) {
	defer s.translate(&err)
	return s.mutate(ctx, p.Actor, func(*sql.Tx) (record, error) {
		return record{action: p.Action, object: p.Object, payload: p.Payload, project: p.Project}, nil
	})
}
