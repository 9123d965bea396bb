package storetest

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// sqlFor rewrites ? placeholders for PostgreSQL, for statements a test runs
// on the database directly.
func sqlFor(b testdb.Backend, q string) string {
	if b.Name != "postgres" {
		return q
	}
	var out strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}

func allEvents(t *testing.T, s store.Store) []audit.Event {
	t.Helper()
	evs, err := s.AuditList(ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// keyedStore opens a store whose audit events feed a checkpointer writing
// to its own directory, started as the keeper starts it.
func keyedStore(t *testing.T, b testdb.Backend, every int64) (*sqlstore.Store, *audit.Checkpointer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	cp := audit.NewCheckpointer(audit.CheckpointerConfig{Dir: dir, KeeperID: "keeper-test-1", Key: testdb.AuditKey, Every: every})
	s := b.Open(t, sqlstore.WithAuditAppended(cp.Appended))
	startCheckpointer(t, s, cp)
	return s, cp, dir
}

func startCheckpointer(t *testing.T, s *sqlstore.Store, cp *audit.Checkpointer) *audit.Problem {
	t.Helper()
	head, err := s.AuditHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cp.Start(head, func(seq int64) (string, error) {
		evs, err := s.AuditList(ctx, store.AuditListParams{AfterSeq: seq - 1, Limit: 1})
		if err != nil || len(evs) == 0 || evs[0].Seq != seq {
			return "", err
		}
		return evs[0].Hash, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func verifyWith(t *testing.T, s store.Store, dir string) audit.Report {
	t.Helper()
	cps, err := audit.ReadCheckpoints(dir, testdb.AuditKey)
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.Verify(ctx, s, testdb.AuditKey, cps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// passedBefore reports whether the database alone is consistent, as the
// verifier this package had before keyed rows and checkpoints saw it: every
// row links to the one before, the last row is the head the database
// records, and every row's hash is right under one hash function — the
// plain SHA-256 that verifier checked (and anyone can recompute), or, for
// rows left as the keeper wrote them, its own. An attack that leaves such a
// database went unnoticed before.
func passedBefore(t *testing.T, s *sqlstore.Store) bool {
	t.Helper()
	prevSeq, prevHash := int64(0), audit.GenesisHash
	legacy, keyed := true, true
	for _, e := range allEvents(t, s) {
		if e.Seq != prevSeq+1 || e.PrevHash != prevHash {
			return false
		}
		legacy = legacy && audit.LegacyHash(e) == e.Hash
		keyed = keyed && testdb.AuditKey.Hash(e) == e.Hash
		prevSeq, prevHash = e.Seq, e.Hash
	}
	head, err := s.AuditHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return (legacy || keyed) && head.Seq == prevSeq && (prevSeq == 0 || head.Hash == prevHash)
}

func hasProblem(r audit.Report, kind string, seq int64, text string) bool {
	for _, p := range r.Problems {
		if p.Kind == kind && p.Seq == seq && strings.Contains(p.Message, text) {
			return true
		}
	}
	return false
}

func kinds(r audit.Report) []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, fmt.Sprintf("%s@%d", p.Kind, p.Seq))
	}
	return out
}

// recomputeUnkeyed rewrites the whole chain as an attacker with write
// access to the database but without the audit key would: row 2's payload
// is changed, then every hash, prev_hash and the head are recomputed with
// the plain SHA-256 older keepers used.
func recomputeUnkeyed(t *testing.T, b testdb.Backend, s *sqlstore.Store) {
	t.Helper()
	prev := audit.GenesisHash
	for _, e := range allEvents(t, s) {
		if e.Seq == 2 {
			e.Payload = `{"name":"someone-else"}`
		}
		e.PrevHash = prev
		e.Hash = audit.LegacyHash(e)
		if _, err := s.DB().Exec(sqlFor(b, `UPDATE audit_events SET payload = ?, prev_hash = ?, hash = ? WHERE seq = ?`), e.Payload, e.PrevHash, e.Hash, e.Seq); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
	}
	if _, err := s.DB().Exec(sqlFor(b, `UPDATE audit_head SET hash = ? WHERE id = 1`), prev); err != nil {
		t.Fatal(err)
	}
}

// testAuditKeyed: rows carry an HMAC under the audit key, which a reader of
// the database cannot recompute, and a store without the key writes nothing.
func testAuditKeyed(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "a")
	mustProvider(t, s, "b")
	for _, e := range allEvents(t, s) {
		if e.Hash != testdb.AuditKey.Hash(e) {
			t.Fatalf("row %d hash is not the HMAC under the audit key", e.Seq)
		}
		if e.Hash == audit.LegacyHash(e) {
			t.Fatalf("row %d carries a plain SHA-256", e.Seq)
		}
	}
	if r := verifyChain(t, s, 2); r.Legacy != 0 {
		t.Fatalf("fresh database reports legacy rows: %+v", r)
	}
	other, err := audit.DeriveKey([]byte("another keeper's root key, 32 b!"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.Verify(ctx, s, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || len(r.Problems) != 1 || !hasProblem(r, audit.ProblemRowTampered, 1, "audit key is probably not the one") {
		t.Fatalf("a different key verified the chain: %+v", r)
	}

	unkeyed := b.Open(t, sqlstore.WithAuditKey(nil))
	_, err = unkeyed.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "x", Driver: "local"}, Actor: "tok_test"})
	if !errors.Is(err, sqlstore.ErrNoAuditKey) {
		t.Fatalf("mutation without an audit key: %v, want ErrNoAuditKey", err)
	}
	if _, err := unkeyed.ProviderGet(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("provider written without its audit event: %v", err)
	}
}

// auditAttack is one attack on the audit log and the problems
// verification must name after it.
type auditAttack struct {
	name   string
	attack func(t *testing.T, s *sqlstore.Store, dir string)
	want   [][3]string // kind, seq, message fragment
	// passedBefore: the attack leaves a database that verification
	// from the database alone (as before checkpoints) would pass.
	passedBefore bool
}

// auditAttacks are testAuditAttacks' cases on backend b.
func auditAttacks(b testdb.Backend) []auditAttack {
	return []auditAttack{
		{"none", func(*testing.T, *sqlstore.Store, string) {}, nil, true},
		{"delete the last rows and fix up the head", func(t *testing.T, s *sqlstore.Store, _ string) {
			execAll(t, s, `DELETE FROM audit_events WHERE seq > 4`,
				`UPDATE audit_head SET seq = 4, hash = (SELECT hash FROM audit_events WHERE seq = 4) WHERE id = 1`)
		}, [][3]string{{audit.ProblemTruncated, "7", "the log ends at row 4"}}, true},
		{"delete every row and reset the head", func(t *testing.T, s *sqlstore.Store, _ string) {
			execAll(t, s, `DELETE FROM audit_events`, `UPDATE audit_head SET seq = 0, hash = '`+audit.GenesisHash+`' WHERE id = 1`)
		}, [][3]string{{audit.ProblemEmptied, "7", "the log has no rows"}}, true},
		{"delete every row and the head row", func(t *testing.T, s *sqlstore.Store, _ string) {
			execAll(t, s, `DELETE FROM audit_events`, `DELETE FROM audit_head`)
			if _, err := s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "after", Driver: "local"}, Actor: "tok_test"}); err == nil || !strings.Contains(err.Error(), "head row is missing") {
				t.Fatalf("mutation without a chain head: %v", err)
			}
		}, [][3]string{{audit.ProblemHeadMismatch, "0", "head row is missing"}, {audit.ProblemEmptied, "7", "the log has no rows"}}, false},
		{"delete every row, head left", func(t *testing.T, s *sqlstore.Store, _ string) {
			execAll(t, s, `DELETE FROM audit_events`)
		}, [][3]string{{audit.ProblemEmptied, "7", "its head records row 7"}, {audit.ProblemEmptied, "7", "checkpoint of keeper keeper-test-1"}}, false},
		{"recompute the chain with plain SHA-256", func(t *testing.T, s *sqlstore.Store, _ string) {
			recomputeUnkeyed(t, b, s)
		}, [][3]string{{audit.ProblemUnkeyed, "1", "rows 1..7 carry a plain SHA-256"}, {audit.ProblemCheckpointMismatch, "7", "the log was rewritten"}}, true},
		{"recompute with SHA-256 and move the keyed boundary", func(t *testing.T, s *sqlstore.Store, _ string) {
			recomputeUnkeyed(t, b, s)
			execAll(t, s, `UPDATE audit_head SET keyed_from = 8 WHERE id = 1`)
		}, [][3]string{{audit.ProblemUnkeyed, "1", "rows 1..7"}, {audit.ProblemCheckpointMismatch, "7", ""}}, true},
		{"recompute only the rows after the checkpoint", func(t *testing.T, s *sqlstore.Store, _ string) {
			relabelAfterCheckpoint(t, b, s)
		}, [][3]string{{audit.ProblemUnkeyed, "8", "rows 8..9"}}, false},
		{"tampered checkpoint file", func(t *testing.T, _ *sqlstore.Store, dir string) {
			shortenCheckpoint(t, dir)
		}, [][3]string{{audit.ProblemCheckpointInvalid, "3", "not signed by this audit key"}}, true},
	}
}

