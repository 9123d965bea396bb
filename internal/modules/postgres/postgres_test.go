package postgres_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	"github.com/soulstack/soulstack/internal/modules/postgres"
)

func TestValidateParams(t *testing.T) {
	t.Parallel()
	base := map[string]any{"db_name": "app", "db_user": "app", "db_password": "s3cret pass'word"}
	tests := []struct {
		name  string
		set   map[string]any
		param string // the param at fault; empty means valid
	}{
		{name: "minimal", set: nil},
		{name: "everything", set: map[string]any{"pg_version": "16", "listen_addresses": "localhost, 10.0.0.5", "remote_cidr": "10.0.0.0/8"}},
		{name: "upper-case user", set: map[string]any{"db_user": "App"}, param: "db_user"},
		{name: "quote in database", set: map[string]any{"db_name": `a"b`}, param: "db_name"},
		{name: "empty password", set: map[string]any{"db_password": ""}, param: "db_password"},
		{name: "password with a newline", set: map[string]any{"db_password": "a\nb"}, param: "db_password"},
		{name: "version with a patch level", set: map[string]any{"pg_version": "16.4"}, param: "pg_version"},
		{name: "listen with a quote", set: map[string]any{"listen_addresses": "localhost'"}, param: "listen_addresses"},
		{name: "cidr with host bits", set: map[string]any{"remote_cidr": "10.0.0.1/8"}, param: "remote_cidr"},
		{name: "extra users and databases", set: map[string]any{
			"users":     []any{user("report", "canary-pw2"), user("audit", "canary pw3")},
			"databases": []any{database("reports", "report"), database("app_audit", "app"), database("misc", "app")},
		}},
		{name: "extra user with an upper-case name", set: map[string]any{"users": []any{user("Report", "canary-pw2")}}, param: "users"},
		{name: "extra user without a password", set: map[string]any{"users": []any{map[string]any{"name": "report"}}}, param: "users"},
		{name: "extra user with an unknown field", set: map[string]any{"users": []any{map[string]any{"name": "report", "password": "a\nb", "superuser": true}}}, param: "users"},
		{name: "extra user that is a string", set: map[string]any{"users": []any{"report"}}, param: "users"},
		{name: "extra user with an empty password", set: map[string]any{"users": []any{user("report", "")}}, param: "users"},
		{name: "extra user with a newline in the password", set: map[string]any{"users": []any{user("report", "a\nb")}}, param: "users"},
		{name: "extra user named like db_user", set: map[string]any{"users": []any{user("app", "canary-pw2")}}, param: "users"},
		{name: "extra user given twice", set: map[string]any{"users": []any{user("report", "canary-pw2"), user("report", "canary-pw3")}}, param: "users"},
		{name: "extra database named like db_name", set: map[string]any{"db_name": "appdb", "databases": []any{database("appdb", "app")}}, param: "databases"},
		{name: "extra database given twice", set: map[string]any{"databases": []any{database("x", "app"), database("x", "app")}}, param: "databases"},
		{name: "extra database of an unknown owner", set: map[string]any{"databases": []any{database("reports", "report")}}, param: "databases"},
		{name: "extra database with a quote", set: map[string]any{"databases": []any{database(`r"s`, "app")}}, param: "databases"},
		{name: "extra database without an owner", set: map[string]any{"databases": []any{map[string]any{"name": "reports"}}}, param: "databases"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v module.Values
			for k, x := range base {
				v.Set(k, x)
			}
			for k, x := range tt.set {
				v.Set(k, x)
			}
			errs := module.CheckParams(&postgres.Installed{}, v)
			if tt.param == "" {
				if len(errs) != 0 {
					t.Fatalf("errors = %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Param != tt.param {
				t.Fatalf("errors = %v, want one about %q", errs, tt.param)
			}
			if strings.Contains(errs[0].Message, "a\nb") || strings.Contains(errs[0].Message, "canary") {
				t.Fatalf("the message quotes a password: %q", errs[0].Message)
			}
		})
	}
}

// TestValidateParamsDynamic checks that an owner is not refused while
// the users it could be among are known only at run time.
func TestValidateParamsDynamic(t *testing.T) {
	t.Parallel()
	for _, dyn := range []string{"db_user", "users"} {
		var v module.Values
		v.Set("db_name", "app")
		v.Set("db_password", "s3cret")
		v.Set("databases", []any{database("reports", "report")})
		if dyn != "db_user" {
			v.Set("db_user", "app")
		}
		v.SetDynamic(dyn)
		if errs := module.CheckParams(&postgres.Installed{}, v); len(errs) != 0 {
			t.Errorf("%s dynamic: errors = %v", dyn, errs)
		}
	}
}

func user(name, password string) map[string]any {
	return map[string]any{"name": name, "password": password}
}

func database(name, owner string) map[string]any {
	return map[string]any{"name": name, "owner": owner}
}

// run runs core.postgres.installed on tg and returns the result and how
// many commands it ran.
func run(t *testing.T, tg *moduletest.VM, params map[string]any) (module.Result, int, error) {
	t.Helper()
	m := &postgres.Installed{}
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := tg.Calls()
	start := time.Now()
	res, err := m.Run(ctx, module.RunInfo{}, raw, tg)
	t.Logf("run (allow_remote=%v): %d round trip(s), %v, changed=%v output=%v err=%v", params["allow_remote"], tg.Calls()-before, time.Since(start).Round(time.Millisecond), res.Changed, res.Output, err)
	return res, tg.Calls() - before, err
}

// TestInstalledInVM runs the module over SSH in a local VM, as a
// non-root user with sudo: the first run creates the role and database, a
// second run changes nothing in one round trip, a new password is set and
// verified (also one that is not ASCII), allow_remote edits pg_hba.conf and listen_addresses and
// restarts the server (a client on the host then logs in over the
// bridge), and a login pg_hba.conf rejects fails verification. The
// passwords never appear in a command's arguments or environment.
func TestInstalledInVM(t *testing.T) {
	t.Parallel()
	tg := newVM(t, "deploy")
	const (
		pass1 = "canary-Pw1:'with\\quotes$x"
		pass2 = "canary-Pw2 second"
		pass3 = "canary-pässwörd"
	)
	sawPass3 := false
	params := func(pass string, remote bool) map[string]any {
		return map[string]any{"db_name": "appdb", "db_user": "app", "db_password": pass, "allow_remote": remote}
	}
	postmaster := func() string {
		return tg.Sh(t, "head -n 1 /var/lib/postgresql/*/main/postmaster.pid")
	}
	wantOutput := func(res module.Result, changed, configChanged bool) {
		t.Helper()
		out, _ := res.Output.(map[string]any)
		if res.Changed != changed || out["status"] != "ok" || out["db_name"] != "appdb" || out["db_user"] != "app" ||
			out["config_changed"] != configChanged || !strings.Contains(out["pg_version"].(string), ".") {
			t.Fatalf("result = %+v, want changed=%v config_changed=%v", res, changed, configChanged)
		}
	}

	res, n, err := run(t, tg, params(pass1, false))
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, true, false)
	if n != 1 {
		t.Errorf("first run took %d round trips, want 1", n)
	}
	if got := tg.Sh(t, `runuser -u postgres -- psql -XAtc "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'appdb'"`); got != "app" {
		t.Fatalf("owner of appdb = %q", got)
	}
	pid := postmaster()

	start := time.Now()
	res, n, err = run(t, tg, params(pass1, false))
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, false, false)
	if n != 1 {
		t.Errorf("second run took %d round trips, want 1", n)
	}
	t.Logf("idempotent second run: %d round trip, %v", n, time.Since(start).Round(time.Millisecond))

	// A new password: the login with it fails, so the role gets it.
	res, _, err = run(t, tg, params(pass2, false))
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, true, false)
	if res, _, err = run(t, tg, params(pass2, false)); err != nil || res.Changed {
		t.Fatalf("rerun with the new password: %+v, %v", res, err)
	}
	if p := postmaster(); p != pid {
		t.Fatalf("the server restarted (pid %s -> %s) with no config change", pid, p)
	}

	// A password that is not ASCII goes as a quoted literal instead of a
	// verifier made on the keeper; then back to pass2.
	for _, pass := range []string{pass3, pass3, pass2} {
		res, _, err = run(t, tg, params(pass, false))
		if err != nil {
			t.Fatal(err)
		}
		wantOutput(res, pass != pass3 || !sawPass3, false)
		sawPass3 = sawPass3 || pass == pass3
	}

	// Remote access: listen on *, a pg_hba.conf entry, a restart.
	res, _, err = run(t, tg, params(pass2, true))
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, true, true)
	if p := postmaster(); p == pid {
		t.Fatal("allow_remote changed listen_addresses but the server did not restart")
	}
	if hba := tg.Sh(t, "grep -c '^host	\"appdb\"	\"app\"	0.0.0.0/0	scram-sha-256$' /etc/postgresql/*/main/pg_hba.conf"); hba != "1" {
		t.Fatalf("pg_hba.conf has %s managed entries", hba)
	}
	loginFromHost(t, tg.PrimaryIP, "app", "appdb", pass2)
	if res, _, err = run(t, tg, params(pass2, true)); err != nil || res.Changed || res.Output.(map[string]any)["config_changed"] != false {
		t.Fatalf("rerun with allow_remote: %+v, %v", res, err)
	}
	if hba := tg.Sh(t, "grep -c 'soulstack' /etc/postgresql/*/main/pg_hba.conf"); hba != "2" {
		t.Fatalf("pg_hba.conf has %s marker lines after a rerun, want 2", hba)
	}

	// Back to local only: the entry goes and the server restarts.
	pid = postmaster()
	res, _, err = run(t, tg, params(pass2, false))
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, true, true)
	if p := postmaster(); p == pid {
		t.Fatal("listen_addresses went back to localhost without a restart")
	}
	if hba := tg.Sh(t, "grep -c 'soulstack' /etc/postgresql/*/main/pg_hba.conf || true"); hba != "0" {
		t.Fatalf("pg_hba.conf keeps %s marker lines", hba)
	}

	// A login pg_hba.conf rejects fails verification, and the module does
	// not touch the password for it.
	tg.Sh(t, `f=$(ls /etc/postgresql/*/main/pg_hba.conf) && sed -i '1i host all app 127.0.0.1/32 reject' "$f" && pg_ctlcluster $(pg_lsclusters -h | awk '{print $1}' | head -n 1) main reload`)
	_, _, err = run(t, tg, params(pass2, false))
	if module.Code(err) != postgres.CodeVerifyFailed || !strings.Contains(err.Error(), "rejects connection") {
		t.Fatalf("login rejected by pg_hba.conf: %v (code %s)", err, module.Code(err))
	}

	// A version the distribution lacks goes to the PostgreSQL project's
	// repository. Offline, stubs of apt-get and curl (earlier in sudo's
	// PATH) make that fail the way a host without network access does.
	tg.Sh(t, `printf '#!/bin/sh\necho "E: offline (test stub)" >&2\nexit 100\n' >/usr/local/sbin/apt-get &&
printf '#!/bin/sh\necho "curl: (6) offline (test stub)" >&2\nexit 6\n' >/usr/local/sbin/curl &&
chmod 0755 /usr/local/sbin/apt-get /usr/local/sbin/curl`)
	p := params(pass2, false)
	p["pg_version"] = "17"
	_, _, err = run(t, tg, p)
	if module.Code(err) != postgres.CodeInstallFailed || !strings.Contains(err.Error(), "postgresql-17 is not in this distribution's archive") || !strings.Contains(err.Error(), "apt.postgresql.org") {
		t.Fatalf("pg_version 17 offline: %v (code %s)", err, module.Code(err))
	}

	for i, c := range tg.Commands() {
		for _, pass := range []string{pass1, pass2, pass3} {
			if strings.Contains(strings.Join(c.Argv, "\x00"), pass) {
				t.Errorf("command %d has the password in its arguments", i)
			}
			for k, v := range c.Env {
				if strings.Contains(k+"="+v, pass) {
					t.Errorf("command %d has the password in its environment (%s)", i, k)
				}
			}
		}
	}
	if err != nil && strings.Contains(err.Error(), pass2) {
		t.Error("the error quotes the password")
	}
}

// loginFromHost runs SELECT 1 as user on database db at the VM's address
// from the host, with the password in a private .pgpass file.
func loginFromHost(t *testing.T, addr, user, db, pass string) {
	t.Helper()
	pgpass := filepath.Join(t.TempDir(), "pgpass")
	line := "*:*:*:*:" + strings.NewReplacer(`\`, `\\`, ":", `\:`).Replace(pass) + "\n"
	if err := os.WriteFile(pgpass, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("psql", "-XAtw", "-h", addr, "-U", user, "-d", db, "-c", "SELECT 1")
	cmd.Env = append(os.Environ(), "PGPASSFILE="+pgpass, "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("psql from the host to %s/%s as %s: %v: %s", addr, db, user, err, out)
	}
}
