package sqlstore

import (
	"context"
	"fmt"

	"github.com/soulstack/soulstack/internal/store"
)

// Counts reads what the registries hold now, for the keeper's metrics:
// runs not finished by phase (those held by an approval apart), souls by
// project and status. Two grouped reads, whatever the registries' size.
func (s *Store) Counts(ctx context.Context) (_ store.Counts, err error) {
	defer s.translate(&err)
	c := store.Counts{Runs: map[string]int{}, Souls: map[store.SoulCountKey]int{}}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT CASE WHEN phase = ? AND id IN (SELECT run_id FROM run_approvals WHERE status = 'pending') THEN ? ELSE phase END, COUNT(*)
		FROM runs WHERE phase IN (?, ?) GROUP BY 1`), store.PhaseRunning, store.PhaseAwaitingApproval, store.PhasePending, store.PhaseRunning)
	if err != nil {
		return c, fmt.Errorf("count runs: %w", err)
	}
	for rows.Next() {
		var phase string
		var n int
		if err := rows.Scan(&phase, &n); err != nil {
			rows.Close()
			return c, fmt.Errorf("count runs: %w", err)
		}
		c.Runs[phase] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("count runs: %w", err)
	}
	rows, err = s.db.QueryContext(ctx, `SELECT project, status, COUNT(*) FROM souls GROUP BY project, status`)
	if err != nil {
		return c, fmt.Errorf("count souls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k store.SoulCountKey
		var n int
		if err := rows.Scan(&k.Project, &k.Status, &n); err != nil {
			return c, fmt.Errorf("count souls: %w", err)
		}
		c.Souls[k] = n
	}
	return c, rows.Err()
}
