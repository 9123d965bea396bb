// Package docker declares core.docker.installed, which installs Docker
// Engine on Debian and Ubuntu souls.
//
// Run is not implemented in this build: it returns an error with code
// module.not_implemented. The declaration is registered so that scenarios
// using the module validate and the catalog lists it.
package docker

import (
	"context"
	"encoding/json"

	"github.com/soulstack/soulstack/internal/module"
)

// InstalledID is the ID of the Installed state.
const InstalledID module.ID = "core.docker.installed"

func init() { module.Register(new(Installed)) }

// Installed is the core.docker.installed state.
type Installed struct{}

var _ module.Module = (*Installed)(nil)

// InstalledParams are the params of core.docker.installed.
type InstalledParams struct {
	Compose bool     `json:"compose"`
	Source  string   `json:"source"`
	Users   []string `json:"users,omitempty"`
	Verify  string   `json:"verify"`
}

// Info returns the declaration of core.docker.installed.
func (*Installed) Info() module.Info {
	return module.Info{
		ID:      InstalledID,
		Summary: "Make sure Docker Engine is installed and running on each target soul.",
		Description: "With `source: docker` it adds Docker's apt repository (GPG key and sources list) and installs " +
			"docker-ce, docker-ce-cli and containerd.io, plus docker-compose-plugin when `compose` is true. " +
			"With `source: distro` it installs the distribution's own packages (docker.io, docker-compose), " +
			"for mirrors and offline sites.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: []module.Param{
			{Name: "compose", Type: module.TypeBool, Default: true, Doc: "Also install the Compose plugin."},
			{Name: "source", Type: module.TypeString, Default: "docker", Enum: []string{"docker", "distro"}, Doc: "Where the packages come from."},
			{Name: "users", Type: module.TypeList, Elem: module.TypeString, DefaultDoc: "the connecting user", Doc: "Users to add to the docker group."},
			{Name: "verify", Type: module.TypeString, Default: "hello-world", Enum: []string{"hello-world", "daemon"}, Doc: "How to check the result: run the hello-world image (needs a registry), or only ask the daemon for its version."},
		},
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok, or already_installed."},
			{Name: "docker_version", Type: "string", Doc: "Output of docker --version."},
			{Name: "compose", Type: "bool", Doc: "Whether the Compose plugin is installed."},
		},
		ChangesWhen:   "Docker was installed, or a user was added to the docker group.",
		UnchangedWhen: "`docker --version` already worked and every user was in the docker group.",
		Example: `- name: docker
  on: web-1.local.test
  module: core.docker.installed
  params:
    compose: true
    verify: daemon`,
		Notes: []string{
			"Drift is not tracked: if Docker is removed later, nothing notices until the scenario runs again.",
			"Group membership takes effect at the user's next login.",
		},
	}
}

// Run is not implemented in this build; it returns a module.not_implemented
// error.
func (*Installed) Run(context.Context, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(InstalledID)
}
