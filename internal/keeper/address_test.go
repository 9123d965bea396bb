package keeper_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/store/sqlite"
)

// fakeCloudPkg is the fake cloud's plugin command.
const fakeCloudPkg = "github.com/soulstack/soulstack/internal/plugin/internal/fakecloud/soul-cloud-fake"

// buildFakeDriver puts the fake cloud's plugin into dir.
func buildFakeDriver(t *testing.T, dir string) {
	t.Helper()
	bins.Install(t, fakeCloudPkg, dir, "")
}

// fakeCloudKeeper serves a keeper in dir (serve's args) with the fake
// cloud's plugin and, for each entry of providers, a provider of that
// driver with its config and the FQDN suffix <name>.test; it returns the
// keeper and an admin client.
func fakeCloudKeeper(t *testing.T, dir string, providers map[string]map[string]any, args ...string) (*proc, *client.Client) {
	t.Helper()
	k := spawn(t, keepertest.Options{Dir: dir, Plugins: []string{fakeCloudPkg}, Args: args})
	c := k.Admin
	for name, cfg := range providers {
		if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: name, Driver: "fake", FQDNSuffix: name + ".test", Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	return k.Proc, c
}

// deploymentID reads the keeper deployment id from a keeper's SQLite
// registry.
func deploymentID(t *testing.T, dataDir string) string {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(dataDir, "keeper.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id string
	if err := db.QueryRow(`SELECT deployment_id FROM keeper_deployment`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestCloudAddressChoice: through a keeper and the fake cloud's real
// plugin process (protocol 2), core.cloud.created outputs each VM's
// public and private address and all its addresses, and the soul's
// address is the public one by default, the private one when the
// provider config says address: private, and the public one again when
// the profile says so (the profile wins); the driver, which decodes its
// config and profile strictly, never sees the key. The driver got the
// keeper deployment's id. A bad value fails the run before anything is
// made.
func TestCloudAddressChoice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	_, c := fakeCloudKeeper(t, dir, map[string]map[string]any{"fake": {}, "fakepriv": {"address": "private"}})
	ctx := context.Background()
	sc := `steps:
  - name: default
    on: keeper
    module: core.cloud.created
    params: {provider: fake, profile: {cpus: 1}}
  - name: private
    on: keeper
    module: core.cloud.created
    params: {provider: fakepriv, profile: {cpus: 1}}
  - name: profile_wins
    on: keeper
    module: core.cloud.created
    params: {provider: fakepriv, profile: {cpus: 1, address: public}}
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, File: "addresses.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var outputs map[string]struct {
		Hosts []struct {
			SID        string `json:"sid"`
			Address    string `json:"address"`
			PrimaryIP  string `json:"primary_ip"`
			PublicIP   string `json:"public_ip"`
			PrivateIP  string `json:"private_ip"`
			Addresses  []map[string]string
			Attributes map[string]any `json:"attributes"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(final.Outputs, &outputs); err != nil {
		t.Fatal(err)
	}
	keeperID := deploymentID(t, data)
	for step, want := range map[string]string{"default": "public", "private": "private", "profile_wins": "public"} {
		hosts := outputs[step].Hosts
		if len(hosts) != 1 {
			t.Fatalf("%s: hosts = %+v", step, hosts)
		}
		h := hosts[0]
		if !strings.HasPrefix(h.PublicIP, "203.0.113.") || !strings.HasPrefix(h.PrivateIP, "192.0.2.") || h.PrimaryIP != h.PublicIP {
			t.Fatalf("%s: host = %+v", step, h)
		}
		if len(h.Addresses) != 2 || h.Addresses[0]["ip"] != h.PrivateIP || h.Addresses[0]["kind"] != "private" || h.Addresses[0]["network"] != "fake-net" ||
			h.Addresses[1]["ip"] != h.PublicIP || h.Addresses[1]["kind"] != "public" {
			t.Fatalf("%s: addresses = %+v", step, h.Addresses)
		}
		wantIP := h.PublicIP
		if want == "private" {
			wantIP = h.PrivateIP
		}
		so, err := c.SoulGet(ctx, h.SID)
		if err != nil || h.Address != wantIP || so.Address != wantIP || so.PrimaryIP != h.PrimaryIP {
			t.Fatalf("%s: output address %q, soul %+v, %v; want the %s address %s", step, h.Address, so, err, want, wantIP)
		}
		if h.Attributes["keeper_id"] != keeperID {
			t.Fatalf("%s: the driver got keeper id %v, want the deployment's %s", step, h.Attributes["keeper_id"], keeperID)
		}
	}

	bad := `steps:
  - name: bad
    on: keeper
    module: core.cloud.created
    params: {provider: fake, profile: {cpus: 1, address: internal}}
`
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: bad, File: "bad.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	tg := final.Steps[0].Targets[0]
	if final.Phase != "Failed" || tg.Error == nil || tg.Error.Code != "cloud.address_invalid" || !strings.Contains(tg.Error.Message, `"internal"`) {
		t.Fatalf("run with address: internal = %s %+v %+v", final.Phase, final.Error, tg)
	}
	souls, err := c.SoulList(ctx, client.ListOptions{})
	if err != nil || len(souls.Items) != 3 {
		t.Fatalf("souls = %+v, %v; want the 3 of the first run only", souls, err)
	}
}

// TestLocalCloudTwoDeployments: two keeper deployments (two registries,
// so two deployment ids) share one local driver state dir, as two
// keepers sharing one cloud account. A's VM has its bridge address as
// its private address, no public one, and A's deployment tag; B does not
// report it as an orphan and cannot destroy it through the orphans API
// (before, B listed every request-tagged VM without a soul of its own);
// the driver refuses B's Destroy with driver.not_owned; A destroys it.
func TestLocalCloudTwoDeployments(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	state := t.TempDir()
	type deployment struct {
		data string
		c    *client.Client
	}
	var ds [2]deployment
	for i := range ds {
		k := spawn(t, keepertest.Options{Plugins: []string{localDriver}})
		ds[i].data, ds[i].c = k.Data, k.Admin
		if _, err := ds[i].c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "two.test", Config: map[string]any{"state_dir": state}}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := ds[0], ds[1]
	idA, idB := deploymentID(t, a.data), deploymentID(t, b.data)
	if idA == idB {
		t.Fatalf("two registries share the deployment id %s", idA)
	}
	ctx := context.Background()
	p := driversdk.Provider{Name: "local", FQDNSuffix: "two.test", Config: json.RawMessage(`{"state_dir":"` + state + `"}`)}
	h, err := plugin.New(plugin.Config{PluginDir: filepath.Join(a.data, "plugins")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	d, err := h.Driver(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // whatever happens, leave no VM behind
		vms, _ := d.List(context.Background(), driversdk.ListRequest{Provider: p})
		for _, vm := range vms {
			q := p
			q.KeeperID = vm.Tags[driversdk.TagKeeper]
			_ = d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: q, VMIDs: []string{vm.ID}})
		}
	})

	sc := `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: {cpus: 1, memory_mb: 128}}
  - name: hello
    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    connect: {retries: 20, delay: 500ms}
    params: {cmd: "ip -4 -o addr show dev eth0"}
`
	run, _, err := a.c.RunCreate(ctx, client.RunCreate{Scenario: sc, File: "two.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, a.c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var out struct {
		Hosts []struct {
			SID       string `json:"sid"`
			VMID      string `json:"vm_id"`
			Address   string `json:"address"`
			PublicIP  string `json:"public_ip"`
			PrivateIP string `json:"private_ip"`
			Addresses []map[string]string
		} `json:"hosts"`
	}
	var outputs map[string]json.RawMessage
	_ = json.Unmarshal(final.Outputs, &outputs)
	if err := json.Unmarshal(outputs["provision"], &out); err != nil || len(out.Hosts) != 1 {
		t.Fatalf("provision output = %s (%v)", outputs["provision"], err)
	}
	host := out.Hosts[0]
	if host.PublicIP != "" || host.PrivateIP == "" || host.Address != host.PrivateIP ||
		len(host.Addresses) != 1 || host.Addresses[0]["ip"] != host.PrivateIP || host.Addresses[0]["kind"] != "private" {
		t.Fatalf("host = %+v: want the bridge address as private and the soul's address, no public one", host)
	}
	var hello struct{ Stdout string }
	_ = json.Unmarshal(final.Steps[1].Targets[0].Output, &hello)
	if !strings.Contains(hello.Stdout, " "+host.PrivateIP+"/") {
		t.Fatalf("eth0 of the soul reached at %s: %q", host.Address, hello.Stdout)
	}
	vms, err := d.List(ctx, driversdk.ListRequest{Provider: p, Tags: map[string]string{driversdk.TagKeeper: idA}})
	if err != nil || len(vms) != 1 || vms[0].ID != host.VMID {
		t.Fatalf("VMs tagged with A's deployment %s = %+v, %v", idA, vms, err)
	}

	orphans, err := b.c.CloudOrphans(ctx, "local")
	if err != nil || len(orphans.Items) != 0 {
		t.Fatalf("B's orphans = %+v, %v; want none (the VM is A's)", orphans, err)
	}
	if _, err := b.c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "local", VMIDs: []string{host.VMID}}); err == nil {
		t.Fatal("B destroyed A's VM as an orphan")
	}
	q := p
	q.KeeperID = idB
	err = d.Destroy(ctx, driversdk.DestroyRequest{Provider: q, VMIDs: []string{host.VMID}})
	if driversdk.CodeOf(err) != driversdk.CodeNotOwned {
		t.Fatalf("Destroy as B = %v, want %s", err, driversdk.CodeNotOwned)
	}
	if left, _ := d.List(ctx, driversdk.ListRequest{Provider: p}); len(left) != 1 {
		t.Fatalf("VMs after B's attempts = %+v", left)
	}

	destroy := `steps:
  - name: gone
    on: keeper
    module: core.cloud.destroyed
    params: {provider: local, vm_ids: ["` + host.VMID + `"], sids: ["` + host.SID + `"]}
`
	run, _, err = a.c.RunCreate(ctx, client.RunCreate{Scenario: destroy, File: "gone.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if final := waitRun(t, a.c, run.ID); final.Phase != "Succeeded" {
		t.Fatalf("A's destroy = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	if left, _ := d.List(ctx, driversdk.ListRequest{Provider: p}); len(left) != 0 {
		t.Fatalf("VMs after A's destroy = %+v", left)
	}
}
