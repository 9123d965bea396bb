package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	"github.com/soulstack/soulstack/internal/modules/postgres"
)

// TestFreshInstallInVM runs the module on a local VM booted from the
// driver's debian-bookworm base, which has no PostgreSQL (unlike a VM on
// the view of the host, whose /usr holds the host's packages): the first
// run installs Debian's postgresql packages through apt over the VM's NAT,
// creates the cluster, role and database and verifies SELECT 1 over TCP;
// a second run changes nothing in one round trip; the role logs in over
// TCP with its password from the VM's own shell.
func TestFreshInstallInVM(t *testing.T) {
	t.Parallel()
	tg := moduletest.NewVMWith(t, moduletest.VMOptions{SSHUser: "deploy", Suffix: "pg.test", Base: "debian-bookworm"})
	if got := tg.Sh(t, "command -v psql pg_ctlcluster || echo none; ls /usr/lib/postgresql 2>/dev/null | wc -l"); got != "none\n0" {
		t.Fatalf("the base VM has PostgreSQL before the run: %q", got)
	}
	const pass = "canary-fresh:'pw"
	params := map[string]any{"db_name": "appdb", "db_user": "app", "db_password": pass}
	m := &postgres.Installed{}
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	runOnce := func() (module.Result, int, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		before, start := tg.Calls(), time.Now()
		res, err := m.Run(ctx, module.RunInfo{}, raw, tg)
		d := time.Since(start)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		return res, tg.Calls() - before, d
	}

	res, n, d := runOnce()
	t.Logf("fresh install: %d round trip(s), %v, output %v", n, d.Round(time.Millisecond), res.Output)
	out, _ := res.Output.(map[string]any)
	if !res.Changed || n != 1 || out["status"] != "ok" || !strings.HasPrefix(out["pg_version"].(string), "15.") {
		t.Fatalf("fresh install: %+v in %d round trips, want changed, status ok, Debian 12's PostgreSQL 15", res, n)
	}
	if got := tg.Sh(t, "dpkg-query -W -f '${Status}\\n' postgresql postgresql-contrib postgresql-client"); got != strings.Repeat("install ok installed\n", 2)+"install ok installed" {
		t.Fatalf("packages after the run:\n%s", got)
	}
	// Over TCP, with the password, as a client on the soul would.
	// pgpass escapes ':' in the password; the line goes quoted for sh.
	line := "127.0.0.1:5432:appdb:app:" + strings.ReplaceAll(pass, ":", `\:`)
	quoted := "'" + strings.ReplaceAll(line, "'", `'\''`) + "'"
	got := tg.Sh(t, "printf '%s\\n' "+quoted+" >/tmp/pgpass && chmod 600 /tmp/pgpass && "+
		"PGPASSFILE=/tmp/pgpass psql -X -A -t -w -h 127.0.0.1 -U app -d appdb -c 'SELECT 1'")
	if got != "1" {
		t.Fatalf("SELECT 1 over TCP as app: %q", got)
	}

	res, n, d = runOnce()
	t.Logf("second run: %d round trip(s), %v", n, d.Round(time.Millisecond))
	if res.Changed || n != 1 {
		t.Fatalf("second run: %+v in %d round trips, want unchanged in 1", res, n)
	}
}

// TestSeedVersionNeedsPGDGInVM asks for the seed's pg_version "14" on a
// Debian 12 VM, whose archive carries PostgreSQL 15 only: the module turns
// to PostgreSQL's own apt repository, which needs the internet. Here its
// names are the VM's loopback (the VM reaches only Debian's archive), so
// the step fails postgres.install_failed saying what the version needs,
// installs no server and leaves no repository behind that would break the
// soul's apt-get update.
func TestSeedVersionNeedsPGDGInVM(t *testing.T) {
	t.Parallel()
	tg := moduletest.NewVMWith(t, moduletest.VMOptions{SSHUser: "root", Suffix: "pg.test", Base: "debian-bookworm"})
	tg.Sh(t, `echo "127.0.0.1 www.postgresql.org apt.postgresql.org" >>/etc/hosts`)
	m := &postgres.Installed{}
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), map[string]any{"pg_version": "14", "db_name": "myapp", "db_user": "app_user", "db_password": "pw"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	_, err = m.Run(ctx, module.RunInfo{}, raw, tg)
	if module.Code(err) != postgres.CodeInstallFailed || !strings.Contains(err.Error(), "postgresql-14 is not in this distribution's archive") ||
		!strings.Contains(err.Error(), "apt.postgresql.org") || !strings.Contains(err.Error(), "internet") {
		t.Fatalf("pg_version 14 on Debian 12 offline: %v (code %s), want %s naming apt.postgresql.org", err, module.Code(err), postgres.CodeInstallFailed)
	}
	if got := tg.Sh(t, "ls /usr/lib/postgresql 2>/dev/null | wc -l; test -e /etc/apt/sources.list.d/pgdg.list && echo pgdg.list || echo none"); got != "0\nnone" {
		t.Fatalf("after the failed install: %q, want no server and no pgdg.list", got)
	}
}
