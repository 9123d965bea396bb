package localcloud

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// requireRoot skips tests that make VMs where they cannot run.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("making local VMs needs root (running as uid %d)", os.Geteuid())
	}
	for _, f := range []string{"/usr/sbin/sshd", "/bin/sh"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("making local VMs needs %s on the host (apt-get install openssh-server)", f)
		}
	}
}

// testKey is a client key pair.
type testKey struct {
	authorized string // authorized_keys line
	pem        []byte
}

func newTestKey(t testing.TB) testKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return testKey{authorized: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))), pem: pem.EncodeToMemory(blk)}
}

// env is one driver on a state dir of its own (so its own bridge, nft
// table and subnet), with a client key, torn down completely when the
// test ends, pass or fail.
type env struct {
	d    *Driver
	prov driversdk.Provider
	dir  string
	key  testKey
}

func newEnv(t testing.TB, config map[string]any) *env {
	t.Helper()
	requireRoot(t)
	// Under /var/tmp rather than /tmp: on the root filesystem, like the
	// default state dir, so that the VMs' lower layer holds it and it must
	// be masked (a VM's /tmp is its own anyway).
	dir, err := os.MkdirTemp("/var/tmp", "soulstack-localcloud-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After destroyAll (cleanups run last first); nothing is mounted
		// under it on the host.
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	if config == nil {
		config = map[string]any{}
	}
	config["state_dir"] = dir
	raw, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		d:    New(Options{Logger: testLogger(t)}),
		prov: driversdk.Provider{Name: "local", FQDNSuffix: "local.test", Config: raw},
		dir:  dir,
		key:  newTestKey(t),
	}
	t.Cleanup(func() { e.destroyAll(t) })
	return e
}

// destroyAll destroys every VM of the env; with none left, Destroy also
// removes the host network.
func (e *env) destroyAll(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vms, err := e.d.List(ctx, driversdk.ListRequest{Provider: e.prov})
	if err != nil {
		t.Errorf("cleanup: list: %v", err)
	}
	var ids []string
	for _, v := range vms {
		ids = append(ids, v.ID)
	}
	if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: ids}); err != nil {
		t.Errorf("cleanup: destroy %v: %v", ids, err)
	}
	if exists(filepath.Join(e.dir, hostFile)) {
		t.Errorf("cleanup: %s is still there after the last VM went", hostFile)
	}
}