// execAll runs statements on the store's database, failing t on the first
// error.
func execAll(t *testing.T, s *sqlstore.Store, statements ...string) {
	t.Helper()
	for _, q := range statements {
		if _, err := s.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// relabelAfterCheckpoint appends rows 8..9 after the checkpoint at 7, then
// recomputes them (and the head) with plain SHA-256 from row 8 on.
func relabelAfterCheckpoint(t *testing.T, b testdb.Backend, s *sqlstore.Store) {
	t.Helper()
	mustProvider(t, s, "late1")
	mustProvider(t, s, "late2")
	evs := allEvents(t, s)
	prev := evs[6].Hash
	for _, e := range evs[7:] {
		e.PrevHash = prev
		e.Hash = audit.LegacyHash(e)
		if _, err := s.DB().Exec(sqlFor(b, `UPDATE audit_events SET prev_hash = ?, hash = ? WHERE seq = ?`), e.PrevHash, e.Hash, e.Seq); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
	}
	if _, err := s.DB().Exec(sqlFor(b, `UPDATE audit_head SET hash = ? WHERE id = 1`), prev); err != nil {
		t.Fatal(err)
	}
}

// shortenCheckpoint rewrites the keeper's checkpoint file to claim a
// shorter log (to cover a later truncation), without the audit key.
func shortenCheckpoint(t *testing.T, dir string) {
	t.Helper()
	path := audit.CheckpointPath(dir, "keeper-test-1")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ck audit.Checkpoint
	if err := json.Unmarshal(raw, &ck); err != nil {
		t.Fatal(err)
	}
	ck.Seq = 3
	out, _ := json.Marshal(ck)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testAuditAttacks performs, on the database directly, what an attacker
// with write access to it but not to the audit key or the checkpoint file
// could do, and checks that verification names each.
func testAuditAttacks(t *testing.T, b testdb.Backend) {
	for _, tc := range auditAttacks(b) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, cp, dir := keyedStore(t, b, 100)
			for i := range 7 {
				mustProvider(t, s, fmt.Sprint("p", i))
			}
			if err := cp.Flush(); err != nil { // as on a graceful shutdown
				t.Fatal(err)
			}
			tc.attack(t, s, dir)
			if tc.passedBefore && !passedBefore(t, s) {
				t.Fatal("the attack does not produce a log the unkeyed verifier passed: it proves nothing")
			}
			r := verifyWith(t, s, dir)
			if len(tc.want) == 0 {
				if !r.OK || r.Checkpoints != 1 {
					t.Fatalf("clean log: %+v", r)
				}
				return
			}
			if r.OK {
				t.Fatalf("verify passed after the attack: %+v", r)
			}
			for _, w := range tc.want {
				var seq int64
				fmt.Sscan(w[1], &seq)
				if !hasProblem(r, w[0], seq, w[2]) {
					t.Fatalf("problems = %v\n%+v\nwant %s at %d mentioning %q", kinds(r), r.Problems, w[0], seq, w[2])
				}
			}
		})
	}
}

