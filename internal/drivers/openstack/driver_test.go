package openstack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/openstack/openstackfake"
	_ "github.com/soulstack/soulstack/internal/modules/standard"
	"github.com/soulstack/soulstack/internal/scenario"
)

// TestAddresses calls the driver in process (the wire carries public and
// private addresses only once the protocol revision lands): a server
// with a floating IP reports it as PublicIP and PrimaryIP, its fixed IP
// as PrivateIP, and both in Addresses with their networks; without one,
// the fixed IP is the private and primary address.
func TestAddresses(t *testing.T) {
	t.Parallel()
	f := openstackfake.Start(openstackfake.Options{
		Users:   []openstackfake.User{{Name: "u", Password: "p", Project: "x"}},
		Flavors: []openstackfake.Flavor{{ID: "1", Name: "m1.small"}}, Images: []string{"img"},
		Networks: map[string]string{"net": "private", "ext": "public"},
	})
	t.Cleanup(f.Close)
	prov := driversdk.Provider{Name: "os", KeeperID: "kp-1", Config: json.RawMessage(`{"endpoint": "` + f.URL + `"}`),
		Credentials: []byte(`{"username": "u", "password": "p", "project_name": "x", "domain_name": "Default"}`)}
	d := New()
	ctx := context.Background()
	for _, tc := range []struct {
		name, fip   string
		wantPublic  bool
		wantAddrLen int
	}{
		{"floating", "ext", true, 2},
		{"fixed only", "", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prof := `{"image": "img", "flavor": "m1.small", "network": "net", "floating_network": "` + tc.fip + `"}`
			vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-" + tc.name, RunID: "run", Profile: json.RawMessage(prof), Count: 1})
			if err != nil || len(vms) != 1 {
				t.Fatalf("Create: %v, %v", vms, err)
			}
			vm := vms[0]
			if !strings.HasPrefix(vm.PrivateIP, "10.0.") || len(vm.Addresses) != tc.wantAddrLen {
				t.Fatalf("vm %+v: want a private 10.0.x address and %d addresses", vm, tc.wantAddrLen)
			}
			if tc.wantPublic {
				if !strings.HasPrefix(vm.PublicIP, "203.0.113.") || vm.PrimaryIP != vm.PublicIP {
					t.Fatalf("vm %+v: want the floating IP public and primary", vm)
				}
				if a := vm.Addresses[1]; a.Kind != driversdk.AddressPublic || a.IP != vm.PublicIP {
					t.Fatalf("addresses %+v", vm.Addresses)
				}
			} else if vm.PublicIP != "" || vm.PrimaryIP != vm.PrivateIP {
				t.Fatalf("vm %+v: want no public IP and the private one primary", vm)
			}
			if a := vm.Addresses[0]; a.Kind != driversdk.AddressPrivate || a.Network != "private" || a.IP != vm.PrivateIP {
				t.Fatalf("addresses %+v", vm.Addresses)
			}
			if vm.Tags[driversdk.TagKeeper] != "kp-1" {
				t.Fatalf("tags %v lack the keeper id", vm.Tags)
			}
			other := prov
			other.KeeperID = "kp-2"
			err = d.Destroy(ctx, driversdk.DestroyRequest{Provider: other, VMIDs: []string{vm.ID}})
			if driversdk.CodeOf(err) != driversdk.CodeNotOwned {
				t.Fatalf("Destroy by another keeper deployment: %v, want %s", err, driversdk.CodeNotOwned)
			}
			if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vm.ID}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestClassify: fixed addresses outside the private ranges are public (a
// provider network handing out routable IPs).
func TestClassify(t *testing.T) {
	t.Parallel()
	vm := vmOf(&servers.Server{Addresses: map[string]any{"provider": []any{
		map[string]any{"addr": "198.51.100.7", "version": 4.0, "OS-EXT-IPS:type": "fixed"},
		map[string]any{"addr": "2001:db8::7", "version": 6.0, "OS-EXT-IPS:type": "fixed"},
		map[string]any{"addr": "100.64.3.4", "version": 4.0, "OS-EXT-IPS:type": "fixed"},
	}}})
	if vm.PublicIP != "198.51.100.7" || vm.PrivateIP != "100.64.3.4" || vm.PrimaryIP != "198.51.100.7" || len(vm.Addresses) != 3 || vm.Addresses[2].IP != "2001:db8::7" {
		t.Fatalf("vm = %+v", vm)
	}
}

// TestUserdata: the keeper's keys and the step's userdata go to
// cloud-init together, as a multipart archive whose parts are merged.
func TestUserdata(t *testing.T) {
	t.Parallel()
	ud, err := buildUserdata("#cloud-config\npackages: [nginx]\n", []string{"ssh-ed25519 AAAA keeper\n"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(ud)
	for _, want := range []string{"Content-Type: multipart/mixed", "Content-Type: text/cloud-config", `- "ssh-ed25519 AAAA keeper"`, "packages: [nginx]", "Merge-Type: list(append)"} {
		if !strings.Contains(s, want) {
			t.Errorf("userdata lacks %q:\n%s", want, s)
		}
	}
	only, _ := buildUserdata("", []string{"ssh-ed25519 AAAA keeper"})
	if !strings.HasPrefix(string(only), "#cloud-config\nssh_authorized_keys:\n") {
		t.Errorf("keys alone: %q", only)
	}
	if none, _ := buildUserdata("", nil); none != nil {
		t.Errorf("no userdata: %q", none)
	}
	if _, err := buildUserdata(strings.Repeat("x", 60000), nil); driversdk.CodeOf(err) != driversdk.CodeProfileInvalid {
		t.Errorf("oversized userdata: %v", err)
	}
}

// TestExample: examples/openstack.yaml validates with every module
// registered.
func TestExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "openstack.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.Check("openstack.yaml", src); err != nil {
		t.Fatalf("examples/openstack.yaml does not validate:\n%v", err)
	}
}

// TestRetryPolicy: what the RetryFunc retries and what it hands back at
// once.
func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	resp := func(status int, retryAfter, body string) error {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return gophercloud.ErrUnexpectedResponseCode{Actual: status, ResponseHeader: h, Body: []byte(body)}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		method string
		err    error
		fails  uint
		retry  bool
	}{
		{"429 POST", "POST", resp(429, "0", `{"overLimit": {"message": "rate-limited"}}`), 1, true},
		{"413 overLimit with Retry-After", "POST", resp(413, "0", `{"overLimit": {"message": "This request was rate-limited."}}`), 1, true},
		{"413 quota with Retry-After", "POST", resp(413, "0", `{"overLimit": {"message": "Quota exceeded for instances"}}`), 1, false},
		{"403 quota", "POST", resp(403, "", `{"forbidden": {"message": "Quota exceeded for instances"}}`), 1, false},
		{"503 GET", "GET", resp(503, "", "<html>"), 1, true},
		{"503 DELETE", "DELETE", resp(503, "", "<html>"), 1, true},
		{"503 POST", "POST", resp(503, "", "<html>"), 1, false},
		{"404 GET", "GET", resp(404, "", `{"itemNotFound": {}}`), 1, false},
		{"429 past the bound", "GET", resp(429, "0", ""), maxRetries + 1, false},
		{"connection reset GET", "GET", errors.New("read: connection reset by peer"), 1, true},
		{"connection reset POST", "POST", errors.New("read: connection reset by peer"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := retry(ctx, tc.method, "http://x", nil, tc.err, tc.fails) == nil
			if got != tc.retry {
				t.Fatalf("retry = %v, want %v", got, tc.retry)
			}
		})
	}
}
