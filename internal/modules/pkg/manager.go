package pkg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
)

// Codes of the errors the pkg states return.
const (
	// CodeLocked means a dpkg or apt lock was still held after the last
	// retry; the message names the process holding it.
	CodeLocked = "apt.locked"
	// CodePackageNotFound means apt has no installation candidate for any
	// of the missing packages.
	CodePackageNotFound = "apt.package_not_found"
	// CodeInstallFailed means no missing package could be installed, for
	// another reason than not being found.
	CodeInstallFailed = "apt.install_failed"
	// CodeRemoveFailed means no installed package could be removed.
	CodeRemoveFailed = "apt.remove_failed"
	// CodeUpdateFailed means apt-get update failed.
	CodeUpdateFailed = "apt.update_failed"
	// CodeUnsupported means the soul has no package manager this build
	// knows.
	CodeUnsupported = "pkg.unsupported"
	// CodeProtocol means the soul answered something the module could not
	// read.
	CodeProtocol = "pkg.protocol"
)

// manager is a package manager on a soul: apt today, dnf next. Each method
// is one round trip to the soul.
type manager interface {
	// query reports the state of every package and the age of the
	// package lists.
	query(ctx context.Context, t module.Target, pkgs []spec) (snapshot, error)
	// install installs pkgs, refreshing the package lists as refresh
	// says. It returns a *lockedError, having changed nothing since the
	// lists were refreshed, when another process holds the package
	// manager's lock.
	install(ctx context.Context, t module.Target, pkgs []spec, refresh refresh) (outcome, error)
	// remove removes pkgs (and their configuration files when purge is
	// set), or returns a *lockedError like install.
	remove(ctx context.Context, t module.Target, pkgs []spec, purge bool) (outcome, error)
	// candidates returns the specs (raw) of pkgs the package manager has
	// a candidate for in its lists as they are, changing nothing.
	candidates(ctx context.Context, t module.Target, pkgs []spec) ([]string, error)
}

// refresh says when install refreshes the package lists.
type refresh int

const (
	// refreshNever leaves the lists as they are: update is false, or this
	// call refreshed them already.
	refreshNever refresh = iota
	// refreshFirst refreshes them before looking the packages up: they
	// are older than cache_valid_time, or there are none.
	refreshFirst
	// refreshIfNotFound refreshes them once, and looks again, when a
	// package has no candidate in the lists cache_valid_time calls fresh:
	// a repository that changed since is the usual cause.
	refreshIfNotFound
)

// spec is one entry of the packages param: name[:arch][=version].
type spec struct {
	raw     string
	name    string
	arch    string
	version string
}

func parseSpec(s string) spec {
	p := spec{raw: s, name: s}
	if i := strings.IndexByte(p.name, '='); i >= 0 {
		p.name, p.version = p.name[:i], p.name[i+1:]
	}
	if i := strings.IndexByte(p.name, ':'); i >= 0 {
		p.name, p.arch = p.name[:i], p.name[i+1:]
	}
	return p
}

// query returns the name the package manager knows the package by,
// without the version.
func (s spec) query() string {
	if s.arch != "" {
		return s.name + ":" + s.arch
	}
	return s.name
}

// record is the package database's entry for one package (one
// architecture of it).
type record struct {
	name    string
	arch    string
	status  string // dpkg's, such as "install ok installed"
	version string
}

func (r record) installed() bool { return strings.HasSuffix(r.status, " installed") }

// configFiles reports a removed package whose configuration files remain.
func (r record) configFiles() bool { return strings.HasSuffix(r.status, " config-files") }

// states are the package database's records.
type states []record

// installed reports whether s is installed, in the version it asks for.
func (st states) installed(s spec) bool {
	return slices.ContainsFunc(st, func(r record) bool {
		return s.matches(r) && r.installed() && (s.version == "" || s.version == r.version)
	})
}

