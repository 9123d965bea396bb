package keeper_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/testdb"
)

// fixture writes what a keeper at one schema version wrote: rows in the
// tables that version made, in its columns.
type fixture struct {
	db      *sql.DB
	pg      bool
	sealer  *secret.Sealer
	audit   *audit.Key // the keeper's audit key, from the data key
	srv     *sshtest.Server
	at      time.Time
	adminTo string // the fixture admin token, in clear
}

func (f *fixture) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if f.pg {
		query = pgPlaceholders(query)
	}
	if _, err := f.db.Exec(query, args...); err != nil {
		t.Fatalf("fixture: %s: %v", query, err)
	}
}

// upgradeFixtures are the rows each schema version's keeper wrote, by the
// version that made their tables.
var upgradeFixtures = map[int64]func(t *testing.T, f *fixture){
	1: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO providers (name, driver, fqdn_suffix, config, created_at, created_by) VALUES ('fx', 'local', 'upgrade.test', '{}', ?, 'tok_fx')`, f.at)
		f.exec(t, `INSERT INTO profiles (name, provider, spec, created_at, created_by) VALUES ('fx-small', 'fx', '{"memory_mb": 256}', ?, 'tok_fx')`, f.at)
		conn := fmt.Sprintf(`{"transport": "ssh", "user": %q, "port": %d}`, f.srv.User, f.srv.Port)
		f.exec(t, `INSERT INTO souls (sid, status, address, attributes, connection, created_by_aid, created_at, updated_at) VALUES ('fx.upgrade.test', 'active', '127.0.0.1', '{"role": "web"}', ?, 'tok_fx', ?, ?)`, conn, f.at, f.at)
		f.exec(t, `INSERT INTO souls (sid, status, address, provider, vm_id, created_at, updated_at) VALUES ('vm-1.upgrade.test', 'destroyed', '10.0.0.9', 'fx', 'vm-1', ?, ?)`, f.at, f.at)
		f.exec(t, `INSERT INTO soul_seeds (sid, scenario, input, status) VALUES ('fx.upgrade.test', 'steps: []', '{}', 'active')`)
		f.exec(t, `INSERT INTO bootstrap_tokens (id, sid, hash, expires_at, status) VALUES ('bt_fx', 'vm-1.upgrade.test', 'aa', ?, 'burned')`, f.at)
		f.exec(t, `INSERT INTO api_tokens (id, name, role, hash, created_by, created_at) VALUES ('tok_fx', 'fixture', 'admin', ?, 'keeper', ?)`, auth.HashToken(f.adminTo), f.at)
		// Three audit rows of a keeper before the audit key: plain SHA-256.
		head := audit.Head{Hash: audit.GenesisHash}
		for i, action := range []string{"token.created", "provider.created", "soul.registered"} {
			e := audit.Event{Seq: int64(i + 1), At: f.at, ActorAID: "tok_fx", Action: action, Object: "fixture/" + action, Payload: "{}", PrevHash: head.Hash}
			e.Hash = audit.LegacyHash(e)
			f.exec(t, `INSERT INTO audit_events (seq, at, actor_aid, action, object, payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, e.Seq, e.At, e.ActorAID, e.Action, e.Object, e.Payload, e.PrevHash, e.Hash)
			head = audit.Head{Seq: e.Seq, Hash: e.Hash}
		}
		f.exec(t, `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`, head.Seq, head.Hash)
	},
	2: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO runs (id, digest, name, scenario, input_sealed, input_masked, phase, timeout_ms, created_by, created_at, started_at, finished_at, outputs)
			VALUES ('run_fx', 'd', 'fixture', 'steps: []', ?, '{}', 'Succeeded', 60000, 'tok_fx', ?, ?, ?, '{"answer": 42}')`, f.sealer.Seal([]byte(`{}`)), f.at, f.at, f.at)
		f.exec(t, `INSERT INTO run_steps (run_id, step_index, name, module, status, started_at, finished_at) VALUES ('run_fx', 0, 'hello', 'core.command.ran', 'changed', ?, ?)`, f.at, f.at)
		f.exec(t, `INSERT INTO run_targets (run_id, step_index, sid, status, changed, output, attempts, duration_ms) VALUES ('run_fx', 0, 'fx.upgrade.test', 'changed', ?, '{"stdout": "hi"}', 1, 12)`, true)
		f.exec(t, `INSERT INTO run_events (run_id, seq, at, kind, data) VALUES ('run_fx', 1, ?, 'run.finished', '{"phase": "Succeeded"}')`, f.at)
	},
	3: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO cloud_requests (request_id, run_id, step, provider, count, status, vm_ids, created_at, finished_at) VALUES ('req_fx', 'run_fx', 'provision', 'fx', 1, 'created', '["vm-1"]', ?, ?)`, f.at, f.at)
	},
	20: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO web_sessions (hash, key_hash, token_id, created_at, expires_at, last_seen_at) VALUES ('ws_fx', 'k', 'tok_fx', ?, ?, ?)`, f.at, f.at.Add(time.Hour), f.at)
	},
	22: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO soul_drift (sid, seed_id, state, checked_at) VALUES ('fx.upgrade.test', 1, 'in_sync', ?)`, f.at)
	},
	24: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO keepers (id, started_at, heartbeat_at) VALUES ('keeper-fx', ?, ?)`, f.at, f.at)
		f.exec(t, `UPDATE runs SET epoch = 1 WHERE id = 'run_fx'`)
		f.exec(t, `INSERT INTO run_commands (run_id, id, step_index, sid, attempt, n, epoch, digest, transport, sent_at) VALUES ('run_fx', 'run_fx.0.1.1.aa', 0, 'fx.upgrade.test', 1, 1, 1, 'dd', 'ssh', ?)`, f.at)
	},
	28: func(t *testing.T, f *fixture) {
		// A project made and deleted by a keeper before deleted names were
		// recorded: its audit events are all that remember it.
		f.exec(t, `INSERT INTO projects (name, description, created_at, created_by) VALUES ('fx-team', '', ?, 'tok_fx')`, f.at)
		f.exec(t, `INSERT INTO runs (id, digest, name, scenario, input_sealed, input_masked, phase, timeout_ms, created_by, created_at, finished_at, project)
			VALUES ('run_fx_team', 'd', 'fixture', 'steps: []', ?, '{}', 'Succeeded', 60000, 'tok_fx', ?, ?, 'fx-team')`, f.sealer.Seal([]byte(`{}`)), f.at, f.at)
		f.exec(t, `DELETE FROM projects WHERE name = 'fx-team'`)
		var head audit.Head
		if err := f.db.QueryRow(`SELECT seq, hash, keyed_from FROM audit_head WHERE id = 1`).Scan(&head.Seq, &head.Hash, &head.KeyedFrom); err != nil {
			t.Fatal(err)
		}
		e := audit.Event{At: f.at, ActorAID: "tok_fx", Action: "project.deleted", Object: "project/fx-team", Payload: "{}"}
		head = f.audit.Seal(&e, head)
		f.exec(t, `INSERT INTO audit_events (seq, at, actor_aid, action, object, payload, prev_hash, hash, project) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'fx-team')`, e.Seq, e.At, e.ActorAID, e.Action, e.Object, e.Payload, e.PrevHash, e.Hash)
		f.exec(t, `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`, head.Seq, head.Hash)
	},
	23: func(t *testing.T, f *fixture) {
		f.exec(t, `INSERT INTO webhook_deliveries (id, notification, event, object, status, attempts, last_code, created_at, updated_at) VALUES ('wd_fx', 'ops', 'run.finished', 'run/run_fx', 'delivered', 1, 200, ?, ?)`, f.at, f.at)
	},
}

// TestUpgradeFromEveryVersion: a database written at each earlier schema
// version, with rows in every table that version had (the fixtures above),
// is upgraded by a real keeper on SQLite and on PostgreSQL; the keeper
// then serves the old rows (providers, profiles, souls, seeds, tokens —
// the fixture's admin token authenticates —, runs with their steps and
// outputs, audit events), its audit chain verifies (the pre-key rows as
// legacy), and a new run executes on the upgraded data: on the old soul,
// over SSH.
func TestUpgradeFromEveryVersion(t *testing.T) {
	t.Parallel()
	versions, err := sqlite.Versions()
	if err != nil {
		t.Fatal(err)
	}
	pgVersions, err := postgres.Versions()
	if err != nil || fmt.Sprint(pgVersions) != fmt.Sprint(versions) {
		t.Fatalf("the backends' migrations differ: sqlite %v, postgres %v (%v)", versions, pgVersions, err)
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, v := range versions[:len(versions)-1] {
			t.Run(fmt.Sprintf("%s/from-%05d", backend, v), func(t *testing.T) {
				t.Parallel()
				upgradeFrom(t, backend, v, versions)
			})
		}
	}
}

func upgradeFrom(t *testing.T, backend string, from int64, versions []int64) {
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	rawKey := make([]byte, 32)
	for i := range rawKey {
		rawKey[i] = byte(i + 7)
	}
	if err := os.WriteFile(filepath.Join(data, "data.key"), []byte(base64.StdEncoding.EncodeToString(rawKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sealer, err := secret.NewSealer(rawKey)
	if err != nil {
		t.Fatal(err)
	}
	auditKey, err := audit.DeriveKey(rawKey)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{pg: backend == "postgres", sealer: sealer, audit: auditKey, srv: sshtest.Start(t, sshtest.Options{}),
		at: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), adminTo: "ss_fixture_admin_token_of_an_old_keeper_0001"}
	var args []string
	var migrateTo func(int64) error
	if f.pg {
		url := testdb.FreshPostgres(t)
		if f.db, err = sql.Open("pgx", url); err != nil {
			t.Fatal(err)
		}
		migrateTo = func(v int64) error { return postgres.MigrateTo(ctx, f.db, v) }
		args = []string{"--database-url", url}
	} else {
		if f.db, err = sql.Open("sqlite", sqlite.DSN(filepath.Join(data, "keeper.db"))); err != nil {
			t.Fatal(err)
		}
		migrateTo = func(v int64) error { return sqlite.MigrateTo(ctx, f.db, v) }
	}
	for _, v := range versions {
		if v > from {
			break
		}
		if err := migrateTo(v); err != nil {
			t.Fatalf("migrate to %d: %v", v, err)
		}
		if fx := upgradeFixtures[v]; fx != nil {
			fx(t, f)
		}
	}
	f.db.Close()
	// The old keeper's SSH key, which its souls trust, stays in the data dir.
	if err := os.MkdirAll(filepath.Join(data, "ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "ssh", "id_ed25519"), f.srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}

	k := serve(t, dir, args...)
	c, err := client.New(k.Addr, f.adminTo)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.ProviderGet(ctx, "fx"); err != nil || p.FQDNSuffix != "upgrade.test" {
		t.Fatalf("provider of the old keeper: %+v, %v", p, err)
	}
	if _, err := c.ProfileGet(ctx, "fx-small"); err != nil {
		t.Fatalf("profile: %v", err)
	}
	so, err := c.SoulGet(ctx, "fx.upgrade.test")
	if err != nil || so.Status != "active" || !strings.Contains(string(so.Attributes), `"role"`) {
		t.Fatalf("soul: %+v, %v", so, err)
	}
	if gone, err := c.SoulGet(ctx, "vm-1.upgrade.test"); err != nil || gone.Status != "destroyed" {
		t.Fatalf("destroyed soul: %+v, %v", gone, err)
	}
	if seeds, err := c.SeedList(ctx, "fx.upgrade.test"); err != nil || len(seeds.Items) != 1 {
		t.Fatalf("seeds: %+v, %v", seeds, err)
	}
	if from >= 2 {
		r, err := c.RunGet(ctx, "run_fx")
		if err != nil || r.Phase != "Succeeded" || len(r.Steps) != 1 || len(r.Steps[0].Targets) != 1 || !r.Steps[0].Targets[0].Changed {
			t.Fatalf("run of the old keeper: %+v, %v", r, err)
		}
	}
	rep, err := c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 100}, Verify: true})
	if err != nil || rep.Verify == nil || !rep.Verify.OK || rep.Verify.Legacy != 3 {
		t.Fatalf("audit after the upgrade: %+v, %v", rep.Verify, err)
	}
	if from >= 28 {
		// The project deleted before the upgrade keeps its name: a new
		// project of that name would read the old project's runs.
		_, err := c.ProjectCreate(ctx, client.ProjectCreate{Name: "fx-team"})
		wantProblem(t, err, http.StatusConflict, "project.name_retired")
	}
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: after\n    on: fx.upgrade.test\n    module: core.command.ran\n    params: {cmd: 'echo upgraded'}\n"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitFor(t, c, run.ID, "a run on the upgraded data", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Succeeded" || !strings.Contains(stdoutOf(t, final.Steps[0].Targets[0]), "upgraded") {
		t.Fatalf("run on the upgraded data = %s %+v", final.Phase, final.Error)
	}
	// Writes on and next to the old rows, through the migrated columns
	// and indexes, and the chain goes on verifying.
	if found, err := c.SoulSearch(ctx, client.ListOptions{}, client.SoulFilter{Label: "role=web"}); err != nil || len(found.Items) != 1 || found.Items[0].SID != "fx.upgrade.test" {
		t.Fatalf("search the old souls by attribute: %+v, %v", found, err)
	}
	if found, err := c.SoulSearch(ctx, client.ListOptions{}, client.SoulFilter{Provider: "fx", Status: "destroyed"}); err != nil || len(found.Items) != 1 {
		t.Fatalf("search the old souls by provider and status: %+v, %v", found, err)
	}
	if _, err := c.SeedAdd(ctx, "fx.upgrade.test", client.SeedCreate{Scenario: "steps:\n  - name: motd\n    on: ${ input.sid }\n    module: core.command.ran\n    params: {cmd: \"true\"}\n", DriftEvery: "1h"}); err != nil {
		t.Fatalf("add a seed to the old soul: %v", err)
	}
	if seeds, err := c.SeedList(ctx, "fx.upgrade.test"); err != nil || len(seeds.Items) != 2 {
		t.Fatalf("seeds after adding one: %+v, %v", seeds, err)
	}
	if err := c.ProfileDelete(ctx, "fx-small"); err != nil {
		t.Fatalf("delete the old profile: %v", err)
	}
	tok, err := c.TokenCreate(ctx, client.TokenCreate{Name: "after-upgrade", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TokenRevoke(ctx, tok.ID); err != nil {
		t.Fatalf("revoke a token: %v", err)
	}
	if toks, err := c.TokenList(ctx, client.ListOptions{}); err != nil || len(toks.Items) < 2 {
		t.Fatalf("tokens: %+v, %v", toks, err)
	}
	rep, err = c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1}, Verify: true})
	if err != nil || rep.Verify == nil || !rep.Verify.OK || rep.Verify.Legacy != 3 {
		t.Fatalf("audit after writes on the upgraded data: %+v, %v", rep.Verify, err)
	}
	k.Interrupt(t)
}
