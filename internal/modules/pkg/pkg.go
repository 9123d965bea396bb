// Package pkg declares core.pkg.installed and core.pkg.removed, which
// manage apt packages on Debian and Ubuntu souls.
//
// Run is not implemented in this build: it returns an error with code
// module.not_implemented. The declarations are registered so that
// scenarios using the modules validate and the catalog lists them.
package pkg

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/module"
)

// The IDs of the pkg states.
const (
	InstalledID module.ID = "core.pkg.installed"
	RemovedID   module.ID = "core.pkg.removed"
)

func init() {
	module.Register(new(Installed))
	module.Register(new(Removed))
}

// Installed is the core.pkg.installed state.
type Installed struct{}

// Removed is the core.pkg.removed state.
type Removed struct{}

var (
	_ module.Module    = (*Installed)(nil)
	_ module.Validator = (*Installed)(nil)
	_ module.Module    = (*Removed)(nil)
	_ module.Validator = (*Removed)(nil)
)

// InstalledParams are the params of core.pkg.installed.
type InstalledParams struct {
	Packages       []string `json:"packages"`
	Update         bool     `json:"update"`
	LockRetries    int      `json:"lock_retries"`
	LockRetryDelay string   `json:"lock_retry_delay"`
}

// RemovedParams are the params of core.pkg.removed.
type RemovedParams struct {
	Packages       []string `json:"packages"`
	Purge          bool     `json:"purge"`
	LockRetries    int      `json:"lock_retries"`
	LockRetryDelay string   `json:"lock_retry_delay"`
}

// lockParams are the dpkg lock retry params both states share.
var lockParams = []module.Param{
	{Name: "lock_retries", Type: module.TypeInt, Default: 5, Doc: "How many times to retry while the dpkg lock is held (by unattended-upgrades, say)."},
	{Name: "lock_retry_delay", Type: module.TypeString, Default: "15s", Doc: "Wait between dpkg lock retries, as a duration such as \"15s\"."},
}

var packagesDoc = "apt package names, optionally with a version (`name=version`)."

// Info returns the declaration of core.pkg.installed.
func (*Installed) Info() module.Info {
	return module.Info{
		ID:      InstalledID,
		Summary: "Make sure apt packages are installed on each target soul.",
		Description: "Runs `apt-get update` first when `update` is true, then " +
			"`DEBIAN_FRONTEND=noninteractive apt-get install -y` for the missing packages, and checks each with dpkg.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: append([]module.Param{
			{Name: "packages", Type: module.TypeList, Elem: module.TypeString, Required: true, Doc: packagesDoc},
			{Name: "update", Type: module.TypeBool, Default: true, Doc: "Run apt-get update before installing."},
		}, lockParams...),
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok, or partial when some packages could not be installed."},
			{Name: "installed", Type: "array<string>", Doc: "Packages this run installed."},
			{Name: "already_installed", Type: "array<string>", Doc: "Packages that were already installed."},
			{Name: "failed", Type: "array<string>", Doc: "Packages that could not be installed (not found, say)."},
		},
		ChangesWhen:   "At least one package was installed.",
		UnchangedWhen: "Every package was already installed.",
		Example: `- name: base
  on: web-1.local.test
  module: core.pkg.installed
  params:
    packages: [git, curl]`,
		Notes: []string{
			"Some packages not found gives `status: partial` with them in `failed`; nothing installed at all fails the target with a readable message.",
			"A host still booting is retried by the transport (3 tries, 10 s apart by default; see the step's `connect`).",
		},
	}
}

// ValidateParams checks the package names and the lock retry settings.
func (*Installed) ValidateParams(v module.Values) error { return checkCommon(v) }

// Run is not implemented in this build; it returns a module.not_implemented
// error.
func (*Installed) Run(context.Context, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(InstalledID)
}

// Info returns the declaration of core.pkg.removed.
func (*Removed) Info() module.Info {
	return module.Info{
		ID:         RemovedID,
		Summary:    "Make sure apt packages are not installed on each target soul.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: append([]module.Param{
			{Name: "packages", Type: module.TypeList, Elem: module.TypeString, Required: true, Doc: packagesDoc},
			{Name: "purge", Type: module.TypeBool, Default: false, Doc: "Also remove the packages' configuration files."},
		}, lockParams...),
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok, or partial when some packages could not be removed."},
			{Name: "removed", Type: "array<string>", Doc: "Packages this run removed."},
			{Name: "already_absent", Type: "array<string>", Doc: "Packages that were not installed."},
			{Name: "failed", Type: "array<string>", Doc: "Packages that could not be removed."},
		},
		ChangesWhen:   "At least one package was removed.",
		UnchangedWhen: "None of the packages was installed.",
		Example: `- name: no_telnet
  on: web-1.local.test
  module: core.pkg.removed
  params:
    packages: [telnet]`,
	}
}

// ValidateParams checks the package names and the lock retry settings.
func (*Removed) ValidateParams(v module.Values) error { return checkCommon(v) }

// Run is not implemented in this build; it returns a module.not_implemented
// error.
func (*Removed) Run(context.Context, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(RemovedID)
}

func checkCommon(v module.Values) error {
	var errs []error
	if x, ok := v.Get("packages"); ok {
		list, _ := x.([]any)
		if len(list) == 0 {
			errs = append(errs, module.Invalid("packages", "param \"packages\" must name at least one package"))
		}
		for _, p := range list {
			s, _ := p.(string)
			if s == "" || strings.HasPrefix(s, "-") || strings.ContainsAny(s, " \t\n'\"") {
				errs = append(errs, module.Invalid("packages", "param \"packages\": %q is not an apt package name", s))
			}
		}
	}
	if x, ok := v.Get("lock_retries"); ok {
		if n, _ := toInt(x); n < 0 {
			errs = append(errs, module.Invalid("lock_retries", "param \"lock_retries\" must not be negative"))
		}
	}
	if x, ok := v.Get("lock_retry_delay"); ok {
		s, _ := x.(string)
		if d, err := time.ParseDuration(s); err != nil || d < 0 {
			errs = append(errs, module.Invalid("lock_retry_delay", "param \"lock_retry_delay\" must be a duration such as \"15s\", got %q", s))
		}
	}
	return errors.Join(errs...)
}

func toInt(x any) (int64, bool) {
	switch n := x.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), true
	case float64:
		return int64(n), true
	}
	return 0, false
}
