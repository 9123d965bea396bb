package keeper_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/soulstack/soulstack/client"
)

// TestCloudFailureBeforeRunAudited: a cloud step that fails while its
// params are evaluated (count: ${ input.n } with n = 0) writes its
// cloud.provisioned event with outcome failed, as every other outcome
// does, and makes nothing.
func TestCloudFailureBeforeRunAudited(t *testing.T) {
	t.Parallel()
	_, c := fakeCloudKeeper(t, t.TempDir(), map[string]map[string]any{"fake": nil})
	ctx := context.Background()
	sc := `inputs:
  n: {type: int}
steps:
  - name: vms
    on: keeper
    module: core.cloud.created
    params: {provider: fake, profile: {cpus: 1}, count: "${ input.n }"}
`
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, File: "zero.yaml", Input: map[string]any{"n": 0}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Failed" || len(final.Steps) != 1 || final.Steps[0].Targets[0].Error == nil {
		t.Fatalf("run = %s %+v", final.Phase, final.Steps)
	}
	code := final.Steps[0].Targets[0].Error.Code
	if code != "step.params" {
		t.Fatalf("the step failed %s, want step.params", code)
	}
	page, err := c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range page.Items {
		if e.Action != "cloud.provisioned" {
			continue
		}
		var p map[string]any
		_ = json.Unmarshal(e.Payload, &p)
		if p["run_id"] == run.ID && p["outcome"] == "failed" && p["error_code"] == code && p["action"] == "created" && e.Object == "run/"+run.ID {
			found = true
		}
	}
	if !found {
		for _, e := range page.Items {
			t.Logf("%s %s %s", e.Action, e.Object, e.Payload)
		}
		t.Fatalf("no cloud.provisioned event of the failed step (code %s) in the audit log", code)
	}
	souls, err := c.SoulList(ctx, client.ListOptions{})
	if err != nil || len(souls.Items) != 0 {
		t.Fatalf("souls after the failed step: %+v, %v", souls, err)
	}
}
