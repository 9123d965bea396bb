package localcloud

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/soulstack/soulstack/driversdk"
	"golang.org/x/sys/unix"
)

// TestDestroyLeavesNoTrace compares what the driver may leave on the host
// before Create and after Destroy, with VMs that did all they could to
// leave something: background processes, processes in a new session,
// files in their root and /var/tmp (VMs can neither mount nor make
// cgroups: TestVMCannotReachHost).
// It is not parallel, so that ip_forward is its own to compare.
func TestDestroyLeavesNoTrace(t *testing.T) {
	e := newEnv(t, nil)
	before := snapshot(t, e.dir, nil)
	fwdBefore, fwdOK := forwarding(t, e.dir)
	vms := e.create(t, driversdk.CreateRequest{RequestID: "no-trace", Count: 2})
	ids := vmIDs(vms)
	for _, vm := range vms {
		e.run(t, vm, "root", `set -e
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &
mkdir -p /srv/scratch && echo x > /srv/scratch/f
echo data > /var/tmp/left-behind`)
	}
	during := snapshot(t, e.dir, ids)
	for _, want := range []string{"link: ", "nft: ", "process: ", "cgroup: ", "state: vms/" + ids[0]} {
		if !slices.ContainsFunc(during, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("the snapshot with VMs up has no %q line; it does not see what it should:\n%s", want, strings.Join(during, "\n"))
		}
	}

	checkRules(t, e.dir)

	ctx := context.Background()
	start := time.Now()
	if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: ids}); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	t.Logf("Destroy of 2 VMs took %s", time.Since(start).Round(time.Millisecond))
	after := snapshot(t, e.dir, ids)
	if !slices.Equal(before, after) {
		t.Errorf("Destroy left traces.\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	if fwdAfter, ok := forwarding(t, e.dir); fwdOK && ok && fwdAfter != fwdBefore {
		t.Errorf("forwarding before: %s; after: %s", fwdBefore, fwdAfter)
	} else if !fwdOK || !ok {
		t.Log("another local driver is up: IPv4 forwarding is not compared")
	}

	t.Run("destroy again", func(t *testing.T) {
		if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: ids}); err != nil {
			t.Fatalf("a second Destroy of the same VMs: %v", err)
		}
	})
	t.Run("destroy unknown", func(t *testing.T) {
		for _, id := range []string{"vm-00000000", "not-an-id", "../../etc"} {
			err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: []string{ids[0], id}})
			wantCode(t, err, driversdk.CodeVMNotFound)
		}
	})
	t.Run("list after", func(t *testing.T) {
		vms, err := e.d.List(ctx, driversdk.ListRequest{Provider: e.prov})
		if err != nil || len(vms) != 0 {
			t.Fatalf("List after Destroy = %v, %v; want none", vmIDs(vms), err)
		}
	})
}

// checkRules checks the nft table's chains: NAT for the subnet, and the
// forward rules (the guard only when forwarding was off before).
func checkRules(t *testing.T, stateDir string) {
	t.Helper()
	h, err := store{dir: stateDir}.loadHost()
	if err != nil || h == nil {
		t.Fatalf("host state: %v, %v", h, err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: h.Table}
	post, err := c.GetRules(table, &nftables.Chain{Name: "postrouting", Table: table})
	if err != nil || len(post) != 1 {
		t.Errorf("postrouting rules: %d, %v; want the masquerade rule", len(post), err)
	}
	fwd, err := c.GetRules(table, &nftables.Chain{Name: "forward", Table: table})
	orig, _ := os.ReadFile(filepath.Join(runDir, "ip_forward.orig"))
	want := 4 // metadata reject, egress, replies, drop
	if strings.TrimSpace(string(orig)) == "0" {
		want = 5
	}
	if err != nil || len(fwd) != want {
		t.Errorf("forward rules: %d, %v; want %d", len(fwd), err, want)
	}
	// established, 2 ICMP, 2 DNS, one per host port, 2 rejects.
	in, err := c.GetRules(table, &nftables.Chain{Name: "input", Table: table})
	if want := 7 + len(h.HostPorts); err != nil || len(in) != want {
		t.Errorf("input rules: %d, %v; want %d", len(in), err, want)
	}
	if b, _ := os.ReadFile(ipForwardPath); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ip_forward is %q with VMs up", b)
	}
}

