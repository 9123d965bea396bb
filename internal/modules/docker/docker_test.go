package docker_test

import (
	"context"
	"encoding/json"
	"os/exec"
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	before := tg.Calls()
	start := time.Now()
	res, err := m.Run(ctx, module.RunInfo{}, raw, tg)
	n := tg.Calls() - before
	t.Logf("run %v: %d round trip(s), %v, changed=%v output=%v err=%v", params, n, time.Since(start).Round(time.Millisecond), res.Changed, res.Output, err)
	return res, n, err
}

// TestLoneCLIInVM runs the module over SSH, through sudo, in a local VM
// on the view of the host, which has the host's docker CLI but no engine
// (dockerd). A lone CLI is not Docker installed: an unknown user fails
// first, and then the module installs the engine from the source asked
// for. Docker's own repository is out of reach here (the VM reaches only
// Debian's archive), so source docker fails at download.docker.com with
// docker.install_failed; source distro, with apt-get made to fail the way
// it does offline, fails at apt-get install. Nothing says
// already_installed, and no docker group is made.
func TestLoneCLIInVM(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("the test needs a docker CLI on the host (the VM shares the host's /usr)")
	}
	if _, err := exec.LookPath("dockerd"); err == nil {
		t.Skip("the host has a Docker engine; the test wants a lone CLI")
	}
	tg := newVM(t, "deploy")
	if tg.Sh(t, "getent group docker || true") != "" {
		t.Skip("the host already has a docker group; the test wants to see it is not made")
	}
	if got := tg.Sh(t, "docker --version >/dev/null && echo cli; command -v dockerd || echo no engine"); got != "cli\nno engine" {
		t.Fatalf("the VM has %q, want a CLI and no engine", got)
	}
	_, _, err := run(t, tg, map[string]any{"users": []any{"ghost"}})
	if module.Code(err) != docker.CodeUserNotFound || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("unknown user: %v (code %s)", err, module.Code(err))
	}
	// Defaults: source docker, through the VM's real network.
	res, n, err := run(t, tg, map[string]any{})
	if module.Code(err) != docker.CodeInstallFailed || !strings.Contains(err.Error(), "download.docker.com") || n != 1 {
		t.Fatalf("lone CLI, source docker: %+v, %v (code %s) in %d round trips; want docker.install_failed at download.docker.com in 1",
			res, err, module.Code(err), n)
	}
	tg.Sh(t, `printf '#!/bin/sh\necho "E: offline (test stub): $*" >&2\nexit 100\n' >/usr/local/sbin/apt-get && chmod 0755 /usr/local/sbin/apt-get`)
	for _, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"source": "distro"}, "apt-get install docker.io docker-compose"},
		{map[string]any{"source": "distro", "compose": false}, "apt-get install docker.io:"},
	} {
		_, _, err = run(t, tg, tc.params)
		if module.Code(err) != docker.CodeInstallFailed || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("install %v offline: %v (code %s), want %q", tc.params, err, module.Code(err), tc.want)
		}
	}
	if got := tg.Sh(t, "getent group docker || echo none"); got != "none" {
		t.Errorf("a failed install made the docker group: %q", got)
	}
}
