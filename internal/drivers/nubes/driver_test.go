package nubes_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/nubes"
	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
)

const token = "nubes-driver-canary-token"

const profile = `{"cpus": 2, "memory_gb": 4, "disk_gb": 10, "image": "Debian_13-20G", "user": "debian", "allowed_ports": [22, 443]}`

func setup(t *testing.T, config map[string]any) (*nubesfake.Fake, *nubes.Driver, driversdk.Provider) {
	t.Helper()
	f := nubesfake.New(token)
	t.Cleanup(f.Close)
	cfg := map[string]any{"endpoint": f.URL, "vapp_uid": "vapp-1", "poll_interval": "1ms", "retry_base": "1ms"}
	for k, v := range config {
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	return f, &nubes.Driver{Version: "test"}, driversdk.Provider{Name: "nubes", FQDNSuffix: "nubes.test", Config: raw, Credentials: []byte(token), KeeperID: "keeper-a"}
}

func request(p driversdk.Provider, id string, n int) driversdk.CreateRequest {
	req := driversdk.CreateRequest{Provider: p, RequestID: id, RunID: "run-" + id, Profile: json.RawMessage(profile), Count: n,
		AuthorizedKeys: []string{"ssh-ed25519 AAAAkeeper keeper\n"}}
	for i := 0; i < n; i++ {
		req.Names = append(req.Names, id+"-"+string(rune('a'+i))+".nubes.test")
		req.Userdata = append(req.Userdata, "#cloud-config\nhostname: "+req.Names[i]+"\n")
	}
	return req
}

func codeOf(err error) string {
	var de *driversdk.Error
	if errors.As(err, &de) {
		return de.Code
	}
	return ""
}

func api(f *nubesfake.Fake) *deckapi.Client {
	return &deckapi.Client{BaseURL: f.URL, Token: func(context.Context) (string, error) { return token, nil }}
}

// TestCreateCarriesTheProfile: each VM's create operation gets the
// profile's values, its name, its userdata and the keeper's key; the VMs
// come back running with their address, the keeper's tags and the
// profile's user as the login the keeper uses (ssh_user), and a
// repeated create of the same request adopts them. Without the keeper's
// names, a VM's name is made from the request.
func TestCreateCarriesTheProfile(t *testing.T) {
	f, d, p := setup(t, nil)
	ctx := context.Background()
	req := request(p, "req-1", 2)
	vms, err := d.Create(ctx, req)
	if err != nil || len(vms) != 2 {
		t.Fatalf("create = %+v, %v", vms, err)
	}
	for i, vm := range vms {
		if vm.FQDN != req.Names[i] || vm.PrimaryIP == "" || vm.Tags[driversdk.TagRequestID] != "req-1" || vm.Tags[driversdk.TagKeeper] != "keeper-a" || vm.Tags[driversdk.TagRunID] != "run-req-1" ||
			vm.Attributes["ssh_user"] != "debian" {
			t.Fatalf("vm %d = %+v", i, vm)
		}
		in, err := api(f).Instance(ctx, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"vappUid": "vapp-1", "vmName": strings.SplitN(req.Names[i], ".", 2)[0], "vmCpu": "2", "vmRam": "4", "vmDisk": "10",
			"imageVm": "Debian_13-20G", "cloudInit": req.Userdata[i], "userLogin": "debian", "userPublicKey": "ssh-ed25519 AAAAkeeper keeper",
			"accessPortList": "[22,443]", "accessIpList": "[]", "ipSpaceName": "no-needed"}
		for k, v := range want {
			if got := in.State.Params[k]; got != v {
				t.Errorf("vm %d: %s = %q, want %q", i, k, got, v)
			}
		}
	}
	again, err := d.Create(ctx, req)
	if err != nil || again[0].ID != vms[0].ID || again[1].ID != vms[1].ID || len(f.Instances()) != 2 {
		t.Fatalf("a repeated create: %+v, %v (the fake holds %v)", again, err, f.Instances())
	}

	// Without the keeper's names (no self_onboard) a VM is named from the
	// request, a DNS label, with the provider's FQDN suffix.
	unnamed := request(p, "req_2", 1)
	unnamed.Names, unnamed.Userdata = nil, nil
	vms, err = d.Create(ctx, unnamed)
	if err != nil || len(vms) != 1 || !regexp.MustCompile(`^soulstack-[0-9a-f]{12}-0\.nubes\.test$`).MatchString(vms[0].FQDN) {
		t.Fatalf("an unnamed create = %+v, %v", vms, err)
	}
	if in, err := api(f).Instance(ctx, vms[0].ID); err != nil || in.State.Params["vmName"] != strings.SplitN(vms[0].FQDN, ".", 2)[0] {
		t.Fatalf("the unnamed VM's vmName = %v, %v", in.State.Params["vmName"], err)
	}
}

// TestCreateFailures: a failing stage, a VM that never runs, an expired
// token and a missing vApp each end with their own code and leave no
// instance behind; the token is in no error.
func TestCreateFailures(t *testing.T) {
	f, d, p := setup(t, nil)
	ctx := context.Background()

	f.FailStage("deploy")
	_, err := d.Create(ctx, request(p, "req-stage", 2))
	if codeOf(err) != nubes.CodeOperationFailed || !strings.Contains(err.Error(), "deploy failed") || len(f.Instances()) != 0 {
		t.Fatalf("a failing stage: %v; the fake holds %v", err, f.Instances())
	}

	f.NeverRunning()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = d.Create(short, request(p, "req-stuck", 1))
	cancel()
	if codeOf(err) != nubes.CodeNotRunning || len(f.Instances()) != 0 {
		t.Fatalf("a VM that never runs: %v; the fake holds %v", err, f.Instances())
	}

	raw, _ := json.Marshal(map[string]any{"endpoint": f.URL, "poll_interval": "1ms"})
	if err := d.ValidateProfile(ctx, driversdk.Provider{Config: raw}, json.RawMessage(profile)); codeOf(err) != driversdk.CodeProfileInvalid || !strings.Contains(err.Error(), "profile.vapp_uid") {
		t.Fatalf("no vApp anywhere: %v", err)
	}

	f.Expire("a-new-token")
	_, err = d.Create(ctx, request(p, "req-expired", 1))
	if codeOf(err) != nubes.CodeAuthFailed || strings.Contains(err.Error(), token) || len(f.Instances()) != 0 {
		t.Fatalf("an expired token: %v", err)
	}
}

// TestDestroyResizeAndOwnership: another deployment's VM is neither
// destroyed nor resized (before anything changes); a resize to the same
// size is unchanged, another size a modify with downtime; destroy deletes
// (the "service deleted" ending is success) and again is a no-op;
// suspend quarantines; an id that is not a uid is vm.not_found.
func TestDestroyResizeAndOwnership(t *testing.T) {
	f, d, p := setup(t, nil)
	ctx := context.Background()
	mine, err := d.Create(ctx, request(p, "req-mine", 1))
	if err != nil {
		t.Fatal(err)
	}
	other := p
	other.KeeperID = "keeper-b"
	theirs, err := d.Create(ctx, request(other, "req-theirs", 1))
	if err != nil {
		t.Fatal(err)
	}
	both := []string{mine[0].ID, theirs[0].ID}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: p, VMIDs: both}); codeOf(err) != driversdk.CodeNotOwned || len(f.Instances()) != 2 {
		t.Fatalf("destroy of another deployment's VM: %v; the fake holds %v", err, f.Instances())
	}
	if _, err := d.Resize(ctx, driversdk.ResizeRequest{Provider: p, VMIDs: both, Spec: json.RawMessage(`{"cpus": 4}`)}); codeOf(err) != driversdk.CodeNotOwned {
		t.Fatalf("resize of another deployment's VM: %v", err)
	}
	res, err := d.Resize(ctx, driversdk.ResizeRequest{Provider: p, VMIDs: []string{mine[0].ID}, Spec: json.RawMessage(`{"cpus": 2, "memory_gb": 4}`)})
	if err != nil || len(res) != 1 || !res[0].Unchanged {
		t.Fatalf("the same size: %+v, %v", res, err)
	}
	res, err = d.Resize(ctx, driversdk.ResizeRequest{Provider: p, VMIDs: []string{mine[0].ID}, Spec: json.RawMessage(`{"cpus": 4, "memory_gb": 8}`)})
	if err != nil || len(res) != 1 || res[0].Unchanged || !res[0].CausedDowntime {
		t.Fatalf("a new size: %+v, %v", res, err)
	}
	if in, _ := api(f).Instance(ctx, mine[0].ID); in.State.Params["vmCpu"] != "4" || in.State.Params["vmRam"] != "8" {
		t.Fatalf("after the resize: %v", in.State.Params)
	}
	for i := 0; i < 2; i++ {
		if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: p, VMIDs: []string{mine[0].ID}}); err != nil {
			t.Fatalf("destroy %d: %v", i+1, err)
		}
	}
	if got := f.Instances(); len(got) != 1 || got[0] != theirs[0].ID {
		t.Fatalf("after destroy the fake holds %v", got)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: p, VMIDs: []string{"web-1"}}); codeOf(err) != driversdk.CodeVMNotFound {
		t.Fatalf("an id that is not a uid: %v", err)
	}

	_, ds, ps := setup(t, map[string]any{"destroy": "suspend"})
	vms, err := ds.Create(ctx, request(ps, "req-q", 1))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := ds.Destroy(ctx, driversdk.DestroyRequest{Provider: ps, VMIDs: []string{vms[0].ID}}); err != nil {
			t.Fatalf("suspend %d: %v", i+1, err)
		}
	}
	listed, err := ds.List(ctx, driversdk.ListRequest{Provider: ps, Tags: map[string]string{driversdk.TagRequestID: "req-q"}})
	if err != nil || len(listed) != 1 || listed[0].Attributes["status"] != "suspended" || listed[0].Attributes["state"] != "suspended" {
		t.Fatalf("a suspended VM is listed: %+v, %v", listed, err)
	}
}
