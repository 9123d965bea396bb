package keeper_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/drivers/openstack/openstackfake"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestOpenStackEndToEnd: a keeper with the real soul-cloud-openstack
// plugin, pointed at the fake OpenStack, runs examples/openstack.yaml's
// provision step (the fake's servers answer no SSH, so its hello step is
// left out): the servers become souls whose address is their floating
// IP, the servers carry the keeper's tags, and the destroy cascade
// deletes servers and floating IPs and marks the souls destroyed. The
// credentials (from a file: ref) never reach the keeper's log.
func TestOpenStackEndToEnd(t *testing.T) {
	t.Parallel()
	f, k, c := openstackKeeper(t)
	ctx := context.Background()
	const (
		image, network, external = osImage, osNetwork, osExternal
		password                 = osPassword
	)

	scenario, _, ok := strings.Cut(readExample(t, "openstack.yaml"), "  - name: hello\n")
	if !ok {
		t.Fatal("examples/openstack.yaml has no hello step")
	}
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "openstack.yaml", Input: map[string]any{
		"count": 2, "image": image, "network": network, "floating_network": external}})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("provision run = %s %+v\n%s\n%s", final.Phase, final.Error, describeSteps(final.Steps), k.Drain())
	}
	var outputs map[string]json.RawMessage
	_ = json.Unmarshal(final.Outputs, &outputs)
	var prov struct {
		Hosts []struct{ SID, VMID, PrimaryIP string } `json:"hosts"`
	}
	if err := json.Unmarshal(fixKeys(outputs["provision"]), &prov); err != nil || len(prov.Hosts) != 2 {
		t.Fatalf("provision output = %s (%v)", outputs["provision"], err)
	}
	servers := map[string]openstackfake.Server{}
	for _, s := range f.Servers() {
		servers[s.ID] = s
	}
	if len(servers) != 2 || f.FloatingIPs() != 2 {
		t.Fatalf("the fake has %d servers and %d floating IPs, want 2 and 2", len(servers), f.FloatingIPs())
	}
	for _, h := range prov.Hosts {
		s, ok := servers[h.VMID]
		if !ok || s.Name != h.SID || s.Metadata["soulstack:run_id"] != run.ID || s.Metadata["soulstack:request_id"] == "" || s.Metadata["managed-by"] != "soulstack" {
			t.Fatalf("host %+v: server %+v", h, s)
		}
		so, err := c.SoulGet(ctx, h.SID)
		if err != nil || so.Provider != "openstack" || so.VMID != h.VMID || so.Address != s.FloatingIP || so.Connection.User != "debian" {
			t.Fatalf("soul %s = %+v, %v; want address %s (the floating IP) and user debian", h.SID, so, err, s.FloatingIP)
		}
	}

	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "destroy-local.yaml"), File: "destroy-local.yaml",
		Input: map[string]any{"provider": "openstack", "hosts": jsonValue(t, outputs["provision"], "hosts")}})
	if err != nil {
		t.Fatal(err)
	}
	final = waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" {
		t.Fatalf("destroy run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
	}
	if n, fips := len(f.Servers()), f.FloatingIPs(); n != 0 || fips != 0 {
		t.Fatalf("after the destroy the fake has %d servers and %d floating IPs", n, fips)
	}
	for _, h := range prov.Hosts {
		if so, _ := c.SoulGet(ctx, h.SID); so.Status != "destroyed" {
			t.Fatalf("soul %s = %s after destroy", h.SID, so.Status)
		}
	}
	if logs := k.Drain(); strings.Contains(logs, password) {
		t.Fatalf("the keeper's log holds the provider's password:\n%s", logs)
	}
}

const (
	osImage, osNetwork, osExternal = "img-debian-13", "net-private", "net-public"
	osPassword                     = "e2e-canary-password-4d1f"
)

// openstackKeeper starts the fake OpenStack and a keeper with the real
// soul-cloud-openstack in its plugin dir and a provider "openstack"
// whose file: credentials point at the fake.
func openstackKeeper(t *testing.T) (*openstackfake.Fake, *proc, *client.Client) {
	t.Helper()
	f := openstackfake.Start(openstackfake.Options{
		Users:   []openstackfake.User{{Name: "soulstack", Password: osPassword, Project: "web"}},
		Flavors: []openstackfake.Flavor{{ID: "f-1", Name: "m1.small"}}, Images: []string{osImage},
		Networks: map[string]string{osNetwork: "private", osExternal: "public"}, HideNew: 1,
	})
	t.Cleanup(f.Close)
	creds := filepath.Join(t.TempDir(), "openstack.json")
	if err := os.WriteFile(creds, []byte(`{"auth": {"auth_url": "`+f.URL+`", "username": "soulstack", "password": "`+osPassword+`",
		"project_name": "web", "user_domain_name": "Default", "project_domain_name": "Default"}, "region_name": "RegionOne"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := spawn(t, keepertest.Options{Plugins: []string{"cmd/soul-cloud-openstack"}})
	k, c := s.Proc, s.Admin
	if _, err := c.ProviderCreate(context.Background(), client.ProviderCreate{Name: "openstack", Driver: "openstack", Region: "RegionOne", FQDNSuffix: "os.test",
		CredentialsRef: "file:" + creds}); err != nil {
		t.Fatal(err)
	}
	return f, k, c
}

// childPID finds the process named comm whose parent is ppid.
func childPID(t *testing.T, ppid int, comm string) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …
		open, closing := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(string(b)[closing+1:])
		if string(b)[open+1:closing] == comm && len(fields) > 1 && fields[1] == strconv.Itoa(ppid) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)[:open]))
			return pid
		}
	}
	t.Fatalf("no %s process under the keeper (pid %d)", comm, ppid)
	return 0
}

// TestOpenStackCrashLeavesOrphan: the plugin dies while the cloud holds
// the answer to a create it accepted. The step fails with
// driver.crashed, the server the cloud made is not lost: soulctl cloud
// orphans (the API under it) lists it by its tags, and destroying the
// orphan deletes it.
func TestOpenStackCrashLeavesOrphan(t *testing.T) {
	t.Parallel()
	f, k, c := openstackKeeper(t)
	ctx := context.Background()
	scenario, _, _ := strings.Cut(readExample(t, "openstack.yaml"), "  - name: hello\n")
	f.HoldCreates()
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "openstack.yaml", Input: map[string]any{
		"count": 1, "image": osImage, "network": osNetwork}})
	if err != nil {
		t.Fatal(err)
	}
	held := <-f.Accepted()
	pid := childPID(t, k.Cmd.Process.Pid, "soul-cloud-open") // comm is cut at 15 bytes
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.Release()
	final := waitRun(t, c, run.ID)
	if final.Phase == "Succeeded" || !strings.Contains(describeSteps(final.Steps), "driver.crashed") {
		t.Fatalf("run after the plugin died = %s\n%s", final.Phase, describeSteps(final.Steps))
	}
	orphans, err := c.CloudOrphans(ctx, "openstack")
	if err != nil || len(orphans.Items) != 1 || orphans.Items[0].VMID != held || orphans.Items[0].RunID != run.ID {
		t.Fatalf("orphans = %+v, %v; want the held server %s of run %s", orphans, err, held, run.ID)
	}
	if _, err := c.CloudOrphansDestroy(ctx, client.OrphansDestroy{Provider: "openstack", VMIDs: []string{held}}); err != nil {
		t.Fatal(err)
	}
	if left := f.Servers(); len(left) != 0 {
		t.Fatalf("servers left after destroying the orphan: %+v", left)
	}
}
