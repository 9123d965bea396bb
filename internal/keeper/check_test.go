package keeper_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
)

// TestCheckRunTouchesNoCloud: a check run of a create-then-install
// scenario against a real keeper and the fake cloud's plugin process says
// that the create would make two VMs and that the install on them is
// unknown (its targets come from the create's output), and makes nothing:
// no soul, no VM at the driver, no cloud.provisioned event. After the
// apply, a check of the destroy names both VMs and souls and destroys
// nothing.
func TestCheckRunTouchesNoCloud(t *testing.T) {
	t.Parallel()
	_, c := fakeCloudKeeper(t, t.TempDir(), map[string]map[string]any{"fake": nil})
	ctx := context.Background()
	spawn := `steps:
  - name: vms
    on: keeper
    module: core.cloud.created
    params: {provider: fake, profile: {cpus: 1}, count: 2}
  - name: hello
    on: "${ steps.vms.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    params: {cmd: "echo hi", creates: /etc/hostname}
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: spawn, File: "spawn.yaml", Mode: client.RunCheck})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != client.PhaseSucceeded || final.Mode != client.RunCheck || len(final.Steps) != 2 {
		t.Fatalf("check run = %s %s %+v", final.Phase, final.Mode, final.Steps)
	}
	vms, hello := final.Steps[0], final.Steps[1]
	if vms.Status != client.StepWouldChange || len(vms.Targets) != 1 || vms.Targets[0].Status != client.TargetWouldChange ||
		len(vms.Targets[0].Changes) != 1 || vms.Targets[0].Changes[0].Kind != "vm" || vms.Targets[0].Changes[0].Action != "create" ||
		!strings.HasPrefix(vms.Targets[0].Changes[0].Name, "2 VM(s)") {
		t.Fatalf("the create's check: %+v", vms)
	}
	if hello.Status != client.StepUnknown || len(hello.Targets) != 0 {
		t.Fatalf("the install's check: %+v, want unknown with no targets", hello)
	}
	if final.Check == nil || final.Check.WouldChange != 1 || final.Check.Unknown != 1 || !strings.Contains(final.Message, `steps.vms.output, which the check cannot know (step "vms"`) {
		t.Fatalf("check summary %+v, message %q", final.Check, final.Message)
	}
	if souls, err := c.SoulList(ctx, client.ListOptions{}); err != nil || len(souls.Items) != 0 {
		t.Fatalf("souls after the check: %+v, %v; want none", souls, err)
	}
	orphans, err := c.CloudOrphans(ctx, "fake")
	if err != nil || len(orphans.Items) != 0 {
		t.Fatalf("VMs at the driver after the check: %+v, %v; want none", orphans, err)
	}
	page, err := c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Items {
		if e.Action == "cloud.provisioned" {
			t.Fatalf("a check run wrote %s %s %s", e.Action, e.Object, e.Payload)
		}
	}

	// The apply makes them; a check of their destroy names both and
	// destroys nothing.
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: spawn[:strings.Index(spawn, "  - name: hello")], File: "spawn.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != client.PhaseSucceeded {
		t.Fatalf("apply = %s %+v", final.Phase, final.Error)
	}
	var out struct {
		Vms struct {
			Hosts []struct {
				SID  string `json:"sid"`
				VMID string `json:"vm_id"`
			} `json:"hosts"`
		} `json:"vms"`
	}
	if err := json.Unmarshal(final.Outputs, &out); err != nil || len(out.Vms.Hosts) != 2 {
		t.Fatalf("outputs %s: %v", final.Outputs, err)
	}
	destroy := `inputs:
  vm_ids: {type: list}
  sids: {type: list}
steps:
  - name: gone
    on: keeper
    module: core.cloud.destroyed
    params: {provider: fake, vm_ids: "${ input.vm_ids }", sids: "${ input.sids }"}
`
	in := map[string]any{"vm_ids": []any{out.Vms.Hosts[0].VMID, out.Vms.Hosts[1].VMID}, "sids": []any{out.Vms.Hosts[0].SID, out.Vms.Hosts[1].SID}}
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: destroy, File: "destroy.yaml", Input: in, Mode: client.RunCheck})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != client.PhaseSucceeded || final.Steps[0].Targets[0].Status != client.TargetWouldChange || len(final.Steps[0].Targets[0].Changes) != 4 {
		t.Fatalf("destroy check = %s %+v", final.Phase, final.Steps)
	}
	souls, err := c.SoulList(ctx, client.ListOptions{})
	if err != nil || len(souls.Items) != 2 {
		t.Fatalf("souls after the destroy's check: %+v, %v", souls, err)
	}
	for _, so := range souls.Items {
		if so.Status == "destroyed" {
			t.Fatalf("the check destroyed %s", so.SID)
		}
	}
}
