// Package docker declares core.docker.installed, which installs Docker
// Engine on Debian and Ubuntu souls.
//
// Run does its work in one SSH round trip: a shell script (installed.sh)
// installs the engine when it is not there (a docker CLI without dockerd
// is not Docker installed), adds the users to the docker group, starts
// the engine when it does not answer and verifies it as asked, and
// reports what it did as JSON.
package docker

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
)

// InstalledID is the ID of the Installed state.
const InstalledID module.ID = "core.docker.installed"

func init() { module.Register(new(Installed)) }

// Installed is the core.docker.installed state.
type Installed struct{}

var (
	_ module.Module    = (*Installed)(nil)
	_ module.Validator = (*Installed)(nil)
	_ module.Checker   = (*Installed)(nil)
)

// Error codes of core.docker.installed.
const (
	// CodeInstallFailed means installing the Docker packages failed.
	CodeInstallFailed = "docker.install_failed"
	// CodeVerifyFailed means the engine did not answer docker info, or
	// docker run hello-world failed.
	CodeVerifyFailed = "docker.verify_failed"
	// CodeNestingRequired: the host's kernel refused the engine what it
	// needs (network namespaces, bridges, iptables): a local VM without
	// nesting: docker, an unprivileged container.
	CodeNestingRequired = "docker.nesting_required"
	// CodePullFailed: the hello-world image was missing and could not be
	// pulled (no registry or mirror answered).
	CodePullFailed = "docker.pull_failed"
	// CodeUserNotFound means a user to add to the docker group does not
	// exist on the soul.
	CodeUserNotFound = "docker.user_not_found"
	// CodeFailed is any other failure on the soul.
	CodeFailed = "docker.failed"
)

