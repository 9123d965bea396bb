package keeper_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

// pkgRepo builds a flat apt repository with one package,
// soulstack-e2e-a, in a host directory, and returns the directory. Local
// VMs do not see the host's /var/tmp: repoTarball carries it into them.
func pkgRepo(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"dpkg-deb", "dpkg-scanpackages"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the local apt repository needs %s (apt-get install dpkg-dev)", tool)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "soulstack-keeper-repo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(t.TempDir(), "soulstack-e2e-a")
	for path, content := range map[string]string{
		"DEBIAN/control": "Package: soulstack-e2e-a\nVersion: 1.0\nArchitecture: all\nMaintainer: Soul Stack tests <tests@soulstack.invalid>\nDescription: Soul Stack test package\n",
		"usr/share/soulstack-test/soulstack-e2e-a": "a\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, filepath.Join(dir, "soulstack-e2e-a_1.0_all.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	scan := exec.Command("dpkg-scanpackages", ".", "/dev/null")
	scan.Dir = dir
	index, err := scan.Output()
	if err != nil {
		t.Fatalf("dpkg-scanpackages: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Packages"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pkgPartialScenario is the seed's install-packages job with one package
// that no repository has, on the hosts given.
const pkgPartialScenario = `name: pkg-partial
inputs:
  hosts: {type: list}
steps:
  - name: packages
    on: "${ input.hosts }"
    module: core.pkg.installed
    connect: {retries: 20, delay: 500ms}
    params:
      packages: [soulstack-e2e-a, no-such-package-zz9]
`

// TestPackagesPartialRerun runs the seed's partial install twice through a
// keeper, on a local VM made by the keeper's soul-cloud-local plugin and
// pointed at a local apt repository: both runs succeed, the package step's
// target is partial both times, changed only the first time.
func TestPackagesPartialRerun(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	repo := pkgRepo(t)
	s := spawn(t, keepertest.Options{Plugins: []string{localDriver}})
	c, data := s.Admin, s.Data
	ctx := context.Background()
	state, err := os.MkdirTemp("/var/tmp", "soulstack-keeper-vms-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "pkg.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "local", Spec: map[string]any{"cpus": 1, "memory_mb": 512}}); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, leave no VM behind.
	t.Cleanup(func() { destroyLocalVMs(t, filepath.Join(data, "plugins"), "pkg.test", state) })

	// A VM whose apt knows only the local repository, copied into it as
	// a tarball on the command's stdin.
	setup := fmt.Sprintf(`name: pkg-vm
inputs:
  repo_tar: {type: string}
steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: small, count: 1}
  - name: repo
    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    connect: {retries: 20, delay: 500ms}
    params:
      stdin: "${ input.repo_tar }"
      cmd: "set -e; mkdir -p -m 755 %[1]s; base64 -d | tar -x -C %[1]s; rm -f /etc/apt/sources.list.d/*; echo 'deb [trusted=yes] file:%[1]s ./' > /etc/apt/sources.list; rm -rf /var/lib/apt/lists/*; mkdir -p /var/lib/apt/lists/partial"
`, repo)
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: setup, File: "pkg-vm.yaml", Input: map[string]any{"repo_tar": repoTarball(t, repo)}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("setup run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	sid := final.Steps[1].Targets[0].SID

	for i, wantChanged := range []bool{true, false} {
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: pkgPartialScenario, File: "pkg-partial.yaml", Input: map[string]any{"hosts": []any{sid}}})
		if err != nil {
			t.Fatal(err)
		}
		final := waitRun(t, c, run.ID)
		if final.Phase != "Succeeded" {
			t.Fatalf("run %d = %s %+v (the seed: some packages not found is partial, not an error)\n%s", i+1, final.Phase, final.Error, describeSteps(final.Steps))
		}
		tg := final.Steps[0].Targets[0]
		var out struct {
			Status           string            `json:"status"`
			Installed        []string          `json:"installed"`
			AlreadyInstalled []string          `json:"already_installed"`
			Failed           []string          `json:"failed"`
			Reasons          map[string]string `json:"reasons"`
		}
		if err := json.Unmarshal(tg.Output, &out); err != nil {
			t.Fatalf("run %d: output %s: %v", i+1, tg.Output, err)
		}
		wantStatus, present := client.TargetChanged, "installed"
		if !wantChanged {
			wantStatus, present = client.TargetOK, "already_installed"
		}
		got := map[string][]string{"installed": out.Installed, "already_installed": out.AlreadyInstalled}
		if tg.Status != wantStatus || tg.Changed != wantChanged || out.Status != "partial" ||
			!slices.Equal(got[present], []string{"soulstack-e2e-a"}) || !slices.Equal(out.Failed, []string{"no-such-package-zz9"}) ||
			!strings.Contains(out.Reasons["no-such-package-zz9"], "not found") {
			t.Fatalf("run %d: target %s changed=%v, output %s; want %s, partial, soulstack-e2e-a in %s", i+1, tg.Status, tg.Changed, tg.Output, wantStatus, present)
		}
	}
}

// repoTarball returns the base64 of a tar of the files in dir.
func repoTarball(t *testing.T, dir string) string {
	return base64.StdEncoding.EncodeToString(moduletest.DirTar(t, dir))
}
