package storetest

import (
	"context"
	"database/sql"
	"regexp"
	"testing"

	"github.com/soulstack/soulstack/internal/testdb"
)

var deploymentIDForm = regexp.MustCompile(`^kd-[0-9a-f]{24}$`)

// testDeploymentID: every database has one deployment id, which does not
// change (not by asking again, not by migrating again), and two databases
// have different ones.
func testDeploymentID(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	id, err := s.DeploymentID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !deploymentIDForm.MatchString(id) {
		t.Fatalf("deployment id %q is not of the form kd-<24 hex>", id)
	}
	if _, err := b.Migrate(ctx, s.DB()); err != nil {
		t.Fatal(err)
	}
	if again, err := s.DeploymentID(ctx); err != nil || again != id {
		t.Fatalf("deployment id after asking and migrating again = %q, %v; want %q", again, err, id)
	}
	var rows int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM keeper_deployment`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("keeper_deployment has %d rows, %v; want 1", rows, err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO keeper_deployment (id, deployment_id) VALUES (2, 'kd-another')`); err == nil {
		t.Fatal("a second deployment row was accepted")
	}
	other, err := b.Open(t).DeploymentID(ctx)
	if err != nil || other == id {
		t.Fatalf("another database's deployment id = %q, %v; want one different from %q", other, err, id)
	}
}

// DeploymentMigration checks migration 00010 (the keeper deployment id)
// on a database that upTo has migrated to version 8, as an older keeper
// left it: the registry it already holds survives, and after the migration
// it has one deployment id that a later migration run keeps. up applies
// every migration.
func DeploymentMigration(t *testing.T, db *sql.DB, upTo func(ctx context.Context, version int64) error, up func(ctx context.Context) error) {
	t.Helper()
	if err := upTo(ctx, 8); err != nil {
		t.Fatalf("migrate to version 8: %v", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO souls (sid, status, address, created_at, updated_at) VALUES ('old.local.test', 'active', '10.0.0.9', '2026-01-01 00:00:00', '2026-01-01 00:00:00')`); err != nil {
		t.Fatalf("insert a soul before the migration: %v", err)
	}
	if _, err := db.ExecContext(ctx, `SELECT deployment_id FROM keeper_deployment`); err == nil {
		t.Fatal("keeper_deployment exists before migration 00010")
	}
	if err := up(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	read := func() string {
		t.Helper()
		var id string
		if err := db.QueryRowContext(ctx, `SELECT deployment_id FROM keeper_deployment WHERE id = 1`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := read()
	if !deploymentIDForm.MatchString(id) {
		t.Fatalf("deployment id %q is not of the form kd-<24 hex>", id)
	}
	if err := up(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	if again := read(); again != id {
		t.Fatalf("deployment id changed from %q to %q", id, again)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM souls WHERE sid = 'old.local.test'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the soul made before the migration: %d, %v", n, err)
	}
}
