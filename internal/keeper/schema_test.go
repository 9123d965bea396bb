package keeper_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
)

// TestRefusesNewerSchema: a database a newer keeper migrated (a schema
// version this keeper does not know) is refused at start and by keeper
// migrate with store.schema_newer, on SQLite and PostgreSQL, and nothing
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
			k.exec(db, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (9999, `+map[string]string{"sqlite": "1", "postgres": "true"}[backend]+`)`)
			for _, args := range [][]string{{"migrate"}, {"serve", "--listen", "127.0.0.1:0"}} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				out, err := exec.CommandContext(ctx, keeperBin, append(args, k.flags()...)...).CombinedOutput()
				cancel()
				if err == nil || !strings.Contains(string(out), "store.schema_newer") || !strings.Contains(string(out), "schema version 9999") {
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
