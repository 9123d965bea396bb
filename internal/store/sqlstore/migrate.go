package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

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
	// A database migrated by a newer keeper has versions this one does
	// not know, which goose passes over in silence: refuse it rather than
	// read and write a schema this code was not written for.
	src := p.ListSources()
	if db, err := p.GetDBVersion(ctx); err != nil {
		return nil, fmt.Errorf("%s schema version: %w", name, err)
	} else if len(src) > 0 && db > src[len(src)-1].Version {
		return nil, &SchemaNewerError{Database: db, Keeper: src[len(src)-1].Version}
	}
	var applied []int64
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// CodeSchemaNewer is the code of a SchemaNewerError.
const CodeSchemaNewer = "store.schema_newer"

// SchemaNewerError is a database whose schema a newer keeper migrated:
// this keeper does not open it (upgrade this keeper first).
type SchemaNewerError struct {
	Database, Keeper int64
}

func (e *SchemaNewerError) Error() string {
	return fmt.Sprintf("%s: the database is at schema version %d, newer than this keeper's %d: it was migrated by a newer keeper; upgrade this keeper to open it", CodeSchemaNewer, e.Database, e.Keeper)
}

// SchemaVersion is the newest schema version migrated into the database
// (goose's version table).
func (s *Store) SchemaVersion(ctx context.Context) (v int64, err error) {
	defer s.translate(&err)
	err = s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version_id), 0) FROM goose_db_version`).Scan(&v)
	return v, err
}

// MigrateTo applies a backend's migrations up to and including version:
// a database as a keeper of that schema left it (upgrade tests build
// their fixtures this way).
func MigrateTo(ctx context.Context, db *sql.DB, dialect goose.Dialect, migrations fs.FS, dir string, version int64) error {
	sub, err := fs.Sub(migrations, dir)
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(dialect, db, sub)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, version)
	return err
}

// Versions lists a backend's migration versions (the numbers its .sql
// files start with), in order.
func Versions(migrations fs.FS, dir string) ([]int64, error) {
	ents, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range ents {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}
