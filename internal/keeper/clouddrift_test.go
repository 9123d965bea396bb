package keeper_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/plugin"
)

// TestCloudDrift: three local VMs made by a keeper; then, behind its back
// (through a plugin host of the test's own), one is destroyed, one
// resized, one stopped (its init killed), and a VM is created with this
// deployment's tags and no soul. GET /v1/drift/cloud reports the first
// missing, the second resized (its memory against the registered one),
// the third stopped, and the stray VM as an orphan.
func TestCloudDrift(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	c, data, state := localCloudKeeper(t, "cdrift.test")
	plugins := filepath.Join(data, "plugins")
	ctx := context.Background()
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: small, count: 3}
`})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	var out struct {
		Provision struct {
			Hosts []struct {
				SID  string `json:"sid"`
				VMID string `json:"vm_id"`
			} `json:"hosts"`
		} `json:"provision"`
	}
	if err := json.Unmarshal(final.Outputs, &out); err != nil || final.Phase != client.PhaseSucceeded || len(out.Provision.Hosts) != 3 {
		t.Fatalf("provision = %s %s (%v)", final.Phase, final.Outputs, err)
	}
	hosts := out.Provision.Hosts

	if rep, err := c.CloudDriftOf(ctx, "local"); err != nil || len(rep.Providers) != 1 || !rep.Providers[0].Listable ||
		len(rep.Providers[0].Missing)+len(rep.Providers[0].Resized)+len(rep.Providers[0].Stopped)+len(rep.Providers[0].Orphans) != 0 {
		t.Fatalf("cloud drift before anything happened: %+v, %v", rep, err)
	}

	// Behind the keeper's back.
	h, err := plugin.New(plugin.Config{PluginDir: plugins})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	d, err := h.Driver(dctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"state_dir": state})
	p := driversdk.Provider{Name: "local", FQDNSuffix: "cdrift.test", Config: cfg, KeeperID: deploymentID(t, data)}
	if err := d.Destroy(dctx, driversdk.DestroyRequest{Provider: p, VMIDs: []string{hosts[0].VMID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Resize(dctx, driversdk.ResizeRequest{Provider: p, VMIDs: []string{hosts[1].VMID}, Spec: json.RawMessage(`{"cpus": 1, "memory_mb": 512}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(dctx, driversdk.CreateRequest{Provider: p, RequestID: "req_stray", Count: 1, Profile: json.RawMessage(`{"cpus": 1, "memory_mb": 256}`)}); err != nil {
		t.Fatal(err)
	}
	// The third VM's init dies (the VM stops): its PID is in the driver's
	// record of it.
	var rec struct {
		PID int `json:"pid"`
	}
	b, err := os.ReadFile(filepath.Join(state, "vms", hosts[2].VMID, "vm.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.PID <= 1 {
		t.Fatalf("the VM record of %s: %s, %v", hosts[2].VMID, b, err)
	}
	if err := syscall.Kill(rec.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && syscall.Kill(rec.PID, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}

	rep, err := c.CloudDriftOf(ctx, "local")
	if err != nil || len(rep.Providers) != 1 {
		t.Fatalf("cloud drift: %+v, %v", rep, err)
	}
	cd := rep.Providers[0]
	if len(cd.Missing) != 1 || cd.Missing[0].SID != hosts[0].SID {
		t.Fatalf("missing = %+v, want %s", cd.Missing, hosts[0].SID)
	}
	if len(cd.Resized) != 1 || cd.Resized[0].SID != hosts[1].SID || cd.Resized[0].Key != "memory_mb" || cd.Resized[0].Registered != "256" || cd.Resized[0].Now != "512" {
		t.Fatalf("resized = %+v, want %s memory_mb 256 -> 512", cd.Resized, hosts[1].SID)
	}
	if len(cd.Orphans) != 1 || cd.Orphans[0].RequestID != "req_stray" {
		t.Fatalf("orphans = %+v", cd.Orphans)
	}
	if len(cd.Stopped) != 1 || cd.Stopped[0].SID != hosts[2].SID || cd.Stopped[0].State != "stopped" {
		t.Fatalf("stopped = %+v, want %s", cd.Stopped, hosts[2].SID)
	}
}
