// Package pkg declares and runs core.pkg.installed and core.pkg.removed,
// which manage apt packages on Debian and Ubuntu souls.
//
// Each run first asks the soul, in one round trip, which of the packages
// are installed (dpkg-query for all of them at once) and how old the
// package lists are; when nothing has to change, that is the only round
// trip. Otherwise a second round trip updates the lists when they are
// stale (or, when they are fresh but a package has no candidate in them,
// updates them once and looks again), drops packages apt has no candidate
// for, and installs or removes the rest. A dpkg or apt lock held by another
// process (unattended-upgrades on a fresh VM, say) is waited for, never
// broken.
//
// core.pkg.installed fails only when none of the packages is present
// afterwards; otherwise the packages that are not are reported in failed
// with status partial, so a re-run of a partial run is partial again and
// unchanged.
//
// The package manager sits behind a small interface (manager) so that dnf
// can follow apt.
package pkg

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
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
type Installed struct{ sleep Sleep }

// Removed is the core.pkg.removed state.
type Removed struct{ sleep Sleep }

// Services are what the keeper gives the package states: the wait
// between two tries of a held package manager lock, on the keeper's clock.
// Unprovisioned (tests, tools), they wait on a timer.
type Services struct {
	Sleep Sleep
}

// Provision returns core.pkg.installed with the keeper's services.
func (*Installed) Provision(s Services) (module.Module, error) {
	return &Installed{sleep: s.Sleep}, nil
}

// Provision returns core.pkg.removed with the keeper's services.
func (*Removed) Provision(s Services) (module.Module, error) { return &Removed{sleep: s.Sleep}, nil }

var (
	_ module.Module    = (*Installed)(nil)
	_ module.Validator = (*Installed)(nil)
	_ module.Module    = (*Removed)(nil)
	_ module.Validator = (*Removed)(nil)
	_ module.Checker   = (*Installed)(nil)
	_ module.Checker   = (*Removed)(nil)

	_ module.Provisioner[Services] = (*Installed)(nil)
	_ module.Provisioner[Services] = (*Removed)(nil)
)

// InstalledParams are the params of core.pkg.installed.
type InstalledParams struct {
	Packages       []string `json:"packages"`
	Update         bool     `json:"update"`
	CacheValidTime string   `json:"cache_valid_time"`
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
	{Name: "lock_retries", Type: module.TypeInt, Default: DefaultLockRetries, Doc: "How many times to retry while the dpkg or apt lock is held (by unattended-upgrades, say) before failing with `apt.locked`."},
	{Name: "lock_retry_delay", Type: module.TypeString, Default: DefaultLockRetryDelay, Doc: "Wait between lock retries, as a duration such as \"15s\"."},
}

// Defaults of the params.
const (
	DefaultLockRetries    = 5
	DefaultLockRetryDelay = "15s"
	DefaultCacheValidTime = "1h"
)

var packagesDoc = "Debian package names, optionally with an architecture (`name:arch`) and a version (`name=version`)."

