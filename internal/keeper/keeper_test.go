package keeper_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/testdb"
)

var keeperBin string

// bins are the module's other commands the tests run (driver plugins, the
// soul agent, soulctl), each built once for the whole test binary.
var bins = &keepertest.Binaries{}

func TestMain(m *testing.M) {
	bustest.RunAgentIfAsked() // an agent process of the agent transport's tests
	localcloud.RunIfChild()   // a local VM behind the nubes fake (TestNubesSeedFlow)
	flag.Parse()
	// Most of these tests wait (on keepers, VMs, timers) far more than they
	// compute: four at a time by default keeps two cores busy where two
	// left them half idle. -parallel still says otherwise.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet && runtime.GOMAXPROCS(0) < 4 {
		_ = flag.Set("test.parallel", "4")
	}
	dir, err := os.MkdirTemp("", "keeper-bin-")
	if err != nil {
		panic(err)
	}
	bins.Dir = dir
	keeperBin, err = keepertest.Build(dir)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a keeper process started by a test.
type proc = keepertest.Proc

// spawn starts a keeper process as o says (keepertest.Spawn), its plugins
// from this test binary's bins.
func spawn(t testing.TB, o keepertest.Options) *keepertest.Server {
	t.Helper()
	o.Bins = bins
	return keepertest.Spawn(t, keeperBin, o)
}

// databaseArgs are the serve arguments of a backend: none for sqlite (the
// data dir's file), a fresh database for postgres.
func databaseArgs(t testing.TB, backend string) []string {
	t.Helper()
	if backend == "postgres" {
		return []string{"--database-url", testdb.FreshPostgres(t)}
	}
	return nil
}

// serve starts `keeper serve` with args in dir and waits until it listens.
// Its keeper.yml lets it resolve the tests' key and credential files
// (testCredentials): without a --config in args, a keeper.yml of that
// alone; a --config without a credentials section gets it added.
func serve(t testing.TB, dir string, args ...string) *proc {
	t.Helper()
	i := slices.Index(args, "--config")
	if i < 0 || i+1 >= len(args) {
		args = append([]string{"--config", keeperConfig(t, dir, "")}, args...)
	} else if b, err := os.ReadFile(args[i+1]); err == nil && !strings.Contains(string(b), "credentials:") {
		if err := os.WriteFile(args[i+1], append([]byte(testCredentials), b...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return keepertest.Serve(t, keeperBin, dir, args...)
}

func TestServeSQLiteZeroConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	tokenPath := filepath.Join(dir, ".keeper", "admin.token")
	fi, err := os.Stat(tokenPath)
	if err != nil {
		t.Fatalf("admin.token: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token mode = %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, ".keeper", "keeper.db")); err != nil {
		t.Fatalf("no embedded database: %v", err)
	}
	raw, _ := os.ReadFile(tokenPath)
	token := strings.TrimSpace(string(raw))
	c, _ := client.New(k.Addr, token)
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "local.test"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(k.Addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	logs := k.Interrupt(t)
	if strings.Contains(logs, token) {
		t.Fatal("the log shows the admin token")
	}
	if !strings.Contains(logs, "admin.token") || !strings.Contains(logs, "stopped") {
		t.Fatalf("log lacks the token path or the clean stop:\n%s", logs)
	}

	// A restart keeps the data and the token, and creates no second admin.
	k = serve(t, dir)
	c, _ = client.New(k.Addr, token)
	if _, err := c.ProviderGet(context.Background(), "local"); err != nil {
		t.Fatalf("provider lost across restart: %v", err)
	}
	tokens, err := c.TokenList(context.Background(), client.ListOptions{})
	if err != nil || len(tokens.Items) != 1 {
		t.Fatalf("tokens after restart = %+v, %v", tokens, err)
	}
	if raw2, _ := os.ReadFile(tokenPath); string(raw2) != string(raw) {
		t.Fatal("admin.token was rewritten on restart")
	}
	k.Interrupt(t)

	// keeper audit verify reads the same database.
	out, err := exec.Command(keeperBin, "audit", "verify", "--data-dir", filepath.Join(dir, ".keeper")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "audit chain OK: 2 events") {
		t.Fatalf("keeper audit verify: %v\n%s", err, out)
	}
}

func TestServePostgres(t *testing.T) {
	t.Parallel()
	url := testdb.FreshPostgres(t)
	dir := t.TempDir()
	k := serve(t, dir, "--database-url", url, "--data-dir", filepath.Join(dir, "data"))
	raw, err := os.ReadFile(filepath.Join(dir, "data", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(k.Addr, strings.TrimSpace(string(raw)))
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "pg", Driver: "local"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "keeper.db")); err == nil {
		t.Fatal("a SQLite file was created although PostgreSQL was configured")
	}
	k.Interrupt(t)

	// Verifying needs the audit key (from the data key) and the
	// checkpoints, both in the keeper's data dir, not in the database.
	out, err := exec.Command(keeperBin, "audit", "verify", "--database-url", url, "--data-dir", filepath.Join(dir, "data"), "--json").CombinedOutput()
	var r client.AuditReport
	if err != nil || json.Unmarshal(out, &r) != nil || !r.OK || r.Checked != 2 || r.Checkpoints != 1 {
		t.Fatalf("keeper audit verify on postgres: %v\n%s", err, out)
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		out, err := exec.Command(keeperBin, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("version"); err != nil || !strings.HasPrefix(out, "keeper ") {
		t.Fatalf("keeper version: %v %s", err, out)
	}
	out, err := run("serve", "--help")
	if err != nil || !strings.Contains(out, "--database-url") || !strings.Contains(out, "admin.token") {
		t.Fatalf("keeper serve --help: %v %s", err, out)
	}
	if out, err := run("serve", "--listen", "nonsense"); err == nil || !strings.Contains(out, "listen") {
		t.Fatalf("bad --listen accepted: %s", out)
	}
	cfg := filepath.Join(t.TempDir(), "keeper.yml")
	_ = os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nlisten_port: 9\n"), 0o600)
	if out, err := run("serve", "--config", cfg); err == nil || !strings.Contains(out, "listen_port") {
		t.Fatalf("unknown config key accepted: %s", out)
	}
	dir := t.TempDir()
	if out, err := run("migrate", "--data-dir", dir); err != nil || !strings.Contains(out, "latest") {
		t.Fatalf("keeper migrate: %v %s", err, out)
	}
}

func TestAuditVerifyDetectsTampering(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	raw, _ := os.ReadFile(filepath.Join(dir, ".keeper", "admin.token"))
	c, _ := client.New(k.Addr, strings.TrimSpace(string(raw)))
	for _, n := range []string{"a", "b", "c"} {
		if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: n, Driver: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	k.Interrupt(t)
	// Edit a row behind the keeper's back, through the database file.
	db := filepath.Join(dir, ".keeper", "keeper.db")
	if err := tamper(db, `UPDATE audit_events SET actor_aid = 'someone-else' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(keeperBin, "audit", "verify", "--data-dir", filepath.Join(dir, ".keeper")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "row 3: audit.row_tampered") {
		t.Fatalf("keeper audit verify after tampering: %v\n%s", err, out)
	}
}