// present reports whether s is installed in any version, or, with
// purge, has configuration files left.
func (st states) present(s spec, purge bool) bool {
	return slices.ContainsFunc(st, func(r record) bool {
		return s.matches(r) && (r.installed() || purge && r.configFiles())
	})
}

func (s spec) matches(r record) bool {
	return r.name == s.name && (s.arch == "" || r.arch == s.arch || r.arch == "all")
}

// snapshot is what query found.
type snapshot struct {
	states states
	// listsAge is the age of the package lists; hasLists is false when
	// there are none (a fresh image), which always needs an update.
	listsAge time.Duration
	hasLists bool
}

// outcome is what install or remove did.
type outcome struct {
	// updated reports that the package lists were refreshed.
	updated bool
	// states are the records of the packages afterwards.
	states states
	// failed maps the packages that failed (by their spec) to why.
	failed map[string]string
	// notFound are the packages the package manager has no candidate for.
	notFound []string
	// retryUpdateFailed is why the refresh that refreshIfNotFound ran
	// failed; the packages were looked up again in the lists as that
	// refresh left them.
	retryUpdateFailed string
}

// lockedError means another process holds the package manager's lock.
type lockedError struct {
	holders []holder
}

// holder is a process holding a lock, or running unattended-upgrade.
type holder struct {
	pid     string
	comm    string
	file    string // the lock file; empty for a running unattended-upgrade
	cmdline string
}

func (h holder) String() string { return h.describe([]string{h.file}) }

// describe says what the holder's process does, with the lock files it
// holds (none for a running unattended-upgrade).
func (h holder) describe(files []string) string {
	var b strings.Builder
	if h.pid != "" {
		fmt.Fprintf(&b, "process %s", h.pid)
		if h.comm != "" {
			fmt.Fprintf(&b, " (%s)", h.comm)
		}
	} else {
		b.WriteString("another process")
	}
	files = slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == "" })
	if len(files) > 0 {
		fmt.Fprintf(&b, " holds %s", strings.Join(files, " and "))
	} else if h.pid != "" {
		b.WriteString(" is running unattended-upgrade")
	}
	if c := strings.TrimSpace(h.cmdline); c != "" {
		fmt.Fprintf(&b, ": %s", c)
	}
	return b.String()
}

// Error names each holding process once, with the lock files it holds.
func (e *lockedError) Error() string {
	if len(e.holders) == 0 {
		return "the package manager's lock is held by another process"
	}
	var order []holder
	files := map[holder][]string{}
	for _, h := range e.holders {
		key := h
		key.file = ""
		if _, seen := files[key]; !seen {
			order = append(order, key)
		}
		if !slices.Contains(files[key], h.file) {
			files[key] = append(files[key], h.file)
		}
	}
	parts := make([]string, len(order))
	for i, h := range order {
		parts[i] = h.describe(files[h])
	}
	return strings.Join(parts, "; ")
}

// lockPolicy is how long to wait for a held lock.
type lockPolicy struct {
	retries int
	delay   time.Duration
	sleep   Sleep
}

func newLockPolicy(retries int, delay string, sleep Sleep) (lockPolicy, error) {
	d, err := time.ParseDuration(delay)
	if err != nil || d < 0 || retries < 0 {
		return lockPolicy{}, module.Invalid("lock_retry_delay", "params lock_retries %d, lock_retry_delay %q: want a count >= 0 and a duration", retries, delay)
	}
	if sleep == nil {
		sleep = timerSleep
	}
	return lockPolicy{retries: retries, delay: d, sleep: sleep}, nil
}

// Sleep waits d or until ctx is done.
type Sleep func(ctx context.Context, d time.Duration) error

