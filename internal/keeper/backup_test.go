package keeper_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/testdb"
)

// keeperCmd runs a keeper subcommand and returns its combined output and
// whether it exited 0.
func keeperCmd(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	out, err := exec.Command(keeperBin, args...).CombinedOutput()
	return string(out), err == nil
}

// TestBackupRestoreWhileRunsExecute: `keeper backup` while 20 runs
// execute, then more writes; the backup restored into a new data dir (only
// with the data key, which the backup does not hold) starts a keeper whose
// audit chain verifies with no file moved by hand, whose runs in flight at
// the backup end by the rules of a keeper restart, and whose souls and
// tokens work; what was written after the backup is not there.
func TestBackupRestoreWhileRunsExecute(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	const n = 20
	ctx := context.Background()
	ids, ledger := ledgerRuns(t, c, n)
	for _, id := range ids[:4] {
		waitFor(t, c, id, "a step running", func(r *client.Run) bool { return stepRunning("first")(r) || stepRunning("second")(r) })
	}
	backup := filepath.Join(t.TempDir(), "keeper.backup")
	out, ok := keeperCmd(t, "backup", backup, "--data-dir", data)
	if !ok || !strings.Contains(out, "backed up keeper") || !strings.Contains(out, "the data key is not in the backup") {
		t.Fatalf("keeper backup while runs execute: %s", out)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	key, err := os.ReadFile(filepath.Join(data, "data.key"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(backup); strings.Contains(string(b), strings.TrimSpace(string(key))) {
		t.Fatal("the backup holds the data key")
	}
	// More writes after the backup, then the keeper is lost.
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "after-backup", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitFor(t, c, id, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	}
	k.Interrupt(t)
	token, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}

	dir2 := t.TempDir()
	data2 := filepath.Join(dir2, ".keeper")
	if out, ok := keeperCmd(t, "restore", backup, "--data-dir", data2); ok || !strings.Contains(out, "restore.data_key") {
		t.Fatalf("restore without the data key: %s", out)
	}
	other := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(other, []byte("c29tZSBvdGhlciBrZXkgb2YgMzIgYnl0ZXMsIG5vdCBpdA==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, ok := keeperCmd(t, "restore", backup, "--data-dir", data2, "--data-key", other); ok || !strings.Contains(out, "restore.data_key") {
		t.Fatalf("restore with another key: %s", out)
	}
	if ents, _ := os.ReadDir(data2); len(ents) != 0 {
		t.Fatalf("a refused restore left %v", ents)
	}
	out, ok = keeperCmd(t, "restore", backup, "--data-dir", data2, "--data-key", filepath.Join(data, "data.key"))
	if !ok || !strings.Contains(out, "audit history continues from row") {
		t.Fatalf("keeper restore: %s", out)
	}
	if out, ok := keeperCmd(t, "restore", backup, "--data-dir", data2, "--data-key", filepath.Join(data, "data.key")); ok || !strings.Contains(out, "restore.not_empty") {
		t.Fatalf("a second restore into the same dir: %s", out)
	}
	// Private keys were sealed in the backup and are back in clear.
	for _, p := range []string{"ssh/id_ed25519", "tls/ca.key", "keeper.id"} {
		a, err1 := os.ReadFile(filepath.Join(data, p))
		b, err2 := os.ReadFile(filepath.Join(data2, p))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Errorf("%s after the restore: %v %v equal=%v", p, err1, err2, string(a) == string(b))
		}
	}

	k2 := serve(t, dir2)
	c2, err := client.New(k2.Addr, strings.TrimSpace(string(token)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.ProviderGet(ctx, "after-backup"); err == nil {
		t.Error("a provider created after the backup is in the restored keeper")
	}
	counts := map[client.Phase]int{}
	for _, id := range ids {
		final := waitFor(t, c2, id, "the run finishing on the restored keeper", func(r *client.Run) bool { return client.Terminal(r.Phase) })
		counts[final.Phase]++
		if final.Phase != "Succeeded" && (final.Error == nil || final.Error.Code == "") {
			t.Errorf("run %s ended %s without a code", id, final.Phase)
		}
	}
	b, _ := os.ReadFile(ledger)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("runs of the backup on the restored keeper: %v; %d commands ran for %d steps", counts, len(lines), 2*n)
	if counts["Succeeded"] == 0 {
		t.Errorf("no run succeeded on the restored keeper: %v", counts)
	}
	// The soul and the keeper's SSH key work; so does a new token.
	run, _, err := c2.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: again\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'echo restored'}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if final := waitFor(t, c2, run.ID, "a new run", func(r *client.Run) bool { return client.Terminal(r.Phase) }); final.Phase != "Succeeded" {
		t.Fatalf("a run on the restored keeper = %s %+v", final.Phase, final.Error)
	}
	if _, err := c2.TokenCreate(ctx, client.TokenCreate{Name: "after-restore", Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	evs, err := c2.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	for _, e := range evs.Items {
		if e.Action == "keeper.restored" {
			restored++
		}
	}
	if restored != 1 || evs.Verify == nil || !evs.Verify.OK || evs.Verify.Restores != 1 {
		t.Fatalf("%d keeper.restored events; the running keeper's verification: %+v", restored, evs.Verify)
	}
	k2.Interrupt(t)
	out, ok = keeperCmd(t, "audit", "verify", "--data-dir", data2)
	if !ok || !strings.Contains(out, "audit chain OK") || !strings.Contains(out, "restore record") {
		t.Fatalf("audit verify after the restore: %s", out)
	}
}

// TestRestoreCannotHideTruncation: a backup refuses a log whose rows were
// removed (its checkpoint records them); a restored log whose rows are
// then removed below the backup's last row fails verification, restore
// record or not; and a restore into a data dir whose checkpoint directory
// records rows the backup lacks from before the backup is refused.
func TestRestoreCannotHideTruncation(t *testing.T) {
	t.Parallel()
	k := newAuditKeeper(t, "sqlite")
	p := k.serve()
	c := k.client(p)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: n, Driver: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	p.Interrupt(t)
	backup := filepath.Join(t.TempDir(), "good.backup")
	if out, ok := keeperCmd(t, "backup", backup, "--data-dir", k.dataDir); !ok {
		t.Fatalf("backup: %s", out)
	}

	// 1. The live log truncated behind the keeper's back: no backup.
	db := k.db()
	k.exec(db, `DELETE FROM audit_events WHERE seq > 3`)
	k.exec(db, `UPDATE audit_head SET seq = 3, hash = (SELECT hash FROM audit_events WHERE seq = 3) WHERE id = 1`)
	if out, ok := keeperCmd(t, "backup", filepath.Join(t.TempDir(), "bad.backup"), "--data-dir", k.dataDir); ok || !strings.Contains(out, "backup.audit_broken") || !strings.Contains(out, "audit.truncated") {
		t.Fatalf("backup of a truncated log: %s", out)
	}

	// 2. The restored log truncated below the backup's last row.
	data2 := filepath.Join(t.TempDir(), "data")
	if out, ok := keeperCmd(t, "restore", backup, "--data-dir", data2, "--data-key", filepath.Join(k.dataDir, "data.key")); !ok {
		t.Fatalf("restore: %s", out)
	}
	k2 := &auditKeeper{t: t, backend: "sqlite", dir: filepath.Dir(data2), dataDir: data2}
	if r, ok := k2.verify(); !ok || !r.OK || r.Restores != 1 {
		t.Fatalf("verify after the restore: %+v", r)
	}
	db2 := k2.db()
	k2.exec(db2, `DELETE FROM audit_events WHERE seq > 2`)
	k2.exec(db2, `UPDATE audit_head SET seq = 2, hash = (SELECT hash FROM audit_events WHERE seq = 2) WHERE id = 1`)
	if r, ok := k2.verify(); ok || r.OK || !hasProblem(r, "audit.truncated") {
		t.Fatalf("verify of the restored log truncated below the backup = %+v", r)
	}

	// 3. The checkpoint directory records, from before the backup, rows
	// the backup does not hold (a backup made of a truncated log by other
	// means): the restore is refused.
	ckdir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "keeper.yml")
	if err := os.WriteFile(cfg, []byte("audit_checkpoint_dir: "+ckdir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(k.dataDir, "audit"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("checkpoints: %v %v", ents, err)
	}
	// The live keeper's checkpoint (at row 6, written before a second
	// backup made now of the truncated database copied by hand).
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(k.dataDir, "audit", e.Name()))
		if err := os.WriteFile(filepath.Join(ckdir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.RemoveAll(filepath.Join(k.dataDir, "audit"))
	truncated := filepath.Join(t.TempDir(), "truncated.backup")
	if out, ok := keeperCmd(t, "backup", truncated, "--data-dir", k.dataDir); !ok {
		t.Fatalf("backup without the checkpoints: %s", out)
	}
	data3 := filepath.Join(t.TempDir(), "data")
	out, ok := keeperCmd(t, "restore", truncated, "--config", cfg, "--data-dir", data3, "--data-key", filepath.Join(k.dataDir, "data.key"))
	if ok || !strings.Contains(out, "restore.audit_truncated") || !strings.Contains(out, "audit.truncated") {
		t.Fatalf("restore of a truncated backup over the checkpoints that record it: %s", out)
	}
}

// TestRestoreSupersedesLaterCheckpoints: with the checkpoint directory
// kept outside the data dir, a restore finds there the checkpoint the lost
// keeper wrote after the backup; it records it as superseded (no file moved
// by hand), the restored keeper starts and checkpoints afresh, and the
// chain verifies before and after it serves.
func TestRestoreSupersedesLaterCheckpoints(t *testing.T) {
	t.Parallel()
	ckdir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "keeper.yml")
	if err := os.WriteFile(cfg, []byte("audit_checkpoint_dir: "+ckdir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := newAuditKeeper(t, "sqlite")
	create := func(names ...string) {
		p := k.serve("--config", cfg)
		c := k.client(p)
		for _, n := range names {
			if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: n, Driver: "local"}); err != nil {
				t.Fatal(err)
			}
		}
		p.Interrupt(t)
	}
	create("a", "b")
	backup := filepath.Join(t.TempDir(), "keeper.backup")
	if out, ok := keeperCmd(t, "backup", backup, "--config", cfg, "--data-dir", k.dataDir); !ok {
		t.Fatalf("backup: %s", out)
	}
	create("c", "d", "e") // lost with the keeper; its checkpoint stays in ckdir
	key := filepath.Join(t.TempDir(), "data.key")
	if b, err := os.ReadFile(filepath.Join(k.dataDir, "data.key")); err != nil || os.WriteFile(key, b, 0o600) != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(k.dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(k.dataDir); err != nil {
		t.Fatal(err)
	}
	out, ok := keeperCmd(t, "restore", backup, "--config", cfg, "--data-dir", k.dataDir, "--data-key", key)
	if !ok || !strings.Contains(out, "1 checkpoint(s) written after the backup superseded") {
		t.Fatalf("restore over a later checkpoint: %s", out)
	}
	// The operator's admin token is not in the backup; its hash is.
	if err := os.WriteFile(filepath.Join(k.dataDir, "admin.token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	verify := func(what string) {
		t.Helper()
		out, err := exec.Command(keeperBin, "audit", "verify", "--json", "--config", cfg, "--data-dir", k.dataDir).Output()
		var r client.AuditReport
		if err != nil || json.Unmarshal(out, &r) != nil || !r.OK || r.Restores != 1 {
			t.Fatalf("verify %s: %v\n%s", what, err, out)
		}
	}
	verify("after the restore")
	p := k.serve("--config", cfg)
	c := k.client(p)
	if _, err := c.ProviderGet(context.Background(), "c"); err == nil {
		t.Error("a provider of the lost keeper's last writes is back")
	}
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "f", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	logs := p.Interrupt(t)
	if strings.Contains(logs, "audit.truncated") {
		t.Fatalf("the restored keeper saw a truncation:\n%s", logs)
	}
	verify("after the restored keeper served")
}

func hasProblem(r client.AuditReport, kind string) bool {
	for _, p := range r.Problems {
		if p.Kind == kind {
			return true
		}
	}
	return false
}

// pgTool finds a PostgreSQL client program of the server's packages.
func pgTool(t *testing.T, name string) string {
	t.Helper()
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(m) > 0 {
		return m[len(m)-1]
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: scripts/test installs postgresql", name)
	}
	return p
}

// TestBackupRestorePostgres: with PostgreSQL, `keeper backup` keeps what
// is not in the database and pg_dump the database (docs/operations.md);
// after pg_restore into a new database, `keeper restore` with its URL
// brings the keeper back, its chain verifies, and it serves.
func TestBackupRestorePostgres(t *testing.T) {
	t.Parallel()
	k := newAuditKeeper(t, "postgres")
	p := k.serve()
	c := k.client(p)
	for _, n := range []string{"a", "b"} {
		if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: n, Driver: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	tmp := t.TempDir()
	backup, dump := filepath.Join(tmp, "keeper.backup"), filepath.Join(tmp, "keeper.dump")
	out, ok := keeperCmd(t, append([]string{"backup", backup}, k.flags()...)...)
	if !ok || !strings.Contains(out, "(postgres,") {
		t.Fatalf("keeper backup on postgres: %s", out)
	}
	if out, err := exec.Command(pgTool(t, "pg_dump"), "--format=custom", "--file", dump, k.url).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "lost", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	p.Interrupt(t)
	token, err := os.ReadFile(filepath.Join(k.dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}

	k2 := &auditKeeper{t: t, backend: "postgres", dir: t.TempDir(), url: testdb.FreshPostgres(t)}
	k2.dataDir = filepath.Join(k2.dir, "data")
	if out, err := exec.Command(pgTool(t, "pg_restore"), "--no-owner", "--dbname", k2.url, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	if out, ok := keeperCmd(t, append([]string{"restore", backup, "--data-key", filepath.Join(k.dataDir, "data.key")}, k2.flags()...)...); !ok {
		t.Fatalf("keeper restore on postgres: %s", out)
	}
	if r, ok := k2.verify(); !ok || !r.OK || r.Restores != 1 {
		t.Fatalf("verify after the restore: %+v", r)
	}
	if err := os.WriteFile(filepath.Join(k2.dataDir, "admin.token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	p2 := k2.serve()
	c2 := k2.client(p2)
	if _, err := c2.ProviderGet(context.Background(), "b"); err != nil {
		t.Fatalf("provider b after the restore: %v", err)
	}
	if _, err := c2.ProviderGet(context.Background(), "lost"); err == nil {
		t.Error("a provider created after the dump is back")
	}
	p2.Interrupt(t)
	if r, ok := k2.verify(); !ok || !r.OK {
		t.Fatalf("verify after the restored keeper served: %+v", r)
	}
}

// TestRestoreRefusesATamperedArchive: a real backup archive whose
// keeper.db is edited (a viewer token made a keeper-wide admin) and whose
// manifest is fixed to the new size and digest is refused by restore
// (restore.tampered), and nothing is restored; so is one whose manifest
// alone is edited. The untouched archive restores.
func TestRestoreRefusesATamperedArchive(t *testing.T) {
	t.Parallel()
	k := newAuditKeeper(t, "sqlite")
	p := k.serve()
	c := k.client(p)
	viewer, err := c.TokenCreate(context.Background(), client.TokenCreate{Name: "viewer", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	p.Interrupt(t)
	backup := filepath.Join(t.TempDir(), "keeper.backup")
	if out, ok := keeperCmd(t, "backup", backup, "--data-dir", k.dataDir); !ok {
		t.Fatalf("backup: %s", out)
	}
	key := filepath.Join(k.dataDir, "data.key")
	restore := func(archive string) (string, bool, string) {
		data := filepath.Join(t.TempDir(), "data")
		out, ok := keeperCmd(t, "restore", archive, "--data-dir", data, "--data-key", key)
		return out, ok, data
	}

	edited := rewriteArchive(t, backup, func(name string, b []byte) []byte {
		if name != "keeper.db" {
			return b
		}
		f := filepath.Join(t.TempDir(), "keeper.db")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := sqlite.Open(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB().Exec(`UPDATE api_tokens SET role = 'admin' WHERE id = ?`, viewer.ID); err != nil {
			t.Fatal(err)
		}
		s.Close()
		b, err = os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, nil)
	out, ok, data := restore(edited)
	if ok || !strings.Contains(out, "restore.tampered") {
		t.Fatalf("restore of an archive with an edited database and a fixed manifest: %v\n%s", ok, out)
	}
	if _, err := os.Stat(filepath.Join(data, "keeper.db")); err == nil {
		t.Fatal("a refused restore wrote the database")
	}
	renamed := rewriteArchive(t, backup, nil, func(m map[string]any) { m["keeper_id"] = "kd-someone-else" })
	if out, ok, _ := restore(renamed); ok || !strings.Contains(out, "restore.tampered") {
		t.Fatalf("restore of an archive with an edited manifest: %v\n%s", ok, out)
	}
	if out, ok, _ := restore(backup); !ok {
		t.Fatalf("restore of the archive as made: %s", out)
	}
}

// rewriteArchive copies a backup archive with each member passed through
// member (nil: unchanged) and the manifest's sizes and digests fixed to
// match, then edit applied to the manifest (nil: none): what someone
// holding the archive but not the data key can do.
func rewriteArchive(t *testing.T, file string, member func(name string, b []byte) []byte, edit func(map[string]any)) string {
	t.Helper()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	var entries []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if member != nil && h.Name != "manifest.json" {
			b = member(h.Name, b)
		}
		entries = append(entries, entry{h, b})
	}
	var m map[string]any
	if err := json.Unmarshal(entries[0].data, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m["files"].([]any) {
		f := f.(map[string]any)
		for _, e := range entries[1:] {
			if e.hdr.Name == f["name"] {
				sum := sha256.Sum256(e.data)
				f["size"], f["sha256"] = len(e.data), hex.EncodeToString(sum[:])
			}
		}
	}
	if edit != nil {
		edit(m)
	}
	if entries[0].data, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(t.TempDir(), "tampered.backup")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(out)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		e.hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(e.hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return outPath
}
