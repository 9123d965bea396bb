package postgres_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/storetest"
	"github.com/soulstack/soulstack/internal/testdb"
)

func TestRunKeyMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testdb.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.RunKeyMigration(t, db,
		func(ctx context.Context, v int64) error { return postgres.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := postgres.Migrate(ctx, db); return err })
}

func TestSoulContactMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testdb.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.SoulContactMigration(t, db,
		func(ctx context.Context, v int64) error { return postgres.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := postgres.Migrate(ctx, db); return err })
}

func TestDeploymentMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testdb.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.DeploymentMigration(t, db,
		func(ctx context.Context, v int64) error { return postgres.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := postgres.Migrate(ctx, db); return err })
}

func TestSoulFiltersMigration(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testdb.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.SoulFiltersMigration(t, db, `SELECT indexname FROM pg_indexes WHERE tablename = 'souls'`,
		func(ctx context.Context, v int64) error { return postgres.MigrateTo(ctx, db, v) },
		func(ctx context.Context) error { _, err := postgres.Migrate(ctx, db); return err })
}