// timerSleep is Sleep on a timer.
func timerSleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// whileLocked calls f until it does not return a *lockedError, at most
// 1+retries times, delay apart. A lock still held after the last try is a
// CodeLocked error naming the holder.
func (p lockPolicy) whileLocked(ctx context.Context, f func() error) error {
	for try := 0; ; try++ {
		err := f()
		var le *lockedError
		if !errors.As(err, &le) {
			return err
		}
		if try >= p.retries {
			return &module.Error{
				Code:    CodeLocked,
				Message: fmt.Sprintf("the package manager is locked: %v (still held after %d tries, %s apart; the lock files were left alone)", le, try+1, p.delay),
				Err:     le,
			}
		}
		if err := p.sleep(ctx, p.delay); err != nil {
			return fmt.Errorf("wait for the package manager's lock (%v): %w", le, err)
		}
	}
}

// cacheValidity is cache_valid_time as a duration.
func cacheValidity(p InstalledParams) (time.Duration, error) {
	if p.CacheValidTime == "" {
		// cache_valid_time declares its default as DefaultDoc: the
		// planned params do not carry it.
		p.CacheValidTime = DefaultCacheValidTime
	}
	d, err := time.ParseDuration(p.CacheValidTime)
	if err != nil {
		return 0, module.Invalid("cache_valid_time", "param \"cache_valid_time\" must be a duration such as \"1h\", got %q", p.CacheValidTime)
	}
	return d, nil
}

// lookMissing is the first round trip of install and its check: the
// packages' states, the output as far as it is known (the installed
// ones), and the packages missing.
func lookMissing(ctx context.Context, m manager, t module.Target, p InstalledParams) (snapshot, installOutput, []spec, error) {
	specs := specsOf(p.Packages)
	out := installOutput{Status: "ok", Installed: []string{}, AlreadyInstalled: []string{}, Failed: []string{}, Reasons: map[string]string{}}
	snap, err := m.query(ctx, t, specs)
	if err != nil {
		return snap, out, nil, err
	}
	var missing []spec
	for _, s := range specs {
		if snap.states.installed(s) {
			out.AlreadyInstalled = append(out.AlreadyInstalled, s.raw)
		} else {
			missing = append(missing, s)
		}
	}
	return snap, out, missing, nil
}

// install is core.pkg.installed on any manager.
func install(ctx context.Context, m manager, t module.Target, p InstalledParams, sleep Sleep) (module.Result, error) {
	lock, err := newLockPolicy(p.LockRetries, p.LockRetryDelay, sleep)
	if err != nil {
		return module.Result{}, err
	}
	cacheValid, err := cacheValidity(p)
	if err != nil {
		return module.Result{}, err
	}
	snap, out, missing, err := lookMissing(ctx, m, t, p)
	if err != nil {
		return module.Result{}, err
	}
	if len(missing) == 0 {
		return module.Result{Output: out.value()}, nil
	}

	mode := refreshNever
	if p.Update {
		mode = refreshIfNotFound
		if !snap.hasLists || snap.listsAge >= cacheValid {
			mode = refreshFirst
		}
	}
	var res outcome
	var refreshFailed string
	err = lock.whileLocked(ctx, func() error {
		var err error
		res, err = m.install(ctx, t, missing, mode)
		if res.retryUpdateFailed != "" {
			refreshFailed = res.retryUpdateFailed
		}
		if res.updated || res.retryUpdateFailed != "" {
			// A try that met the lock after running apt-get update
			// does not run it again: one a run.
			out.CacheUpdated = out.CacheUpdated || res.updated
			mode = refreshNever
		}
		return err
	})
	if err != nil {
		return module.Result{Output: out.value()}, err
	}
	for _, s := range missing {
		switch {
		case res.states.installed(s):
			out.Installed = append(out.Installed, s.raw)
		case slices.Contains(res.notFound, s.raw):
			out.Failed = append(out.Failed, s.raw)
			out.Reasons[s.raw] = "not found: " + notFound("it", p.Update, out.CacheUpdated, refreshFailed)
		default:
			reason := res.failed[s.raw]
			if reason == "" {
				reason = "not installed after apt-get install"
			}
			out.Failed = append(out.Failed, s.raw)
			out.Reasons[s.raw] = reason
		}
	}
	changed := len(out.Installed) > 0
	if len(out.Failed) > 0 {
		out.Status = "partial"
	}
	// A total failure is one that leaves none of the packages present; a
	// re-run of a partial run, with the found packages already there, is
	// partial again and unchanged.
	if len(out.Installed)+len(out.AlreadyInstalled) == 0 {
		names := strings.Join(out.Failed, ", ")
		e := &module.Error{Code: CodeInstallFailed, Message: fmt.Sprintf("nothing installed: %s could not be installed: %s", names, out.Reasons[out.Failed[0]])}
		if len(res.notFound) == len(out.Failed) {
			e = &module.Error{Code: CodePackageNotFound, Message: "nothing installed: " + notFound(names, p.Update, out.CacheUpdated, refreshFailed)}
		}
		return module.Result{Output: out.value()}, e
	}
	return module.Result{Changed: changed, Output: out.value()}, nil
}

