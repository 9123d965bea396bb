package pkg

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
)

// fakeManager answers from a table, for the logic around the manager.
type fakeManager struct {
	snap     snapshot
	locked   int // install and remove report a held lock this many times
	outcome  outcome
	installs []refresh // the refresh of each install call
	// failRefresh, when set, is how the refresh for a missing package
	// fails in the tries that meet the lock.
	failRefresh string
	removes     int
}

func (f *fakeManager) query(context.Context, module.Target, []spec) (snapshot, error) {
	return f.snap, nil
}

// candidates says every package has one, unless the outcome lists it not
// found.
func (f *fakeManager) candidates(_ context.Context, _ module.Target, pkgs []spec) ([]string, error) {
	var out []string
	for _, s := range pkgs {
		if !slices.Contains(f.outcome.notFound, s.raw) {
			out = append(out, s.raw)
		}
	}
	return out, nil
}

func (f *fakeManager) install(_ context.Context, _ module.Target, _ []spec, r refresh) (outcome, error) {
	f.installs = append(f.installs, r)
	if f.locked > 0 {
		f.locked--
		// The first try refreshed the lists, then met the lock.
		o := outcome{updated: r != refreshNever}
		if f.failRefresh != "" && r == refreshIfNotFound {
			o = outcome{retryUpdateFailed: f.failRefresh}
		}
		return o, &lockedError{holders: []holder{{pid: "42", comm: "apt-get", file: "/var/lib/dpkg/lock-frontend", cmdline: "apt-get upgrade "}}}
	}
	return f.outcome, nil
}

func (f *fakeManager) remove(context.Context, module.Target, []spec, bool) (outcome, error) {
	f.removes++
	if f.locked > 0 {
		f.locked--
		return outcome{}, &lockedError{}
	}
	return f.outcome, nil
}

func installedRecord(name string) record {
	return record{name: name, arch: "amd64", status: "install ok installed", version: "1.0"}
}

// noSleep is a Sleep that records what it was asked to wait.
func noSleep() (Sleep, *[]time.Duration) {
	var slept []time.Duration
	return func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		return nil
	}, &slept
}

func installParams(pkgs ...string) InstalledParams {
	return InstalledParams{Packages: pkgs, Update: true, LockRetries: DefaultLockRetries, LockRetryDelay: DefaultLockRetryDelay}
}