func isCgroup2() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// TestVMs makes two VMs and checks what a VM is: its own address and
// hostname, SSH with the given key, a root of its own, the userdata
// applied, live resize, listing by tag, idempotent Create, and a driver
// process that did not make them still knowing them.
func TestVMs(t *testing.T) {
	t.Parallel()
	// A host port VMs may reach (host_ports); TestVMCannotReachHost tries
	// the others.
	hostPort, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostPort.Close()
	e := newEnv(t, map[string]any{"host_ports": []int{hostPort.Addr().(*net.TCPAddr).Port}})
	extra := newTestKey(t)
	userdata := `#cloud-config
ssh_authorized_keys:
  - ` + extra.authorized + `
write_files:
  - path: /etc/soulstack-test/hello.txt
    content: hello from userdata
    permissions: '0640'
    owner: nobody:nogroup
  - path: /opt/soulstack-test/late.txt
    content: bGF0ZQo=
    encoding: b64
    defer: true
runcmd:
  - echo "ran on $(hostname)" > /root/runcmd.out
  - [sh, -c, "echo list form >> /root/runcmd.out"]
`
	suffix := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	names := []string{"alpha-" + suffix + ".local.test", "beta-" + suffix + ".local.test"}
	req := driversdk.CreateRequest{
		RequestID: "req-" + suffix,
		RunID:     "run-" + suffix,
		Profile:   json.RawMessage(`{"cpus": 1, "memory_mb": 512}`),
		Count:     2,
		Names:     names,
		Userdata:  []string{userdata, ""},
	}
	start := time.Now()
	vms := e.create(t, req)
	t.Logf("Create of 2 VMs took %s", time.Since(start).Round(time.Millisecond))
	alpha, beta := vms[0], vms[1]
	ctx := context.Background()

	t.Run("addresses and hostnames", func(t *testing.T) {
		if alpha.PrimaryIP == beta.PrimaryIP {
			t.Fatalf("both VMs have %s", alpha.PrimaryIP)
		}
		for i, vm := range vms {
			if vm.FQDN != names[i] {
				t.Errorf("VM %d FQDN %q, want %q", i, vm.FQDN, names[i])
			}
			if _, err := netip.ParseAddr(vm.PrimaryIP); err != nil {
				t.Errorf("VM %d primary IP %q: %v", i, vm.PrimaryIP, err)
			}
			if got := e.run(t, vm, "root", "hostname"); got != names[i] {
				t.Errorf("hostname in VM %d = %q, want %q", i, got, names[i])
			}
			if got := e.run(t, vm, "root", "ip -4 -o addr show eth0 | awk '{print $4}'"); !strings.HasPrefix(got, vm.PrimaryIP+"/") {
				t.Errorf("eth0 in VM %d has %q, want %s", i, got, vm.PrimaryIP)
			}
			if got := e.run(t, vm, "root", "cat /sys/class/net/eth0/address"); got != vm.Attributes["mac"] {
				t.Errorf("eth0 MAC in VM %d = %q, want the reported %v", i, got, vm.Attributes["mac"])
			}
			// /etc/ssh holds the VM's own host key (soul join reads it
			// there), and only that one: none of the host's.
			if got := e.run(t, vm, "root", "cat /etc/ssh/ssh_host_*_key.pub"); got != vm.Attributes["ssh_host_key"] {
				t.Errorf("/etc/ssh of VM %d shows %q, want its own key %v alone", i, got, vm.Attributes["ssh_host_key"])
			}
		}
		if h, _ := os.Hostname(); h == names[0] || h == names[1] {
			t.Errorf("the host's hostname changed to %q", h)
		}
	})

	t.Run("network", func(t *testing.T) {
		// VM to VM across the bridge (through the forward hook, with
		// br_netfilter), and VM to host on the gateway address. Only this
		// driver's own addresses are used.
		if got := e.run(t, alpha, "root", "timeout 5 bash -c 'exec 3<>/dev/tcp/"+beta.PrimaryIP+"/22 && head -c 4 <&3'"); got != "SSH-" {
			t.Errorf("alpha reading beta's sshd: %q", got)
		}
		h, err := store{dir: e.dir}.loadHost()
		if err != nil || h == nil {
			t.Fatalf("host state: %v %v", h, err)
		}
		got := make(chan string, 1)
		go func() {
			c, err := hostPort.Accept()
			if err != nil {
				got <- err.Error()
				return
			}
			defer c.Close()
			b, _ := io.ReadAll(io.LimitReader(c, 64))
			got <- strings.TrimSpace(string(b))
		}()
		_, port, _ := net.SplitHostPort(hostPort.Addr().String())
		e.run(t, alpha, "root", fmt.Sprintf("timeout 5 bash -c 'echo hello-host >/dev/tcp/%s/%s'", h.gateway(), port))
		if msg := <-got; msg != "hello-host" {
			t.Errorf("the host got %q from the VM on a port in host_ports", msg)
		}
		if mtu := e.run(t, alpha, "root", "cat /sys/class/net/eth0/mtu"); mtu != strconv.Itoa(h.MTU) {
			t.Errorf("eth0 MTU %s, want the uplink's %d", mtu, h.MTU)
		}
	})

	t.Run("a root of its own", func(t *testing.T) {
		e.run(t, alpha, "root", "echo secret > /root/only-in-alpha && mkdir -p /usr/local/share/alpha && touch /usr/local/share/alpha/x")
		if _, err := os.Stat("/root/only-in-alpha"); err == nil {
			t.Error("a file written in a VM shows on the host")
		}
		if _, err := os.Stat("/usr/local/share/alpha"); err == nil {
			t.Error("a directory made in a VM shows on the host")
		}
		if got := e.run(t, beta, "root", "test -e /root/only-in-alpha && echo visible || echo absent"); got != "absent" {
			t.Error("a file written in one VM shows in the other")
		}
		// Its own processes, /run, /tmp, and not the driver's state.
		if got := e.run(t, alpha, "root", "cat /proc/1/cmdline | tr '\\0' ' '"); !strings.HasPrefix(got, "soulstack-local-init") {
			t.Errorf("PID 1 in the VM is %q", got)
		}
		if got := e.run(t, alpha, "root", "ls -A "+shellQuote(e.dir)+" 2>/dev/null | wc -l"); got != "0" {
			t.Errorf("the VM sees %s entries of the driver's state dir", got)
		}
		e.run(t, alpha, "root", "test ! -e /run/soulstack-local && test -d /run/sshd && touch /tmp/in-vm && test \"$(ls /sys/class/net | sort | tr '\\n' ' ')\" = 'eth0 lo '")
		if _, err := os.Stat("/tmp/in-vm"); err == nil {
			t.Error("the VM's /tmp is the host's")
		}
	})

	t.Run("userdata", func(t *testing.T) {
		e.waitFile(t, alpha, vmBootFinished)
		if got := e.run(t, alpha, "root", "cat /etc/soulstack-test/hello.txt; echo; stat -c '%a %U:%G' /etc/soulstack-test/hello.txt"); got != "hello from userdata\n640 nobody:nogroup" {
			t.Errorf("write_files: got %q", got)
		}
		if got := e.run(t, alpha, "root", "cat /opt/soulstack-test/late.txt"); got != "late" {
			t.Errorf("deferred b64 write_files: got %q", got)
		}
		if got := e.run(t, alpha, "root", "cat /root/runcmd.out"); got != "ran on "+names[0]+"\nlist form" {
			t.Errorf("runcmd: got %q", got)
		}
		// The extra key from ssh_authorized_keys logs in as well.
		c, err := dial(t, alpha, "root", extra)
		if err != nil {
			t.Fatalf("ssh with the userdata's key: %v", err)
		}
		c.Close()
		// The other VM had no userdata: no extra key there.
		if c, err := dial(t, beta, "root", extra); err == nil {
			c.Close()
			t.Error("the VM without userdata trusts the other VM's userdata key")
		}
		if _, err := os.Stat("/etc/soulstack-test"); err == nil {
			t.Error("userdata files landed on the host")
		}
	})

	t.Run("resize live", func(t *testing.T) {
		sleeper := e.run(t, alpha, "root", "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
		limitFile := "/sys/fs/cgroup/memory/memory.limit_in_bytes"
		if isCgroup2() {
			limitFile = "/sys/fs/cgroup/memory.max"
		}
		if got := e.run(t, alpha, "root", "cat "+limitFile); got != strconv.Itoa(512<<20) {
			t.Fatalf("memory limit in the VM before resize = %s, want %d", got, 512<<20)
		}
		res, err := e.d.Resize(ctx, driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{alpha.ID},
			Spec: json.RawMessage(`{"memory_mb": 256, "cpus": 0.5}`)})
		if err != nil {
			t.Fatalf("Resize: %v", err)
		}
		if len(res) != 1 || res[0].VMID != alpha.ID || res[0].CausedDowntime || res[0].Unchanged {
			t.Fatalf("Resize = %+v", res)
		}
		// The same spec again (cpus only: memory_mb keeps its value) is
		// reported unchanged.
		res, err = e.d.Resize(ctx, driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{alpha.ID}, Spec: json.RawMessage(`{"cpus": 0.5}`)})
		if err != nil || len(res) != 1 || !res[0].Unchanged || res[0].CausedDowntime {
			t.Fatalf("Resize to the size the VM has = %+v, %v", res, err)
		}
		if got := e.run(t, alpha, "root", "cat "+limitFile); got != strconv.Itoa(256<<20) {
			t.Errorf("memory limit in the VM after resize = %s, want %d", got, 256<<20)
		}
		rec, err := store{dir: e.dir}.loadVM(alpha.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := memoryLimit(rec.Cgroups); err != nil || got != 256<<20 {
			t.Errorf("memory limit on the host after resize = %d, %v", got, err)
		}
		for _, p := range rec.Cgroups {
			if q, err := os.ReadFile(filepath.Join(p, "cpu.cfs_quota_us")); err == nil && strings.TrimSpace(string(q)) != "50000" {
				t.Errorf("CPU quota after resize = %s, want 50000", q)
			}
			if q, err := os.ReadFile(filepath.Join(p, "cpu.max")); err == nil && strings.TrimSpace(string(q)) != "50000 100000" {
				t.Errorf("cpu.max after resize = %s", q)
			}
		}
		// Nothing restarted: the same process is still there.
		e.run(t, alpha, "root", "kill -0 "+sleeper)
		listed, err := e.d.List(ctx, driversdk.ListRequest{Provider: e.prov, Tags: map[string]string{driversdk.TagRequestID: req.RequestID}})
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range listed {
			if vm.ID == alpha.ID && (vm.Attributes["memory_mb"] != 256 || vm.Attributes["cpus"] != 0.5) {
				t.Errorf("List after resize reports %v", vm.Attributes)
			}
		}
		t.Run("bad spec", func(t *testing.T) {
			_, err := e.d.Resize(ctx, driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{alpha.ID}, Spec: json.RawMessage(`{"disk_gb": 10}`)})
			if e := wantCode(t, err, driversdk.CodeProfileInvalid); e.Field != "disk_gb" {
				t.Errorf("Field = %q", e.Field)
			}
			_, err = e.d.Resize(ctx, driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{alpha.ID}, Spec: json.RawMessage(`{"ssh_user": "other"}`)})
			wantCode(t, err, driversdk.CodeProfileInvalid)
			_, err = e.d.Resize(ctx, driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{"vm-00000000"}, Spec: json.RawMessage(`{}`)})
			wantCode(t, err, driversdk.CodeVMNotFound)
		})
	})

	t.Run("list by tag", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tags map[string]string
			want []string
		}{
			{"request id", map[string]string{driversdk.TagRequestID: req.RequestID}, vmIDs(vms)},
			{"run id", map[string]string{driversdk.TagRunID: req.RunID}, vmIDs(vms)},
			{"both", map[string]string{driversdk.TagRunID: req.RunID, driversdk.TagRequestID: req.RequestID}, vmIDs(vms)},
			{"other request", map[string]string{driversdk.TagRequestID: "someone-else"}, nil},
			{"all", nil, vmIDs(vms)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := e.d.List(ctx, driversdk.ListRequest{Provider: e.prov, Tags: tc.tags})
				if err != nil {
					t.Fatal(err)
				}
				ids := vmIDs(got)
				slices.Sort(ids)
				want := slices.Clone(tc.want)
				slices.Sort(want)
				if !slices.Equal(ids, want) {
					t.Fatalf("List(%v) = %v, want %v", tc.tags, ids, want)
				}
				for _, vm := range got {
					if vm.Attributes["state"] != "running" || vm.Tags[driversdk.TagRunID] != req.RunID {
						t.Errorf("listed %s: state %v tags %v", vm.ID, vm.Attributes["state"], vm.Tags)
					}
				}
			})
		}
	})

	t.Run("idempotent create", func(t *testing.T) {
		again := e.create(t, req)
		if !slices.Equal(vmIDs(again), vmIDs(vms)) {
			t.Fatalf("a repeated Create made %v, first %v", vmIDs(again), vmIDs(vms))
		}
		ents, err := os.ReadDir(filepath.Join(e.dir, vmsDir))
		if err != nil || len(ents) != 2 {
			t.Fatalf("%d VM dirs after a repeated Create (%v)", len(ents), err)
		}
	})

	t.Run("another driver process knows them", func(t *testing.T) {
		// The VMs' inits lead sessions of their own, out of reach of
		// signals to the driver's; cmd/soul-cloud-local checks that they
		// outlive the driver process.
		for _, vm := range vms {
			rec, err := store{dir: e.dir}.loadVM(vm.ID)
			if err != nil {
				t.Fatal(err)
			}
			if sid, _ := unix.Getsid(rec.PID); sid == mySID() {
				t.Errorf("VM %s's init is in the driver's session", vm.ID)
			}
		}
		other := New(Options{})
		got, err := other.List(ctx, driversdk.ListRequest{Provider: e.prov})
		if err != nil || len(got) != 2 {
			t.Fatalf("a new driver lists %v, %v", vmIDs(got), err)
		}
	})

	t.Run("destroy one", func(t *testing.T) {
		if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: []string{beta.ID}}); err != nil {
			t.Fatal(err)
		}
		got, err := e.d.List(ctx, driversdk.ListRequest{Provider: e.prov})
		if err != nil || !slices.Equal(vmIDs(got), []string{alpha.ID}) {
			t.Fatalf("List after destroying one = %v, %v", vmIDs(got), err)
		}
		// The other VM and the host network are still fine.
		if got := e.run(t, alpha, "root", "hostname"); got != names[0] {
			t.Errorf("hostname = %q", got)
		}
	})
}

