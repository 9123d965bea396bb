package qemu

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/goccy/go-yaml"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/qemu/qemutest"
	_ "github.com/soulstack/soulstack/internal/modules/standard"
	"github.com/soulstack/soulstack/internal/scenario"
)

// fieldOf returns the profile.invalid field of err, failing on any other
// error.
func fieldOf(t *testing.T, err error) string {
	t.Helper()
	var de *driversdk.Error
	if !errors.As(err, &de) || de.Code != driversdk.CodeProfileInvalid {
		t.Fatalf("err = %v, want a %s error", err, driversdk.CodeProfileInvalid)
	}
	return de.Field
}

// TestParseSpec: defaults fill an empty profile; every bad profile is
// profile.invalid naming its key.
func TestParseSpec(t *testing.T) {
	t.Parallel()
	s, err := ParseSpec(nil)
	if err != nil || s != (Spec{CPUs: 1, MemoryMB: 1024, DiskGB: 4, Image: ImageDebianBookworm, SSHUser: "debian"}) {
		t.Fatalf("defaults = %+v, %v", s, err)
	}
	for _, tc := range []struct{ profile, field string }{
		{`{"cpu": 2}`, "cpu"},
		{`{"cpus": 0}`, "cpus"},
		{`{"cpus": 65}`, "cpus"},
		{`{"cpus": "2"}`, "cpus"},
		{`{"memory_mb": 128}`, "memory_mb"},
		{`{"disk_gb": 0}`, "disk_gb"},
		{`{"image": ""}`, "image"},
		{`{"image": "bookworm.qcow2"}`, "image"},
		{`{"image": "/srv/a,b.qcow2"}`, "image"},
		{`{"ssh_user": "Root"}`, "ssh_user"},
		{`{"ssh_user": "a;b"}`, "ssh_user"},
		{`[1]`, ""},
	} {
		_, err := ParseSpec(json.RawMessage(tc.profile))
		if got := fieldOf(t, err); got != tc.field {
			t.Errorf("%s: field = %q, want %q (%v)", tc.profile, got, tc.field, err)
		}
	}
}

