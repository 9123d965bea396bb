package sqlstore

import (
	"context"
	"fmt"
)

// DeploymentID returns the keeper deployment's id, which migration 00010
// made once for this database.
func (s *Store) DeploymentID(ctx context.Context) (_ string, err error) {
	defer s.translate(&err)
	var id string
	if err := s.db.QueryRowContext(ctx, `SELECT deployment_id FROM keeper_deployment WHERE id = 1`).Scan(&id); err != nil {
		return "", fmt.Errorf("read the keeper deployment id: %w", err)
	}
	return id, nil
}
