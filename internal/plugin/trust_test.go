package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/plugin"
)

// nobody is the uid of the account that owns nothing.
const nobody = 65534

// evilPlugin writes soul-cloud-evil into dir: a script that leaves a
// marker file when it runs. It returns the marker's path.
func evilPlugin(t *testing.T, dir string, mode os.FileMode) (bin, marker string) {
	t.Helper()
	marker = filepath.Join(t.TempDir(), "executed")
	bin = filepath.Join(dir, plugin.BinaryPrefix+"evil")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, mode); err != nil {
		t.Fatal(err)
	}
	return bin, marker
}

func executed(marker string) bool {
	_, err := os.Stat(marker)
	return err == nil
}

// driverErr asks a host over dir (and $PATH with lookup) for driver evil.
func driverErr(t *testing.T, dir string, lookup bool) error {
	t.Helper()
	h, err := plugin.New(plugin.Config{PluginDir: dir, PathLookup: lookup})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.Driver(context.Background(), "evil")
	if err == nil {
		t.Fatal("driver evil started")
	}
	return err
}

// TestUntrustedPluginsNotExecuted: a plugin that someone other than the
// keeper's user or root could have written is refused with
// driver.untrusted naming the path and the problem, and never runs.
// Before, any executable named soul-cloud-<driver> in the plugin dir or
// on $PATH was started.
func TestUntrustedPluginsNotExecuted(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns files to nobody and needs root")
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) (marker, want string)
	}{
		{"world-writable binary", func(t *testing.T, dir string) (string, string) {
			_, m := evilPlugin(t, dir, 0o777)
			return m, "is world-writable (mode 0777)"
		}},
		{"group-writable binary", func(t *testing.T, dir string) (string, string) {
			_, m := evilPlugin(t, dir, 0o775)
			return m, "is group-writable (mode 0775)"
		}},
		{"binary owned by another uid", func(t *testing.T, dir string) (string, string) {
			bin, m := evilPlugin(t, dir, 0o755)
			if err := os.Chown(bin, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			return m, "is owned by uid 65534"
		}},
		{"world-writable plugin dir", func(t *testing.T, dir string) (string, string) {
			_, m := evilPlugin(t, dir, 0o755)
			if err := os.Chmod(dir, 0o1777); err != nil {
				t.Fatal(err)
			}
			return m, "directory " + dir + " is world-writable"
		}},
		{"plugin dir owned by another uid", func(t *testing.T, dir string) (string, string) {
			_, m := evilPlugin(t, dir, 0o755)
			if err := os.Chown(dir, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			return m, "directory " + dir + " is owned by uid 65534"
		}},
		{"link to a binary in a world-writable dir", func(t *testing.T, dir string) (string, string) {
			open := filepath.Join(t.TempDir(), "open")
			if err := os.Mkdir(open, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(open, 0o777); err != nil {
				t.Fatal(err)
			}
			bin, m := evilPlugin(t, open, 0o755)
			if err := os.Symlink(bin, filepath.Join(dir, plugin.BinaryPrefix+"evil")); err != nil {
				t.Fatal(err)
			}
			return m, "directory " + open + " is world-writable"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "plugins")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			marker, want := tc.setup(t, dir)
			e := wantCode(t, driverErr(t, dir, false), driversdk.CodeDriverUntrusted)
			if !strings.Contains(e.Message, want) {
				t.Errorf("message %q does not say %q", e.Message, want)
			}
			if executed(marker) {
				t.Fatal("the untrusted plugin was executed")
			}
		})
	}

	// The control: the same script, trusted, does run (and is then refused
	// as no CloudDriver plugin), so the marker would have shown execution.
	dir := filepath.Join(t.TempDir(), "plugins")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, marker := evilPlugin(t, dir, 0o755)
	wantCode(t, driverErr(t, dir, false), driversdk.CodeDriverIncompatible)
	if !executed(marker) {
		t.Fatal("the trusted script did not run: the marker proves nothing")
	}
}

// TestPathLookupOnlyWhenEnabled: a soul-cloud-<driver> on $PATH is not
// even looked at unless plugin_path_lookup is on, and then passes the same
// checks. Not parallel: it sets $PATH.
func TestPathLookupOnlyWhenEnabled(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "plugins")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	bindir := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bindir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, marker := evilPlugin(t, bindir, 0o777)
	t.Setenv("PATH", bindir+string(os.PathListSeparator)+os.Getenv("PATH"))

	e := wantCode(t, driverErr(t, empty, false), driversdk.CodeDriverNotFound)
	if !strings.Contains(e.Message, "plugin_path_lookup") {
		t.Errorf("not-found message does not mention plugin_path_lookup: %s", e.Message)
	}
	if executed(marker) {
		t.Fatal("a plugin on $PATH ran without plugin_path_lookup")
	}
	wantCode(t, driverErr(t, empty, true), driversdk.CodeDriverUntrusted)
	if executed(marker) {
		t.Fatal("an untrusted plugin on $PATH ran")
	}
	if err := os.Chmod(filepath.Join(bindir, plugin.BinaryPrefix+"evil"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantCode(t, driverErr(t, empty, true), driversdk.CodeDriverIncompatible)
	if !executed(marker) {
		t.Fatal("with plugin_path_lookup a trusted plugin on $PATH did not run")
	}
}
