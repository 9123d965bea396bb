package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/plugin"
)

// requireLocalVMs skips, saying why, where local VMs cannot be made.
func requireLocalVMs(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("local VMs need root on Linux (scripts/test runs as root in CI)")
	}
}

// localDriver is the local cloud's plugin command.
const localDriver = "cmd/soul-cloud-local"

// buildLocalDriver builds soul-cloud-local into dir.
func buildLocalDriver(t *testing.T, dir string) { buildDriver(t, dir, "local") }

// buildDriver puts the real soul-cloud-<driver> plugin (built once per
// test binary) into the plugin dir dir.
func buildDriver(t testing.TB, dir, driver string) {
	t.Helper()
	bins.Install(t, "cmd/soul-cloud-"+driver, dir, "")
}

// localCloudKeeper serves a keeper with the real soul-cloud-local plugin,
// a provider "local" (FQDN suffix suffix, max_count 3, its own state dir)
// and a profile "small" (1 CPU, 256 MB), and destroys every VM of that
// state dir when the test ends, whatever happened. It returns an admin
// client, the keeper's data dir and the state dir.
func localCloudKeeper(t *testing.T, suffix string) (c *client.Client, data, state string) {
	t.Helper()
	k := spawn(t, keepertest.Options{Plugins: []string{localDriver}})
	c, data = k.Admin, k.Data
	ctx := context.Background()
	state = t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: suffix, Config: map[string]any{"state_dir": state, "max_count": 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "local", Spec: map[string]any{"cpus": 1, "memory_mb": 256}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, filepath.Join(data, "plugins"), suffix, state) })
	return c, data, state
}

