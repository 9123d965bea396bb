package keeper_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/store/sqlite"
)

// buildFakeDriver builds the fake cloud's plugin into dir.
func buildFakeDriver(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "soul-cloud-fake"),
		"github.com/soulstack/soulstack/internal/plugin/internal/fakecloud/soul-cloud-fake").CombinedOutput(); err != nil {
		t.Fatalf("build soul-cloud-fake: %v\n%s", err, out)
	}
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
	buildFakeDriver(t, filepath.Join(data, "plugins"))
	k := serve(t, dir)
	c := adminClient(t, k, data)
	ctx := context.Background()
	for name, cfg := range map[string]map[string]any{"fake": {}, "fakepriv": {"address": "private"}} {
		if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: name, Driver: "fake", FQDNSuffix: name + ".test", Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
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
