package keeper_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/nubes"
	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestNubesSeedFlow is the second seed's one command on its own cloud: a
// real keeper with the real soul-cloud-nubes plugin process, against the
// FAKE deck-api (nubesfake) whose VMs are real local VMs. examples/nubes.yaml
// creates 2 VMs that join by themselves (their host keys pinned from what
// they reported, which are the VMs' own), installs packages, Docker and
// PostgreSQL on them, and the run's outputs carry each job's status;
// destroy-local.yaml with provider nubes leaves no instance, no VM and no
// live soul. A VM of the deployment that no soul holds is an orphan,
// listed and destroyed through the plugin; another deployment's is
// neither; a VM suspended and one deleted behind the keeper's back are
// cloud drift. A failing create stage and an expired token each fail with
// their dotted code and leave nothing behind. The deck-api token is in no
// log, answer, event, audit row or database page in clear.
func TestNubesSeedFlow(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	soul := buildSoul(t, t.TempDir())
	newToken := func() string {
		raw := make([]byte, 16)
		_, _ = rand.Read(raw)
		return "nubes-token-" + hex.EncodeToString(raw)
	}
	token, next := newToken(), newToken()

	agentPort := freePort(t)
	busPort := freePort(t)
	for busPort == agentPort {
		busPort = freePort(t)
	}
	// The VMs reach the keeper's agent listener and bus, on loopback, at
	// their gateway; they may run Docker.
	f, machines := nubesfake.StartLocal(t, token, []uint16{uint16(agentPort), uint16(busPort)}, true)

	s := spawn(t, keepertest.Options{Plugins: []string{"cmd/soul-cloud-nubes"}, YAML: fmt.Sprintf(`agent_binary: %s
agent_listen: 127.0.0.1:%d
advertise_url: https://soulstack-local-gateway:%d
nats:
  listen: 127.0.0.1:%d
drivers:
  nubes:
    endpoints: [%q]
`, soul, agentPort, agentPort, busPort, f.URL)})
	c := s.Admin
	ctx := context.Background()
	if _, err := c.CredentialPut(ctx, "default", "nubes", token); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "nubes", Driver: "nubes", FQDNSuffix: "nubes.test", CredentialsRef: "credential:nubes",
		Config: map[string]any{"endpoint": f.URL, "vapp_uid": "vapp-e2e", "poll_interval": "100ms", "retry_base": "100ms"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "nubes",
		Spec: map[string]any{"cpus": 1, "memory_gb": 1, "image": "Debian_13-20G", "user": "root"}}); err != nil {
		t.Fatal(err)
	}

	// The failure modes first: each ends with its code and leaves no
	// instance, no soul and no bootstrap token.
	failing := func(name, wantCode string) {
		t.Helper()
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "nubes.yaml"), File: "nubes.yaml",
			Input: map[string]any{"name": name, "install_packages": false}})
		if err != nil {
			t.Fatal(err)
		}
		final := waitRunFor(t, c, run.ID, 2*time.Minute)
		if final.Phase != "Failed" || len(final.Steps) == 0 || len(final.Steps[0].Targets) == 0 || final.Steps[0].Targets[0].Error == nil ||
			final.Steps[0].Targets[0].Error.Code != wantCode {
			t.Fatalf("%s: run = %s %+v\n%s", name, final.Phase, final.Error, describeSteps(final.Steps))
		}
		if left := f.Instances(); len(left) != 0 {
			t.Fatalf("%s: the fake still holds %v", name, left)
		}
		if souls, err := c.SoulList(ctx, client.ListOptions{}); err != nil || len(souls.Items) != 0 {
			t.Fatalf("%s: souls %+v, %v", name, souls, err)
		}
	}
	f.FailStage("deploy")
	failing("stage", "nubes.operation_failed")
	f.Expire(next)
	failing("expired", "nubes.auth_failed")
	if _, err := c.CredentialPut(ctx, "default", "nubes", next); err != nil {
		t.Fatal(err)
	}

	const pgPassword = "pg-Nubes-Secret-71c4-never-shown"
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "nubes.yaml"), File: "nubes.yaml", Input: map[string]any{
		"count": 2, "base_packages": []string{"jq", "curl"}, "install_docker": true, "docker_verify": "daemon",
		"install_postgres": true, "pg_db_name": "shop", "pg_db_user": "shop_app", "pg_db_password": pgPassword}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRunFor(t, c, run.ID, 12*time.Minute)
	if final.Phase != "Succeeded" {
		t.Fatalf("the seed's run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	// Every job ran on both VMs, and the outputs say so per VM.
	var outputs map[string]json.RawMessage
	if err := json.Unmarshal(final.Outputs, &outputs); err != nil {
		t.Fatal(err)
	}
	var prov struct {
		Hosts []struct {
			SID  string `json:"sid"`
			VMID string `json:"vm_id"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(outputs["provision"], &prov); err != nil || len(prov.Hosts) != 2 {
		t.Fatalf("provision output = %s (%v)", outputs["provision"], err)
	}
	for _, step := range []string{"packages", "docker", "postgres"} {
		var out map[string]map[string]any
		if err := json.Unmarshal(outputs[step], &out); err != nil {
			t.Fatalf("%s output = %s (%v)", step, outputs[step], err)
		}
		for _, h := range prov.Hosts {
			if st, _ := out[h.SID]["status"].(string); st != "ok" {
				t.Errorf("%s on %s: status %q in %s", step, h.SID, st, outputs[step])
			}
		}
	}
	if strings.Contains(string(final.Outputs)+final.Message, pgPassword) {
		t.Error("the run's outputs show the PostgreSQL password")
	}

	// The VMs joined by themselves: active, with a certificate, and the
	// host key pinned is the VM's own (the local VM behind the instance).
	local, err := machines.Driver.List(ctx, driversdk.ListRequest{Provider: machines.Provider})
	if err != nil || len(local) != 2 {
		t.Fatalf("local VMs behind the fake = %+v, %v", local, err)
	}
	for _, h := range prov.Hosts {
		so, err := c.SoulGet(ctx, h.SID)
		if err != nil || so.Status != "active" || so.JoinedAt == nil || so.CertSerial == "" || so.Provider != "nubes" || so.VMID != h.VMID {
			t.Fatalf("soul %s = %+v, %v", h.SID, so, err)
		}
		own := ""
		for _, vm := range local {
			if vm.FQDN == h.SID {
				own, _ = vm.Attributes["ssh_host_key"].(string)
			}
		}
		if own == "" || so.Connection.HostKey != own {
			t.Errorf("soul %s pinned %q; the VM's own key is %q", h.SID, so.Connection.HostKey, own)
		}
	}
	// PostgreSQL serves the seed's database on each VM.
	check := runScenario(t, c, "psql.yaml", `inputs: {hosts: {type: list}}
steps:
  - name: psql
    on: "${ input.hosts }"
    module: core.command.ran
    params: {cmd: "runuser -u postgres -- psql -XAt -c \"SELECT datname FROM pg_database WHERE datname = 'shop'\""}
    changed_when: false
`, map[string]any{"hosts": []string{prov.Hosts[0].SID, prov.Hosts[1].SID}}, 2*time.Minute)
	for _, tg := range check.Steps[0].Targets {
		var out struct{ Stdout string }
		_ = json.Unmarshal(tg.Output, &out)
		if strings.TrimSpace(out.Stdout) != "shop" {
			t.Errorf("database shop on %s: %q", tg.SID, out.Stdout)
		}
	}

	// A VM the keeper's deployment made but never registered (a crash
	// between the create and the registry write) is an orphan, found
	// through the plugin's List and destroyed; another deployment's VM in
	// the same account is neither.
	dc := &deckapi.Client{BaseURL: f.URL, Token: func(context.Context) (string, error) { return next, nil }}
	made, err := dc.Instance(ctx, prov.Hosts[0].VMID)
	if err != nil {
		t.Fatal(err)
	}
	deployment := ""
	for _, kv := range strings.Fields(made.Description) {
		if v, ok := strings.CutPrefix(kv, "keeper="); ok {
			deployment = v
		}
	}
	if deployment == "" {
		t.Fatalf("the instance's description %q names no deployment", made.Description)
	}
	drv := &nubes.Driver{Version: "test"}
	provCfg, _ := json.Marshal(map[string]any{"endpoint": f.URL, "vapp_uid": "vapp-e2e", "poll_interval": "100ms"})
	crashed := func(keeperID, request string) driversdk.VM {
		t.Helper()
		vms, err := drv.Create(ctx, driversdk.CreateRequest{RequestID: request, RunID: "run_" + request, Count: 1,
			Provider: driversdk.Provider{Name: "nubes", FQDNSuffix: "nubes.test", Config: provCfg, Credentials: []byte(next), KeeperID: keeperID},
			Profile:  json.RawMessage(`{"cpus": 1, "memory_gb": 1, "image": "Debian_13-20G"}`)})
		if err != nil || len(vms) != 1 {
			t.Fatalf("create %s's VM: %+v, %v", keeperID, vms, err)
		}
		return vms[0]
	}
	orphan, theirs := crashed(deployment, "req_crashed"), crashed("another-deployment", "req_theirs")
	orphans, err := c.CloudOrphans(ctx, "nubes")
	if err != nil || len(orphans.Items) != 1 || orphans.Items[0].VMID != orphan.ID || orphans.Items[0].RequestID != "req_crashed" {
		t.Fatalf("orphans = %+v, %v; want %s alone", orphans, err, orphan.ID)
	}
	if _, err := c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "nubes", VMIDs: []string{theirs.ID}}); err == nil {
		t.Fatal("destroying another deployment's VM as an orphan was accepted")
	}
	if _, err := c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "nubes", VMIDs: []string{orphan.ID}}); err != nil {
		t.Fatal(err)
	}
	if left := f.Instances(); len(left) != 3 || slices.Contains(left, orphan.ID) || !slices.Contains(left, theirs.ID) {
		t.Fatalf("after the orphan's destroy the fake holds %v (orphan %s, theirs %s)", left, orphan.ID, theirs.ID)
	}
	if err := drv.Destroy(ctx, driversdk.DestroyRequest{VMIDs: []string{theirs.ID},
		Provider: driversdk.Provider{Config: provCfg, Credentials: []byte(next), KeeperID: "another-deployment"}}); err != nil {
		t.Fatal(err)
	}

	// Cloud drift: one VM suspended and the other deleted behind the
	// keeper's back (the driver with destroy: suspend, then delete) are
	// a stopped soul and a missing one.
	behind := func(mode, uid string) {
		t.Helper()
		cfg, _ := json.Marshal(map[string]any{"endpoint": f.URL, "vapp_uid": "vapp-e2e", "poll_interval": "100ms", "destroy": mode})
		if err := drv.Destroy(ctx, driversdk.DestroyRequest{VMIDs: []string{uid},
			Provider: driversdk.Provider{Config: cfg, Credentials: []byte(next), KeeperID: deployment}}); err != nil {
			t.Fatalf("%s %s behind the keeper's back: %v", mode, uid, err)
		}
	}
	behind("suspend", prov.Hosts[0].VMID)
	behind("delete", prov.Hosts[1].VMID)
	report, err := c.CloudDriftOf(ctx, "nubes")
	if err != nil || len(report.Providers) != 1 {
		t.Fatalf("cloud drift = %+v, %v", report, err)
	}
	cd := report.Providers[0]
	if !cd.Listable || len(cd.Stopped) != 1 || cd.Stopped[0].SID != prov.Hosts[0].SID || cd.Stopped[0].State != "suspended" ||
		len(cd.Missing) != 1 || cd.Missing[0].SID != prov.Hosts[1].SID || len(cd.Orphans) != 0 || len(cd.Resized) != 0 {
		t.Fatalf("cloud drift of nubes = %+v", cd)
	}

	// Destroy: no instance in the fake, no VM behind it, no live soul.
	destroy := runScenario(t, c, "destroy-local.yaml", readExample(t, "destroy-local.yaml"),
		map[string]any{"provider": "nubes", "hosts": jsonValue(t, outputs["provision"], "hosts")}, 2*time.Minute)
	var cascade map[string]any
	_ = json.Unmarshal(destroy.Steps[0].Targets[0].Output, &cascade)
	if cascade["souls_destroyed"] != 2.0 {
		t.Fatalf("cascade = %v", cascade)
	}
	if left := f.Instances(); len(left) != 0 {
		t.Fatalf("after destroy the fake holds %v", left)
	}
	if vms, err := machines.Driver.List(ctx, driversdk.ListRequest{Provider: machines.Provider}); err != nil || len(vms) != 0 {
		t.Fatalf("after destroy the local VMs are %+v, %v", vms, err)
	}
	for _, h := range prov.Hosts {
		if so, _ := c.SoulGet(ctx, h.SID); so.Status != "destroyed" {
			t.Fatalf("soul %s = %s after destroy", h.SID, so.Status)
		}
	}

	// The deck-api tokens (both) are nowhere in clear: not in the
	// keeper's log (the plugin's stderr included), its answers, the runs'
	// events, the audit log or the database's files.
	var seen strings.Builder
	seen.WriteString(s.Drain())
	for _, id := range []string{run.ID, destroy.ID} {
		r, _ := c.RunGet(ctx, id)
		b, _ := json.Marshal(r)
		seen.Write(b)
		_ = c.RunEvents(ctx, id, 0, func(e client.RunEvent) error { seen.Write(e.Data); return nil })
	}
	for _, get := range []func() (any, error){
		func() (any, error) { return c.ProviderGet(ctx, "nubes") },
		func() (any, error) { return c.CredentialList(ctx, "default") },
		func() (any, error) {
			return c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
		},
	} {
		v, err := get()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		seen.Write(b)
	}
	files, _ := filepath.Glob(filepath.Join(s.Data, "*"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			seen.Write(b)
		}
	}
	for _, tok := range []string{token, next} {
		if strings.Contains(seen.String(), tok) {
			t.Errorf("the deck-api token %q is in clear in the keeper's logs, answers, events, audit or files", tok)
		}
	}
}
