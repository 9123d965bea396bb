package keeper_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestRefusesNewerSchema: a database a newer keeper migrated (a schema
// version this keeper does not know) is refused at start and by keeper
// migrate with store.schema_newer and exit status 78, on SQLite and PostgreSQL, and nothing
// is written to it: the older keeper of a fleet sharing one PostgreSQL
// does not start on it.
func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			k := newAuditKeeper(t, backend)
			p := k.serve()
			c := k.client(p)
			if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "a", Driver: "local"}); err != nil {
				t.Fatal(err)
			}
			p.Interrupt(t)
			db := k.db()
			var head int64
			if err := db.QueryRow(`SELECT seq FROM audit_head WHERE id = 1`).Scan(&head); err != nil {
				t.Fatal(err)
			}
			migrateAhead(k, db)
			for _, args := range [][]string{{"migrate"}, {"serve", "--listen", "127.0.0.1:0"}} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				out, err := exec.CommandContext(ctx, keeperBin, append(args, k.flags()...)...).CombinedOutput()
				cancel()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 78 || !strings.Contains(string(out), "store.schema_newer") || !strings.Contains(string(out), "schema version 9999") {
					t.Fatalf("keeper %s on a newer schema: %v\n%s", args[0], err, out)
				}
			}
			var after int64
			if err := db.QueryRow(`SELECT seq FROM audit_head WHERE id = 1`).Scan(&after); err != nil || after != head {
				t.Fatalf("the refused keeper wrote to the database: audit head %d -> %d (%v)", head, after, err)
			}
		})
	}
}

// TestServingKeeperStopsOnNewerSchema: a keeper that serves while a newer
// keeper migrates the shared database (a schema version it does not
// know, written under it) notices within seconds, claims no run any more,
// finishes the step in flight, hands its run back and exits with status
// 78 (store.schema_newer), which the unit does not restart. A keeper that
// knows the schema (here: the same binary once the version is taken
// away again, standing in for the newer one) resumes the run at its next
// step; the step in flight ran once.
func TestServingKeeperStopsOnNewerSchema(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			k := newAuditKeeper(t, backend)
			p := k.serve()
			c := k.client(p)
			addSoul(t, c, "h.local.test", sshtest.Start(t, sshtest.Options{}))
			count := filepath.Join(t.TempDir(), "count")
			sc := `steps:
  - name: long
    on: h.local.test
    module: core.command.ran
    params: {cmd: "echo start >> ` + count + `; sleep 5; echo done >> ` + count + `"}
  - name: after
    on: h.local.test
    module: core.command.ran
    params: {cmd: "echo after >> ` + count + `"}
`
			ctx := context.Background()
			run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, c, run.ID, "the long step to start", func(*client.Run) bool {
				b, _ := os.ReadFile(count)
				return strings.Contains(string(b), "start")
			})
			db := k.db()
			migrateAhead(k, db)

			var exit error
			select {
			case exit = <-p.Done():
			case <-time.After(60 * time.Second):
				t.Fatalf("the keeper still serves a minute after a newer keeper migrated its database:\n%s", p.Drain())
			}
			logs := p.Drain()
			var ee *exec.ExitError
			if !errors.As(exit, &ee) || ee.ExitCode() != 78 || !strings.Contains(logs, "store.schema_newer") {
				t.Fatalf("exit %v, want status 78 and store.schema_newer in the log:\n%s", exit, logs)
			}
			if b, _ := os.ReadFile(count); string(b) != "start\ndone\n" {
				t.Fatalf("the step in flight did not finish in the drain: %q", b)
			}
			var owner sql.NullString
			if err := db.QueryRow(`SELECT owner FROM runs WHERE id = `+map[string]string{"sqlite": "?", "postgres": "$1"}[backend], run.ID).Scan(&owner); err != nil || owner.String != "" {
				t.Fatalf("the run's owner after the stop = %q (%v), want none (handed back)", owner.String, err)
			}

			k.exec(db, `DELETE FROM goose_db_version WHERE version_id = 9999`)
			p = k.serve()
			c = k.client(p)
			if final := waitRun(t, c, run.ID); final.Phase != client.PhaseSucceeded {
				t.Fatalf("the resumed run = %s %+v", final.Phase, final.Error)
			}
			if b, _ := os.ReadFile(count); string(b) != "start\ndone\nafter\n" {
				t.Fatalf("the commands ran %q, want each once", b)
			}
			p.Interrupt(t)
		})
	}
}

// migrateAhead makes k's database look migrated by a newer keeper: schema
// version 9999, which this keeper does not know.
func migrateAhead(k *auditKeeper, db *sql.DB) {
	applied := map[string]string{"sqlite": "1", "postgres": "true"}[k.backend]
	k.exec(db, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (9999, `+applied+`)`)
}
