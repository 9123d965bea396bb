package keeper_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/testdb"
)

// auditKeeper is a keeper data dir (and, for PostgreSQL, its database)
// that tests start, stop and attack.
type auditKeeper struct {
	t       *testing.T
	backend string
	dir     string // the keeper's working directory
	dataDir string
	url     string // PostgreSQL; "" for SQLite
}

func newAuditKeeper(t *testing.T, backend string) *auditKeeper {
	dir := t.TempDir()
	k := &auditKeeper{t: t, backend: backend, dir: dir, dataDir: filepath.Join(dir, "data")}
	if backend == "postgres" {
		k.url = testdb.FreshPostgres(t)
	}
	return k
}

func (k *auditKeeper) flags() []string {
	args := []string{"--data-dir", k.dataDir}
	if k.url != "" {
		args = append(args, "--database-url", k.url)
	}
	return args
}

func (k *auditKeeper) serve(extra ...string) *proc {
	return serve(k.t, k.dir, append(k.flags(), extra...)...)
}

func (k *auditKeeper) client(p *proc) *client.Client {
	raw, err := os.ReadFile(filepath.Join(k.dataDir, "admin.token"))
	if err != nil {
		k.t.Fatal(err)
	}
	c, err := client.New(p.Addr, strings.TrimSpace(string(raw)))
	if err != nil {
		k.t.Fatal(err)
	}
	return c
}

// verify runs `keeper audit verify --json` and returns its report and
// whether it exited 0.
func (k *auditKeeper) verify() (client.AuditReport, bool) {
	k.t.Helper()
	cmd := exec.Command(keeperBin, append([]string{"audit", "verify", "--json"}, k.flags()...)...)
	out, err := cmd.Output()
	var r client.AuditReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		k.t.Fatalf("keeper audit verify: %v %v\n%s", err, jerr, out)
	}
	return r, err == nil
}

// db opens the keeper's database directly, as an attacker with write
// access to it would.
func (k *auditKeeper) db() *sql.DB {
	k.t.Helper()
	if k.url != "" {
		db, err := sql.Open("pgx", k.url)
		if err != nil {
			k.t.Fatal(err)
		}
		k.t.Cleanup(func() { db.Close() })
		return db
	}
	s, err := sqlite.Open(context.Background(), filepath.Join(k.dataDir, "keeper.db"))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { s.Close() })
	return s.DB()
}

// q rewrites ? placeholders for PostgreSQL.
func (k *auditKeeper) q(query string) string {
	if k.url == "" {
		return query
	}
	return pgPlaceholders(query)
}

