package storetest

import (
	"context"
	"database/sql"
	"testing"
)

// RunKeyMigration checks migration 00005 (re-run keys scoped to the
// creating token) on a database that upTo has migrated to version 4: runs
// with their steps, targets and events made before it survive it, and after
// it two tokens may use one key while one token still may not use a key
// twice. up applies every migration.
func RunKeyMigration(t *testing.T, db *sql.DB, upTo func(ctx context.Context, version int64) error, up func(ctx context.Context) error) {
	t.Helper()
	if err := upTo(ctx, 4); err != nil {
		t.Fatalf("migrate to version 4: %v", err)
	}
	insertRun := func(id, key, createdBy string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO runs (id, key, digest, name, scenario, input_sealed, phase, timeout_ms, created_by, created_at)
			VALUES ('`+id+`', '`+key+`', 'd', 'n', 'steps: []', 'sealed', 'Succeeded', 1000, '`+createdBy+`', '2026-01-01 00:00:00')`)
		return err
	}
	if err := insertRun("run_old", "k", "tok_a"); err != nil {
		t.Fatalf("insert a run before the migration: %v", err)
	}
	for _, q := range []string{
		`INSERT INTO run_steps (run_id, step_index, name, module, status) VALUES ('run_old', 0, 's', 'core.command.ran', 'ok')`,
		`INSERT INTO run_targets (run_id, step_index, sid, status) VALUES ('run_old', 0, 'web-1', 'ok')`,
		`INSERT INTO run_events (run_id, seq, at, kind) VALUES ('run_old', 1, '2026-01-01 00:00:00', 'run.phase')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("insert before the migration: %v", err)
		}
	}
	if err := insertRun("run_dup", "k", "tok_b"); err == nil {
		t.Fatal("before the migration a key was unique over all tokens, but a second token's insert worked")
	}
	if err := up(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	for _, q := range []string{
		`SELECT COUNT(*) FROM runs WHERE id = 'run_old' AND key = 'k' AND created_by = 'tok_a'`,
		`SELECT COUNT(*) FROM run_steps WHERE run_id = 'run_old'`,
		`SELECT COUNT(*) FROM run_targets WHERE run_id = 'run_old'`,
		`SELECT COUNT(*) FROM run_events WHERE run_id = 'run_old'`,
	} {
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil || n != 1 {
			t.Fatalf("after the migration %s = %d, %v; want 1", q, n, err)
		}
	}
	if err := insertRun("run_b", "k", "tok_b"); err != nil {
		t.Fatalf("another token's run with the same key after the migration: %v", err)
	}
	if err := insertRun("run_a2", "k", "tok_a"); err == nil {
		t.Fatal("one token used one key twice after the migration")
	}
	// The child tables still cascade from runs.
	if _, err := db.ExecContext(ctx, `DELETE FROM runs WHERE id = 'run_old'`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM run_steps) + (SELECT COUNT(*) FROM run_targets) + (SELECT COUNT(*) FROM run_events)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("child rows left after deleting their run: %d, %v", n, err)
	}
}
