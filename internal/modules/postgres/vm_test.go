package postgres_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/module"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
	"golang.org/x/crypto/ssh"
)

func TestMain(m *testing.M) {
	// Local VMs are started by re-executing the test binary.
	localcloud.RunIfChild()
	os.Exit(m.Run())
}

// vmTarget is a module.Target on a local VM that records every command
// it runs, so tests can count round trips and look for secrets.
type vmTarget struct {
	vm     driversdk.VM
	client *sshx.Client

	mu   sync.Mutex
	cmds []module.Command
}

// SID returns the VM's FQDN.
func (t *vmTarget) SID() string { return t.vm.FQDN }

// Exec records cmd and runs it on the VM, through sudo when the login
// user is not root, as the engine does for modules that need root.
func (t *vmTarget) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	t.mu.Lock()
	t.cmds = append(t.cmds, cmd)
	t.mu.Unlock()
	res, err := t.client.Exec(ctx, sshx.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: true})
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}

// calls returns how many commands ran so far.
func (t *vmTarget) calls() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cmds)
}

// commands returns the commands run so far.
func (t *vmTarget) commands() []module.Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]module.Command(nil), t.cmds...)
}

// sh runs a shell script on the VM as root, outside the record, and
// returns its trimmed standard output; a failure fails the test.
func (t *vmTarget) sh(tb testing.TB, script string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := t.client.Exec(ctx, sshx.Command{Script: script, Sudo: true})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("%s: %v (exit %d) %s", script, err, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// newVM starts one local VM (an overlay over the host's /, so it has the
// host's PostgreSQL packages) logged into as sshUser, and destroys it when
// the test ends. It skips the test where local VMs cannot run.
func newVM(t *testing.T, sshUser string) *vmTarget {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skipf("local VMs need root on Linux (running as uid %d on %s)", os.Geteuid(), runtime.GOOS)
	}
	for _, f := range []string{"/usr/sbin/sshd", "/usr/bin/pg_ctlcluster"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("the VM test needs %s on the host", f)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "soulstack-postgres-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	d := localcloud.New(localcloud.Options{})
	prov := driversdk.Provider{Name: "local", FQDNSuffix: "pg.test", Config: json.RawMessage(`{"state_dir":"` + dir + `"}`)}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vms, err := d.Create(ctx, driversdk.CreateRequest{
		Provider: prov, RequestID: "pg", Count: 1,
		Profile:        json.RawMessage(`{"cpus": 1, "memory_mb": 1024, "ssh_user": "` + sshUser + `"}`),
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := d.List(ctx, driversdk.ListRequest{Provider: prov})
		if err != nil {
			t.Errorf("cleanup: list VMs: %v", err)
		}
		var ids []string
		for _, vm := range list {
			ids = append(ids, vm.ID)
		}
		if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: ids}); err != nil {
			t.Errorf("cleanup: destroy %v: %v", ids, err)
		}
	})
	if err != nil || len(vms) != 1 {
		t.Fatalf("create a VM: %v (%d VMs)", err, len(vms))
	}
	hostKey, _ := vms[0].Attributes["ssh_host_key"].(string)
	c, err := sshx.Dial(ctx, sshx.Target{
		Address: vms[0].PrimaryIP, User: sshUser, PrivateKey: pem.EncodeToMemory(blk), HostKey: hostKey,
		ConnectTimeout: 10 * time.Second,
	}, sshx.Options{})
	if err != nil {
		t.Fatalf("ssh to the VM: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &vmTarget{vm: vms[0], client: c}
}

// TestInstalledExtrasInVM runs the module with two extra users and two
// extra databases in a local VM: the first run creates them all, a second
// run changes nothing in one round trip, a new password of an extra user
// is set, a user that owns no database is verified on postgres (a role
// that may not log in gets LOGIN back), and allow_remote writes one
// pg_hba.conf entry per database, through which a client on the host logs
// in. No password appears in a command's arguments or environment.
func TestInstalledExtrasInVM(t *testing.T) {
	t.Parallel()
	tg := newVM(t, "deploy")
	const (
		appPass     = "canary-xApp:'q\\z"
		reportPass1 = "canary-xReport one"
		reportPass2 = "canary-xReport two"
		auditPass   = "canary-xäudit"
	)
	params := func(reportPass string, remote bool) map[string]any {
		return map[string]any{
			"db_name": "appdb", "db_user": "app", "db_password": appPass, "allow_remote": remote,
			"users": []any{
				map[string]any{"name": "report", "password": reportPass},
				map[string]any{"name": "audit", "password": auditPass},
			},
			"databases": []any{
				map[string]any{"name": "reports", "owner": "report"},
				map[string]any{"name": "app_audit", "owner": "app"},
			},
		}
	}
	check := func(res module.Result, n int, err error, changed, configChanged bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out, _ := res.Output.(map[string]any)
		if res.Changed != changed || out["config_changed"] != configChanged || n != 1 ||
			!reflect.DeepEqual(out["users"], []any{"report", "audit"}) || !reflect.DeepEqual(out["databases"], []any{"reports", "app_audit"}) {
			t.Fatalf("result = %+v in %d round trip(s), want changed=%v config_changed=%v in 1", res, n, changed, configChanged)
		}
	}

	res, n, err := run(t, tg, params(reportPass1, false))
	check(res, n, err, true, false)
	owners := tg.sh(t, `runuser -u postgres -- psql -XAt -F ' ' -c "SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE datname IN ('appdb', 'reports', 'app_audit') ORDER BY datname"`)
	if want := "app_audit app\nappdb app\nreports report"; owners != want {
		t.Fatalf("databases and owners:\n%s\nwant:\n%s", owners, want)
	}
	roles := tg.sh(t, `runuser -u postgres -- psql -XAt -F ' ' -c "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname IN ('app', 'report', 'audit') ORDER BY rolname"`)
	if want := "app t\naudit t\nreport t"; roles != want {
		t.Fatalf("roles:\n%s\nwant:\n%s", roles, want)
	}

	start := time.Now()
	res, n, err = run(t, tg, params(reportPass1, false))
	check(res, n, err, false, false)
	t.Logf("idempotent second run with extras: %d round trip, %v", n, time.Since(start).Round(time.Millisecond))

	// A new password of an extra user: its login fails, so it is set.
	res, n, err = run(t, tg, params(reportPass2, false))
	check(res, n, err, true, false)
	res, n, err = run(t, tg, params(reportPass2, false))
	check(res, n, err, false, false)

	// audit owns no database and is verified on postgres: a role that may
	// no longer log in is noticed and gets LOGIN back.
	tg.sh(t, `runuser -u postgres -- psql -XAtc 'ALTER ROLE audit NOLOGIN'`)
	res, n, err = run(t, tg, params(reportPass2, false))
	check(res, n, err, true, false)
	if got := tg.sh(t, `runuser -u postgres -- psql -XAtc "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'audit'"`); got != "t" {
		t.Fatalf("audit rolcanlogin = %s after the run", got)
	}

	// Remote access: one entry per database, for its owner.
	res, n, err = run(t, tg, params(reportPass2, true))
	check(res, n, err, true, true)
	block := tg.sh(t, `sed -n '/^# BEGIN soulstack/,/^# END soulstack/p' /etc/postgresql/*/main/pg_hba.conf`)
	want := "# BEGIN soulstack core.postgres.installed\n" +
		"host\t\"appdb\"\t\"app\"\t0.0.0.0/0\tscram-sha-256\n" +
		"host\t\"reports\"\t\"report\"\t0.0.0.0/0\tscram-sha-256\n" +
		"host\t\"app_audit\"\t\"app\"\t0.0.0.0/0\tscram-sha-256\n" +
		"# END soulstack core.postgres.installed"
	if block != want {
		t.Fatalf("pg_hba.conf block:\n%s\nwant:\n%s", block, want)
	}
	loginFromHost(t, tg.vm.PrimaryIP, "report", "reports", reportPass2)
	loginFromHost(t, tg.vm.PrimaryIP, "app", "app_audit", appPass)
	res, n, err = run(t, tg, params(reportPass2, true))
	check(res, n, err, false, false)

	for i, c := range tg.commands() {
		for _, pass := range []string{appPass, reportPass1, reportPass2, auditPass} {
			if strings.Contains(strings.Join(c.Argv, "\x00"), pass) {
				t.Errorf("command %d has a password in its arguments", i)
			}
			for k, v := range c.Env {
				if strings.Contains(k+"="+v, pass) {
					t.Errorf("command %d has a password in its environment (%s)", i, k)
				}
			}
		}
	}
}