// pgPlaceholders rewrites a query's ? placeholders as PostgreSQL's $1, $2…
func pgPlaceholders(query string) string {
	n := 0
	var b strings.Builder
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (k *auditKeeper) exec(db *sql.DB, query string, args ...any) {
	k.t.Helper()
	if _, err := db.Exec(k.q(query), args...); err != nil {
		k.t.Fatalf("%s: %v", query, err)
	}
}

// key is the audit key as the keeper derives it from its data key.
func (k *auditKeeper) key() *audit.Key {
	k.t.Helper()
	raw, err := os.ReadFile(filepath.Join(k.dataDir, "data.key"))
	if err != nil {
		k.t.Fatal(err)
	}
	root, err := secret.DecodeKey(string(raw))
	if err != nil {
		k.t.Fatal(err)
	}
	key, err := audit.DeriveKey(root)
	if err != nil {
		k.t.Fatal(err)
	}
	return key
}

// checkpoint reads the keeper's one checkpoint file and checks its mode.
func (k *auditKeeper) checkpoint() (string, audit.Checkpoint) {
	k.t.Helper()
	files, err := filepath.Glob(filepath.Join(k.dataDir, "audit", "*.checkpoint.json"))
	if err != nil || len(files) != 1 {
		k.t.Fatalf("checkpoint files = %v, %v; want one", files, err)
	}
	f, err := audit.ReadCheckpoint(files[0], k.key())
	if err != nil || f.Err != nil {
		k.t.Fatalf("read checkpoint: %v %v", err, f.Err)
	}
	if fi, _ := os.Stat(files[0]); fi.Mode().Perm() != 0o600 {
		k.t.Fatalf("checkpoint mode = %v, want 0600", fi.Mode().Perm())
	}
	return files[0], f.Checkpoint
}

type auditRow struct {
	seq                                      int64
	at                                       string
	actor, action, object, payload, prevHash string
}

// recomputeUnkeyed rewrites the log as someone with write access to the
// database but not the audit key would: row 2 now names another actor,
// and every hash, prev_hash and the head are recomputed with plain SHA-256,
// the way keepers hashed rows before the audit key.
func (k *auditKeeper) recomputeUnkeyed(db *sql.DB) {
	k.t.Helper()
	rows, err := db.Query(`SELECT seq, at, actor_aid, action, object, payload FROM audit_events ORDER BY seq`)
	if err != nil {
		k.t.Fatal(err)
	}
	var evs []audit.Event
	for rows.Next() {
		var e audit.Event
		if err := rows.Scan(&e.Seq, &e.At, &e.ActorAID, &e.Action, &e.Object, &e.Payload); err != nil {
			k.t.Fatal(err)
		}
		evs = append(evs, e)
	}
	rows.Close()
	prev := audit.GenesisHash
	for _, e := range evs {
		if e.Seq == 2 {
			e.ActorAID = "tok_someone_else"
		}
		e.PrevHash = prev
		e.Hash = audit.LegacyHash(e)
		k.exec(db, `UPDATE audit_events SET actor_aid = ?, prev_hash = ?, hash = ? WHERE seq = ?`, e.ActorAID, e.PrevHash, e.Hash, e.Seq)
		prev = e.Hash
	}
	k.exec(db, `UPDATE audit_head SET hash = ? WHERE id = 1`, prev)
}

func problemNamed(r client.AuditReport, kind string, seq int64) bool {
	for _, p := range r.Problems {
		if p.Kind == kind && p.Seq == seq {
			return true
		}
	}
	return false
}

// TestAuditAttacksOnKeeper performs each attack on the database (or the
// checkpoint file) of a real keeper that was stopped gracefully, and checks
// that `keeper audit verify` names it, that a restarted keeper logs it and
// keeps its checkpoint, and that GET /v1/audit?verify=true names it too.
// Before the audit key and checkpoints, the first three attacks left a log
// the verifier passed: the head was fixed up, or the chain recomputed with
// the plain SHA-256 it checked.
func TestAuditAttacksOnKeeper(t *testing.T) {
	t.Parallel()
	attacks := []struct {
		name   string
		attack func(k *auditKeeper, db *sql.DB, ckPath string)
		want   []string // kinds, each at the checkpoint's seq unless "@1"
		// logged is the code a restarted keeper logs when it compares
		// the log with its checkpoint.
		logged string
	}{
		{"delete the last rows and fix up the head", func(k *auditKeeper, db *sql.DB, _ string) {
			k.exec(db, `DELETE FROM audit_events WHERE seq > 3`)
			k.exec(db, `UPDATE audit_head SET seq = 3, hash = (SELECT hash FROM audit_events WHERE seq = 3) WHERE id = 1`)
		}, []string{audit.ProblemTruncated}, audit.ProblemTruncated},
		{"delete every row and the head", func(k *auditKeeper, db *sql.DB, _ string) {
			k.exec(db, `DELETE FROM audit_events`)
			k.exec(db, `UPDATE audit_head SET seq = 0, hash = ? WHERE id = 1`, audit.GenesisHash)
		}, []string{audit.ProblemEmptied}, audit.ProblemEmptied},
		{"recompute the chain with plain SHA-256", func(k *auditKeeper, db *sql.DB, _ string) {
			k.recomputeUnkeyed(db)
		}, []string{audit.ProblemUnkeyed + "@1", audit.ProblemCheckpointMismatch}, audit.ProblemCheckpointMismatch},
		{"forge the checkpoint to cover a truncation", func(k *auditKeeper, db *sql.DB, ckPath string) {
			raw, err := os.ReadFile(ckPath)
			if err != nil {
				k.t.Fatal(err)
			}
			var ck map[string]any
			_ = json.Unmarshal(raw, &ck)
			ck["seq"] = 3
			out, _ := json.Marshal(ck)
			if err := os.WriteFile(ckPath, out, 0o600); err != nil {
				k.t.Fatal(err)
			}
			k.exec(db, `DELETE FROM audit_events WHERE seq > 3`)
			k.exec(db, `UPDATE audit_head SET seq = 3, hash = (SELECT hash FROM audit_events WHERE seq = 3) WHERE id = 1`)
		}, []string{audit.ProblemCheckpointInvalid + "@3"}, audit.ProblemCheckpointInvalid},
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, tc := range attacks {
			t.Run(backend+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				k := newAuditKeeper(t, backend)
				p := k.serve()
				c := k.client(p)
				for _, n := range []string{"a", "b", "c", "d", "e"} {
					if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: n, Driver: "local"}); err != nil {
						t.Fatal(err)
					}
				}
				p.Interrupt(t)
				ckPath, ck := k.checkpoint()
				if ck.Seq != 6 { // token.created and five providers
					t.Fatalf("checkpoint after shutdown = %+v, want seq 6", ck)
				}
				if r, ok := k.verify(); !ok || !r.OK || r.Checkpoints != 1 {
					t.Fatalf("verify before the attack: %+v", r)
				}

				tc.attack(k, k.db(), ckPath)
				r, ok := k.verify()
				if ok || r.OK {
					t.Fatalf("keeper audit verify passed after the attack: %+v", r)
				}
				for _, w := range tc.want {
					kind, seq := w, ck.Seq
					if i := strings.Index(w, "@"); i > 0 {
						kind = w[:i]
						fmt.Sscan(w[i+1:], &seq)
					}
					if !problemNamed(r, kind, seq) {
						t.Fatalf("keeper audit verify = %+v\nwant %s at row %d", r.Problems, kind, seq)
					}
				}

				// A restarted keeper names the contradiction, keeps its
				// checkpoint as the evidence, and the API reports it.
				before, _ := os.ReadFile(ckPath)
				p = k.serve()
				list, err := k.client(p).AuditList(context.Background(), client.AuditListOptions{Verify: true})
				if err != nil {
					t.Fatal(err)
				}
				kind := strings.Split(tc.want[0], "@")[0]
				if list.Verify == nil || list.Verify.OK || !strings.Contains(fmt.Sprint(list.Verify.Problems), kind) {
					t.Fatalf("GET /v1/audit?verify=true after the attack: %+v", list.Verify)
				}
				logs := p.Interrupt(t)
				if !strings.Contains(logs, "code="+tc.logged) {
					t.Fatalf("the restart did not log %s:\n%s", tc.logged, logs)
				}
				if after, _ := os.ReadFile(ckPath); string(after) != string(before) {
					t.Fatalf("the restart overwrote the checkpoint:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// TestAuditCheckpointsOfKeeper: a keeper writes its checkpoint every
// audit_checkpoint_every events and on graceful shutdown, and a clean
// restart verifies.
func TestAuditCheckpointsOfKeeper(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			k := newAuditKeeper(t, backend)
			cfg := filepath.Join(k.dir, "keeper.yml")
			if err := os.WriteFile(cfg, []byte("audit_checkpoint_every: 2\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p := k.serve("--config", cfg)
			c := k.client(p)
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: n, Driver: "local"}); err != nil {
					t.Fatal(err)
				}
			}
			// Seq 1 (token.created) at start, then every 2 events: 3, 5.
			if _, ck := k.checkpoint(); ck.Seq != 5 {
				t.Fatalf("checkpoint while serving = %+v, want seq 5", ck)
			}
			p.Interrupt(t)
			_, ck := k.checkpoint()
			if ck.Seq != 6 {
				t.Fatalf("checkpoint after shutdown = %+v, want seq 6", ck)
			}
			list, err := c.AuditList(context.Background(), client.AuditListOptions{})
			if err == nil {
				t.Fatalf("the stopped keeper answered: %+v", list)
			}

			// A clean restart agrees with the checkpoint and verifies.
			p = k.serve("--config", cfg)
			c = k.client(p)
			l, err := c.AuditList(context.Background(), client.AuditListOptions{Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			if v := l.Verify; v == nil || !v.OK || v.Checked != 6 || v.Checkpoints != 1 || v.Legacy != 0 {
				t.Fatalf("verify after a clean restart: %+v", v)
			}
			if l.Items[5].Hash != ck.Hash {
				t.Fatalf("row 6 hash %s, checkpoint %s", l.Items[5].Hash, ck.Hash)
			}
			p.Interrupt(t)
			if r, ok := k.verify(); !ok || !r.OK || r.Checked != 6 {
				t.Fatalf("keeper audit verify after a clean restart: %+v", r)
			}
		})
	}
}

// TestAuditKeyRef: with audit_key_ref the audit key comes from the key it
// names, not from the data key: verifying with the data key alone fails on
// every row and on the checkpoint.
func TestAuditKeyRef(t *testing.T) {
	t.Parallel()
	k := newAuditKeeper(t, "sqlite")
	keyFile := filepath.Join(t.TempDir(), "audit.key")
	if err := os.WriteFile(keyFile, []byte("c291bHN0YWNrIGF1ZGl0IGtleSBmcm9tIGEgcmVmISE=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(k.dir, "keeper.yml")
	if err := os.WriteFile(cfg, []byte("audit_key_ref: file:"+keyFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := k.serve("--config", cfg)
	if _, err := k.client(p).ProviderCreate(context.Background(), client.ProviderCreate{Name: "a", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	p.Interrupt(t)

	out, err := exec.Command(keeperBin, append([]string{"audit", "verify", "--config", cfg}, k.flags()...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "audit chain OK: 2 events, head 2, 1 signed checkpoint(s)") {
		t.Fatalf("verify with audit_key_ref: %v\n%s", err, out)
	}
	r, ok := k.verify() // the data key's audit key
	if ok || !problemNamed(r, audit.ProblemRowTampered, 1) || !strings.Contains(r.Problems[0].Message, "rows 1..2, every row of the log") || !problemNamed(r, audit.ProblemCheckpointInvalid, 2) {
		t.Fatalf("verify with the data key instead of audit_key_ref: %+v", r)
	}
}

// TestAuditSeveralKeepers: keepers sharing one PostgreSQL (and the data
// key) each write their own checkpoint into a shared directory; verify
// checks the log against each, and a truncation is named per keeper.
func TestAuditSeveralKeepers(t *testing.T) {
	t.Parallel()
	url := testdb.FreshPostgres(t)
	shared := t.TempDir()
	keyFile := filepath.Join(shared, "data.key")
	if err := os.WriteFile(keyFile, []byte("c291bHN0YWNrIGRhdGEga2V5IHNoYXJlZCBieSB0d28="+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(shared, "keeper.yml")
	if err := os.WriteFile(cfg, []byte("data_key_ref: file:"+keyFile+"\naudit_checkpoint_dir: "+filepath.Join(shared, "checkpoints")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	one, two := newAuditKeeper(t, "postgres"), newAuditKeeper(t, "postgres")
	one.url, two.url = url, url
	p1 := one.serve("--config", cfg)
	c1 := one.client(p1)
	p2 := two.serve("--config", cfg)
	token, _ := os.ReadFile(filepath.Join(one.dataDir, "admin.token")) // the second keeper found the admin and made none
	c2, _ := client.New(p2.Addr, strings.TrimSpace(string(token)))
	for i, c := range []*client.Client{c1, c2, c1, c2} {
		if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: fmt.Sprint("p", i), Driver: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	p1.Interrupt(t) // its last event is row 4
	if _, err := c2.ProviderCreate(context.Background(), client.ProviderCreate{Name: "late", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	p2.Interrupt(t) // row 6

	verify := func() (client.AuditReport, bool) {
		out, err := exec.Command(keeperBin, append([]string{"audit", "verify", "--json", "--config", cfg}, one.flags()...)...).Output()
		var r client.AuditReport
		if jerr := json.Unmarshal(out, &r); jerr != nil {
			t.Fatalf("keeper audit verify: %v %v\n%s", err, jerr, out)
		}
		return r, err == nil
	}
	if r, ok := verify(); !ok || !r.OK || r.Checked != 6 || r.Checkpoints != 2 {
		t.Fatalf("verify of two keepers' log: %+v", r)
	}
	db := one.db()
	one.exec(db, `DELETE FROM audit_events WHERE seq > 3`)
	one.exec(db, `UPDATE audit_head SET seq = 3, hash = (SELECT hash FROM audit_events WHERE seq = 3) WHERE id = 1`)
	r, ok := verify()
	if ok || !problemNamed(r, audit.ProblemTruncated, 4) || !problemNamed(r, audit.ProblemTruncated, 6) {
		t.Fatalf("truncation below both checkpoints: %+v", r.Problems)
	}
}

// TestAuditConfigInvalid: bad audit settings stop the keeper before it
// starts, naming the field.
func TestAuditConfigInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yml, field string }{
		{"audit_key_ref: /etc/audit.key\n", "audit_key_ref"},
		{"audit_checkpoint_every: -5\n", "audit_checkpoint_every"},
		{"audit_key_ref: env:SOULSTACK_TEST_UNSET_AUDIT_KEY\n", "audit_key_ref"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "keeper.yml")
			if err := os.WriteFile(cfg, []byte(tc.yml), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(keeperBin, "serve", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--config", cfg)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.field) {
				t.Fatalf("keeper serve with %q: %v\n%s", tc.yml, err, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "data", "admin.token")); err == nil {
				t.Fatal("an admin token was created by a keeper that refused its config")
			}
		})
	}
}

// TestAuditHeadRowDeleted: every row and the chain head row itself deleted
// is named by keeper audit verify, and the keeper refuses to write to a log
// without its head.
func TestAuditHeadRowDeleted(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			k := newAuditKeeper(t, backend)
			p := k.serve()
			if _, err := k.client(p).ProviderCreate(context.Background(), client.ProviderCreate{Name: "a", Driver: "local"}); err != nil {
				t.Fatal(err)
			}
			p.Interrupt(t)
			db := k.db()
			k.exec(db, `DELETE FROM audit_events`)
			k.exec(db, `DELETE FROM audit_head`)
			r, ok := k.verify()
			if ok || !problemNamed(r, audit.ProblemHeadMismatch, 0) || !problemNamed(r, audit.ProblemEmptied, 2) {
				t.Fatalf("keeper audit verify without rows and head: %+v", r)
			}
			// Bounded, so that a keeper that wrongly starts serving fails
			// the test instead of hanging it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, keeperBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, k.flags()...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "head row is missing") {
				t.Fatalf("keeper serve on a log without its head: %v\n%s", err, out)
			}
		})
	}
}