// installCheck is core.pkg.installed's check: the query install starts
// with, and for the missing packages a look at the package lists as they
// are. A missing package apt has a candidate for would be installed (a
// change); when none has one, a run that refreshes the lists first
// (update) may find them, which a check cannot know without refreshing,
// and one that does not fails as install would.
func installCheck(ctx context.Context, m manager, t module.Target, p InstalledParams) (module.Prediction, error) {
	if _, err := cacheValidity(p); err != nil {
		return module.Prediction{}, err
	}
	_, out, missing, err := lookMissing(ctx, m, t, p)
	if err != nil {
		return module.Prediction{}, err
	}
	if len(missing) == 0 {
		return module.Prediction{Output: out.value(), OutputKnown: true}, nil
	}
	found, err := m.candidates(ctx, t, missing)
	if err != nil {
		return module.Prediction{}, err
	}
	var changes []client.Change
	var absent []string
	for _, s := range missing {
		if slices.Contains(found, s.raw) {
			changes = append(changes, client.Change{Kind: "package", Action: "install", Name: s.raw})
		} else {
			absent = append(absent, s.raw)
		}
	}
	switch {
	case len(changes) > 0:
		return module.Prediction{WouldChange: true, Changes: changes}, nil
	case p.Update:
		return module.Prediction{Unknown: fmt.Sprintf("apt has no candidate for %s in the package lists as they are; the run refreshes them (update) before it looks, which a check does not do", strings.Join(absent, ", "))}, nil
	}
	return module.Prediction{}, &module.Error{Code: CodePackageNotFound, Message: "nothing would be installed: " + notFound(strings.Join(absent, ", "), false, false, "")}
}

// removeCheck is core.pkg.removed's check: the query remove starts with.
func removeCheck(ctx context.Context, m manager, t module.Target, p RemovedParams) (module.Prediction, error) {
	specs := specsOf(p.Packages)
	snap, err := m.query(ctx, t, specs)
	if err != nil {
		return module.Prediction{}, err
	}
	out := removeOutput{Status: "ok", Removed: []string{}, AlreadyAbsent: []string{}, Failed: []string{}, Reasons: map[string]string{}}
	action := "remove"
	if p.Purge {
		action = "purge"
	}
	var changes []client.Change
	for _, s := range specs {
		if snap.states.present(s, p.Purge) {
			changes = append(changes, client.Change{Kind: "package", Action: action, Name: s.raw})
		} else {
			out.AlreadyAbsent = append(out.AlreadyAbsent, s.raw)
		}
	}
	if len(changes) == 0 {
		return module.Prediction{Output: out.value(), OutputKnown: true}, nil
	}
	return module.Prediction{WouldChange: true, Changes: changes}, nil
}

