package keeper_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/testdb"
)

// cloudStep runs a one-step keeper scenario and returns the run and its
// step's target output.
func cloudStep(t *testing.T, c *client.Client, module, params string) (*client.Run, map[string]any) {
	t.Helper()
	scenario := fmt.Sprintf("steps:\n  - name: cloud\n    on: keeper\n    module: %s\n    params: %s\n", module, params)
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: scenario, File: "cloud.yaml"})
	if err != nil {
		t.Fatalf("%s %s: %v", module, params, err)
	}
	final := waitRun(t, c, run.ID)
	var out map[string]any
	if len(final.Steps) == 1 && len(final.Steps[0].Targets) == 1 {
		_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &out)
	}
	return final, out
}

// stepStatus is the run's phase, its one step's status and, when the step
// failed, the error's code.
func stepStatus(r *client.Run) string {
	s := string(r.Phase)
	for _, st := range r.Steps {
		s += " " + string(st.Status)
		for _, tg := range st.Targets {
			if tg.Error != nil {
				s += " " + tg.Error.Code
			}
		}
	}
	return s
}

// TestLocalCloudChangesWhen: through a keeper on PostgreSQL with the real
// soul-cloud-local plugin and a real local VM, each line of the destroyed
// and resized catalog pages: resize to the size the VM has is ok
// (unchanged), to another size changed; destroy of a live VM changed,
// the same destroy again ok with the VM in already_gone; cloud.provisioned
// is written for every one of them and for a failure, as the run's
// creator; and when the audit log refuses cloud.provisioned, resized and
// destroyed fail.
func TestLocalCloudChangesWhen(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	url := testdb.FreshPostgres(t)
	s := spawn(t, keepertest.Options{Plugins: []string{localDriver}, Args: []string{"--database-url", url}})
	c, data := s.Admin, s.Data
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "sem.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "local", Spec: map[string]any{"cpus": 1, "memory_mb": 256}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAllLocal(data, state, "sem.test") })

	run, out := cloudStep(t, c, "core.cloud.created", "{provider: local, profile: small, count: 2}")
	if stepStatus(run) != "Succeeded changed" {
		t.Fatalf("create: %s\n%s", stepStatus(run), describeSteps(run.Steps))
	}
	creator := run.CreatedBy
	var hosts []struct {
		SID   string `json:"sid"`
		VMID  string `json:"vm_id"`
		Token string `json:"bootstrap_token"`
	}
	raw, _ := json.Marshal(out["hosts"])
	if err := json.Unmarshal(raw, &hosts); err != nil || len(hosts) != 2 {
		t.Fatalf("hosts = %s (%v)", raw, err)
	}
	a, b := hosts[0], hosts[1]

	// resized: the size the VM has -> ok; another size -> changed.
	run, out = cloudStep(t, c, "core.cloud.resized", fmt.Sprintf("{provider: local, vm_ids: [%s], profile: small}", a.VMID))
	if stepStatus(run) != "Succeeded ok" || fmt.Sprint(out["vms"]) != fmt.Sprintf("[map[caused_downtime:false changed:false vm_id:%s]]", a.VMID) {
		t.Fatalf("resize to the size the VM has: %s %v", stepStatus(run), out)
	}
	run, out = cloudStep(t, c, "core.cloud.resized", fmt.Sprintf("{provider: local, vm_ids: [%s, %s], profile: {memory_mb: 384}}", a.VMID, b.VMID))
	if stepStatus(run) != "Succeeded changed" || !strings.Contains(fmt.Sprint(out["vms"]), "changed:true vm_id:"+a.VMID) {
		t.Fatalf("resize to another size: %s %v", stepStatus(run), out)
	}

	// destroyed: a live VM -> changed; again -> ok, already gone, no
	// pairing mismatch.
	destroyA := fmt.Sprintf("{provider: local, vm_ids: [%s], sids: [%s]}", a.VMID, a.SID)
	run, out = cloudStep(t, c, "core.cloud.destroyed", destroyA)
	if stepStatus(run) != "Succeeded changed" || out["souls_destroyed"] != 1.0 || fmt.Sprint(out["already_gone"]) != "[]" {
		t.Fatalf("destroy of a live VM: %s %v", stepStatus(run), out)
	}
	run, out = cloudStep(t, c, "core.cloud.destroyed", destroyA)
	if stepStatus(run) != "Succeeded ok" || out["souls_destroyed"] != 0.0 || out["bootstraps_burned"] != 0.0 || fmt.Sprint(out["already_gone"]) != "["+a.VMID+"]" {
		t.Fatalf("destroy of a VM already gone: %s %v\n%s", stepStatus(run), out, describeSteps(run.Steps))
	}
	// A failure is audited too.
	run, _ = cloudStep(t, c, "core.cloud.destroyed", "{provider: local, vm_ids: [vm-00000000]}")
	if stepStatus(run) != "Failed failed cloud.pairing_mismatch" {
		t.Fatalf("destroy of a VM the keeper never made: %s", stepStatus(run))
	}

	audit, err := c.AuditList(ctx, client.AuditListOptions{Verify: true})
	if err != nil || !audit.Verify.OK {
		t.Fatalf("audit: %+v, %v", audit.Verify, err)
	}
	var got []string
	for _, e := range audit.Items {
		if e.Action != "cloud.provisioned" {
			continue
		}
		if e.ActorAID != creator || strings.Contains(string(e.Payload), "sbt_") {
			t.Errorf("cloud.provisioned by %q (want the run's creator %q): %s", e.ActorAID, creator, e.Payload)
		}
		var p struct {
			Action, Outcome string
			Changed         *bool
			ErrorCode       string `json:"error_code"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		s := p.Action + " " + p.Outcome
		if p.Changed != nil {
			s += fmt.Sprintf(" changed=%v", *p.Changed)
		}
		got = append(got, strings.TrimSpace(s+" "+p.ErrorCode))
	}
	want := []string{"created ok changed=true", "resized ok changed=false", "resized ok changed=true", "destroyed ok changed=true", "destroyed ok changed=false", "destroyed failed cloud.pairing_mismatch"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cloud.provisioned events (oldest first?) = %q, want %q", got, want)
	}

	// The audit log refuses cloud.provisioned (every other event still
	// goes through, so runs can be made): resized and destroyed fail.
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE FUNCTION cloud_audit_down() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit store unavailable'; END $$`,
		`CREATE TRIGGER cloud_audit_down BEFORE INSERT ON audit_events FOR EACH ROW WHEN (NEW.action = 'cloud.provisioned') EXECUTE FUNCTION cloud_audit_down()`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	run, _ = cloudStep(t, c, "core.cloud.resized", fmt.Sprintf("{provider: local, vm_ids: [%s], profile: {memory_mb: 384}}", b.VMID))
	if stepStatus(run) != "Failed failed cloud.audit_failed" {
		t.Fatalf("unchanged resize with the audit refused: %s", stepStatus(run))
	}
	run, _ = cloudStep(t, c, "core.cloud.destroyed", destroyA)
	if stepStatus(run) != "Failed failed cloud.registry_failed" {
		t.Fatalf("unchanged destroy with the audit refused: %s", stepStatus(run))
	}
	run, _ = cloudStep(t, c, "core.cloud.destroyed", fmt.Sprintf("{provider: local, vm_ids: [%s], sids: [%s]}", b.VMID, b.SID))
	if stepStatus(run) != "Failed failed cloud.registry_failed" {
		t.Fatalf("destroy with the audit refused: %s", stepStatus(run))
	}
	// The cascade went with its event: the soul is still pending.
	if so, err := c.SoulGet(ctx, b.SID); err != nil || so.Status != "pending" {
		t.Fatalf("soul %s after a destroy whose audit was refused = %+v, %v", b.SID, so, err)
	}
}

// destroyAllLocal destroys every VM soul-cloud-local keeps in state, so
// that a test leaves none behind whatever happened.
func destroyAllLocal(data, state, suffix string) {
	h, err := plugin.New(plugin.Config{PluginDir: filepath.Join(data, "plugins")})
	if err != nil {
		return
	}
	defer h.Close()
	d, err := h.Driver(context.Background(), "local")
	if err != nil {
		return
	}
	p := driversdk.Provider{Name: "local", FQDNSuffix: suffix, Config: json.RawMessage(`{"state_dir":"` + state + `"}`)}
	_ = destroyDriverVMs(context.Background(), d, p)
}