// TestParseConfig: the provider config is strict too, its fields named
// under config.; the images dir is always an allowed image dir.
func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(json.RawMessage(`{"state_dir": "/srv/q", "accel": "tcg", "image_dirs": ["/srv/images"], "subnet": "10.9.0.0/24", "shutdown_timeout": "5s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/srv/q" || c.Accel != AccelTCG || c.Subnet != netip.MustParsePrefix("10.9.0.0/24") ||
		strings.Join(c.ImageDirs, " ") != "/srv/images /srv/q/images" || c.ShutdownTimeout.Seconds() != 5 {
		t.Fatalf("config = %+v", c)
	}
	for _, tc := range []struct{ config, field string }{
		{`{"statedir": "/x"}`, "config.statedir"},
		{`{"state_dir": "relative"}`, "config.state_dir"},
		{`{"state_dir": "/"}`, "config.state_dir"},
		{`{"accel": "hvf"}`, "config.accel"},
		{`{"subnet": "10.9.0.1/24"}`, "config.subnet"},
		{`{"subnet": "10.0.0.0/8"}`, "config.subnet"},
		{`{"host_ports": [8420, 0]}`, "config.host_ports[1]"},
		{`{"host_ports": "8420"}`, "config.host_ports"},
		{`{"image_dirs": ["/srv", "images"]}`, "config.image_dirs[1]"},
		{`{"debian_mirror": "ftp://x"}`, "config.debian_mirror"},
		{`{"shutdown_timeout": "2h"}`, "config.shutdown_timeout"},
		{`{"qemu_binary": "qemu"}`, "config.qemu_binary"},
	} {
		_, err := ParseConfig(json.RawMessage(tc.config))
		if got := fieldOf(t, err); got != tc.field {
			t.Errorf("%s: field = %q, want %q (%v)", tc.config, got, tc.field, err)
		}
	}
}

// TestParseResize: a resize changes CPUs, memory and a growing disk; the
// image never changes and a disk never shrinks.
func TestParseResize(t *testing.T) {
	t.Parallel()
	cur := Spec{CPUs: 1, MemoryMB: 1024, DiskGB: 4, Image: ImageDebianBookworm, SSHUser: "debian"}
	next, err := ParseResize(json.RawMessage(`{"memory_mb": 1536, "disk_gb": 6}`), cur)
	if err != nil || next.MemoryMB != 1536 || next.DiskGB != 6 || next.CPUs != 1 || next.Image != cur.Image {
		t.Fatalf("resize = %+v, %v", next, err)
	}
	if same, err := ParseResize(json.RawMessage(`{"image": "debian-bookworm"}`), cur); err != nil || same != cur {
		t.Fatalf("the same image = %+v, %v", same, err)
	}
	for _, tc := range []struct{ spec, field string }{
		{`{"image": "/srv/other.qcow2"}`, "image"},
		{`{"disk_gb": 3}`, "disk_gb"},
		{`{"memory_mb": 64}`, "memory_mb"},
		{`{"ram": 1}`, "ram"},
	} {
		_, err := ParseResize(json.RawMessage(tc.spec), cur)
		if got := fieldOf(t, err); got != tc.field {
			t.Errorf("%s: field = %q, want %q (%v)", tc.spec, got, tc.field, err)
		}
	}
}

// TestSeedISO: the seed is an ISO 9660 image labelled cidata whose
// meta-data names the instance and host, whose network-config sets the
// address by MAC, and whose user-data is a multipart carrying the
// keeper's userdata unchanged first, then the driver's cloud-config and
// boot hook.
func TestSeedISO(t *testing.T) {
	t.Parallel()
	keeper := "#!/bin/sh\necho keeper's own userdata\n"
	s := seed{InstanceID: "vm-0123abcd", FQDN: "a.qemu.test", IP: netip.MustParsePrefix("10.9.0.5/24"), Gateway: netip.MustParseAddr("10.9.0.1"),
		MAC: "52:54:00:12:34:56", DNS: []netip.Addr{netip.MustParseAddr("10.9.0.1")}, HostKey: "PRIVATE", HostKeyPub: "ssh-ed25519 AAAA host",
		AuthorizedKeys: []string{"ssh-ed25519 BBBB keeper\n"}, Userdata: keeper}
	path := filepath.Join(t.TempDir(), "seed.iso")
	if err := s.writeISO(path); err != nil {
		t.Fatal(err)
	}
	back, err := file.OpenFromPath(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	fi, _ := os.Stat(path)
	fs, err := iso9660.Read(back, fi.Size(), 0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimRight(fs.Label(), "\x00 "); got != "cidata" {
		t.Fatalf("label = %q, want cidata", got)
	}
	read := func(name string) []byte {
		b, err := fs.ReadFile(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return b
	}
	var meta map[string]string
	if err := yaml.Unmarshal(read("meta-data"), &meta); err != nil || meta["instance-id"] != s.InstanceID || meta["local-hostname"] != s.FQDN {
		t.Fatalf("meta-data = %v, %v", meta, err)
	}
	var net struct {
		Config []struct {
			MAC     string `yaml:"mac_address"`
			Subnets []struct {
				Address string `yaml:"address"`
				Gateway string `yaml:"gateway"`
			} `yaml:"subnets"`
		} `yaml:"config"`
	}
	if err := yaml.Unmarshal(read("network-config"), &net); err != nil || len(net.Config) != 1 || net.Config[0].MAC != s.MAC ||
		net.Config[0].Subnets[0].Address != "10.9.0.5/24" || net.Config[0].Subnets[0].Gateway != "10.9.0.1" {
		t.Fatalf("network-config = %+v, %v", net, err)
	}
	msg, err := mail.ReadMessage(strings.NewReader(string(read("user-data"))))
	if err != nil {
		t.Fatal(err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var types, bodies []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		types, bodies = append(types, ct), append(bodies, string(b))
	}
	if strings.Join(types, " ") != "text/x-shellscript text/cloud-config text/cloud-boothook" || bodies[0] != keeper {
		t.Fatalf("user-data parts = %v, first %q", types, bodies[0])
	}
	var cc map[string]any
	if err := yaml.Unmarshal([]byte(bodies[1]), &cc); err != nil {
		t.Fatal(err)
	}
	if cc["fqdn"] != s.FQDN || cc["ssh_authorized_keys"].([]any)[0] != "ssh-ed25519 BBBB keeper" || cc["disable_root"] != nil {
		t.Fatalf("driver cloud-config = %v", cc)
	}
	if !strings.Contains(bodies[2], "10.9.0.1 "+GatewayName) || !strings.Contains(bodies[2], "nameserver 10.9.0.1") {
		t.Fatalf("boot hook:\n%s", bodies[2])
	}
}

// TestImageFileConfined: a profile's image path must be a qcow2 or raw
// file without a backing file inside the provider's image_dirs; a path
// elsewhere, a symlink out of them and an overlay that names another
// file are refused before anything starts.
func TestImageFileConfined(t *testing.T) {
	qemutest.Require(t)
	t.Parallel()
	allowed, outside := t.TempDir(), t.TempDir()
	img := func(dir, name string, args ...string) string {
		p := filepath.Join(dir, name)
		if out, err := exec.Command("qemu-img", append(append([]string{"create", "-q", "-f", "qcow2"}, args...), p, "1G")...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img: %v: %s", err, out)
		}
		return p
	}
	good := img(allowed, "good.qcow2")
	secret := img(outside, "secret.qcow2")
	overlay := img(allowed, "overlay.qcow2", "-F", "qcow2", "-b", secret)
	link := filepath.Join(allowed, "link.qcow2")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(json.RawMessage(`{"state_dir": "` + t.TempDir() + `", "image_dirs": ["` + allowed + `"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if im, err := imageFile(t.Context(), cfg, good); err != nil || im.Format != "qcow2" || im.Size != 1<<30 {
		t.Fatalf("good image = %+v, %v", im, err)
	}
	for _, p := range []string{secret, link, overlay, filepath.Join(allowed, "missing.qcow2"), "/etc/shadow"} {
		if _, err := imageFile(t.Context(), cfg, p); fieldOf(t, err) != "image" {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestExample: examples/qemu.yaml validates with every module registered,
// and the profile it builds from its default inputs is one this driver
// accepts.
func TestExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "qemu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.Check("qemu.yaml", src); err != nil {
		t.Fatalf("examples/qemu.yaml does not validate:\n%v", err)
	}
	var doc struct {
		Inputs map[string]struct {
			Default any `yaml:"default"`
		} `yaml:"inputs"`
	}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	profile, _ := json.Marshal(map[string]any{"cpus": doc.Inputs["cpus"].Default, "memory_mb": doc.Inputs["memory_mb"].Default,
		"disk_gb": doc.Inputs["disk_gb"].Default, "image": doc.Inputs["image"].Default, "ssh_user": "debian"})
	if _, err := ParseSpec(profile); err != nil {
		t.Fatalf("the example's default profile %s: %v", profile, err)
	}
}

// TestIncompleteVM: a VM dir without its record (a create that died
// before writing it) is listed by its ID, state incomplete, and destroyed
// by its ID like any VM; destroying it again is a no-op.
func TestIncompleteVM(t *testing.T) {
	qemutest.Require(t)
	t.Parallel()
	state, err := os.MkdirTemp("/var/tmp", "soul-cloud-qemu-incomplete-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	const id = "vm-0a1b2c3d"
	if err := os.MkdirAll(filepath.Join(state, "vms", id), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"state_dir": state})
	prov := driversdk.Provider{Name: "qemu", Config: cfg, KeeperID: "kd-test"}
	d := New(Options{})
	vms, err := d.List(t.Context(), driversdk.ListRequest{Provider: prov})
	if err != nil || len(vms) != 1 || vms[0].ID != id || vms[0].Attributes["state"] != "incomplete" || vms[0].PrimaryIP != "" {
		t.Fatalf("list = %+v, %v", vms, err)
	}
	if _, err := d.Resize(t.Context(), driversdk.ResizeRequest{Provider: prov, VMIDs: []string{id}, Spec: json.RawMessage(`{"memory_mb": 512}`)}); driversdk.CodeOf(err) != driversdk.CodeVMNotFound {
		t.Fatalf("resize of an incomplete VM: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := d.Destroy(t.Context(), driversdk.DestroyRequest{Provider: prov, VMIDs: []string{id}}); err != nil {
			t.Fatalf("destroy %d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "vms", id)); !os.IsNotExist(err) {
		t.Fatalf("the VM dir is still there: %v", err)
	}
	if vms, err := d.List(t.Context(), driversdk.ListRequest{Provider: prov}); err != nil || len(vms) != 0 {
		t.Fatalf("list after destroy = %+v, %v", vms, err)
	}
}