// TestLocalCloudEndToEnd: a keeper with the real soul-cloud-local plugin
// creates two VMs, reaches both over SSH through the provision step's
// hosts output, then destroys them with the cascade; VMs a crash left
// without souls are found and removed as orphans.
func TestLocalCloudEndToEnd(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	c, data, state := localCloudKeeper(t, "e2e.test")
	ctx := context.Background()

	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "spawn-local.yaml"), File: "spawn-local.yaml", Input: map[string]any{"count": 2}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("spawn run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var prov struct {
		Hosts []struct {
			SID, VMID, PrimaryIP, BootstrapToken string
		} `json:"hosts"`
	}
	raw, _ := json.Marshal(map[string]any{})
	var outputs map[string]json.RawMessage
	_ = json.Unmarshal(final.Outputs, &outputs)
	raw = outputs["provision"]
	if err := json.Unmarshal(fixKeys(raw), &prov); err != nil || len(prov.Hosts) != 2 {
		t.Fatalf("provision output = %s (%v)", raw, err)
	}
	for _, h := range prov.Hosts {
		if !strings.HasSuffix(h.SID, ".e2e.test") || h.PrimaryIP == "" || h.BootstrapToken != "***" {
			t.Fatalf("host = %+v (the token must be masked in the API)", h)
		}
		so, err := c.SoulGet(ctx, h.SID)
		// hello ran a command on it: it came alive.
		if err != nil || so.Status != "active" || so.LastSeenAt == nil || so.CreatedByAID != nil || so.VMID != h.VMID || so.Provider != "local" || !strings.HasPrefix(so.Connection.HostKey, "ssh-ed25519 ") {
			t.Fatalf("soul %s = %+v, %v", h.SID, so, err)
		}
	}
	hello := final.Steps[1]
	if hello.Status != "ok" || len(hello.Targets) != 2 {
		t.Fatalf("hello = %+v", hello)
	}
	for _, tg := range hello.Targets {
		var out struct{ Stdout string }
		_ = json.Unmarshal(tg.Output, &out)
		host, _, _ := strings.Cut(tg.SID, ".")
		if !strings.HasPrefix(out.Stdout, "hello from "+host) {
			t.Fatalf("%s answered %q", tg.SID, out.Stdout)
		}
	}

	// Destroy with the provision step's output as input.
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "destroy-local.yaml"), File: "destroy-local.yaml", Input: map[string]any{"hosts": jsonValue(t, outputs["provision"], "hosts")}})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("destroy run = %s %+v", final.Phase, final.Error)
	}
	var cascade map[string]any
	_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &cascade)
	if cascade["souls_destroyed"] != 2.0 || cascade["bootstraps_burned"] != 2.0 {
		t.Fatalf("cascade = %v", cascade)
	}
	for _, h := range prov.Hosts {
		if so, _ := c.SoulGet(ctx, h.SID); so.Status != "destroyed" {
			t.Fatalf("soul %s = %s after destroy", h.SID, so.Status)
		}
	}

	// self_onboard: predicted names, and the keeper's cloud_init with the
	// VM's own bootstrap token reaches the VM.
	onboard := `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: small, count: 1, self_onboard: true, name: web}
  - name: check
    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    connect: {retries: 20, delay: 500ms}
    params: {cmd: "hostname; cat /etc/soulstack/bootstrap.json"}
`
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: onboard, File: "onboard.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" || final.Steps[1].Targets[0].SID != "web-1.e2e.test" {
		t.Fatalf("self_onboard run = %s %+v %+v", final.Phase, final.Error, final.Steps)
	}
	var check struct{ Stdout string }
	_ = json.Unmarshal(final.Steps[1].Targets[0].Output, &check)
	if !strings.HasPrefix(check.Stdout, "web-1.e2e.test\n") || !strings.Contains(check.Stdout, `"sid": "web-1.e2e.test"`) || !strings.Contains(check.Stdout, `"token": "***"`) {
		t.Fatalf("the VM's bootstrap file (token masked in the output) = %q", check.Stdout)
	}
	toks, _ := c.SoulGet(ctx, "web-1.e2e.test")
	if toks.Status != "active" {
		t.Fatalf("self-onboarded soul = %+v", toks)
	}

	// A VM made with a keeper request tag but never registered (a crash
	// between Create and the registry write) is an orphan.
	h, err := plugin.New(plugin.Config{PluginDir: filepath.Join(data, "plugins")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	d, err := h.Driver(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	p := driversdk.Provider{Name: "local", FQDNSuffix: "e2e.test", Config: json.RawMessage(`{"state_dir":"` + state + `"}`)}
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: p, RequestID: "req_crashed", RunID: "run_crashed", Profile: json.RawMessage(`{"memory_mb":128}`), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	orphans, err := c.CloudOrphans(ctx, "local")
	if err != nil || len(orphans.Items) != 1 || orphans.Items[0].VMID != vms[0].ID || orphans.Items[0].RequestID != "req_crashed" {
		t.Fatalf("orphans = %+v, %v", orphans, err)
	}
	if _, err := c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "local", VMIDs: []string{"not-an-orphan"}}); err == nil {
		t.Fatal("destroying a VM that is not an orphan was accepted")
	}
	if _, err := c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "local", VMIDs: []string{vms[0].ID}}); err != nil {
		t.Fatal(err)
	}
	left, _ := d.List(ctx, driversdk.ListRequest{Provider: p})
	for _, vm := range left {
		if vm.ID == vms[0].ID {
			t.Fatalf("the orphan %s is still there", vm.ID)
		}
	}
	if len(left) != 1 || left[0].FQDN != "web-1.e2e.test" {
		t.Fatalf("VMs left = %+v, want only the self-onboarded one", left)
	}
	audit, _ := c.AuditList(ctx, client.AuditListOptions{Verify: true})
	var provisioned, orphaned int
	for _, e := range audit.Items {
		switch e.Action {
		case "cloud.provisioned":
			provisioned++
			if strings.Contains(string(e.Payload), "sbt_") {
				t.Fatalf("audit holds a bootstrap token: %s", e.Payload)
			}
		case "cloud.orphans_destroyed":
			orphaned++
		}
	}
	if provisioned != 3 || orphaned != 1 || !audit.Verify.OK {
		t.Fatalf("audit: %d cloud.provisioned, %d cloud.orphans_destroyed, verify %+v", provisioned, orphaned, audit.Verify)
	}
}

// fixKeys maps the output's snake_case keys onto the test struct's fields.
func fixKeys(raw json.RawMessage) []byte {
	s := strings.NewReplacer(`"vm_id"`, `"VMID"`, `"primary_ip"`, `"PrimaryIP"`, `"bootstrap_token"`, `"BootstrapToken"`, `"sid"`, `"SID"`).Replace(string(raw))
	return []byte(s)
}

func jsonValue(t *testing.T, raw json.RawMessage, key string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m[key]
}

// describeSteps renders steps with their targets' errors, for failures.
func describeSteps(steps []client.RunStep) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "step %s (%s): %s\n", s.Name, s.Module, s.Status)
		for _, tg := range s.Targets {
			fmt.Fprintf(&b, "  %s: %s", tg.SID, tg.Status)
			if tg.Error != nil {
				fmt.Fprintf(&b, " %s: %s", tg.Error.Code, tg.Error.Message)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
