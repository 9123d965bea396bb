package keeper_test

import (
	"context"

	"github.com/soulstack/soulstack/internal/store/sqlite"
)

// tamper runs a statement on a stopped keeper's SQLite file.
func tamper(path, stmt string) error {
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.DB().Exec(stmt)
	return err
}
