package keeper_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
)

// TestLocalVMCannotReadKeeperData is the attack of issue 9 against a real
// keeper and the real soul-cloud-local plugin: a run makes a local VM,
// then has root in it read the keeper's admin.token and data.key (by path,
// base64 so that no masking can hide a success, and by find(1)), then
// destroys the VM. The run succeeds, but the VM sees neither the data dir
// nor the files, and neither the token nor the key is anywhere in the run.
// The keeper runs from a directory on the host's root filesystem, as a
// Quick start from a checkout does (a VM's /tmp is its own, so a data dir
// there would prove nothing).
func TestLocalVMCannotReadKeeperData(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	// /var/tmp is outside the VMs' view of the host; /usr/local/share is
	// in it, and there the keeper's dirs are hidden because the keeper
	// names them to the plugin.
	for _, parent := range []string{"/var/tmp", "/usr/local/share"} {
		t.Run(parent, func(t *testing.T) { stealKeeperData(t, parent) })
	}
}

// stealKeeperData is the attack on a keeper whose data dir is in parent.
// find(1) looks for this keeper's files only: other tests' keepers may
// be up at the same time.
func stealKeeperData(t *testing.T, parent string) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "soulstack-keeper-vm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, ".keeper")
	buildLocalDriver(t, filepath.Join(data, "plugins"))
	k := serve(t, dir)
	c := adminClient(t, k, data)
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "steal.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, filepath.Join(data, "plugins"), "steal.test", state) })
	token, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(data, "data.key"))
	if err != nil {
		t.Fatal(err)
	}

	steal := "for f in " + data + "/admin.token " + data + "/data.key; do test -e $f && echo \"VISIBLE $f\" || echo \"absent $f\"; done; " +
		"base64 -w0 " + data + "/admin.token; echo; base64 -w0 " + data + "/data.key; echo; " +
		"echo found: $(find / -path /proc -prune -o \\( -name admin.token -o -name data.key \\) -print | grep -F " + filepath.Base(dir) + ")"
	scenario := `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: {cpus: 1, memory_mb: 256}, count: 1}
  - name: steal
    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    connect: {retries: 20, delay: 500ms}
    params:
      cmd: ` + jsonString(steal) + `
    changed_when: false
  - name: destroy
    on: keeper
    module: core.cloud.destroyed
    params:
      provider: local
      vm_ids: "${ steps.provision.output.hosts.map(h, h.vm_id) }"
      sids: "${ steps.provision.output.hosts.map(h, h.sid) }"
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "steal.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" || len(final.Steps) != 3 || len(final.Steps[1].Targets) != 1 {
		t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var out struct{ Stdout, Stderr string }
	if err := json.Unmarshal(final.Steps[1].Targets[0].Output, &out); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{data + "/admin.token", data + "/data.key"} {
		if !strings.Contains(out.Stdout, "absent "+p+"\n") {
			t.Errorf("the VM sees %s:\n%s", p, out.Stdout)
		}
	}
	if !slices.Contains(strings.Split(out.Stdout, "\n"), "found:") {
		t.Errorf("find(1) in the VM found the keeper's files:\n%s", out.Stdout)
	}
	whole, err := json.Marshal(final)
	if err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string][]byte{"admin.token": token, "data.key": key} {
		s := strings.TrimSpace(string(secret))
		for _, form := range []string{s, base64.StdEncoding.EncodeToString(secret), base64.StdEncoding.EncodeToString([]byte(s))} {
			if strings.Contains(string(whole), form) || strings.Contains(out.Stdout+out.Stderr, form) {
				t.Errorf("the run holds the keeper's %s", name)
			}
		}
	}
}

// jsonString quotes s for YAML (JSON strings are YAML flow scalars).
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
