package standard_test

import (
	"os"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/command"
	"github.com/soulstack/soulstack/internal/modules/docker"
	"github.com/soulstack/soulstack/internal/modules/file"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	"github.com/soulstack/soulstack/internal/modules/pkg"
	"github.com/soulstack/soulstack/internal/modules/postgres"
	"github.com/soulstack/soulstack/internal/modules/script"
)

func TestMain(m *testing.M) {
	// Local VMs are started by re-executing the test binary.
	localcloud.RunIfChild()
	os.Exit(m.Run())
}

// TestCheckThenApplyInVM is the check-then-apply agreement matrix on a
// real local VM booted from the debian-bookworm base (with nesting:
// docker, so that Docker's engine can run): for every soul-side module
// with a check path and each case, the check leaves the VM's writable
// layer byte-identical and its processes as they were, and the apply that
// follows reports changed exactly when the check said would_change (and,
// where nothing would change, the very output the check predicted).
func TestCheckThenApplyInVM(t *testing.T) {
	t.Parallel()
	tg := moduletest.NewVMWith(t, moduletest.VMOptions{SSHUser: "root", Suffix: "check.test", Base: "debian-bookworm", Nesting: "docker"})
	// Fresh package lists, as a VM that has run apt before has them.
	tg.ShFor(t, "apt-get update -qq", 5*time.Minute)
	// Every check runs twice, through the shell and through the soul
	// executor, which answers the file and package probes natively: the
	// predictions must be the same.
	tg.WithExecutor(t)
	dir := "/srv/check"

	type step struct {
		name   string
		setup  string // a shell script run first, outside the check
		m      module.Module
		params map[string]any
		would  bool // what the check must say (and the apply then do)
		// unknown: the check must say it cannot know (the apply then
		// decides alone).
		unknown bool
	}
	// A handler script that honours check runs: with SOULSTACK_CHECK=1 it
	// only says whether it would create its file.
	const handler = `f=/srv/check/handled
if [ -e "$f" ]; then echo '{"changed": false}'; exit 0; fi
if [ "${SOULSTACK_CHECK:-}" = 1 ]; then echo '{"changed": true}'; exit 0; fi
touch "$f" && echo '{"changed": true}'`
	pk := func(p ...any) map[string]any { return map[string]any{"packages": p} }
	f := func(kv ...any) map[string]any {
		m := map[string]any{"path": dir + "/motd"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	dk := map[string]any{"source": "distro", "compose": false, "verify": "daemon"}
	// pgQuiet makes the server write nothing by itself while a check is
	// compared: no autovacuum, a checkpoint done, and the relation cache
	// that a restarted server writes at its first connection written.
	// wal_level minimal (set once, with a restart) stops the background
	// writer's standby snapshots, which it writes to the WAL every 15 s
	// after any activity.
	const pgQuiet = `runuser -u postgres -- psql -X -q -d postgres -c 'ALTER SYSTEM SET autovacuum = off' -c 'SELECT pg_reload_conf()' -c 'SELECT 1' && sleep 1 && runuser -u postgres -- psql -X -q -d postgres -c CHECKPOINT`
	const pgMinimal = `runuser -u postgres -- psql -X -q -d postgres -c 'ALTER SYSTEM SET wal_level = minimal' -c 'ALTER SYSTEM SET max_wal_senders = 0' && pg_ctlcluster 15 main restart && ` + pgQuiet
	pg := func(pw string, remote bool) map[string]any {
		return map[string]any{"db_name": "myapp", "db_user": "app_user", "db_password": pw, "allow_remote": remote}
	}
	steps := []step{
		{name: "packages missing", m: &pkg.Installed{}, params: pk("jq"), would: true},
		{name: "packages present", m: &pkg.Installed{}, params: pk("jq"), would: false},
		{name: "packages partial", m: &pkg.Installed{}, params: pk("jq", "tree"), would: true},
		{name: "remove present", m: &pkg.Removed{}, params: pk("tree"), would: true},
		{name: "remove absent", m: &pkg.Removed{}, params: pk("tree"), would: false},
		{name: "file absent", setup: "mkdir -p " + dir, m: &file.Present{}, params: f("content", "one\n", "mode", "0640"), would: true},
		{name: "file same", m: &file.Present{}, params: f("content", "one\n", "mode", "0640"), would: false},
		{name: "file different", m: &file.Present{}, params: f("content", "two\n", "mode", "0640"), would: true},
		{name: "file mode only", setup: "chmod 0644 " + dir + "/motd", m: &file.Present{}, params: f("content", "two\n", "mode", "0640"), would: true},
		{name: "command creates absent", m: &command.Ran{}, params: map[string]any{"cmd": "touch " + dir + "/made", "creates": dir + "/made"}, would: true},
		{name: "command creates present", m: &command.Ran{}, params: map[string]any{"cmd": "touch " + dir + "/made", "creates": dir + "/made"}, would: false},
		{name: "command removes present", m: &command.Ran{}, params: map[string]any{"cmd": "rm " + dir + "/made", "removes": dir + "/made"}, would: true},
		{name: "command removes absent", m: &command.Ran{}, params: map[string]any{"cmd": "rm " + dir + "/made", "removes": dir + "/made"}, would: false},
		{name: "script that answers checks, to do", m: &script.Ran{}, params: map[string]any{"source": handler, "check": true}, would: true},
		{name: "script that answers checks, done", m: &script.Ran{}, params: map[string]any{"source": handler, "check": true}, would: false},
		{name: "script without a check answer", m: &script.Ran{}, params: map[string]any{"source": `echo '{"changed": true}'`}, unknown: true},
		{name: "command without a guard", m: &command.Ran{}, params: map[string]any{"cmd": "true"}, unknown: true},
		{name: "postgres absent", m: &postgres.Installed{}, params: pg("one", false), would: true},
		{name: "postgres as asked", setup: pgMinimal, m: &postgres.Installed{}, params: pg("one", false), would: false},
		{name: "postgres password change", setup: pgQuiet, m: &postgres.Installed{}, params: pg("two", false), would: true},
		{name: "postgres config drift", setup: pgQuiet, m: &postgres.Installed{}, params: pg("two", true), would: true},
		{name: "postgres config edited by hand", setup: `runuser -u postgres -- psql -X -q -c "ALTER SYSTEM SET listen_addresses = 'localhost'" && pg_ctlcluster 15 main restart && ` + pgQuiet,
			m: &postgres.Installed{}, params: pg("two", true), would: true},
		{name: "postgres role may not log in", setup: `runuser -u postgres -- psql -X -q -c 'ALTER ROLE app_user NOLOGIN' && ` + pgQuiet,
			m: &postgres.Installed{}, params: pg("two", true), would: true},
		{name: "postgres as asked again", setup: pgQuiet, m: &postgres.Installed{}, params: pg("two", true), would: false},
		// PostgreSQL writes its WAL in the background (checkpoints,
		// autovacuum), which is no check's doing: it stops before Docker's
		// cases compare the layer.
		{name: "docker absent", setup: "pg_ctlcluster 15 main stop", m: &docker.Installed{}, params: dk, would: true},
		{name: "docker running", m: &docker.Installed{}, params: dk, would: false},
		{name: "docker stopped", setup: `pid=$(cat /run/docker.pid) && kill "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done`,
			m: &docker.Installed{}, params: dk, would: true},
		{name: "docker user missing from the group", setup: "useradd -m alice", m: &docker.Installed{},
			params: map[string]any{"source": "distro", "compose": false, "verify": "daemon", "users": []any{"alice"}}, would: true},
		// Someone removed the engine and left a docker CLI behind (a copy
		// of the client binary): a lone CLI is not Docker installed.
		{name: "docker CLI only", setup: `cp /usr/bin/docker /usr/local/bin/docker && pid=$(cat /run/docker.pid) && kill "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq docker.io >/dev/null && hash -r && docker --version && ! command -v dockerd`,
			m: &docker.Installed{}, params: dk, would: true},
		{name: "docker engine back", m: &docker.Installed{}, params: dk, would: false},
	}
	for _, s := range steps {
		if s.setup != "" {
			tg.ShFor(t, s.setup, 3*time.Minute)
		}
		p, _, err := moduletest.CheckThenApply(t, tg, s.m, s.params)
		if err != nil {
			t.Fatalf("%s: apply: %v", s.name, err)
		}
		if s.unknown {
			if p.Unknown == "" {
				t.Fatalf("%s: check said would_change=%v, want unknown", s.name, p.WouldChange)
			}
			continue
		}
		if p.Unknown != "" || p.WouldChange != s.would {
			t.Fatalf("%s: check said would_change=%v unknown=%q, want would_change=%v", s.name, p.WouldChange, p.Unknown, s.would)
		}
		if s.would && len(p.Changes) == 0 {
			t.Errorf("%s: would change but names no change", s.name)
		}
	}
	// The layer compared is the one the VM writes to: the apply's file is
	// there.
	if _, ok := moduletest.Snapshot(t, tg.UpperDir())["srv/check/motd"]; !ok {
		t.Fatalf("%s does not hold the file the apply wrote: the comparison proves nothing", tg.UpperDir())
	}
}
