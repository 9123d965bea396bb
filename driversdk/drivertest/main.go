package drivertest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/plugin"
)

// built maps a plugin's driver name to the binary Main built.
var built = map[string]string{}

// Main is a TestMain for the tests of driver plugins: it builds each
// package of pkgs (import paths of soul-cloud-<name> commands) once for
// the whole test binary, runs the tests, removes the binaries and exits.
// Plugin returns a built binary by its driver name.
//
//	func TestMain(m *testing.M) { drivertest.Main(m, "github.com/acme/cmd/soul-cloud-acme") }
func Main(m *testing.M, pkgs ...string) {
	dir, err := os.MkdirTemp("", "drivertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, pkg := range pkgs {
		name := strings.TrimPrefix(path.Base(pkg), plugin.BinaryPrefix)
		bin := filepath.Join(dir, plugin.BinaryPrefix+name)
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		built[name] = bin
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Plugin returns the binary of driver name that Main built; it fails t
// when Main built none.
func Plugin(t testing.TB, name string) string {
	t.Helper()
	bin, ok := built[name]
	if !ok {
		t.Fatalf("drivertest: Main built no plugin for driver %q", name)
	}
	return bin
}

// PluginDir returns the directory Main built the plugins into: a plugin
// dir for a PluginHost.
func PluginDir(t testing.TB) string {
	t.Helper()
	for _, bin := range built {
		return filepath.Dir(bin)
	}
	t.Fatal("drivertest: Main built no plugin")
	return ""
}