// notFound says that apt has no installation candidate for what (a
// package, or a list of them), with what this call did to the package
// lists.
func notFound(what string, update, refreshed bool, refreshFailed string) string {
	const check = "check the names and the configured repositories"
	msg := "apt has no installation candidate for " + what
	switch {
	case refreshed:
		return msg + ", even after refreshing the package lists (" + check + ")"
	case refreshFailed != "":
		return msg + ", and refreshing the package lists failed: " + refreshFailed
	case !update:
		return msg + " in the package lists, which were not refreshed because update is false (" + check + ", or set update)"
	}
	return msg + " (" + check + ")"
}

// remove is core.pkg.removed on any manager.
func remove(ctx context.Context, m manager, t module.Target, p RemovedParams, sleep Sleep) (module.Result, error) {
	lock, err := newLockPolicy(p.LockRetries, p.LockRetryDelay, sleep)
	if err != nil {
		return module.Result{}, err
	}
	specs := specsOf(p.Packages)
	snap, err := m.query(ctx, t, specs)
	if err != nil {
		return module.Result{}, err
	}
	out := removeOutput{Status: "ok", Removed: []string{}, AlreadyAbsent: []string{}, Failed: []string{}, Reasons: map[string]string{}}
	var present []spec
	for _, s := range specs {
		if snap.states.present(s, p.Purge) {
			present = append(present, s)
		} else {
			out.AlreadyAbsent = append(out.AlreadyAbsent, s.raw)
		}
	}
	if len(present) == 0 {
		return module.Result{Output: out.value()}, nil
	}
	var res outcome
	err = lock.whileLocked(ctx, func() error {
		var err error
		res, err = m.remove(ctx, t, present, p.Purge)
		return err
	})
	if err != nil {
		return module.Result{Output: out.value()}, err
	}
	for _, s := range present {
		if res.states.present(s, p.Purge) {
			reason := res.failed[s.raw]
			if reason == "" {
				reason = "still installed after apt-get remove"
			}
			out.Failed = append(out.Failed, s.raw)
			out.Reasons[s.raw] = reason
		} else {
			out.Removed = append(out.Removed, s.raw)
		}
	}
	changed := len(out.Removed) > 0
	if len(out.Failed) > 0 {
		out.Status = "partial"
		if !changed {
			return module.Result{Output: out.value()}, &module.Error{
				Code:    CodeRemoveFailed,
				Message: fmt.Sprintf("nothing removed: %s could not be removed: %s", strings.Join(out.Failed, ", "), out.Reasons[out.Failed[0]]),
			}
		}
	}
	return module.Result{Changed: changed, Output: out.value()}, nil
}

func specsOf(pkgs []string) []spec {
	var out []spec
	for _, p := range pkgs {
		s := parseSpec(p)
		if !slices.ContainsFunc(out, func(o spec) bool { return o.raw == s.raw }) {
			out = append(out, s)
		}
	}
	return out
}

// installOutput is the output of core.pkg.installed.
type installOutput struct {
	Status           string
	Installed        []string
	AlreadyInstalled []string
	Failed           []string
	Reasons          map[string]string
	CacheUpdated     bool
}

// value returns the output as the JSON-compatible value expressions see.
func (o installOutput) value() map[string]any {
	return map[string]any{
		"status":            o.Status,
		"installed":         anyList(o.Installed),
		"already_installed": anyList(o.AlreadyInstalled),
		"failed":            anyList(o.Failed),
		"reasons":           anyMap(o.Reasons),
		"cache_updated":     o.CacheUpdated,
	}
}

// removeOutput is the output of core.pkg.removed.
type removeOutput struct {
	Status        string
	Removed       []string
	AlreadyAbsent []string
	Failed        []string
	Reasons       map[string]string
}

// value returns the output as the JSON-compatible value expressions see.
func (o removeOutput) value() map[string]any {
	return map[string]any{
		"status":         o.Status,
		"removed":        anyList(o.Removed),
		"already_absent": anyList(o.AlreadyAbsent),
		"failed":         anyList(o.Failed),
		"reasons":        anyMap(o.Reasons),
	}
}

func anyList(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
