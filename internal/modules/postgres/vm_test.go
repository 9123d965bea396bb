package postgres_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

func TestMain(m *testing.M) {
	// Local VMs are started by re-executing the test binary.
	localcloud.RunIfChild()
	os.Exit(m.Run())
}

// newVM starts a local VM (it has the host's PostgreSQL packages) logged
// into as sshUser; see moduletest.NewVM.
func newVM(t *testing.T, sshUser string) *moduletest.VM {
	t.Helper()
	return moduletest.NewVM(t, sshUser, "pg.test", "/usr/bin/pg_ctlcluster")
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
	owners := tg.Sh(t, `runuser -u postgres -- psql -XAt -F ' ' -c "SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE datname IN ('appdb', 'reports', 'app_audit') ORDER BY datname"`)
	if want := "app_audit app\nappdb app\nreports report"; owners != want {
		t.Fatalf("databases and owners:\n%s\nwant:\n%s", owners, want)
	}
	roles := tg.Sh(t, `runuser -u postgres -- psql -XAt -F ' ' -c "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname IN ('app', 'report', 'audit') ORDER BY rolname"`)
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
	tg.Sh(t, `runuser -u postgres -- psql -XAtc 'ALTER ROLE audit NOLOGIN'`)
	res, n, err = run(t, tg, params(reportPass2, false))
	check(res, n, err, true, false)
	if got := tg.Sh(t, `runuser -u postgres -- psql -XAtc "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'audit'"`); got != "t" {
		t.Fatalf("audit rolcanlogin = %s after the run", got)
	}

	// Remote access: one entry per database, for its owner.
	res, n, err = run(t, tg, params(reportPass2, true))
	check(res, n, err, true, true)
	block := tg.Sh(t, `sed -n '/^# BEGIN soulstack/,/^# END soulstack/p' /etc/postgresql/*/main/pg_hba.conf`)
	want := "# BEGIN soulstack core.postgres.installed\n" +
		"host\t\"appdb\"\t\"app\"\t0.0.0.0/0\tscram-sha-256\n" +
		"host\t\"reports\"\t\"report\"\t0.0.0.0/0\tscram-sha-256\n" +
		"host\t\"app_audit\"\t\"app\"\t0.0.0.0/0\tscram-sha-256\n" +
		"# END soulstack core.postgres.installed"
	if block != want {
		t.Fatalf("pg_hba.conf block:\n%s\nwant:\n%s", block, want)
	}
	loginFromHost(t, tg.PrimaryIP, "report", "reports", reportPass2)
	loginFromHost(t, tg.PrimaryIP, "app", "app_audit", appPass)
	res, n, err = run(t, tg, params(reportPass2, true))
	check(res, n, err, false, false)

	for i, c := range tg.Commands() {
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
