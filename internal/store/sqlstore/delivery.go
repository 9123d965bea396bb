package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/soulstack/soulstack/internal/store"
)

var _ store.DeliveryStore = (*Store)(nil)

// DeliveryCreate logs a queued delivery.
func (s *Store) DeliveryCreate(ctx context.Context, d store.Delivery) (err error) {
	defer s.translate(&err)
	now := s.stamp()
	_, err = s.db.ExecContext(ctx, s.q(`INSERT INTO webhook_deliveries (id, notification, event, object, project, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		d.ID, d.Notification, d.Event, d.Object, d.Project, store.DeliveryPending, now, now)
	if err != nil {
		return fmt.Errorf("log delivery %s: %w", d.ID, err)
	}
	return nil
}

// DeliveryAttempt records one attempt.
func (s *Store) DeliveryAttempt(ctx context.Context, id, status string, code int, errMsg string) (err error) {
	defer s.translate(&err)
	if len(errMsg) > 500 {
		errMsg = errMsg[:500] + "…"
	}
	_, err = s.db.ExecContext(ctx, s.q(`UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1, last_code = ?, last_error = ?, updated_at = ? WHERE id = ?`),
		status, code, errMsg, s.stamp(), id)
	if err != nil {
		return fmt.Errorf("log attempt of delivery %s: %w", id, err)
	}
	return nil
}

// Deliveries lists deliveries, newest first.
func (s *Store) Deliveries(ctx context.Context, p store.DeliveryListParams) (_ []store.Delivery, err error) {
	defer s.translate(&err)
	q := `SELECT id, notification, event, object, project, status, attempts, last_code, last_error, created_at, updated_at FROM webhook_deliveries WHERE 1 = 1`
	var args []any
	if p.Project != "" {
		q += ` AND project = ?`
		args = append(args, p.Project)
	}
	if p.Before != "" {
		q += ` AND id < ?`
		args = append(args, p.Before)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limitOf(p.Limit))
	rows, err := s.db.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	out := []store.Delivery{}
	for rows.Next() {
		var d store.Delivery
		var created, updated sql.NullTime
		if err := rows.Scan(&d.ID, &d.Notification, &d.Event, &d.Object, &d.Project, &d.Status, &d.Attempts, &d.LastCode, &d.LastError, &created, &updated); err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		d.CreatedAt, d.UpdatedAt = created.Time.UTC(), updated.Time.UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}
