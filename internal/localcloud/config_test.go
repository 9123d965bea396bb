package localcloud

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		in        string
		want      Spec
		wantField string
	}{
		{"empty", ``, Spec{CPUs: 1, MemoryMB: 1024, SSHUser: "root"}, ""},
		{"null", `null`, Spec{CPUs: 1, MemoryMB: 1024, SSHUser: "root"}, ""},
		{"design example", `{"cpus": 1, "memory_mb": 512, "ssh_user": "root"}`, Spec{CPUs: 1, MemoryMB: 512, SSHUser: "root"}, ""},
		{"fractions of a CPU", `{"cpus": 0.25}`, Spec{CPUs: 0.25, MemoryMB: 1024, SSHUser: "root"}, ""},
		{"base root", `{"base_root": "/srv/bookworm/", "ssh_user": "admin"}`, Spec{CPUs: 1, MemoryMB: 1024, SSHUser: "admin", BaseRoot: "/srv/bookworm"}, ""},
		{"base root / is the live root", `{"base_root": "/"}`, Spec{CPUs: 1, MemoryMB: 1024, SSHUser: "root"}, ""},
		{"unknown key", `{"cpus": 1, "disk_gb": 10}`, Spec{}, "disk_gb"},
		{"not an object", `[1]`, Spec{}, ""},
		{"cpus a string", `{"cpus": "2"}`, Spec{}, "cpus"},
		{"cpus zero", `{"cpus": 0}`, Spec{}, "cpus"},
		{"cpus negative", `{"cpus": -1}`, Spec{}, "cpus"},
		{"memory fractional", `{"memory_mb": 512.5}`, Spec{}, "memory_mb"},
		{"memory too small", `{"memory_mb": 16}`, Spec{}, "memory_mb"},
		{"memory a string", `{"memory_mb": "1G"}`, Spec{}, "memory_mb"},
		{"bad user", `{"ssh_user": "Root; rm"}`, Spec{}, "ssh_user"},
		{"user not a string", `{"ssh_user": 0}`, Spec{}, "ssh_user"},
		{"relative base root", `{"base_root": "srv/x"}`, Spec{}, "base_root"},
		{"base", `{"base": "debian-bookworm"}`, Spec{CPUs: 1, MemoryMB: 1024, SSHUser: "root", Base: "debian-bookworm"}, ""},
		{"unknown base", `{"base": "ubuntu"}`, Spec{}, "base"},
		{"base and base_root", `{"base": "debian-bookworm", "base_root": "/srv/x"}`, Spec{}, "base"},
		{"base root with a comma", `{"base_root": "/srv/a,b"}`, Spec{}, "base_root"},
		{"nesting", `{"nesting": "docker"}`, Spec{CPUs: 1, MemoryMB: 1024, SSHUser: "root", Nesting: "docker"}, ""},
		{"unknown nesting", `{"nesting": "kvm"}`, Spec{}, "nesting"},
		{"nesting not a string", `{"nesting": true}`, Spec{}, "nesting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSpec(json.RawMessage(tc.in))
			if tc.want == (Spec{}) {
				e := wantProfileInvalid(t, err)
				if e.Field != tc.wantField {
					t.Errorf("Field = %q, want %q (%v)", e.Field, tc.wantField, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ParseSpec = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func wantProfileInvalid(t *testing.T, err error) *driversdk.Error {
	t.Helper()
	var e *driversdk.Error
	if !errors.As(err, &e) || e.Code != driversdk.CodeProfileInvalid {
		t.Fatalf("got %v, want code %s", err, driversdk.CodeProfileInvalid)
	}
	return e
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		in        string
		want      Config
		wantField string
	}{
		{"empty", `{}`, Config{StateDir: DefaultStateDir}, ""},
		{"both", `{"subnet": "10.99.0.0/16", "state_dir": "/srv/local/"}`,
			Config{StateDir: "/srv/local", Subnet: netip.MustParsePrefix("10.99.0.0/16")}, ""},
		{"host ports", `{"host_ports": [8420, 9000, 8420]}`, Config{StateDir: DefaultStateDir, HostPorts: []uint16{8420, 9000}}, ""},
		{"base roots", `{"base_roots": ["/srv/bookworm/"]}`, Config{StateDir: DefaultStateDir, BaseRoots: []string{"/srv/bookworm"}}, ""},
		{"base root /", `{"base_roots": ["/"]}`, Config{}, "config.base_roots"},
		{"relative base root", `{"base_roots": ["srv"]}`, Config{}, "config.base_roots"},
		{"bases", `{"bases_dir": "/var/cache/bases/", "debian_mirror": "http://mirror.example/debian"}`,
			Config{StateDir: DefaultStateDir, BasesDir: "/var/cache/bases", DebianMirror: "http://mirror.example/debian"}, ""},
		{"relative bases dir", `{"bases_dir": "bases"}`, Config{}, "config.bases_dir"},
		{"allow nesting", `{"allow_nesting": true}`, Config{StateDir: DefaultStateDir, AllowNesting: true}, ""},
		{"allow nesting not a bool", `{"allow_nesting": "yes"}`, Config{}, "config.allow_nesting"},
		{"mirror not a URL", `{"debian_mirror": "deb.debian.org"}`, Config{}, "config.debian_mirror"},
		{"no host port", `{"host_ports": []}`, Config{StateDir: DefaultStateDir, HostPorts: []uint16{}}, ""},
		{"host port out of range", `{"host_ports": [70000]}`, Config{}, "config.host_ports"},
		{"host port not a number", `{"host_ports": ["ssh"]}`, Config{}, "config.host_ports"},
		{"host ports not a list", `{"host_ports": 8420}`, Config{}, "config.host_ports"},
		{"unknown key", `{"subnet": "10.99.0.0/24", "region": "x"}`, Config{}, "config.region"},
		{"host bits", `{"subnet": "10.99.0.1/24"}`, Config{}, "config.subnet"},
		{"ipv6", `{"subnet": "fd00::/64"}`, Config{}, "config.subnet"},
		{"too small", `{"subnet": "10.99.0.0/30"}`, Config{}, "config.subnet"},
		{"not a cidr", `{"subnet": "10.99.0.0"}`, Config{}, "config.subnet"},
		{"relative state dir", `{"state_dir": "state"}`, Config{}, "config.state_dir"},
		{"state dir with a colon", `{"state_dir": "/a:b"}`, Config{}, "config.state_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig(json.RawMessage(tc.in))
			if tc.wantField != "" {
				if e := wantProfileInvalid(t, err); e.Field != tc.wantField {
					t.Errorf("Field = %q, want %q (%v)", e.Field, tc.wantField, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.DebianMirror == "" {
				tc.want.DebianMirror = DefaultDebianMirror
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConflictsAndPickSubnet(t *testing.T) {
	t.Parallel()
	used := []usedNet{
		{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Dev: "lo", What: "route local 127.0.0.0/8 dev lo"},
		// Another tool's /16 over the default /24 (a real incident).
		{Prefix: netip.MustParsePrefix("10.213.0.0/16"), Dev: "ab-br0", What: "address 10.213.0.1/16 on ab-br0"},
		{Prefix: netip.MustParsePrefix("10.214.0.0/24"), Dev: "soulbr1234", What: "route 10.214.0.0/24 dev soulbr1234"},
	}
	if c := conflicts(netip.MustParsePrefix("10.213.5.0/24"), used, ""); len(c) != 1 || !strings.Contains(c[0], "ab-br0") {
		t.Errorf("conflicts = %v", c)
	}
	if c := conflicts(netip.MustParsePrefix("10.214.0.0/24"), used, "soulbr1234"); len(c) != 0 {
		t.Errorf("the driver's own bridge conflicts: %v", c)
	}
	got, err := pickSubnet(used, "")
	if err != nil || got != netip.MustParsePrefix("10.214.1.0/24") {
		t.Errorf("pickSubnet = %v, %v; want 10.214.1.0/24", got, err)
	}
	if got, _ := pickSubnet(nil, ""); got.String() != DefaultSubnet {
		t.Errorf("pickSubnet on an empty host = %v, want %s", got, DefaultSubnet)
	}
	all := []usedNet{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), What: "route 10.0.0.0/8"}}
	if _, err := pickSubnet(all, ""); !errors.Is(err, errNoFreeSubnet) {
		t.Errorf("pickSubnet with 10/8 taken: %v", err)
	}
}

func TestVMAddrs(t *testing.T) {
	t.Parallel()
	var got []string
	for a := range vmAddrs(netip.MustParsePrefix("10.1.2.0/29")) {
		got = append(got, a.String())
	}
	want := []string{"10.1.2.2", "10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6"}
	if !slices.Equal(got, want) {
		t.Errorf("vmAddrs(/29) = %v, want %v", got, want)
	}
	if m := macFor(netip.MustParseAddr("10.213.0.2")); m != "02:5e:0a:d5:00:02" {
		t.Errorf("macFor = %s", m)
	}
}

func TestCreateRequestChecks(t *testing.T) {
	t.Parallel()
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJBK0oOAtPb2vhegM36tBZjUXxppp8TsBvgkKOqbo48I test"
	ok := driversdk.CreateRequest{Count: 2, AuthorizedKeys: []string{key}}
	for _, tc := range []struct {
		name  string
		edit  func(r *driversdk.CreateRequest)
		code  string
		field string
	}{
		{"count 0", func(r *driversdk.CreateRequest) { r.Count = 0 }, codeRequestInvalid, "count"},
		{"names short", func(r *driversdk.CreateRequest) { r.Names = []string{"a.local.test"} }, codeRequestInvalid, "names"},
		{"bad name", func(r *driversdk.CreateRequest) { r.Names = []string{"a.local.test", "b_c.local.test"} }, codeRequestInvalid, "names[1]"},
		{"name too long for a hostname", func(r *driversdk.CreateRequest) {
			r.Names = []string{"a.local.test", strings.Repeat("a", 60) + ".local.test"}
		}, codeRequestInvalid, "names[1]"},
		{"duplicate names", func(r *driversdk.CreateRequest) { r.Names = []string{"a.local.test", "A.local.test."} }, codeRequestInvalid, "names[1]"},
		{"userdata short", func(r *driversdk.CreateRequest) { r.Userdata = []string{""} }, codeRequestInvalid, "userdata"},
		{"bad userdata", func(r *driversdk.CreateRequest) { r.Userdata = []string{"", "#cloud-config\npackages: [nginx]\n"} }, codeUserdataInvalid, "userdata[1]"},
		{"bad key", func(r *driversdk.CreateRequest) { r.AuthorizedKeys = []string{"ssh-ed25519 nope"} }, codeRequestInvalid, "authorized_keys[0]"},
		{"unknown profile key", func(r *driversdk.CreateRequest) { r.Profile = json.RawMessage(`{"image": "x"}`) }, codeProfileInvalid, "image"},
		{"bad suffix", func(r *driversdk.CreateRequest) { r.Provider.FQDNSuffix = "bad_suffix" }, codeProfileInvalid, "fqdn_suffix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			_, err := New(Options{}).plan(r)
			var e *driversdk.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field {
				t.Fatalf("plan = %v, want code %s field %s", err, tc.code, tc.field)
			}
		})
	}
	p, err := New(Options{}).plan(driversdk.CreateRequest{Count: 2, Names: []string{"A.Local.Test.", "b.local.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.names, []string{"a.local.test", "b.local.test"}) || p.suffix != DefaultFQDNSuffix {
		t.Errorf("plan names %v suffix %q", p.names, p.suffix)
	}
}

func TestValidateProfileNotRoot(t *testing.T) {
	t.Parallel()
	d := New(Options{})
	d.euid = func() int { return 1000 }
	err := d.ValidateProfile(context.Background(), driversdk.Provider{}, json.RawMessage(`{"cpus": 1}`))
	var e *driversdk.Error
	if !errors.As(err, &e) || e.Code != driversdk.CodeDriverUnavailable {
		t.Fatalf("ValidateProfile as a non-root user: %v, want code %s", err, driversdk.CodeDriverUnavailable)
	}
	t.Log(err)
	// Bad keys are still reported first: they are the caller's to fix
	// wherever the driver runs.
	err = d.ValidateProfile(context.Background(), driversdk.Provider{}, json.RawMessage(`{"gpus": 1}`))
	if e := wantProfileInvalid(t, err); e.Field != "gpus" {
		t.Errorf("Field = %q", e.Field)
	}
	// So is nesting the provider does not allow.
	err = d.ValidateProfile(context.Background(), driversdk.Provider{}, json.RawMessage(`{"nesting": "docker"}`))
	if e := wantProfileInvalid(t, err); e.Field != "nesting" || !strings.Contains(e.Message, "allow_nesting") {
		t.Errorf("nesting without allow_nesting: %v", err)
	}
	// Create fails the same way before making anything.
	state := filepath.Join(t.TempDir(), "state")
	_, err = d.Create(context.Background(), driversdk.CreateRequest{Count: 1, Provider: driversdk.Provider{
		Config: json.RawMessage(`{"state_dir": "` + state + `"}`)}})
	if !errors.As(err, &e) || e.Code != driversdk.CodeDriverUnavailable {
		t.Fatalf("Create as a non-root user: %v", err)
	}
	if _, err := os.Stat(state); err == nil {
		t.Error("a refused Create made the state dir")
	}
}

func TestParsePorts(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]uint16{
		"8420":          {8420},
		"8420, 9000":    {8420, 9000},
		"":              nil,
		"x,0,70000,-1":  nil,
		"22,not-a-port": {22},
	} {
		if got := ParsePorts(in); !slices.Equal(got, want) {
			t.Errorf("ParsePorts(%q) = %v, want %v", in, got, want)
		}
	}
}