// TestInstallLogic runs the install flow on a fake manager.
func TestInstallLogic(t *testing.T) {
	t.Parallel()
	sleep, slept := noSleep()
	fresh := snapshot{hasLists: true, listsAge: time.Minute}
	tests := []struct {
		name        string
		params      InstalledParams
		mgr         fakeManager
		wantChanged bool
		wantCode    string
		wantOut     map[string]any
		wantInstall []refresh
		wantSleeps  int
	}{{
		name:    "all there: no install",
		params:  installParams("git", "curl"),
		mgr:     fakeManager{snap: snapshot{states: states{installedRecord("git"), installedRecord("curl")}}},
		wantOut: map[string]any{"status": "ok", "installed": []string{}, "already_installed": []string{"git", "curl"}, "failed": []string{}},
	}, {
		name:        "no lists: update",
		params:      installParams("git"),
		mgr:         fakeManager{outcome: outcome{updated: true, states: states{installedRecord("git")}}},
		wantChanged: true,
		wantOut:     map[string]any{"status": "ok", "installed": []string{"git"}, "cache_updated": true},
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "fresh lists: no update",
		params:      installParams("git"),
		mgr:         fakeManager{snap: fresh, outcome: outcome{states: states{installedRecord("git")}}},
		wantChanged: true,
		wantOut:     map[string]any{"cache_updated": false},
		wantInstall: []refresh{refreshIfNotFound},
	}, {
		name:        "update off",
		params:      InstalledParams{Packages: []string{"git"}, LockRetryDelay: "1s"},
		mgr:         fakeManager{outcome: outcome{states: states{installedRecord("git")}}},
		wantChanged: true,
		wantInstall: []refresh{refreshNever},
	}, {
		name:        "stale lists: update",
		params:      installParams("git"),
		mgr:         fakeManager{snap: snapshot{hasLists: true, listsAge: 2 * time.Hour}, outcome: outcome{updated: true, states: states{installedRecord("git")}}},
		wantChanged: true,
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "wrong version installed",
		params:      installParams("git=2.0"),
		mgr:         fakeManager{snap: snapshot{states: states{installedRecord("git")}}, outcome: outcome{states: states{{name: "git", arch: "amd64", status: "install ok installed", version: "2.0"}}}},
		wantChanged: true,
		wantOut:     map[string]any{"installed": []string{"git=2.0"}, "already_installed": []string{}},
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "some unknown: partial",
		params:      installParams("git", "nope"),
		mgr:         fakeManager{outcome: outcome{notFound: []string{"nope"}, states: states{installedRecord("git")}}},
		wantChanged: true,
		wantOut:     map[string]any{"status": "partial", "installed": []string{"git"}, "failed": []string{"nope"}},
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "all unknown",
		params:      installParams("nope", "nada"),
		mgr:         fakeManager{outcome: outcome{notFound: []string{"nope", "nada"}}},
		wantCode:    CodePackageNotFound,
		wantOut:     map[string]any{"status": "partial", "failed": []string{"nope", "nada"}},
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "partial again: unchanged, not an error",
		params:      installParams("git", "nope"),
		mgr:         fakeManager{snap: snapshot{hasLists: true, listsAge: time.Minute, states: states{installedRecord("git")}}, outcome: outcome{updated: true, notFound: []string{"nope"}}},
		wantOut:     map[string]any{"status": "partial", "installed": []string{}, "already_installed": []string{"git"}, "failed": []string{"nope"}, "cache_updated": true},
		wantInstall: []refresh{refreshIfNotFound},
	}, {
		name:        "partial again, update off",
		params:      InstalledParams{Packages: []string{"git", "nope"}, LockRetryDelay: "1s"},
		mgr:         fakeManager{snap: snapshot{states: states{installedRecord("git")}}, outcome: outcome{notFound: []string{"nope"}}},
		wantOut:     map[string]any{"status": "partial", "already_installed": []string{"git"}, "reasons": map[string]string{"nope": "not found: apt has no installation candidate for it in the package lists, which were not refreshed because update is false (check the names and the configured repositories, or set update)"}},
		wantInstall: []refresh{refreshNever},
	}, {
		name:        "not found, the refresh for it failed",
		params:      installParams("nope"),
		mgr:         fakeManager{snap: fresh, outcome: outcome{notFound: []string{"nope"}, retryUpdateFailed: "E: boom"}},
		wantCode:    CodePackageNotFound,
		wantOut:     map[string]any{"cache_updated": false, "reasons": map[string]string{"nope": "not found: apt has no installation candidate for it, and refreshing the package lists failed: E: boom"}},
		wantInstall: []refresh{refreshIfNotFound},
	}, {
		name:        "other version installed, new one unknown: nothing present",
		params:      installParams("git=9.9"),
		mgr:         fakeManager{snap: snapshot{states: states{installedRecord("git")}}, outcome: outcome{updated: true, notFound: []string{"git=9.9"}, states: states{installedRecord("git")}}},
		wantCode:    CodePackageNotFound,
		wantOut:     map[string]any{"already_installed": []string{}, "failed": []string{"git=9.9"}},
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "locked after the refresh for a missing package: not refreshed again",
		params:      installParams("git"),
		mgr:         fakeManager{snap: fresh, locked: 1, outcome: outcome{states: states{installedRecord("git")}}},
		wantChanged: true,
		wantOut:     map[string]any{"cache_updated": true},
		wantInstall: []refresh{refreshIfNotFound, refreshNever},
		wantSleeps:  1,
	}, {
		name:        "locked after a failed refresh for a missing package: not refreshed again",
		params:      installParams("nope"),
		mgr:         fakeManager{snap: fresh, locked: 1, failRefresh: "E: gone", outcome: outcome{notFound: []string{"nope"}}},
		wantCode:    CodePackageNotFound,
		wantOut:     map[string]any{"cache_updated": false, "reasons": map[string]string{"nope": "not found: apt has no installation candidate for it, and refreshing the package lists failed: E: gone"}},
		wantInstall: []refresh{refreshIfNotFound, refreshNever},
		wantSleeps:  1,
	}, {
		name:        "install failed",
		params:      installParams("broken"),
		mgr:         fakeManager{outcome: outcome{failed: map[string]string{"broken": "E: boom"}}},
		wantCode:    CodeInstallFailed,
		wantOut:     map[string]any{"reasons": map[string]string{"broken": "E: boom"}},
		wantInstall: []refresh{refreshFirst},
	}, {
		name:        "locked, then free: the lists are not refreshed twice",
		params:      installParams("git"),
		mgr:         fakeManager{locked: 2, outcome: outcome{states: states{installedRecord("git")}}},
		wantChanged: true,
		wantOut:     map[string]any{"cache_updated": true},
		wantInstall: []refresh{refreshFirst, refreshNever, refreshNever},
		wantSleeps:  2,
	}, {
		name:        "locked for good",
		params:      InstalledParams{Packages: []string{"git"}, LockRetries: 3, LockRetryDelay: "15s"},
		mgr:         fakeManager{locked: 100},
		wantCode:    CodeLocked,
		wantInstall: []refresh{refreshNever, refreshNever, refreshNever, refreshNever},
		wantSleeps:  3,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			*slept = nil
			res, err := install(context.Background(), &tc.mgr, nil, tc.params, sleep)
			if tc.wantCode != "" {
				if module.Code(err) != tc.wantCode {
					t.Fatalf("err = %v (%s); want %s", err, module.Code(err), tc.wantCode)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if res.Changed != tc.wantChanged {
				t.Errorf("changed = %v; want %v", res.Changed, tc.wantChanged)
			}
			out, _ := res.Output.(map[string]any)
			for k, want := range tc.wantOut {
				if got, _ := json.Marshal(out[k]); string(got) != mustJSON(t, want) {
					t.Errorf("output %s = %s; want %s", k, got, mustJSON(t, want))
				}
			}
			if !slices.Equal(tc.mgr.installs, tc.wantInstall) {
				t.Errorf("install calls (refresh flags) = %v; want %v", tc.mgr.installs, tc.wantInstall)
			}
			if len(*slept) != tc.wantSleeps {
				t.Errorf("slept %v; want %d waits", *slept, tc.wantSleeps)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLockedMessage(t *testing.T) {
	t.Parallel()
	sleep, slept := noSleep()
	m := &fakeManager{locked: 100}
	_, err := install(context.Background(), m, nil, InstalledParams{Packages: []string{"git"}, LockRetries: 1, LockRetryDelay: "2s"}, sleep)
	want := "the package manager is locked: process 42 (apt-get) holds /var/lib/dpkg/lock-frontend: apt-get upgrade (still held after 2 tries, 2s apart; the lock files were left alone)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	var le *lockedError
	if !errors.As(err, &le) || len(*slept) != 1 || (*slept)[0] != 2*time.Second {
		t.Errorf("the error does not wrap the lockedError, or slept %v", *slept)
	}
	for _, tc := range []struct {
		h    holder
		want string
	}{
		{holder{pid: "7", comm: "unattended-upgr", cmdline: "/usr/bin/python3 /usr/bin/unattended-upgrade"}, "process 7 (unattended-upgr) is running unattended-upgrade: /usr/bin/python3 /usr/bin/unattended-upgrade"},
		{holder{cmdline: "E: Could not get lock /var/lib/dpkg/lock-frontend."}, "another process: E: Could not get lock /var/lib/dpkg/lock-frontend."},
	} {
		if got := tc.h.String(); got != tc.want {
			t.Errorf("holder %+v = %q; want %q", tc.h, got, tc.want)
		}
	}
}

func TestRemoveLogic(t *testing.T) {
	t.Parallel()
	sleep, _ := noSleep()
	p := RemovedParams{Packages: []string{"telnet", "nope"}, LockRetries: 5, LockRetryDelay: "1s"}
	m := &fakeManager{snap: snapshot{states: states{installedRecord("telnet")}}, locked: 1, outcome: outcome{}}
	res, err := remove(context.Background(), m, nil, p, sleep)
	out, _ := res.Output.(map[string]any)
	if err != nil || !res.Changed || mustJSON(t, out["removed"]) != `["telnet"]` || mustJSON(t, out["already_absent"]) != `["nope"]` || m.removes != 2 {
		t.Fatalf("remove = %+v, %v after %d calls", res, err, m.removes)
	}

	m = &fakeManager{snap: snapshot{states: states{{name: "telnet", status: "deinstall ok config-files"}}}}
	res, err = remove(context.Background(), m, nil, p, sleep)
	if err != nil || res.Changed || m.removes != 0 {
		t.Fatalf("config files left, no purge: %+v, %v, %d calls", res, err, m.removes)
	}
	p.Purge = true
	res, err = remove(context.Background(), m, nil, p, sleep)
	if err != nil || !res.Changed || m.removes != 1 {
		t.Fatalf("config files left, purge: %+v, %v, %d calls", res, err, m.removes)
	}

	m = &fakeManager{snap: snapshot{states: states{installedRecord("telnet")}}, outcome: outcome{states: states{installedRecord("telnet")}, failed: map[string]string{"telnet": "E: no"}}}
	_, err = remove(context.Background(), m, nil, p, sleep)
	if module.Code(err) != CodeRemoveFailed || !strings.Contains(err.Error(), "E: no") {
		t.Fatalf("failed removal: %v", err)
	}
}

func TestSpecs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want spec
	}{
		{"git", spec{raw: "git", name: "git"}},
		{"libc6:i386", spec{raw: "libc6:i386", name: "libc6", arch: "i386"}},
		{"curl=7.88.1-10+deb12u5", spec{raw: "curl=7.88.1-10+deb12u5", name: "curl", version: "7.88.1-10+deb12u5"}},
		{"libc6:amd64=2.36-9", spec{raw: "libc6:amd64=2.36-9", name: "libc6", arch: "amd64", version: "2.36-9"}},
	} {
		if got := parseSpec(tc.in); got != tc.want {
			t.Errorf("parseSpec(%q) = %+v; want %+v", tc.in, got, tc.want)
		}
	}
	st := states{{name: "libc6", arch: "amd64", status: "install ok installed", version: "2.36"}, {name: "tzdata", arch: "all", status: "install ok installed", version: "1"}}
	for s, want := range map[string]bool{"libc6": true, "libc6:amd64": true, "libc6:i386": false, "libc6=2.36": true, "libc6=2.37": false, "tzdata:amd64": true, "vim": false} {
		if got := st.installed(parseSpec(s)); got != want {
			t.Errorf("installed(%q) = %v; want %v", s, got, want)
		}
	}
	if got := specsOf([]string{"a", "b", "a"}); len(got) != 2 {
		t.Errorf("specsOf does not drop duplicates: %+v", got)
	}
}

func TestValidateParams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		params map[string]any
		bad    []string // params named by the errors
	}{
		{"ok", map[string]any{"packages": []any{"git", "g++", "libc6:amd64", "curl=7.88.1-10+deb12u5", "python3.11"}, "cache_valid_time": "30m"}, nil},
		{"empty", map[string]any{"packages": []any{}}, []string{"packages"}},
		{"option", map[string]any{"packages": []any{"-y"}}, []string{"packages"}},
		{"glob", map[string]any{"packages": []any{"git*"}}, []string{"packages"}},
		{"upper case", map[string]any{"packages": []any{"Git"}}, []string{"packages"}},
		{"space", map[string]any{"packages": []any{"git curl"}}, []string{"packages"}},
		{"bad durations", map[string]any{"packages": []any{"git"}, "cache_valid_time": "soon", "lock_retry_delay": "-1s", "lock_retries": -1}, []string{"lock_retries", "lock_retry_delay", "cache_valid_time"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v module.Values
			for k, x := range tc.params {
				v.Set(k, x)
			}
			errs := module.CheckParams(new(Installed), v)
			var got []string
			for _, e := range errs {
				got = append(got, e.Param)
			}
			if !slices.Equal(slices.Compact(got), tc.bad) {
				t.Errorf("errors for %v: %v; want errors about %v", tc.params, errs, tc.bad)
			}
		})
	}
}

// TestScriptExit checks that the scripts exit with lockedExit.
func TestScriptExit(t *testing.T) {
	t.Parallel()
	if n := strings.Count(aptCommon, "exit "+strconv.Itoa(lockedExit)+"\n"); n != 2 {
		t.Errorf("aptCommon exits %d times with lockedExit; want 2", n)
	}
}
