package docker_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/docker"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

func TestValidateParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		users []any
		ok    bool
	}{
		{name: "none", users: nil, ok: true},
		{name: "plain", users: []any{"deploy", "ci-runner", "_svc", "machine$"}, ok: true},
		{name: "upper case", users: []any{"Deploy"}},
		{name: "shell", users: []any{"a;rm -rf /"}},
		{name: "empty", users: []any{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v module.Values
			if tt.users != nil {
				v.Set("users", tt.users)
			}
			errs := module.CheckParams(&docker.Installed{}, v)
			if tt.ok != (len(errs) == 0) {
				t.Fatalf("errors = %v, want ok=%v", errs, tt.ok)
			}
		})
	}
}

// run runs core.docker.installed on tg and returns the result and how
// many commands it ran.
func run(t *testing.T, tg *moduletest.VM, params map[string]any) (module.Result, int, error) {
	t.Helper()
	m := &docker.Installed{}
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := tg.Calls()
	start := time.Now()
	res, err := m.Run(ctx, module.RunInfo{}, raw, tg)
	n := tg.Calls() - before
	t.Logf("run %v: %d round trip(s), %v, changed=%v output=%v err=%v", params, n, time.Since(start).Round(time.Millisecond), res.Changed, res.Output, err)
	return res, n, err
}

// TestAlreadyInstalledInVM runs the module over SSH, through sudo, in a
// local VM that has the host's docker CLI but no engine (dockerd): this
// host has none, and no network to install one. Docker counts as
// installed, the docker group is made and the connecting user added once,
// named users are added, an unknown user fails, and verify: daemon fails
// while no engine answers docker info and passes when one does (a stub
// docker command stands in for the engine). Offline installs fail with
// docker.install_failed on the path each source takes.
func TestAlreadyInstalledInVM(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("the test needs the docker CLI on the host (the VM shares the host's /usr)")
	}
	tg := newVM(t, "deploy")
	if tg.Sh(t, "getent group docker || true") != "" {
		t.Skip("the host already has a docker group; the test wants to see it made")
	}
	wantOutput := func(res module.Result, changed bool, added ...string) map[string]any {
		t.Helper()
		out, _ := res.Output.(map[string]any)
		if added == nil {
			added = []string{}
		}
		if res.Changed != changed || out["status"] != "already_installed" ||
			!strings.HasPrefix(out["docker_version"].(string), "Docker version ") ||
			!slices.Equal(out["users_added"].([]string), added) {
			t.Fatalf("result = %+v, want changed=%v users_added=%v", res, changed, added)
		}
		return out
	}
	inGroup := func(user string) bool {
		return slices.Contains(strings.Fields(tg.Sh(t, "id -nG "+user)), "docker")
	}

	// Defaults: compose, source docker, verify hello-world, the
	// connecting user (SUDO_USER) added to a new docker group.
	res, n, err := run(t, tg, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	out := wantOutput(res, true, "deploy")
	if n != 1 {
		t.Errorf("first run took %d round trips, want 1", n)
	}
	compose := exec.Command(cli, "compose", "version").Run() == nil
	if out["compose"] != compose {
		t.Errorf("compose = %v, want %v (as on the host)", out["compose"], compose)
	}
	if !inGroup("deploy") {
		t.Fatal("deploy is not in the docker group")
	}

	start := time.Now()
	res, n, err = run(t, tg, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, false)
	if n != 1 {
		t.Errorf("second run took %d round trips, want 1", n)
	}
	t.Logf("idempotent second run: %d round trip, %v", n, time.Since(start).Round(time.Millisecond))

	tg.Sh(t, "useradd -m alice")
	res, _, err = run(t, tg, map[string]any{"users": []any{"alice", "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, true, "alice")
	if !inGroup("alice") {
		t.Fatal("alice is not in the docker group")
	}
	if res, _, err = run(t, tg, map[string]any{"users": []any{"alice"}}); err != nil || res.Changed {
		t.Fatalf("rerun with alice: %+v, %v", res, err)
	}

	_, _, err = run(t, tg, map[string]any{"users": []any{"ghost"}})
	if module.Code(err) != docker.CodeUserNotFound || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("unknown user: %v (code %s)", err, module.Code(err))
	}

	// No engine here: docker info fails and nothing can start one.
	_, _, err = run(t, tg, map[string]any{"verify": "daemon"})
	if module.Code(err) != docker.CodeVerifyFailed || !strings.Contains(err.Error(), "docker info") {
		t.Fatalf("verify daemon without an engine: %v (code %s)", err, module.Code(err))
	}

	// An engine that answers: a docker command earlier in sudo's PATH
	// passes info and hands everything else to the real CLI.
	tg.Sh(t, "printf '#!/bin/sh\\n[ \"$1\" = info ] && exit 0\\nexec "+cli+" \"$@\"\\n' >/usr/local/sbin/docker && chmod 0755 /usr/local/sbin/docker")
	res, n, err = run(t, tg, map[string]any{"verify": "daemon"})
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(res, false)
	if n != 1 {
		t.Errorf("verify daemon took %d round trips, want 1", n)
	}

	// Not installed, offline: stubs earlier in sudo's PATH make docker
	// missing and apt-get and curl fail the way they do without network
	// access. Each source takes its own way and fails with install_failed.
	tg.Sh(t, `printf '#!/bin/sh\nexit 127\n' >/usr/local/sbin/docker &&
printf '#!/bin/sh\necho "E: offline (test stub): $*" >&2\nexit 100\n' >/usr/local/sbin/apt-get &&
printf '#!/bin/sh\necho "curl: (6) offline (test stub)" >&2\nexit 6\n' >/usr/local/sbin/curl &&
chmod 0755 /usr/local/sbin/apt-get /usr/local/sbin/curl`)
	for _, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"source": "docker"}, "download.docker.com"},
		{map[string]any{"source": "distro"}, "apt-get install docker.io docker-compose"},
		{map[string]any{"source": "distro", "compose": false}, "apt-get install docker.io:"},
	} {
		_, _, err = run(t, tg, tc.params)
		if module.Code(err) != docker.CodeInstallFailed || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("install %v offline: %v (code %s), want %q", tc.params, err, module.Code(err), tc.want)
		}
	}
}