// userRE matches a Linux user name as useradd accepts it by default.
var userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,30}[$]?$`)

// InstalledParams are the params of core.docker.installed.
type InstalledParams struct {
	Compose bool     `json:"compose"`
	Source  string   `json:"source"`
	Users   []string `json:"users,omitempty"`
	Verify  string   `json:"verify"`
	Pull    string   `json:"pull"`
}

// Info returns the declaration of core.docker.installed.
func (*Installed) Info() module.Info {
	return module.Info{
		ID:      InstalledID,
		Summary: "Make sure Docker Engine is installed and running on each target soul.",
		Description: "With `source: docker` it adds Docker's apt repository (GPG key and sources list) and installs " +
			"docker-ce, docker-ce-cli and containerd.io, plus docker-compose-plugin when `compose` is true. " +
			"With `source: distro` it installs the distribution's own packages (docker.io, and docker-compose-v2 or docker-compose), " +
			"for mirrors and offline sites.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: []module.Param{
			{Name: "compose", Type: module.TypeBool, Default: true, Doc: "Also install the Compose plugin."},
			{Name: "source", Type: module.TypeString, Default: "docker", Enum: []string{"docker", "distro"}, Doc: "Where the packages come from."},
			{Name: "users", Type: module.TypeList, Elem: module.TypeString, DefaultDoc: "the connecting user", Doc: "Users to add to the docker group."},
			{Name: "verify", Type: module.TypeString, Default: "hello-world", Enum: []string{"hello-world", "daemon"}, Doc: "How to check the result, on every run: make sure the engine answers `docker info` (starting it when it does not), and with `hello-world` also run `docker run --rm hello-world` and expect its greeting."},
			{Name: "pull", Type: module.TypeString, Default: "missing", Enum: []string{"missing", "never"}, Doc: "With verify hello-world: `missing` pulls the image when the soul does not have it (from Docker Hub, or the engine's registry-mirrors), as `docker run hello-world` does; `never` expects it there already, for offline sites (docker load)."},
		},
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok, or already_installed."},
			{Name: "docker_version", Type: "string", Doc: "Output of docker --version."},
			{Name: "compose", Type: "bool", Doc: "Whether Compose works (`docker compose` or `docker-compose`)."},
			{Name: "users_added", Type: "array<string>", Doc: "Users this run added to the docker group."},
			{Name: "started_with", Type: "string", Doc: "How this run started the engine (the systemctl, init script or dockerd command line), or empty when it was running."},
			{Name: "pulled", Type: "bool", Doc: "Whether this run pulled the hello-world image (a change)."},
		},
		CheckMode: "Asks what apply asks, in one round trip: is the engine installed (dockerd, not a lone CLI), is the docker group there, are the users in it, does the engine answer docker info, is the hello-world image there (verify hello-world). " +
			"Installs, starts, pulls and runs nothing: no container is created. A missing user fails docker.user_not_found, and a missing image with pull: never fails docker.verify_failed, as apply would.",
		ChangesWhen:   "Docker was installed (the engine was missing, even when a docker CLI was there), the docker group was created, a user was added to it, the engine was started, or the hello-world image was pulled.",
		UnchangedWhen: "`docker --version` worked and `dockerd` was installed, every user was in the docker group, and the engine answered `docker info`.",
		Example: `- name: docker
  on: web-1.local.test
  module: core.docker.installed
  params:
    compose: true
    verify: daemon`,
		Notes: []string{
			"Drift is not tracked: if Docker is removed later, nothing notices until the scenario runs again.",
			"Group membership takes effect at the user's next login. By default the connecting user is added (the user sudo ran for); root never is.",
			"Installed means the engine is there: `docker --version` working and `dockerd` on the PATH. A lone docker CLI (a client for a remote engine) gets the engine installed from `source`.",
			"When Docker is already installed nothing is installed, not even Compose: `compose` in the output says whether it works.",
			"`source: docker` needs download.docker.com; `source: distro` works with the distribution's mirror (docker.io, and docker-compose-v2 or docker-compose).",
			"Starting the engine: with systemd as PID 1, `systemctl enable --now docker.service`; under SysV init, `/etc/init.d/docker start`; without either (containers, local VMs) `dockerd` detached in its own session with pid file /run/docker.pid and log /var/log/dockerd.log, and flags found by probing: `--storage-driver=vfs` when /var/lib/docker is on overlayfs, `--iptables=false` when iptables cannot list its filter table. Nothing starts a detached dockerd again at boot; `started_with` says what was run.",
			"On a local VM (soul-cloud-local) the engine runs only with the profile key `nesting: docker`, which the provider config must allow (`allow_nesting: true`); see the local driver's documentation for what that costs in isolation. Without it the step fails docker.nesting_required (the kernel refused dockerd its network namespaces or iptables), saying so, rather than docker.verify_failed with the kernel's message.",
		},
	}
}

// ValidateParams checks the user names.
func (*Installed) ValidateParams(v module.Values) error {
	x, ok := v.Get("users")
	if !ok {
		return nil
	}
	list, _ := x.([]any)
	var errs []error
	for i, u := range list {
		if s, _ := u.(string); !userRE.MatchString(s) {
			errs = append(errs, module.Invalid("users", "param \"users\": element %d is %q, not a user name", i, s))
		}
	}
	return errors.Join(errs...)
}

// installScript is the shell script Run sends to the soul.
//
//go:embed installed.sh
var installScript string

// report is the JSON line installed.sh prints when it succeeds.
type report struct {
	Changed       bool     `json:"changed"`
	Installed     bool     `json:"installed"`
	DaemonStarted bool     `json:"daemon_started"`
	Compose       bool     `json:"compose"`
	UsersAdded    []string `json:"users_added"`
	DockerVersion string   `json:"docker_version"`
	StartedWith   string   `json:"started_with"`
	Pulled        bool     `json:"pulled"`
}

// command returns the command Run (mode apply) or Check (mode check)
// sends to the soul for p.
func command(p InstalledParams, mode string) module.Command {
	source, verify, pull := p.Source, p.Verify, p.Pull
	if source == "" {
		source = "docker"
	}
	if verify == "" {
		verify = "hello-world"
	}
	if pull == "" {
		pull = "missing"
	}
	argv := []string{"/bin/sh", "-c", installScript, "sh", fmt.Sprint(p.Compose), source, verify, pull, mode}
	return module.Command{Argv: append(argv, p.Users...)}
}

// Run makes sure Docker is installed on the soul, in one command. It fails
// with docker.install_failed, docker.verify_failed, docker.user_not_found
// or docker.failed.
func (m *Installed) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	out, err := m.exec(ctx, raw, "apply", t)
	if err != nil {
		return module.Result{}, err
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		return module.Result{}, &module.Error{Code: CodeFailed, Message: fmt.Sprintf("unreadable report from the soul: %q", out), Err: err}
	}
	status := "already_installed"
	if r.Installed {
		status = "ok"
	}
	added := r.UsersAdded
	if added == nil {
		added = []string{}
	}
	return module.Result{Changed: r.Changed, Output: map[string]any{
		"status":         status,
		"docker_version": r.DockerVersion,
		"compose":        r.Compose,
		"users_added":    added,
		"started_with":   r.StartedWith,
		"pulled":         r.Pulled,
	}}, nil
}

// Check asks the soul the questions Run asks (is the engine installed,
// is the group there, are the users in it, does the engine answer, is
// the hello-world image there) in one round trip, and changes nothing:
// no install, no start, no pull, no container.
func (m *Installed) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	out, err := m.exec(ctx, raw, "check", t)
	if err != nil {
		return module.Prediction{}, err
	}
	var p module.Prediction
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, "\t", 4)
		if len(f) == 4 && f[0] == "@change" {
			p.Changes = append(p.Changes, client.Change{Kind: f[1], Action: f[2], Name: f[3]})
		}
	}
	p.WouldChange = len(p.Changes) > 0
	return p, nil
}

// exec runs the script in mode on the soul and returns its standard
// output (the report last), or the error its exit status means.
func (m *Installed) exec(ctx context.Context, raw json.RawMessage, mode string, t module.Target) ([]byte, error) {
	var p InstalledParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	var v module.Values
	users := make([]any, len(p.Users))
	for i, u := range p.Users {
		users[i] = u
	}
	v.Set("users", users)
	if err := m.ValidateParams(v); err != nil {
		return nil, err
	}
	switch {
	case p.Source != "" && p.Source != "docker" && p.Source != "distro":
		return nil, module.Invalid("source", "param \"source\" is %q; want docker or distro", p.Source)
	case p.Verify != "" && p.Verify != "hello-world" && p.Verify != "daemon":
		return nil, module.Invalid("verify", "param \"verify\" is %q; want hello-world or daemon", p.Verify)
	case p.Pull != "" && p.Pull != "missing" && p.Pull != "never":
		return nil, module.Invalid("pull", "param \"pull\" is %q; want missing or never", p.Pull)
	}
	res, err := t.Exec(ctx, command(p, mode))
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		code := CodeFailed
		switch res.ExitCode {
		case 10:
			code = CodeInstallFailed
		case 11:
			code = CodeVerifyFailed
		case 12:
			code = CodeUserNotFound
		case 13:
			code = CodeNestingRequired
		case 14:
			code = CodePullFailed
		}
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return nil, &module.Error{Code: code, Message: msg}
	}
	if mode == "check" {
		return res.Stdout, nil
	}
	out := bytes.TrimSpace(res.Stdout)
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return out, nil
}