func mySID() int {
	sid, _ := unix.Getsid(0)
	return sid
}

// TestUserAndBaseRoot makes a VM whose root is built on a base_root
// directory (a read-only bind mount of the host's / here, standing in for
// a debootstrapped tree) and whose ssh_user is made at first boot. Only
// the base roots the provider's config lists are accepted, and none
// reached through a symlink (/proc/1/root would be the host's /).
func TestUserAndBaseRoot(t *testing.T) {
	t.Parallel()
	// Not in t.TempDir: its RemoveAll must never meet a bind mount of /.
	base, err := os.MkdirTemp("", "soulstack-base-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/", base, "", unix.MS_BIND, ""); err != nil {
		os.Remove(base)
		t.Fatalf("bind-mount / as a base root: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(base, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", base, err)
			return
		}
		if err := os.Remove(base); err != nil {
			t.Error(err)
		}
	})
	// Read-only, so that the test proves the driver never writes there.
	if err := unix.Mount("", base, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("make %s read-only: %v", base, err)
	}
	e := newEnv(t, map[string]any{"base_roots": []string{base, "/proc/1/root"}})
	for _, bad := range []string{"/proc/1/root", "/old_root", "/usr"} {
		p, _ := json.Marshal(map[string]any{"base_root": bad})
		if pe := wantCode(t, e.d.ValidateProfile(context.Background(), e.prov, p), driversdk.CodeProfileInvalid); pe.Field != "base_root" {
			t.Errorf("base_root %s: field %q", bad, pe.Field)
		}
	}
	profile, _ := json.Marshal(map[string]any{"ssh_user": "soul", "base_root": base, "memory_mb": 256})
	if err := e.d.ValidateProfile(context.Background(), e.prov, profile); err != nil {
		t.Fatalf("ValidateProfile: %v", err)
	}
	vm := e.create(t, driversdk.CreateRequest{RequestID: "user", Profile: profile})[0]
	if vm.Attributes["ssh_user"] != "soul" || vm.Attributes["base_root"] != base {
		t.Errorf("attributes %v", vm.Attributes)
	}
	if got := e.run(t, vm, "soul", "id -un; pwd"); got != "soul\n/home/soul" {
		t.Errorf("as the ssh user: %q", got)
	}
	if _, err := os.Stat("/usr/bin/sudo"); err == nil {
		if got := e.run(t, vm, "soul", "sudo -n id -u"); got != "0" {
			t.Errorf("sudo -n id -u = %q", got)
		}
	}
	if got := e.run(t, vm, "soul", "grep ' / ' /proc/mounts"); !strings.Contains(got, "lowerdir="+base) {
		t.Errorf("the VM's root is not built on the base: %q", got)
	}
	if c, err := dial(t, vm, "root", e.key); err == nil {
		c.Close()
		t.Error("root logs in with the key given for ssh_user soul")
	}
	if _, err := os.Stat("/home/soul"); err == nil {
		t.Error("the ssh user's home shows on the host")
	}
}

