package keeper_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/drivers/aws/awsfake"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestAWSCloudEndToEnd: a keeper with the real soul-cloud-aws plugin,
// pointed at a fake EC2 on 127.0.0.1 through the provider's endpoint,
// makes two instances with core.cloud.created (they are pending for a
// while and missing from the first Describe), registers them as souls at
// their public addresses, and core.cloud.destroyed terminates them and
// marks the souls destroyed. The credentials reach the plugin only
// through credentials_ref and appear in no log. (The fake's instances
// cannot be reached over SSH, so no step runs on them.)
func TestAWSCloudEndToEnd(t *testing.T) {
	t.Parallel()
	const secret = "e2e-canary-secret-4b1d9a7c0e2f"
	fake := awsfake.New()
	t.Cleanup(fake.Close)
	fake.SetAccessKey("AKIAE2ETEST000000001")
	fake.SetPending(2)
	fake.SetHidden(1)

	credPath := filepath.Join(t.TempDir(), "aws.json")
	if err := os.WriteFile(credPath, []byte(`{"access_key_id": "AKIAE2ETEST000000001", "secret_access_key": "`+secret+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := spawn(t, keepertest.Options{YAML: "drivers:\n  aws:\n    endpoints: [" + fake.URL + "]\n", Plugins: []string{"cmd/soul-cloud-aws"}})
	k, c := s.Proc, s.Admin
	ctx := context.Background()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "aws", Driver: "aws", Region: "eu-central-1", FQDNSuffix: "aws.test",
		CredentialsRef: "file:" + credPath, Config: map[string]any{"endpoint": fake.URL, "poll_interval": "10ms", "max_backoff": "20ms"}}); err != nil {
		t.Fatal(err)
	}
	spawn := `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params:
      provider: aws
      count: 2
      profile: {image_id: ami-0123456789abcdef0, instance_type: t3.micro, subnet_id: subnet-0123456789abcdef0, ssh_user: admin}
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: spawn, File: "spawn-aws.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("spawn run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	var outputs map[string]json.RawMessage
	_ = json.Unmarshal(final.Outputs, &outputs)
	var prov struct {
		Hosts []struct {
			SID, VMID, PrimaryIP string
		} `json:"hosts"`
	}
	if err := json.Unmarshal(fixKeys(outputs["provision"]), &prov); err != nil || len(prov.Hosts) != 2 {
		t.Fatalf("provision output = %s (%v)", outputs["provision"], err)
	}
	insts := map[string]awsfake.Instance{}
	for _, inst := range fake.Instances() {
		insts[inst.ID] = inst
	}
	if len(insts) != 2 {
		t.Fatalf("the fake made %d instances, want 2", len(insts))
	}
	for _, h := range prov.Hosts {
		inst, ok := insts[h.VMID]
		if !ok || inst.State != "running" || h.PrimaryIP != inst.PublicIP || inst.PublicIP == "" {
			t.Fatalf("host %+v, fake instance %+v", h, inst)
		}
		if !strings.HasSuffix(h.SID, ".aws.test") || inst.Tags["Name"] != h.SID {
			t.Fatalf("host %s, Name tag %q: want the same name under the provider's suffix", h.SID, inst.Tags["Name"])
		}
		if inst.Tags["soulstack:run_id"] != run.ID || inst.Tags["soulstack:request_id"] == "" {
			t.Fatalf("instance %s tags %v (run %s)", inst.ID, inst.Tags, run.ID)
		}
		so, err := c.SoulGet(ctx, h.SID)
		if err != nil || so.VMID != inst.ID || so.Provider != "aws" || so.Address != inst.PublicIP || so.Connection.User != "admin" {
			t.Fatalf("soul %s = %+v, %v", h.SID, so, err)
		}
	}

	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "destroy-local.yaml"), File: "destroy-local.yaml",
		Input: map[string]any{"provider": "aws", "hosts": jsonValue(t, outputs["provision"], "hosts")}})
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
	for _, h := range prov.Hosts {
		if so, _ := c.SoulGet(ctx, h.SID); so.Status != "destroyed" {
			t.Fatalf("soul %s = %s after destroy", h.SID, so.Status)
		}
	}
	if fake.Live() != 0 {
		t.Fatalf("%d instances still live after destroy", fake.Live())
	}
	if logs := k.Drain(); strings.Contains(logs, secret) {
		t.Fatalf("the keeper's log holds the credentials' secret:\n%s", logs)
	}
}