func (e *env) create(t testing.TB, req driversdk.CreateRequest) []driversdk.VM {
	t.Helper()
	req.Provider = e.prov
	if req.AuthorizedKeys == nil {
		req.AuthorizedKeys = []string{e.key.authorized}
	}
	if req.Count == 0 {
		req.Count = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vms, err := e.d.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(vms) != req.Count {
		t.Fatalf("Create(count %d) made %d VMs", req.Count, len(vms))
	}
	return vms
}

// dial connects to a VM as user with key, pinning the host key the
// driver reported.
func dial(t testing.TB, vm driversdk.VM, user string, key testKey) (*sshx.Client, error) {
	t.Helper()
	hostKey, _ := vm.Attributes["ssh_host_key"].(string)
	if hostKey == "" {
		t.Fatalf("VM %s reports no ssh_host_key", vm.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sshx.Dial(ctx, sshx.Target{
		Address: vm.PrimaryIP, User: user, PrivateKey: key.pem, HostKey: hostKey,
		Retry: sshx.RetryPolicy{Attempts: 1}, ConnectTimeout: 10 * time.Second,
	}, sshx.Options{})
}

// run runs a shell script on a VM over SSH as user and returns its
// trimmed stdout; a failure or a non-zero exit fails the test.
func (e *env) run(t testing.TB, vm driversdk.VM, user, script string) string {
	t.Helper()
	return e.runFor(t, vm, user, script, 30*time.Second)
}

// runFor is run with a deadline of its own.
func (e *env) runFor(t testing.TB, vm driversdk.VM, user, script string, d time.Duration) string {
	t.Helper()
	c, err := dial(t, vm, user, e.key)
	if err != nil {
		t.Fatalf("ssh %s@%s: %v", user, vm.PrimaryIP, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := c.Exec(ctx, sshx.Command{Script: script})
	if err != nil {
		t.Fatalf("ssh %s@%s %q: %v", user, vm.PrimaryIP, script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("ssh %s@%s %q: exit %d: %s%s", user, vm.PrimaryIP, script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// waitFile waits until path exists in the VM (cloud-init's final stage
// runs after sshd is up).
func (e *env) waitFile(t testing.TB, vm driversdk.VM, path string) {
	t.Helper()
	e.run(t, vm, "root", fmt.Sprintf("for i in $(seq 200); do test -e %s && exit 0; sleep 0.05; done; exit 1", shellQuote(path)))
}

// testLogger sends the driver's log to the test's.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// snapshot is what the driver may leave on the host, restricted to one
// state dir's objects (other tests and other drivers may run at the same
// time): its bridge and its VMs' links, routes and neighbours on the
// bridge, its nft table, mounts under the state dir, its cgroups, the
// processes of its VMs (zombies included), its VM directories and host
// record, and named network namespaces with its names.
func snapshot(t testing.TB, stateDir string, vmIDs []string) []string {
	t.Helper()
	inst := instanceID(stateDir)
	bridge := bridgePrefix + inst
	var out []string
	add := func(kind string, lines ...string) {
		for _, l := range lines {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, kind+": "+l)
			}
		}
	}
	cmd := func(args ...string) []string {
		b, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return strings.Split(string(b), "\n")
	}
	mine := func(line string) bool {
		if strings.Contains(line, bridge) || strings.Contains(line, stateDir) {
			return true
		}
		for _, id := range vmIDs {
			if strings.Contains(line, id) || strings.Contains(line, strings.TrimPrefix(id, "vm-")) {
				return true
			}
		}
		return false
	}
	for _, l := range cmd("ip", "-o", "link", "show") {
		if mine(l) {
			add("link", l)
		}
	}
	for _, l := range cmd("ip", "-o", "-4", "route", "show", "table", "all") {
		if mine(l) {
			add("route", l)
		}
	}
	for _, l := range cmd("ip", "neigh", "show") {
		if mine(l) {
			add("neigh", l)
		}
	}
	// The VMs' network namespaces are anonymous (they live and die with
	// their init); a named one of this driver's would be a leak.
	for _, l := range cmd("ip", "netns", "list") {
		if mine(l) {
			add("netns", l)
		}
	}
	if ok, err := tableExists(tablePrefix + inst); err != nil {
		t.Fatal(err)
	} else if ok {
		add("nft", "table inet "+tablePrefix+inst)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		if strings.Contains(l, stateDir) {
			add("mount", l)
		}
	}
	// Cgroups: every soulstack-local dir and VM cgroup in every hierarchy.
	cgMounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cgMounts {
		_ = filepath.WalkDir(m.point, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if slices.Contains(vmIDs, d.Name()) {
				add("cgroup", p)
			}
			return nil
		})
	}
	// Processes: the launcher and init carry the state dir in their
	// environment; everything in a VM is in its cgroups.
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if b, err := os.ReadFile(p + "/environ"); err == nil && bytes.Contains(b, []byte(stateDir)) {
			add("process", p+" (environ)")
		}
		if b, err := os.ReadFile(p + "/cgroup"); err == nil && mine(string(b)) {
			add("process", p+" (cgroup)")
		}
	}
	ents, _ := os.ReadDir(filepath.Join(stateDir, vmsDir))
	for _, e := range ents {
		add("state", "vms/"+e.Name())
	}
	if exists(filepath.Join(stateDir, hostFile)) {
		add("state", hostFile)
	}
	slices.Sort(out)
	return out
}

// forwarding returns IPv4 forwarding and whether the driver's record of
// it exists; ok is false when another local driver's bridge is up (then
// they are not this test's to compare).
func forwarding(t testing.TB, stateDir string) (state string, ok bool) {
	t.Helper()
	if otherBridges(bridgePrefix + instanceID(stateDir)) {
		return "", false
	}
	fwd, err := os.ReadFile(ipForwardPath)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ip_forward=%s, ip_forward.orig exists=%v", strings.TrimSpace(string(fwd)),
		exists(filepath.Join(runDir, "ip_forward.orig"))), true
}

// otherBridges reports whether another local driver's bridge is up.
func otherBridges(mine string) bool {
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), bridgePrefix) && e.Name() != mine {
			return true
		}
	}
	return false
}

func vmIDs(vms []driversdk.VM) []string {
	out := make([]string, len(vms))
	for i, v := range vms {
		out[i] = v.ID
	}
	return out
}

func wantCode(t testing.TB, err error, code string) *driversdk.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want code %s", code)
	}
	var e *driversdk.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v, want code %s", err, code)
	}
	return e
}