// downgradeToLegacy takes a migrated database back to the schema an
// older keeper left: before migration 00006, and without the later ones.
func downgradeToLegacy(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{ // 00033, the souls' executor, 00032, the projects' credentials and SSH keys, 00031, the deliveries' project and retired project names, 00030, the person tokens' groups, 00029, run approvals, 00028, project isolation, 00027, projects, 00026, the tokens' people and login codes, 00025, the runs' trace context, 00024, keeper rows, epochs and command records, 00023, webhook deliveries, 00022, drift, 00021, run modes, 00020, web sessions, 00019, seeds' secret inputs, and 00016, the souls' list indexes: an older keeper had none
		`ALTER TABLE souls DROP COLUMN executor`, `DELETE FROM goose_db_version WHERE version_id = 33`,
		`DROP TABLE secret_files`, `DROP TABLE project_ssh_keys`, `DROP TABLE credentials`, `DELETE FROM goose_db_version WHERE version_id = 32`,
		`DROP TABLE retired_projects`, `DROP INDEX webhook_deliveries_project`, `ALTER TABLE webhook_deliveries DROP COLUMN project`, `DELETE FROM goose_db_version WHERE version_id = 31`,
		`ALTER TABLE api_tokens DROP COLUMN person_groups`, `DELETE FROM goose_db_version WHERE version_id = 30`,
		`DROP TABLE approval_policy`, `DROP TABLE run_approvals`, `DELETE FROM goose_db_version WHERE version_id = 29`,
		`DROP TABLE project_shares`, `DROP TABLE project_bindings`,
		`DROP INDEX audit_events_project`, `DROP INDEX runs_project`, `DROP INDEX souls_project`, `DROP INDEX profiles_project`, `DROP INDEX providers_project`,
		`ALTER TABLE souls DROP COLUMN memory_mb`, `ALTER TABLE souls DROP COLUMN vcpus`, `ALTER TABLE souls DROP COLUMN project`,
		`ALTER TABLE cloud_requests DROP COLUMN memory_mb`, `ALTER TABLE cloud_requests DROP COLUMN vcpus`, `ALTER TABLE cloud_requests DROP COLUMN project`,
		`ALTER TABLE audit_events DROP COLUMN project`, `ALTER TABLE api_tokens DROP COLUMN project`, `ALTER TABLE runs DROP COLUMN project`,
		`ALTER TABLE profiles DROP COLUMN project`, `ALTER TABLE providers DROP COLUMN project`,
		`DELETE FROM goose_db_version WHERE version_id = 28`,
		`DROP TABLE projects`, `DELETE FROM goose_db_version WHERE version_id = 27`,
		`DROP TABLE oidc_codes`, `ALTER TABLE api_tokens DROP COLUMN person_name`, `ALTER TABLE api_tokens DROP COLUMN person_subject`, `ALTER TABLE api_tokens DROP COLUMN person_issuer`, `DELETE FROM goose_db_version WHERE version_id = 26`,
		`ALTER TABLE runs DROP COLUMN trace_parent`, `DELETE FROM goose_db_version WHERE version_id = 25`,
		`DROP TABLE run_commands`, `DROP INDEX runs_owner`, `ALTER TABLE runs DROP COLUMN epoch`, `DROP TABLE keepers`, `DELETE FROM goose_db_version WHERE version_id = 24`,
		`DROP TABLE webhook_deliveries`, `DELETE FROM goose_db_version WHERE version_id = 23`,
		`DROP TABLE soul_drift`, `ALTER TABLE soul_seeds DROP COLUMN remediate`, `ALTER TABLE soul_seeds DROP COLUMN drift_every_ms`, `DELETE FROM goose_db_version WHERE version_id = 22`,
		`ALTER TABLE run_targets DROP COLUMN changes`, `ALTER TABLE run_targets DROP COLUMN unknown`, `ALTER TABLE runs DROP COLUMN mode`,
		`DELETE FROM goose_db_version WHERE version_id = 21`,
		`DROP TABLE web_sessions`, `DELETE FROM goose_db_version WHERE version_id = 20`,
		`ALTER TABLE soul_seeds DROP COLUMN secret_inputs`, `DELETE FROM goose_db_version WHERE version_id = 19`,
		`DROP INDEX souls_status_sid`, `DROP INDEX souls_provider_sid`, `DROP INDEX IF EXISTS souls_attributes`, `DELETE FROM goose_db_version WHERE version_id = 16`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}

	// Back to the schema before migration 00006, as an older keeper left it
	// (so without the migrations after it either: 00008, souls' last
	// contact; 00010, the deployment id; 00011, souls' certificates and
	// seeds' creators).
	for _, q := range []string{
		`ALTER TABLE soul_seeds DROP COLUMN created_at`, `ALTER TABLE soul_seeds DROP COLUMN created_by`,
		`ALTER TABLE souls DROP COLUMN joined_at`, `ALTER TABLE souls DROP COLUMN cert_not_after`, `ALTER TABLE souls DROP COLUMN cert_serial`,
		`DELETE FROM goose_db_version WHERE version_id = 11`,
		`DROP TABLE keeper_deployment`, `DELETE FROM goose_db_version WHERE version_id = 10`,
		`ALTER TABLE souls DROP COLUMN last_error`, `ALTER TABLE souls DROP COLUMN last_seen_at`, `DELETE FROM goose_db_version WHERE version_id = 8`,
		`ALTER TABLE audit_head DROP COLUMN keyed_from`, `DELETE FROM goose_db_version WHERE version_id = 6`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// testAuditLegacyUpgrade: a database whose rows an older keeper wrote with
// plain SHA-256 is migrated; its rows verify as legacy, the first keyed row
// chains onto them, and a keyed row cannot be passed off as a legacy one.
func testAuditLegacyUpgrade(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	db := s.DB()
	downgradeToLegacy(t, db)
	prev := audit.GenesisHash
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for seq := int64(1); seq <= 3; seq++ {
		e := audit.Event{Seq: seq, At: at, ActorAID: "tok_old", Action: "provider.created", Object: fmt.Sprint("provider/old", seq), Payload: "{}", PrevHash: prev}
		e.Hash = audit.LegacyHash(e)
		if _, err := db.Exec(sqlFor(b, `INSERT INTO audit_events (seq, at, actor_aid, action, object, payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
			e.Seq, e.At, e.ActorAID, e.Action, e.Object, e.Payload, e.PrevHash, e.Hash); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
	}
	if _, err := db.Exec(sqlFor(b, `UPDATE audit_head SET seq = 3, hash = ? WHERE id = 1`), prev); err != nil {
		t.Fatal(err)
	}
	applied, err := b.Migrate(ctx, db)
	if err != nil || !slices.Equal(applied, []int64{6, 8, 10, 11, 16, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33}) {
		t.Fatalf("migrate = %v, %v; want [6 8 10 11 16 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33]", applied, err)
	}
	head, err := s.AuditHead(ctx)
	if err != nil || head.KeyedFrom != 4 {
		t.Fatalf("head after upgrade = %+v, %v; want keyed from 4", head, err)
	}
	mustProvider(t, s, "new")
	evs := allEvents(t, s)
	if evs[3].PrevHash != evs[2].Hash || evs[3].Hash != testdb.AuditKey.Hash(evs[3]) {
		t.Fatalf("the first keyed row does not chain onto the legacy rows: %+v", evs[3])
	}
	r := verifyChain(t, s, 4)
	if r.Legacy != 3 {
		t.Fatalf("legacy = %d, want 3", r.Legacy)
	}
	// The first keyed row's HMAC covers the last legacy row's hash: legacy
	// rows edited after the upgrade, even with the legacy chain recomputed,
	// no longer link to it.
	prev = audit.GenesisHash
	for _, le := range evs[:3] {
		if le.Seq == 2 {
			le.ActorAID = "tok_someone_else"
		}
		le.PrevHash = prev
		le.Hash = audit.LegacyHash(le)
		if _, err := db.Exec(sqlFor(b, `UPDATE audit_events SET actor_aid = ?, prev_hash = ?, hash = ? WHERE seq = ?`), le.ActorAID, le.PrevHash, le.Hash, le.Seq); err != nil {
			t.Fatal(err)
		}
		prev = le.Hash
	}
	r = tamperReport(t, s)
	if r.OK || !hasProblem(r, audit.ProblemRelinked, 4, "") {
		t.Fatalf("legacy rows recomputed after the upgrade: %v %+v", kinds(r), r.Problems)
	}
	for _, le := range evs[:3] { // put them back
		if _, err := db.Exec(sqlFor(b, `UPDATE audit_events SET actor_aid = ?, prev_hash = ?, hash = ? WHERE seq = ?`), le.ActorAID, le.PrevHash, le.Hash, le.Seq); err != nil {
			t.Fatal(err)
		}
	}
	verifyChain(t, s, 4)

	// A keyed row recomputed with SHA-256 does not pass as legacy.
	e := evs[3]
	e.Object = "provider/forged"
	e.Hash = audit.LegacyHash(e)
	if _, err := db.Exec(sqlFor(b, `UPDATE audit_events SET object = ?, hash = ? WHERE seq = 4`), e.Object, e.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(sqlFor(b, `UPDATE audit_head SET hash = ? WHERE id = 1`), e.Hash); err != nil {
		t.Fatal(err)
	}
	r = tamperReport(t, s)
	if r.OK || !hasProblem(r, audit.ProblemUnkeyed, 4, "rows 4..4") {
		t.Fatalf("downgraded keyed row: %v %+v", kinds(r), r.Problems)
	}
}

func readCheckpoint(t *testing.T, dir string) audit.Checkpoint {
	t.Helper()
	path := audit.CheckpointPath(dir, "keeper-test-1")
	f, err := audit.ReadCheckpoint(path, testdb.AuditKey)
	if err != nil || f.Err != nil {
		t.Fatalf("read checkpoint: %v %v", err, f.Err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	return f.Checkpoint
}

// testAuditCheckpointConcurrent: mutations committing concurrently report
// their heads to the checkpointer in any order; the checkpoint only moves
// forward and always names a committed row.
func testAuditCheckpointConcurrent(t *testing.T, b testdb.Backend) {
	s, cp, dir := keyedStore(t, b, 1)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: fmt.Sprint("c", i), Driver: "local"}, Actor: "tok_test"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := cp.Flush(); err != nil {
		t.Fatal(err)
	}
	if ck := readCheckpoint(t, dir); ck.Seq != 16 {
		t.Fatalf("checkpoint after 16 concurrent events = %+v", ck)
	}
	if r := verifyWith(t, s, dir); !r.OK || r.Checked != 16 || r.Checkpoints != 1 {
		t.Fatalf("verify: %+v", r)
	}
}

// testAuditCheckpointer: a checkpoint every N events and on Flush, a clean
// restart that agrees with it, and a restart after truncation that keeps
// the old checkpoint as the evidence.
func testAuditCheckpointer(t *testing.T, b testdb.Backend) {
	s, cp, dir := keyedStore(t, b, 3)
	if ck := readCheckpoint(t, dir); ck.Seq != 0 || ck.KeyedFrom != 1 {
		t.Fatalf("start checkpoint = %+v", ck)
	}
	for i := range 7 {
		mustProvider(t, s, fmt.Sprint("p", i))
	}
	evs := allEvents(t, s)
	if ck := readCheckpoint(t, dir); ck.Seq != 6 || ck.Hash != evs[5].Hash {
		t.Fatalf("checkpoint after 7 events every 3 = %+v, want row 6", ck)
	}
	if err := cp.Flush(); err != nil {
		t.Fatal(err)
	}
	if ck := readCheckpoint(t, dir); ck.Seq != 7 || ck.Hash != evs[6].Hash {
		t.Fatalf("checkpoint after flush = %+v, want row 7", ck)
	}

	// A clean restart agrees with the checkpoint and verifies.
	again := audit.NewCheckpointer(audit.CheckpointerConfig{Dir: dir, KeeperID: "keeper-test-1", Key: testdb.AuditKey, Every: 3})
	if p := startCheckpointer(t, s, again); p != nil {
		t.Fatalf("clean restart: %+v", p)
	}
	if r := verifyWith(t, s, dir); !r.OK || r.Checkpoints != 1 {
		t.Fatalf("verify after a clean restart: %+v", r)
	}

	// Truncated while the keeper was down: the restart names it and never
	// overwrites the checkpoint, not even when events follow.
	for _, q := range []string{
		`DELETE FROM audit_events WHERE seq > 5`,
		`UPDATE audit_head SET seq = 5, hash = (SELECT hash FROM audit_events WHERE seq = 5) WHERE id = 1`,
	} {
		if _, err := s.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	third := audit.NewCheckpointer(audit.CheckpointerConfig{Dir: dir, KeeperID: "keeper-test-1", Key: testdb.AuditKey, Every: 1})
	p := startCheckpointer(t, s, third)
	if p == nil || p.Kind != audit.ProblemTruncated || p.Seq != 7 {
		t.Fatalf("restart after truncation: %+v", p)
	}
	head, _ := s.AuditHead(ctx)
	third.Appended(audit.Head{Seq: head.Seq + 5, Hash: "x"})
	if err := third.Flush(); err != nil {
		t.Fatal(err)
	}
	if ck := readCheckpoint(t, dir); ck.Seq != 7 || ck.Hash != evs[6].Hash {
		t.Fatalf("the evidence was overwritten: %+v", ck)
	}
}
