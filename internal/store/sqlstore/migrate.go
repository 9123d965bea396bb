package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// Migrate applies a backend's embedded migrations (the .sql files of dir
// in migrations) to db with goose, and returns the versions it applied,
// none when the schema was current. name names the backend in errors.
func Migrate(ctx context.Context, db *sql.DB, dialect goose.Dialect, name string, migrations fs.FS, dir string) ([]int64, error) {
	sub, err := fs.Sub(migrations, dir)
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(dialect, db, sub)
	if err != nil {
		return nil, fmt.Errorf("%s migrations: %w", name, err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply %s migrations: %w", name, err)
	}
	var applied []int64
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}