// Info returns the declaration of core.pkg.installed.
func (*Installed) Info() module.Info {
	return module.Info{
		ID:      InstalledID,
		Summary: "Make sure apt packages are installed on each target soul.",
		Description: "Asks dpkg which of the packages are installed, all at once; when none is missing nothing else runs. " +
			"Otherwise, in one more round trip, it runs `apt-get update` when `update` is true and the package lists are older than `cache_valid_time` (or missing), " +
			"looks the missing packages up (when `update` is true and the lists were not refreshed in this run, a package with no installation candidate " +
			"makes it run `apt-get update` once and look again: stale lists are the usual cause on a fresh VM), " +
			"leaves out the packages apt still has no installation candidate for, and runs " +
			"`DEBIAN_FRONTEND=noninteractive apt-get install -y` (keeping existing configuration files) for the rest.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: append([]module.Param{
			{Name: "packages", Type: module.TypeList, Elem: module.TypeString, Required: true, Doc: packagesDoc},
			{Name: "update", Type: module.TypeBool, Default: true, Doc: "Refresh the package lists (apt-get update) before installing when they are older than `cache_valid_time`, and, when they are younger but a package is not found in them, refresh them once and look again. At most one apt-get update a run; none when no package is missing. false never refreshes them."},
			{Name: "cache_valid_time", Type: module.TypeString, DefaultDoc: DefaultCacheValidTime, Doc: "How old the package lists may be before `update` refreshes them ahead of the install, as a duration such as \"1h\"; \"0s\" always updates. Younger lists are still refreshed once when a package is not found in them."},
		}, lockParams...),
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok, or partial when some packages are not installed (they are in `failed`) while others are."},
			{Name: "installed", Type: "array<string>", Doc: "Packages this run installed."},
			{Name: "already_installed", Type: "array<string>", Doc: "Packages that were already installed."},
			{Name: "failed", Type: "array<string>", Doc: "Packages that could not be installed (not found, say)."},
			{Name: "reasons", Type: "map<string,string>", Doc: "Why each package in `failed` failed."},
			{Name: "cache_updated", Type: "bool", Doc: "Whether this run ran apt-get update (ahead of the install, or once for a package not found)."},
		},
		ChangesWhen: "At least one package was installed.",
		CheckMode: "Asks dpkg which packages are installed, and apt which missing ones have a candidate in the package lists as they are (apt-cache keeps its caches in memory): those would be installed. " +
			"The lists are never refreshed: when no missing package has a candidate, the target is unknown with update (the apply refreshes first) and fails pkg.package_not_found without it, as apply would.",
		UnchangedWhen: "No package was installed: every package was already installed, or (status partial) the ones not installed still cannot be, as when a partial run is run again.",
		Example: `- name: base
  on: web-1.local.test
  module: core.pkg.installed
  params:
    packages: [git, curl]`,
		Notes: []string{
			"Partial and total failure: when some packages are present afterwards (installed by this run or already there) and others could not be installed, the run succeeds with `status: partial`, the others in `failed` and why in `reasons`; run again, it gives the same `status: partial`, unchanged, with the present ones in `already_installed`. Only when none of the packages is present afterwards does it fail the target with a readable message: `apt.package_not_found` when apt has no installation candidate for any of them, `apt.install_failed` otherwise.",
			"Stale lists: with `update: true`, a package not found in lists that `cache_valid_time` calls fresh makes the run refresh them once (`cache_updated: true`) and look again before calling it not found; a run that refreshed them ahead of the install does not refresh them again. A failure of that refresh is not fatal: the packages are looked up again in the lists it did refresh, and those still not found have a reason that says why it failed. With `update: false` the lists are never refreshed and the reason says so.",
			"A dpkg or apt lock held by another process, or a running unattended-upgrade, is waited for (`lock_retries` x `lock_retry_delay`); the lock files are never deleted. A lock still held after the last try fails with `apt.locked`, naming the process that holds it.",
			"The package lists are fresh when /var/lib/apt/periodic/update-success-stamp or /var/lib/apt/lists is younger than `cache_valid_time`; a successful update touches the stamp.",
			"A host still booting is retried by the transport (3 tries, 10 s apart by default; see the step's `connect`).",
		},
	}
}

// Run installs the missing packages. See the package doc for the round
// trips.
func (m *Installed) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	var p InstalledParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	return install(ctx, apt{}, t, p, m.sleep)
}

// Check says which missing packages would be installed, changing nothing
// (the package lists are not refreshed).
func (*Installed) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	var p InstalledParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	return installCheck(ctx, apt{}, t, p)
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
			{Name: "reasons", Type: "map<string,string>", Doc: "Why each package in `failed` failed."},
		},
		ChangesWhen:   "At least one package was removed.",
		CheckMode:     "Asks dpkg which of the packages are installed (or, with purge, have configuration files left): those would be removed. Removes nothing.",
		UnchangedWhen: "None of the packages was installed.",
		Example: `- name: no_telnet
  on: web-1.local.test
  module: core.pkg.removed
  params:
    packages: [telnet]`,
		Notes: []string{
			"Packages apt does not know are reported in `already_absent`, not as failures.",
			"Locks are waited for as in core.pkg.installed; a lock still held after the last try fails with `apt.locked`.",
		},
	}
}

// Run removes the installed packages among the given ones.
func (m *Removed) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	var p RemovedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	return remove(ctx, apt{}, t, p, m.sleep)
}

// Check says which of the packages would be removed.
func (*Removed) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	var p RemovedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	return removeCheck(ctx, apt{}, t, p)
}

// packageRE is a Debian package name (policy 5.6.1), optionally with an
// architecture qualifier and a version (policy 5.6.12). Glob characters,
// which dpkg-query and apt would expand, are not allowed.
var packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[0-9][A-Za-z0-9.+~:-]*)?$`)

// ValidateParams checks the package names, the lock retry settings and
// cache_valid_time.
func (*Installed) ValidateParams(v module.Values) error {
	err := checkCommon(v)
	if x, ok := v.Get("cache_valid_time"); ok {
		s, _ := x.(string)
		if d, perr := time.ParseDuration(s); perr != nil || d < 0 {
			err = errors.Join(err, module.Invalid("cache_valid_time", "param \"cache_valid_time\" must be a duration such as \"1h\", got %q", s))
		}
	}
	return err
}

// ValidateParams checks the package names and the lock retry settings.
func (*Removed) ValidateParams(v module.Values) error { return checkCommon(v) }

func checkCommon(v module.Values) error {
	var errs []error
	if x, ok := v.Get("packages"); ok {
		list, _ := x.([]any)
		if len(list) == 0 {
			errs = append(errs, module.Invalid("packages", "param \"packages\" must name at least one package"))
		}
		for _, p := range list {
			s, _ := p.(string)
			if !packageRE.MatchString(s) {
				errs = append(errs, module.Invalid("packages", "param \"packages\": %q is not a Debian package name", s))
			}
		}
	}
	if x, ok := v.Get("lock_retries"); ok {
		if n, _ := module.Int(x); n < 0 {
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