// TestCreateUnderDeadline cuts Create short at several points: each time
// it answers driver.timeout (or VMs, if it was quick enough) and a failed
// Create leaves nothing behind.
func TestCreateUnderDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	before := snapshot(t, e.dir, nil)
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond, 120 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		vms, err := e.d.Create(ctx, driversdk.CreateRequest{Provider: e.prov, RequestID: "deadline", Count: 2,
			AuthorizedKeys: []string{e.key.authorized}})
		took := time.Since(start)
		cancel()
		t.Logf("deadline %s: answered after %s: %d VMs, %v", d, took.Round(time.Millisecond), len(vms), err)
		if took > d+2*time.Second {
			t.Errorf("deadline %s: Create took %s", d, took)
		}
		if err != nil {
			wantCode(t, err, driversdk.CodeDriverTimeout)
			if after := snapshot(t, e.dir, nil); !slices.Equal(before, after) {
				t.Errorf("deadline %s: a timed-out Create left traces:\n%s", d, strings.Join(after, "\n"))
			}
			continue
		}
		e.destroyAll(t)
	}
}

// TestSubnet checks the choice of the bridge's subnet: a configured one
// that overlaps a route or address of the host (its own network,
// loopback, another driver's bridge) is refused before anything is made;
// without one, a driver picks a free subnet; and a state dir with VMs
// keeps its subnet.
func TestSubnet(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ctx := context.Background()
	used, err := hostNetworks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The uplink's network is taken for as long as the test runs; other
	// tests' bridges and veths come and go, so they are not used here.
	uplink := defaultRouteDev(t)
	taken := []string{"127.0.0.0/24"}
	for _, u := range used {
		if u.Dev == uplink && u.Prefix.Addr().Is4() && u.Prefix.Bits() >= 8 && u.Prefix.Bits() <= 29 {
			taken = append(taken, u.Prefix.Masked().String())
			break
		}
	}
	for _, subnet := range taken {
		t.Run("overlaps "+subnet, func(t *testing.T) {
			e := newEnv(t, map[string]any{"subnet": subnet})
			err := e.d.ValidateProfile(ctx, e.prov, nil)
			if pe := wantCode(t, err, driversdk.CodeProfileInvalid); pe.Field != "config.subnet" {
				t.Errorf("Field = %q", pe.Field)
			}
			t.Log(err)
			_, err = e.d.Create(ctx, driversdk.CreateRequest{Provider: e.prov, Count: 1})
			wantCode(t, err, driversdk.CodeProfileInvalid)
			if after := snapshot(t, e.dir, nil); len(after) != 0 {
				t.Errorf("a refused Create left:\n%s", strings.Join(after, "\n"))
			}
		})
	}

	a := newEnv(t, nil)
	a.create(t, driversdk.CreateRequest{RequestID: "a"})
	ha, err := store{dir: a.dir}.loadHost()
	if err != nil || ha == nil {
		t.Fatalf("host state of the first driver: %v, %v", ha, err)
	}
	t.Run("another driver's subnet", func(t *testing.T) {
		b := newEnv(t, map[string]any{"subnet": ha.Subnet.String()})
		err := b.d.ValidateProfile(ctx, b.prov, nil)
		if pe := wantCode(t, err, driversdk.CodeProfileInvalid); pe.Field != "config.subnet" || !strings.Contains(pe.Message, ha.Bridge) {
			t.Errorf("refusal does not name the bridge %s: %v", ha.Bridge, err)
		}
	})
	t.Run("a free one is picked", func(t *testing.T) {
		c := newEnv(t, nil)
		vm := c.create(t, driversdk.CreateRequest{RequestID: "c"})[0]
		hc, err := store{dir: c.dir}.loadHost()
		if err != nil || hc == nil {
			t.Fatal(err)
		}
		if hc.Subnet.Overlaps(ha.Subnet) {
			t.Errorf("the second driver picked %s, which overlaps the first's %s", hc.Subnet, ha.Subnet)
		}
		if ip := netip.MustParseAddr(vm.PrimaryIP); !hc.Subnet.Contains(ip) {
			t.Errorf("VM address %s is not in %s", ip, hc.Subnet)
		}
		if got := c.run(t, vm, "root", "ip -4 route show default"); !strings.Contains(got, hc.gateway().String()) {
			t.Errorf("the VM's default route %q is not through %s", got, hc.gateway())
		}
	})
	t.Run("kept while VMs exist", func(t *testing.T) {
		other := netip.MustParsePrefix("10.223.254.0/24")
		raw, _ := json.Marshal(map[string]string{"state_dir": a.dir, "subnet": other.String()})
		prov := a.prov
		prov.Config = raw
		_, err := a.d.Create(ctx, driversdk.CreateRequest{Provider: prov, Count: 1})
		if pe := wantCode(t, err, driversdk.CodeProfileInvalid); pe.Field != "config.subnet" {
			t.Errorf("Field = %q", pe.Field)
		}
	})
}

