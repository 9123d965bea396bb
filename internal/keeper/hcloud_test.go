package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/drivers/hcloud/hcloudfake"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestHcloudEndToEnd: a keeper with the real soul-cloud-hcloud plugin,
// pointed at a fake of the Hetzner Cloud API, runs examples/hcloud.yaml
// (the servers' SSH is not reachable, so without its greeting): two
// servers, two pending souls with the servers' ids and public addresses;
// then examples/hcloud-destroy.yaml deletes the servers and destroys the
// souls. The token, read through credentials_ref, shows in no log.
func TestHcloudEndToEnd(t *testing.T) {
	t.Parallel()
	const token = "CANARY-e2e-hcloud-token-91b2"
	k, c, fake := hcloudKeeper(t, token, "")
	ctx := context.Background()

	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "hcloud.yaml"), File: "hcloud.yaml",
		Input: map[string]any{"count": 2, "greet": false, "networks": []any{"soulstack-net"}}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("hcloud run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var outputs map[string]json.RawMessage
	_ = json.Unmarshal(final.Outputs, &outputs)
	var prov struct {
		Hosts []struct{ SID, VMID, PrimaryIP string } `json:"hosts"`
	}
	if err := json.Unmarshal(fixKeys(outputs["provision"]), &prov); err != nil || len(prov.Hosts) != 2 {
		t.Fatalf("provision output = %s (%v)", outputs["provision"], err)
	}
	servers := fake.Servers()
	if len(servers) != 2 {
		t.Fatalf("the fake has %d servers, want 2", len(servers))
	}
	for i, h := range prov.Hosts {
		s := servers[i]
		if !strings.HasPrefix(s.Name, "soulstack-") || h.SID != s.Name+".hc.test" || h.VMID != fmt.Sprint(s.ID) || h.PrimaryIP != fmt.Sprintf("203.0.113.%d", s.ID%250) {
			t.Errorf("host %d = %+v, fake server %+v", i, h, s)
		}
		if s.Status != "running" || s.Labels["soulstack.run_id"] != run.ID || s.Labels["soulstack.request_id"] == "" || s.Labels["managed-by"] != "soulstack" || s.ServerType != "cx22" {
			t.Errorf("fake server %+v", s)
		}
		so, err := c.SoulGet(ctx, h.SID)
		if err != nil || so.Provider != "hetzner" || so.VMID != h.VMID || so.Status != "pending" {
			t.Fatalf("soul %s = %+v, %v", h.SID, so, err)
		}
	}

	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "hcloud-destroy.yaml"), File: "hcloud-destroy.yaml",
		Input: map[string]any{"hosts": jsonValue(t, outputs["provision"], "hosts")}})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("destroy run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var cascade map[string]any
	_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &cascade)
	if cascade["souls_destroyed"] != 2.0 {
		t.Fatalf("cascade = %v", cascade)
	}
	if left := fake.Servers(); len(left) != 0 || fake.Deletes() != 2 {
		t.Fatalf("servers left after destroy: %+v (%d deletes)", left, fake.Deletes())
	}
	for _, h := range prov.Hosts {
		if so, _ := c.SoulGet(ctx, h.SID); so.Status != "destroyed" {
			t.Fatalf("soul %s = %s after destroy", h.SID, so.Status)
		}
	}
	if logs := k.Interrupt(t); strings.Contains(logs, token) {
		t.Fatalf("the API token shows in the keeper's log:\n%s", logs)
	}
}

// hcloudKeeper starts a keeper with the real soul-cloud-hcloud plugin and
// keeper.yml text cfg (none when empty), and registers provider "hetzner"
// against a fake of the Hetzner API that accepts token, read through
// credentials_ref.
func hcloudKeeper(t *testing.T, token, cfg string) (*proc, *client.Client, *hcloudfake.Fake) {
	t.Helper()
	fake := hcloudfake.New(token)
	t.Cleanup(fake.Close)
	tokenFile := filepath.Join(t.TempDir(), "hcloud.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The fake stands for Hetzner's API: a keeper admin allows it as the
	// driver's endpoint.
	s := spawn(t, keepertest.Options{YAML: "drivers:\n  hcloud:\n    endpoints: [" + fake.URL + "]\n" + cfg, Plugins: []string{"cmd/soul-cloud-hcloud"}})
	k, c := s.Proc, s.Admin
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "hetzner", Driver: "hcloud", Region: "fsn1", FQDNSuffix: "hc.test",
		CredentialsRef: "file:" + tokenFile,
		Config:         map[string]any{"endpoint": fake.URL, "poll_interval": "5ms", "retry_base": "5ms"}}); err != nil {
		t.Fatal(err)
	}
	return k, c, fake
}
