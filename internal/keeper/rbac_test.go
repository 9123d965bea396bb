package keeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store/sqlite"
)

// cloudKeeper is a keeper started as the Quick start starts it, with the
// real soul-cloud-local plugin and a provider "local" whose VMs live in
// their own state dir.
type cloudKeeper struct {
	k      *proc
	data   string
	admin  *client.Client
	driver driversdk.Driver
	prov   driversdk.Provider
}

func startCloudKeeper(t *testing.T, suffix string) *cloudKeeper {
	t.Helper()
	k := spawn(t, keepertest.Options{Plugins: []string{localDriver}})
	data := k.Data
	ck := &cloudKeeper{k: k.Proc, data: data, admin: k.Admin}
	state := t.TempDir()
	cfg := map[string]any{"state_dir": state}
	if _, err := ck.admin.ProviderCreate(context.Background(), client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: suffix, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	// The test's own view of the provider, through the same plugin.
	h, err := plugin.New(plugin.Config{PluginDir: filepath.Join(data, "plugins")})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Driver(context.Background(), "local")
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	ck.driver, ck.prov = d, driversdk.Provider{Name: "local", FQDNSuffix: suffix, Config: json.RawMessage(`{"state_dir":"` + state + `"}`)}
	// Whatever happens, leave no VM behind.
	t.Cleanup(func() {
		defer h.Close()
		if err := destroyDriverVMs(context.Background(), d, ck.prov); err != nil {
			t.Errorf("destroy VMs: %v", err)
		}
	})
	return ck
}

// vmIDs lists the VMs the provider has, whoever made them.
func (ck *cloudKeeper) vmIDs(t *testing.T) []string {
	t.Helper()
	vms, err := ck.driver.List(context.Background(), driversdk.ListRequest{Provider: ck.prov})
	if err != nil {
		t.Fatalf("list VMs: %v", err)
	}
	var ids []string
	for _, vm := range vms {
		ids = append(ids, vm.ID)
	}
	return ids
}

// token issues a token through the admin and returns its client and id.
func (ck *cloudKeeper) token(t *testing.T, in client.TokenCreate) (*client.Client, string) {
	t.Helper()
	tok, err := ck.admin.TokenCreate(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ck.k.Addr, tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	return c, tok.ID
}

// attack is the three-step scenario: a VM on provider local with
// an inline profile, a command in it that prints the keeper's admin token,
// and the VM destroyed again.
func attack(data, cmd string) string {
	if cmd == "" {
		cmd = "base64 -w0 " + filepath.Join(data, "admin.token")
	}
	return `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: {cpus: 1, memory_mb: 256}, count: 1}
  - name: steal
    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    connect: {retries: 20, delay: 500ms}
    params: {cmd: "` + cmd + `"}
  - name: teardown
    on: keeper
    module: core.cloud.destroyed
    params:
      provider: local
      vm_ids: "${ steps.provision.output.vm_ids }"
      sids: "${ steps.provision.output.hosts.map(h, h.sid) }"
`
}

func wantProblem(t *testing.T, err error, status int, code string, contains ...string) {
	t.Helper()
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != status || p.Code != code {
		t.Fatalf("err = %v; want %d %s", err, status, code)
	}
	for _, s := range contains {
		if !strings.Contains(p.Detail, s) {
			t.Fatalf("problem detail %q does not say %q", p.Detail, s)
		}
	}
}

// TestOperatorCannotRunCloudSteps is the attack: an operator token
// submits a scenario that makes a local VM, reads the keeper's admin token
// from inside it and destroys the VM. POST /v1/runs refuses it with 403
// auth.forbidden naming cloud.create; nothing is queued and no VM is made.
// The same holds for destroy and resize steps. A token that holds the cloud
// permissions runs the same shape of scenario, and every cloud and run
// audit event names that token as actor.
func TestOperatorCannotRunCloudSteps(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	ck := startCloudKeeper(t, "rbac.test")
	ctx := context.Background()
	operator, operatorID := ck.token(t, client.TokenCreate{Name: "ops", Role: "operator"})

	_, _, err := operator.RunCreate(ctx, client.RunCreate{Scenario: attack(ck.data, ""), File: "attack.yaml"})
	wantProblem(t, err, 403, "auth.forbidden", operatorID, "role operator", "lacks permission cloud.create", `step "provision" (core.cloud.created)`)
	steps := map[string]string{
		"cloud.destroy": "steps:\n  - name: teardown\n    on: keeper\n    module: core.cloud.destroyed\n    params: {provider: local, vm_ids: [vm-1]}\n",
		"cloud.resize":  "steps:\n  - name: grow\n    on: keeper\n    module: core.cloud.resized\n    params: {provider: local, vm_ids: [vm-1], profile: {cpus: 2}}\n",
	}
	for perm, scenario := range steps {
		_, _, err := operator.RunCreate(ctx, client.RunCreate{Scenario: scenario})
		wantProblem(t, err, 403, "auth.forbidden", "lacks permission "+perm)
	}
	// A step that is skipped by `when` still needs the permission: the
	// check does not depend on input.
	guarded := "inputs:\n  go: {type: bool, default: false}\nsteps:\n  - name: provision\n    on: keeper\n    when: input.go\n    module: core.cloud.created\n    params: {provider: local}\n"
	_, _, err = operator.RunCreate(ctx, client.RunCreate{Scenario: guarded})
	wantProblem(t, err, 403, "auth.forbidden", "lacks permission cloud.create")
	// Nothing was queued, nothing was made.
	runs, err := ck.admin.RunList(ctx, client.RunListOptions{})
	if err != nil || len(runs.Items) != 0 {
		t.Fatalf("runs after refusals = %+v, %v", runs, err)
	}
	if ids := ck.vmIDs(t); len(ids) != 0 {
		t.Fatalf("VMs after refusals: %v", ids)
	}

	// A custom token may hold exactly the cloud permissions it needs.
	spawner, spawnerID := ck.token(t, client.TokenCreate{Name: "spawner", Permissions: []string{"run.read", "run.create", "cloud.create", "cloud.destroy"}})
	_, _, err = spawner.RunCreate(ctx, client.RunCreate{Scenario: steps["cloud.resize"]})
	wantProblem(t, err, 403, "auth.forbidden", "permissions run.read, run.create, cloud.create, cloud.destroy", "lacks permission cloud.resize")
	run, _, err := spawner.RunCreate(ctx, client.RunCreate{Scenario: attack(ck.data, "echo reached $(hostname)"), File: "spawn.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, spawner, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("run with the cloud permissions = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	if ids := ck.vmIDs(t); len(ids) != 0 {
		t.Fatalf("VMs left after teardown: %v", ids)
	}

	// The audit actor of the run's events and of every cloud event is the
	// run's creator, never the keeper.
	audit, err := ck.admin.AuditList(ctx, client.AuditListOptions{Verify: true})
	if err != nil || !audit.Verify.OK {
		t.Fatalf("audit = %+v, %v", audit, err)
	}
	seen := map[string]int{}
	for _, e := range audit.Items {
		if !strings.HasPrefix(e.Action, "cloud.") && !strings.HasPrefix(e.Action, "run.") {
			continue
		}
		seen[e.Action]++
		if e.ActorAID != spawnerID {
			t.Errorf("%s %s by %q; want the run's creator %s", e.Action, e.Payload, e.ActorAID, spawnerID)
		}
	}
	if seen["cloud.provisioned"] != 2 || seen["run.started"] != 1 || seen["run.finished"] != 1 {
		t.Fatalf("audit events = %v; want 2 cloud.provisioned, run.started, run.finished", seen)
	}
}

// TestCloudStepRecheckedWhenItRuns: a run accepted while its creator held
// cloud.create waits in a first step (a real sshd host blocks on a barrier
// file) while the creator is revoked, stripped of the permission, or
// expires; when the cloud step comes, it fails with auth.forbidden before
// anything is done, and no VM exists.
func TestCloudStepRecheckedWhenItRuns(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	ck := startCloudKeeper(t, "recheck.test")
	ctx := context.Background()
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, ck.admin, "gate.local.test", srv)
	dbPath := filepath.Join(ck.data, "keeper.db")
	if _, err := os.Stat(dbPath); err != nil {
		t.Fatalf("the keeper's SQLite file: %v", err)
	}

	cases := []struct {
		name   string
		change func(t *testing.T, id string)
		reason string
	}{
		{"revoked", func(t *testing.T, id string) {
			if err := ck.admin.TokenRevoke(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, "was revoked"},
		// No API changes a token's grant; the registry row is what a
		// future one (or another keeper version) would change.
		{"downgraded", func(t *testing.T, id string) {
			execDB(t, dbPath, `UPDATE api_tokens SET permissions = 'run.read,run.create' WHERE id = ?`, id)
		}, "lacks permission cloud.create"},
		{"expired", func(t *testing.T, id string) {
			execDB(t, dbPath, `UPDATE api_tokens SET expires_at = ? WHERE id = ?`, time.Now().Add(-time.Minute).UTC(), id)
		}, "has expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, id := ck.token(t, client.TokenCreate{Name: "ci-" + tc.name, Permissions: []string{"run.read", "run.create", "cloud.create"}})
			barrier := filepath.Join(t.TempDir(), "go")
			scenario := `steps:
  - name: wait
    on: gate.local.test
    module: core.command.ran
    params: {cmd: "while [ ! -e ` + barrier + ` ]; do sleep 0.05; done"}
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: {cpus: 1, memory_mb: 256}, count: 1}
`
			run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, ck.admin, run.ID, "step wait running", stepRunning("wait"))
			tc.change(t, id)
			if err := os.WriteFile(barrier, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			final := waitRun(t, ck.admin, run.ID)
			if final.Phase != "Failed" || len(final.Steps) != 2 || final.Steps[0].Status != "changed" {
				t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
			}
			prov := final.Steps[1]
			if prov.Status != "failed" || len(prov.Targets) != 1 || prov.Targets[0].Error == nil || prov.Targets[0].Error.Code != "auth.forbidden" ||
				!strings.Contains(prov.Targets[0].Error.Message, "token "+id+" ") || !strings.Contains(prov.Targets[0].Error.Message, tc.reason) {
				t.Fatalf("provision step = %s\n%s", prov.Status, describeSteps(final.Steps))
			}
		})
	}
	if ids := ck.vmIDs(t); len(ids) != 0 {
		t.Fatalf("VMs made by steps whose creator lost the permission: %v", ids)
	}
	souls, _ := ck.admin.SoulList(ctx, client.ListOptions{})
	if len(souls.Items) != 1 {
		t.Fatalf("souls = %+v; want only the gate", souls.Items)
	}
}

// execDB runs one statement on the running keeper's SQLite registry.
func execDB(t *testing.T, path, stmt string, args ...any) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().Exec(stmt, args...); err != nil {
		t.Fatal(err)
	}
}

// TestDestroyPairingMismatch: core.cloud.destroyed with a hand-registered
// soul paired with a real VM's id, and destroyed/resized with a VM this
// keeper did not create, fail with cloud.pairing_mismatch before the driver
// is called: the soul stays active and every VM is still there.
func TestDestroyPairingMismatch(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	ck := startCloudKeeper(t, "pair.test")
	ctx := context.Background()
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, ck.admin, "db.example.com", srv)

	run, _, err := ck.admin.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: provision\n    on: keeper\n    module: core.cloud.created\n    params: {provider: local, profile: {cpus: 1, memory_mb: 128}}\n"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, ck.admin, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("provision = %s %+v", final.Phase, final.Error)
	}
	var out struct {
		VMIDs []string `json:"vm_ids"`
	}
	_ = json.Unmarshal(final.Steps[0].Targets[0].Output, &out)
	if len(out.VMIDs) != 1 {
		t.Fatalf("provision output = %s", final.Steps[0].Targets[0].Output)
	}
	real := out.VMIDs[0]
	// The VM carries the run's tag (the run id comes with the step's call).
	tagged, err := ck.driver.List(ctx, driversdk.ListRequest{Provider: ck.prov, Tags: map[string]string{driversdk.TagRunID: run.ID}})
	if err != nil || len(tagged) != 1 || tagged[0].ID != real {
		t.Fatalf("VMs tagged with run %s = %+v, %v", run.ID, tagged, err)
	}
	// A VM made at the provider behind the keeper's back.
	foreign, err := ck.driver.Create(ctx, driversdk.CreateRequest{Provider: ck.prov, RequestID: "req_foreign", RunID: "run_foreign", Profile: json.RawMessage(`{"memory_mb":128}`), Count: 1})
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, step, want string
	}{
		{"hand-registered soul with a real VM", "module: core.cloud.destroyed\n    params: {provider: local, vm_ids: [" + real + "], sids: [db.example.com]}", `soul "db.example.com" is not a cloud VM of this keeper`},
		{"VM this keeper did not create", "module: core.cloud.destroyed\n    params: {provider: local, vm_ids: [" + foreign[0].ID + "]}", `VM "` + foreign[0].ID + `" was not created by this keeper`},
		{"resize of a VM this keeper did not create", "module: core.cloud.resized\n    params: {provider: local, vm_ids: [" + foreign[0].ID + "], profile: {cpus: 2}}", `VM "` + foreign[0].ID + `" was not created by this keeper`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run, _, err := ck.admin.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: act\n    on: keeper\n    " + tc.step + "\n"})
			if err != nil {
				t.Fatal(err)
			}
			final := waitRun(t, ck.admin, run.ID)
			tg := final.Steps[0].Targets[0]
			if final.Phase != "Failed" || tg.Error == nil || tg.Error.Code != "cloud.pairing_mismatch" || !strings.Contains(tg.Error.Message, tc.want) {
				t.Fatalf("run = %s\n%s", final.Phase, describeSteps(final.Steps))
			}
		})
	}
	if so, err := ck.admin.SoulGet(ctx, "db.example.com"); err != nil || so.Status != "active" {
		t.Fatalf("hand-registered soul = %+v, %v", so, err)
	}
	if ids := ck.vmIDs(t); len(ids) != 2 {
		t.Fatalf("VMs = %v; want the keeper's and the foreign one still there", ids)
	}
}