// TestSubnetFull asks for more VMs than a /29 holds: quota.exceeded,
// before anything is made.
func TestSubnetFull(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	used, err := hostNetworks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var subnet netip.Prefix
	for third := 255; third > 0 && !subnet.IsValid(); third-- {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 223, byte(third), 0}), 29)
		if len(conflicts(p, used, "")) == 0 {
			subnet = p
		}
	}
	e := newEnv(t, map[string]any{"subnet": subnet.String()})
	_, err = e.d.Create(context.Background(), driversdk.CreateRequest{Provider: e.prov, Count: 6,
		AuthorizedKeys: []string{e.key.authorized}})
	wantCode(t, err, "quota.exceeded")
	t.Log(err)
	if after := snapshot(t, e.dir, nil); len(after) != 0 {
		t.Errorf("a refused Create left:\n%s", strings.Join(after, "\n"))
	}
}

// TestNAT stands up an "outside" network namespace behind a veth of the
// host's, as the Internet would be behind its uplink, and checks that a
// VM reaches it masqueraded behind the host's address (what apt needs),
// while the outside cannot open connections to the VM. Only namespaces
// the test makes are involved.
func TestNAT(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ctx := context.Background()
	used, err := hostNetworks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var link netip.Prefix
	for third := 255; third > 0 && !link.IsValid(); third-- {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 222, byte(third), 0}), 30)
		if len(conflicts(p, used, "")) == 0 {
			link = p
		}
	}
	hostIP, outsideIP := link.Addr().Next(), link.Addr().Next().Next()
	tag := fmt.Sprintf("%04x", os.Getpid()&0xffff)
	ns, hostEnd := "soulnat-test-"+tag, "snath"+tag
	mustRun := func(args ...string) {
		t.Helper()
		if _, err := run(ctx, "", args[0], args[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	mustRun("ip", "netns", "add", ns)
	t.Cleanup(func() {
		if _, err := run(ctx, "", "ip", "netns", "del", ns); err != nil {
			t.Error(err)
		}
	})
	mustRun("ip", "link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() { _ = delLink(ctx, hostEnd) })
	mustRun("ip", "addr", "add", netip.PrefixFrom(hostIP, 30).String(), "dev", hostEnd)
	mustRun("ip", "link", "set", hostEnd, "up")
	mustRun("ip", "-n", ns, "addr", "add", netip.PrefixFrom(outsideIP, 30).String(), "dev", "eth0")
	mustRun("ip", "-n", ns, "link", "set", "eth0", "up")
	mustRun("ip", "-n", ns, "link", "set", "lo", "up")

	e := newEnv(t, nil)
	vm := e.create(t, driversdk.CreateRequest{RequestID: "nat"})[0]

	// Outbound: the outside sees the host's address, not the VM's.
	ln, err := inNetns(ns, func() (net.Listener, error) { return net.Listen("tcp", netip.AddrPortFrom(outsideIP, 0).String()) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type conn struct {
		from, msg string
	}
	got := make(chan conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- conn{msg: err.Error()}
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(io.LimitReader(c, 64))
		got <- conn{from: c.RemoteAddr().(*net.TCPAddr).IP.String(), msg: strings.TrimSpace(string(b))}
	}()
	e.run(t, vm, "root", fmt.Sprintf("timeout 5 bash -c 'echo via-nat >/dev/tcp/%s/%d'", outsideIP, ln.Addr().(*net.TCPAddr).Port))
	c := <-got
	if c.msg != "via-nat" || c.from != hostIP.String() {
		t.Errorf("the outside got %q from %s; want via-nat from the host's %s (masqueraded)", c.msg, c.from, hostIP)
	}

	// Inbound: even with a route to the VMs, the outside cannot connect.
	h, err := store{dir: e.dir}.loadHost()
	if err != nil || h == nil {
		t.Fatal(err)
	}
	mustRun("ip", "-n", ns, "route", "add", h.Subnet.String(), "via", hostIP.String())
	_, err = inNetns(ns, func() (net.Conn, error) {
		return net.DialTimeout("tcp", netip.AddrPortFrom(netip.MustParseAddr(vm.PrimaryIP), 22).String(), time.Second)
	})
	if err == nil {
		t.Error("a connection from outside the host reached the VM's sshd")
	}
}

// inNetns runs f on an OS thread that has entered the named network
// namespace; sockets it makes stay in that namespace. The thread is
// thrown away afterwards.
func inNetns[T any](name string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var zero T
		fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{zero, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{zero, err}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// testBasesDir keeps the bases tests build across test runs on this
// machine: the first TestBase debootstraps Debian (a minute or two), the
// next ones reuse it, as VMs of one provider do.
const testBasesDir = "/var/cache/soulstack-localcloud-test/bases"

// TestBase makes VMs on the debian-bookworm base: a debootstrapped Debian
// the driver builds once in its bases dir and reuses, with none of the
// host's packages (no PostgreSQL, no docker CLI) and the same confinement
// as VMs on the view of the host; apt installs from the Debian archive in
// it.
func TestBase(t *testing.T) {
	t.Parallel()
	if _, err := toolPath("debootstrap"); err != nil && !exists(filepath.Join(testBasesDir, "debian-bookworm")) {
		t.Fatalf("TestBase needs debootstrap on the host (apt-get install debootstrap): %v", err)
	}
	e := newEnv(t, map[string]any{"bases_dir": testBasesDir})
	ctx := context.Background()
	for _, tc := range []struct{ name, spec, field string }{
		{"unknown base", `{"base": "debian-sid-nightly"}`, "base"},
		{"base and base_root", `{"base": "debian-bookworm", "base_root": "/srv/x"}`, "base"},
	} {
		if pe := wantCode(t, e.d.ValidateProfile(ctx, e.prov, json.RawMessage(tc.spec)), driversdk.CodeProfileInvalid); pe.Field != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, pe.Field, tc.field)
		}
	}
	profile := json.RawMessage(`{"base": "debian-bookworm", "ssh_user": "soul", "memory_mb": 512}`)
	if err := e.d.ValidateProfile(ctx, e.prov, profile); err != nil {
		t.Fatalf("ValidateProfile: %v", err)
	}
	start := time.Now()
	// The keeper gives Create 10 minutes; building the base takes most
	// of the first one.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	vms, err := e.d.Create(cctx, driversdk.CreateRequest{Provider: e.prov, RequestID: "base-1", Profile: profile, Count: 1,
		AuthorizedKeys: []string{e.key.authorized}})
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create on the base: %v (%d VMs)", err, len(vms))
	}
	vm := vms[0]
	t.Logf("first Create on the base took %s (it builds the base when the bases dir lacks it)", time.Since(start).Round(time.Millisecond))
	base := filepath.Join(testBasesDir, "debian-bookworm")
	var before unix.Stat_t
	if err := unix.Stat(base, &before); err != nil {
		t.Fatal(err)
	}
	if vm.Attributes["base"] != "debian-bookworm" {
		t.Errorf("attributes %v", vm.Attributes)
	}
	got := e.run(t, vm, "soul", `. /etc/os-release; echo "$VERSION_CODENAME"
dpkg-query -W -f '${Status}\n' postgresql-15 2>/dev/null || echo "no postgresql"
test -e /usr/local/bin/docker && echo "host docker" || echo "no docker"
sudo -n id -u
grep ' / ' /proc/mounts | grep -c "lowerdir=`+base+`"
awk '/^CapBnd/ {print $2}' /proc/self/status`)
	wantCaps := uint64(0)
	for _, c := range vmCapabilities {
		wantCaps |= 1 << c
	}
	if want := fmt.Sprintf("bookworm\nno postgresql\nno docker\n0\n1\n%016x", wantCaps); got != want {
		t.Errorf("in the VM:\n%s\nwant:\n%s", got, want)
	}
	// From the Debian archive, over the VM's NAT: slow on a loaded machine.
	e.runFor(t, vm, "soul", "sudo -n sh -c 'apt-get -q update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends hello >/dev/null' && hello >/dev/null", 5*time.Minute)

	second := e.create(t, driversdk.CreateRequest{RequestID: "base-2", Profile: profile})[0]
	var after unix.Stat_t
	if err := unix.Stat(base, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino || after.Mtim != before.Mtim {
		t.Error("the base was built again for the second VM")
	}
	if got := e.run(t, second, "soul", "command -v hello || echo absent"); got != "absent" {
		t.Errorf("a package installed in one VM is in the base: %q", got)
	}
	if _, err := e.d.Resize(ctx, driversdk.ResizeRequest{Provider: e.prov, VMIDs: []string{second.ID}, Spec: json.RawMessage(`{"base": ""}`)}); err == nil {
		t.Error("Resize changed the base")
	}
}

// defaultRouteDev returns the device of the host's IPv4 default route, or
// "" when there is none.
func defaultRouteDev(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-4", "route", "show", "default").Output()
	if err != nil {
		t.Fatalf("ip route show default: %v", err)
	}
	var routes []struct {
		Dev string `json:"dev"`
	}
	if err := json.Unmarshal(out, &routes); err != nil || len(routes) == 0 {
		return ""
	}
	return routes[0].Dev
}
