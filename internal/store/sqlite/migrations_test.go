package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/store/storetest"
)

func TestRunKeyMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "keeper.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.RunKeyMigration(t, db,
		func(ctx context.Context, v int64) error { return sqlite.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := sqlite.Migrate(ctx, db); return err })
}

func TestSoulContactMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "keeper.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.SoulContactMigration(t, db,
		func(ctx context.Context, v int64) error { return sqlite.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := sqlite.Migrate(ctx, db); return err })
}

func TestDeploymentMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "keeper.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.DeploymentMigration(t, db,
		func(ctx context.Context, v int64) error { return sqlite.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := sqlite.Migrate(ctx, db); return err })
}

func TestSoulFiltersMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "keeper.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.SoulFiltersMigration(t, db, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'souls'`,
		func(ctx context.Context, v int64) error { return sqlite.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := sqlite.Migrate(ctx, db); return err })
}
