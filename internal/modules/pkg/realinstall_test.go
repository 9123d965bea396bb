package pkg_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	"github.com/soulstack/soulstack/internal/modules/pkg"
)

// The TestRealInstall tests install and remove real packages, from a local
// repository built by the test, in local VMs (whose root is an overlay
// over the host's, so nothing leaks into the host). They reach no network.

func list(out map[string]any, key string) []string {
	l, _ := out[key].([]any)
	var s []string
	for _, x := range l {
		str, _ := x.(string)
		s = append(s, str)
	}
	return s
}

func reason(out map[string]any, pkg string) string {
	m, _ := out["reasons"].(map[string]any)
	s, _ := m[pkg].(string)
	return s
}

func wantList(t *testing.T, out map[string]any, key string, want ...string) {
	t.Helper()
	got := list(out, key)
	if _, ok := out[key].([]any); !ok || !slices.Equal(got, want) {
		t.Errorf("output %s = %q, want %q (output %v)", key, got, want, out)
	}
}

// TestRealInstall runs core.pkg.installed and core.pkg.removed through
// their cases on one VM, in order.
func TestRealInstall(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	v := newVM(t, r)
	installed, removed := &pkg.Installed{}, &pkg.Removed{}

	t.Run("install two", func(t *testing.T) {
		res, out, n, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-b"}})
		if err != nil || !res.Changed {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		wantList(t, out, "installed", "soulstack-test-a", "soulstack-test-b")
		wantList(t, out, "already_installed")
		wantList(t, out, "failed")
		if out["status"] != "ok" || out["cache_updated"] != true {
			t.Errorf("output = %v; want status ok and cache_updated (the VM started with no lists)", out)
		}
		if n != 2 {
			t.Errorf("%d round trips; want 2 (query, install)", n)
		}
		v.sh(t, "test -f /usr/share/soulstack-test/soulstack-test-a && test -f /usr/share/soulstack-test/soulstack-test-b")
	})

	t.Run("again unchanged", func(t *testing.T) {
		res, out, n, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-b", "soulstack-test-b=1.0"}})
		if err != nil || res.Changed {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		wantList(t, out, "installed")
		wantList(t, out, "already_installed", "soulstack-test-a", "soulstack-test-b", "soulstack-test-b=1.0")
		if out["status"] != "ok" || out["cache_updated"] != false {
			t.Errorf("output = %v", out)
		}
		if n != 1 {
			t.Errorf("%d round trips for an unchanged run; want 1 (the dpkg-query)", n)
		}
		if v.aptUpdates(t) != 1 {
			t.Errorf("apt-get update ran %d times in all; want 1 (the first install's)", v.aptUpdates(t))
		}
	})

	t.Run("unknown package partial", func(t *testing.T) {
		updates := v.aptUpdates(t)
		res, out, n, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-c", "soulstack-test-nope", "soulstack-test-a"}})
		if err != nil || !res.Changed {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		wantList(t, out, "installed", "soulstack-test-c")
		wantList(t, out, "already_installed", "soulstack-test-a")
		wantList(t, out, "failed", "soulstack-test-nope")
		if out["status"] != "partial" || !strings.Contains(reason(out, "soulstack-test-nope"), "not found") {
			t.Errorf("output = %v; want status partial with a not-found reason", out)
		}
		if out["cache_updated"] != true || v.aptUpdates(t) != updates+1 {
			t.Errorf("cache_updated = %v after %d apt-get updates; want one refresh for the package not found in the fresh lists", out["cache_updated"], v.aptUpdates(t)-updates)
		}
		if n != 2 {
			t.Errorf("%d round trips; want 2", n)
		}
	})

	t.Run("only unknown packages", func(t *testing.T) {
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-nope", "soulstack-test-b=9.9"}})
		if module.Code(err) != pkg.CodePackageNotFound || res.Changed {
			t.Fatalf("Run = %+v, %v (%s); want %s", res, err, module.Code(err), pkg.CodePackageNotFound)
		}
		t.Logf("message: %v", err)
		if !strings.Contains(err.Error(), "soulstack-test-nope, soulstack-test-b=9.9") {
			t.Errorf("message %q does not name the packages", err)
		}
		wantList(t, out, "failed", "soulstack-test-nope", "soulstack-test-b=9.9")
	})

	t.Run("removed", func(t *testing.T) {
		res, out, _, err := v.run(t, removed, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-nope"}})
		if err != nil || !res.Changed {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		wantList(t, out, "removed", "soulstack-test-a")
		wantList(t, out, "already_absent", "soulstack-test-nope")
		v.sh(t, "! test -e /usr/share/soulstack-test/soulstack-test-a")

		res, out, n, err := v.run(t, removed, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-nope"}})
		if err != nil || res.Changed {
			t.Fatalf("second Run = %+v, %v", res, err)
		}
		wantList(t, out, "removed")
		wantList(t, out, "already_absent", "soulstack-test-a", "soulstack-test-nope")
		if n > 2 {
			t.Errorf("%d round trips for an unchanged removal; want at most 2", n)
		}
	})

	t.Run("stale lists updated", func(t *testing.T) {
		v.sh(t, "touch -d '2 hours ago' /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists")
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a"}})
		if err != nil || !res.Changed || out["cache_updated"] != true {
			t.Fatalf("Run = %+v, %v; want installed with cache_updated", res, err)
		}
		v.sh(t, "touch -d '2 hours ago' /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists")
		res, out, _, err = v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-d"}, "cache_valid_time": "3h"})
		if err != nil || !res.Changed || out["cache_updated"] != false {
			t.Fatalf("Run with cache_valid_time 3h = %+v, %v; want installed without an update", res, err)
		}
		res, out, _, err = v.run(t, removed, map[string]any{"packages": []any{"soulstack-test-d"}, "purge": true})
		if err != nil || !res.Changed {
			t.Fatalf("purge = %+v, %v", res, err)
		}
		wantList(t, out, "removed", "soulstack-test-d")
		if got := v.sh(t, "dpkg-query -W -f='${Status}' soulstack-test-d 2>/dev/null || true"); strings.Contains(got, "installed") || strings.Contains(got, "config-files") {
			t.Errorf("after purge the package's status is %q", got)
		}
	})

	// Last: a package that fails to configure stays half-configured.
	t.Run("broken package partial", func(t *testing.T) {
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-broken", "soulstack-test-d"}})
		if err != nil || !res.Changed {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		wantList(t, out, "installed", "soulstack-test-d")
		wantList(t, out, "failed", "soulstack-test-broken")
		if out["status"] != "partial" || !strings.Contains(reason(out, "soulstack-test-broken"), "soulstack-test-broken") {
			t.Errorf("output = %v; want partial with a reason that names the package", out)
		}
		t.Logf("reason: %s", reason(out, "soulstack-test-broken"))
	})
}

// TestRealInstallLock holds dpkg's locks in a VM the way a real holder
// does: dpkg -i of a package whose preinst waits for a file.
func TestRealInstallLock(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	v := newVM(t, r)
	installed := &pkg.Installed{}

	hold := func(t *testing.T) {
		t.Helper()
		v.sh(t, fmt.Sprintf(`rm -f %[1]s %[2]s
setsid dpkg -i %[3]s </dev/null >/root/slow.log 2>&1 &
for i in $(seq 600); do test -e %[1]s && exit 0; sleep 0.05; done
cat /root/slow.log; exit 1`, slowHolding, slowRelease, r.deb("soulstack-test-slow")))
	}
	release := func(t testing.TB) {
		t.Helper()
		v.sh(t, fmt.Sprintf(`touch %s
for i in $(seq 600); do pgrep -x dpkg >/dev/null || exit 0; sleep 0.05; done
echo dpkg is still running; exit 1`, slowRelease))
	}

	t.Run("never released", func(t *testing.T) {
		hold(t)
		defer release(t)
		pid := v.sh(t, "pgrep -x dpkg")
		res, _, n, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a"}, "lock_retries": 2, "lock_retry_delay": "100ms"})
		if module.Code(err) != pkg.CodeLocked || res.Changed {
			t.Fatalf("Run = %+v, %v (%s); want %s", res, err, module.Code(err), pkg.CodeLocked)
		}
		msg := err.Error()
		t.Logf("message: %s", msg)
		for _, want := range []string{"process " + pid + " (dpkg)", "/var/lib/dpkg/lock", "3 tries"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not say %q", msg, want)
			}
		}
		if n != 1+3 {
			t.Errorf("%d round trips; want 4 (query, 3 tries)", n)
		}
		v.sh(t, "test -e /var/lib/dpkg/lock-frontend && test -e /var/lib/dpkg/lock")
	})

	t.Run("released", func(t *testing.T) {
		hold(t)
		var once sync.Once
		var waited bool
		v.mu.Lock()
		v.onResult = func(res module.ExecResult) {
			if res.ExitCode == 75 { // the module saw the lock held
				waited = true
				// Release from another goroutine: this one is inside
				// the module's Exec.
				once.Do(func() {
					go v.exec(context.Background(), module.Command{Argv: []string{"touch", slowRelease}})
				})
			}
		}
		v.mu.Unlock()
		defer func() {
			v.mu.Lock()
			v.onResult = nil
			v.mu.Unlock()
			release(t)
		}()
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a"}, "lock_retries": 200, "lock_retry_delay": "100ms"})
		if err != nil || !res.Changed {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		if !waited {
			t.Error("the module never saw the lock held")
		}
		wantList(t, out, "installed", "soulstack-test-a")
	})

	t.Run("flock holder", func(t *testing.T) {
		// flock(1) takes a BSD lock, which apt's fcntl locks do not see;
		// the module still waits, because the process has the file open.
		pid := v.sh(t, `flock /var/lib/dpkg/lock-frontend sleep 600 </dev/null >/dev/null 2>&1 &
echo $!
for i in $(seq 200); do [ -n "$(pgrep -P $! -x sleep)" ] && exit 0; sleep 0.05; done; exit 1`)
		defer v.sh(t, "kill "+pid+" $(pgrep -P "+pid+" -x sleep); true")
		_, _, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-c"}, "lock_retries": 0})
		if module.Code(err) != pkg.CodeLocked || !strings.Contains(err.Error(), "process "+pid+" (flock) holds /var/lib/dpkg/lock-frontend") {
			t.Errorf("with flock holding the frontend lock: %v (%s)", err, module.Code(err))
		}
	})

	t.Run("unattended-upgrade running", func(t *testing.T) {
		// A process that looks like unattended-upgrade counts as a holder
		// even when it holds no lock; its shutdown helper does not.
		v.sh(t, `mkdir -p /root/uu && cp /bin/sleep /root/uu/unattended-upgrade && cp /bin/sleep /root/uu/unattended-upgrade-shutdown
/root/uu/unattended-upgrade-shutdown 600 </dev/null >/dev/null 2>&1 &
echo $! > /root/uu/pids
/root/uu/unattended-upgrade 600 </dev/null >/dev/null 2>&1 &
echo $! >> /root/uu/pids`)
		_, _, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-b"}, "lock_retries": 1, "lock_retry_delay": "10ms"})
		if module.Code(err) != pkg.CodeLocked || !strings.Contains(err.Error(), "is running unattended-upgrade") ||
			strings.Contains(err.Error(), "unattended-upgrade-shutdown") {
			t.Errorf("with unattended-upgrade running: %v (%s)", err, module.Code(err))
		}
		// Wait until they are gone (a killed process left as a zombie
		// has no cmdline, and no longer counts), however long that takes.
		v.sh(t, `kill $(cat /root/uu/pids)
for i in $(seq 600); do pgrep -f '/root/uu/[u]nattended-upgrade' >/dev/null || exit 0; sleep 0.05; done
echo the fake unattended-upgrade is still running; exit 1`)
		res, _, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-b"}, "lock_retries": 1, "lock_retry_delay": "10ms"})
		if err != nil || !res.Changed {
			t.Errorf("after it stopped: %+v, %v", res, err)
		}
	})
}

// TestHostAlreadyInstalled runs core.pkg.installed and core.pkg.removed on
// this machine through a real sshd, with packages every Debian system
// has and one that no system has: nothing is missing, so nothing but the
// one dpkg-query round trip runs, and the host is not changed. It needs no
// root.
func TestHostAlreadyInstalled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("the host has no dpkg-query: not a Debian system")
	}
	tg := &countingTarget{Target: moduletest.New(t)}
	res, err := moduletest.Run(t, &pkg.Installed{}, tg, map[string]any{"packages": []any{"dpkg", "base-files"}})
	out, _ := res.Output.(map[string]any)
	if err != nil || res.Changed || out["status"] != "ok" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	wantList(t, out, "already_installed", "dpkg", "base-files")
	wantList(t, out, "installed")
	res, err = moduletest.Run(t, &pkg.Removed{}, tg, map[string]any{"packages": []any{"soulstack-test-never-installed"}})
	out, _ = res.Output.(map[string]any)
	if err != nil || res.Changed {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	wantList(t, out, "already_absent", "soulstack-test-never-installed")
	if n := tg.execs.Load(); n != 2 {
		t.Errorf("%d round trips for two unchanged runs; want 2", n)
	}
}

// countingTarget counts the commands run through a target.
type countingTarget struct {
	module.Target
	execs atomic.Int32
}

func (c *countingTarget) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	c.execs.Add(1)
	return c.Target.Exec(ctx, cmd)
}

// TestRealInstallSudo installs as a login user that is not root, through
// sudo -n as the engine runs modules that need root.
func TestRealInstallSudo(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	v := newVMAs(t, r, "soul")
	if got := v.sh(t, "echo $SUDO_USER"); got != "soul" {
		t.Fatalf("commands do not run through sudo: SUDO_USER=%q", got)
	}
	res, out, _, err := v.run(t, &pkg.Installed{}, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-nope"}})
	if err != nil || !res.Changed {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	wantList(t, out, "installed", "soulstack-test-a")
	wantList(t, out, "failed", "soulstack-test-nope")
	// Again: partial and unchanged, its refresh for the missing package
	// run through sudo too.
	res, out, _, err = v.run(t, &pkg.Installed{}, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-nope"}})
	if err != nil || res.Changed || out["status"] != "partial" || out["cache_updated"] != true || v.aptUpdates(t) != 2 {
		t.Fatalf("re-run = %+v, %v after %d apt-get updates; want partial, unchanged, after one more update", res, err, v.aptUpdates(t))
	}
	wantList(t, out, "already_installed", "soulstack-test-a")
	res, _, n, err := v.run(t, &pkg.Installed{}, map[string]any{"packages": []any{"soulstack-test-a"}})
	if err != nil || res.Changed || n != 1 {
		t.Fatalf("second Run = %+v, %v in %d round trips", res, err, n)
	}
}

// TestRealInstallPartialRerun runs the seed's partial install (one
// package there, one that no repository has) again: a re-run says what
// the first run said, partial, and changes nothing. Only when none of the
// packages is present is it an error.
func TestRealInstallPartialRerun(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	v := newVM(t, r)
	installed := &pkg.Installed{}
	packages := []any{"soulstack-test-a", "no-such-package-zz9"}

	res, out, _, err := v.run(t, installed, map[string]any{"packages": packages})
	if err != nil || !res.Changed {
		t.Fatalf("first Run = %+v, %v; want partial, changed", res, err)
	}
	wantList(t, out, "installed", "soulstack-test-a")
	wantList(t, out, "failed", "no-such-package-zz9")
	if out["status"] != "partial" {
		t.Errorf("first run: status %v; want partial", out["status"])
	}
	if n := v.aptUpdates(t); n != 1 {
		t.Errorf("the first run (no lists yet) ran apt-get update %d times; want 1", n)
	}

	for _, tc := range []struct {
		update  bool
		updates int // apt-get update runs expected in the re-run
	}{{true, 1}, {false, 0}} {
		t.Run(fmt.Sprintf("update %v", tc.update), func(t *testing.T) {
			before := v.aptUpdates(t)
			res, out, n, err := v.run(t, installed, map[string]any{"packages": packages, "update": tc.update})
			if err != nil || res.Changed {
				t.Fatalf("re-run = %+v, %v (%s); want partial, unchanged, no error", res, err, module.Code(err))
			}
			if out["status"] != "partial" {
				t.Errorf("re-run: status %v; want partial", out["status"])
			}
			wantList(t, out, "installed")
			wantList(t, out, "already_installed", "soulstack-test-a")
			wantList(t, out, "failed", "no-such-package-zz9")
			if !strings.Contains(reason(out, "no-such-package-zz9"), "not found") {
				t.Errorf("reason %q does not say not found", reason(out, "no-such-package-zz9"))
			}
			if n != 2 {
				t.Errorf("%d round trips; want 2 (query, look up and install)", n)
			}
			if got := v.aptUpdates(t) - before; got != tc.updates {
				t.Errorf("apt-get update ran %d times; want %d", got, tc.updates)
			}
		})
	}

	t.Run("none present", func(t *testing.T) {
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"no-such-package-zz9", "soulstack-test-a=9.9"}})
		if module.Code(err) != pkg.CodePackageNotFound || res.Changed {
			t.Fatalf("Run = %+v, %v (%s); want %s: none of the packages is present", res, err, module.Code(err), pkg.CodePackageNotFound)
		}
		wantList(t, out, "failed", "no-such-package-zz9", "soulstack-test-a=9.9")
		wantList(t, out, "already_installed")
	})
}

// TestRealInstallStaleLists installs a package the repository gained after
// the VM's package lists were made, while cache_valid_time says the lists
// are fresh: with update true the lists are refreshed once and the package
// is found; with update false it is not found.
func TestRealInstallStaleLists(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	v := newVM(t, r)
	installed := &pkg.Installed{}
	res, _, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a"}})
	if err != nil || !res.Changed || v.aptUpdates(t) != 1 {
		t.Fatalf("first Run = %+v, %v after %d apt-get updates; want installed after 1", res, err, v.aptUpdates(t))
	}
	r.publish(t, v, 1)
	late := []any{"soulstack-test-late"}

	t.Run("update false", func(t *testing.T) {
		res, out, _, err := v.run(t, installed, map[string]any{"packages": late, "update": false})
		if module.Code(err) != pkg.CodePackageNotFound || res.Changed {
			t.Fatalf("Run = %+v, %v (%s); want %s", res, err, module.Code(err), pkg.CodePackageNotFound)
		}
		if out["cache_updated"] != false || v.aptUpdates(t) != 1 {
			t.Errorf("update false refreshed the lists: cache_updated %v, %d apt-get updates", out["cache_updated"], v.aptUpdates(t))
		}
		if r := reason(out, "soulstack-test-late"); !strings.Contains(r, "update is false") {
			t.Errorf("reason %q does not say the lists were not refreshed", r)
		}
	})

	t.Run("fresh by cache_valid_time", func(t *testing.T) {
		res, out, n, err := v.run(t, installed, map[string]any{"packages": late, "cache_valid_time": "3h"})
		if err != nil || !res.Changed {
			t.Fatalf("Run = %+v, %v (%s); want the package found after one refresh", res, err, module.Code(err))
		}
		wantList(t, out, "installed", "soulstack-test-late")
		if out["status"] != "ok" || out["cache_updated"] != true {
			t.Errorf("output = %v; want status ok, cache_updated", out)
		}
		if got := v.aptUpdates(t); got != 2 {
			t.Errorf("%d apt-get updates in all; want 2 (one before, one in this run)", got)
		}
		if n != 2 {
			t.Errorf("%d round trips; want 2 (query, refresh and install)", n)
		}
		v.sh(t, "test -f /usr/share/soulstack-test/soulstack-test-late")
	})

	t.Run("stale lists are refreshed once", func(t *testing.T) {
		v.sh(t, "touch -d '2 hours ago' /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists")
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-b", "soulstack-test-nope"}})
		if err != nil || !res.Changed || out["status"] != "partial" || out["cache_updated"] != true {
			t.Fatalf("Run = %+v, %v; want partial after a refresh", res, err)
		}
		if got := v.aptUpdates(t); got != 3 {
			t.Errorf("%d apt-get updates in all; want 3: a package not found after the run's own refresh does not refresh again", got)
		}
	})

	t.Run("not found after the refresh", func(t *testing.T) {
		res, out, _, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-nope"}, "cache_valid_time": "3h"})
		if module.Code(err) != pkg.CodePackageNotFound || res.Changed {
			t.Fatalf("Run = %+v, %v (%s); want %s", res, err, module.Code(err), pkg.CodePackageNotFound)
		}
		if got := v.aptUpdates(t); got != 4 || out["cache_updated"] != true {
			t.Errorf("%d apt-get updates in all, cache_updated %v; want 4, true", got, out["cache_updated"])
		}
		if r := reason(out, "soulstack-test-nope"); !strings.Contains(r, "after refreshing") {
			t.Errorf("reason %q does not say the lists were refreshed", r)
		}
		t.Logf("message: %v", err)
	})

	t.Run("the refresh fails", func(t *testing.T) {
		// The repository gains another package, and a second source
		// that is not there makes apt-get update fail, though it
		// refreshes the first one's lists: what they have is installed,
		// and the reason of what they lack says the refresh failed.
		r.publish(t, v, 2)
		v.sh(t, "echo 'deb [trusted=yes] file:/nonexistent-soulstack-repo ./' > /etc/apt/sources.list.d/gone.list")
		defer v.sh(t, "rm /etc/apt/sources.list.d/gone.list")
		res, out, n, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-late2", "soulstack-test-nope"}, "cache_valid_time": "3h"})
		if err != nil || !res.Changed || out["status"] != "partial" {
			t.Fatalf("Run = %+v, %v (%s); want partial, changed: a failed refresh for a missing package is not fatal", res, err, module.Code(err))
		}
		wantList(t, out, "installed", "soulstack-test-late2")
		wantList(t, out, "already_installed", "soulstack-test-a")
		wantList(t, out, "failed", "soulstack-test-nope")
		if r := reason(out, "soulstack-test-nope"); !strings.Contains(r, "refreshing the package lists failed: ") || !strings.Contains(r, "nonexistent-soulstack-repo") {
			t.Errorf("reason %q does not say the refresh failed, and why", r)
		}
		if got := v.aptUpdates(t); got != 5 || out["cache_updated"] != false || n != 2 {
			t.Errorf("%d apt-get updates in all, cache_updated %v, %d round trips; want 5, false, 2", got, out["cache_updated"], n)
		}
		t.Logf("reason: %s", reason(out, "soulstack-test-nope"))
	})

	t.Run("nothing missing", func(t *testing.T) {
		res, _, n, err := v.run(t, installed, map[string]any{"packages": []any{"soulstack-test-a", "soulstack-test-late", "soulstack-test-late2"}})
		if err != nil || res.Changed || n != 1 || v.aptUpdates(t) != 5 {
			t.Errorf("Run = %+v, %v in %d round trips, %d apt-get updates; want unchanged in 1, no update", res, err, n, v.aptUpdates(t))
		}
	})
}
