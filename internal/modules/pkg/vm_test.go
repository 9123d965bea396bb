package pkg_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
	"golang.org/x/crypto/ssh"
)

func TestMain(m *testing.M) {
	// Local VMs are started by re-executing the test binary.
	localcloud.RunIfChild()
	os.Exit(m.Run())
}

// testPackage is a small .deb the local repository serves.
type testPackage struct {
	name     string
	version  string
	preinst  string // shell script; empty: none
	postinst string
	// late, when not 0, leaves the package out of the repository's
	// Packages index; Packages.<late> has it (and those of earlier
	// stages): copying that over Packages in a VM (publish) is a
	// repository that gained packages after the VM's lists were made.
	late int
}

// The packages of the local repository. Each installs
// /usr/share/soulstack-test/<name>.
var testPackages = []testPackage{
	{name: "soulstack-test-a", version: "1.0"},
	{name: "soulstack-test-b", version: "1.0"},
	{name: "soulstack-test-c", version: "1.0"},
	{name: "soulstack-test-d", version: "1.0"},
	// broken fails to configure.
	{name: "soulstack-test-broken", version: "1.0", postinst: "echo 'soulstack-test-broken: refusing to configure' >&2\nexit 1"},
	// slow holds dpkg's locks, from its preinst, until the release
	// file exists; dpkg -i it to get a real lock holder.
	{name: "soulstack-test-slow", version: "1.0", preinst: "touch " + slowHolding + "\nwhile [ ! -e " + slowRelease + " ]; do sleep 0.05; done"},
	{name: "soulstack-test-late", version: "1.0", late: 1},
	{name: "soulstack-test-late2", version: "1.0", late: 2},
}

// Files in a VM that the slow package's preinst uses.
const (
	slowHolding = "/root/soulstack-test-holding"
	slowRelease = "/root/soulstack-test-release"
)

// repo is a flat apt repository of the test packages on the host. VMs
// do not see the host's /var/tmp: newVMAs copies the repository into
// each VM, at the same path.
type repo struct{ dir string }

// newRepo builds the test packages with dpkg-deb and indexes them with
// dpkg-scanpackages (package dpkg-dev). The directory is removed when the
// test ends.
func newRepo(t testing.TB) repo {
	t.Helper()
	for _, tool := range []string{"dpkg-deb", "dpkg-scanpackages"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the local apt repository needs %s (apt-get install dpkg-dev)", tool)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "soulstack-pkg-repo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := filepath.Join(dir, "build")
	for _, p := range testPackages {
		root := filepath.Join(build, p.name)
		write(t, filepath.Join(root, "DEBIAN", "control"), 0o644, fmt.Sprintf(
			"Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: Soul Stack tests <tests@soulstack.invalid>\nSection: misc\nPriority: optional\nDescription: Soul Stack test package %s\n",
			p.name, p.version, p.name))
		write(t, filepath.Join(root, "usr", "share", "soulstack-test", p.name), 0o644, p.name+"\n")
		if p.preinst != "" {
			write(t, filepath.Join(root, "DEBIAN", "preinst"), 0o755, "#!/bin/sh\n"+p.preinst+"\n")
		}
		if p.postinst != "" {
			write(t, filepath.Join(root, "DEBIAN", "postinst"), 0o755, "#!/bin/sh\n"+p.postinst+"\n")
		}
		deb := filepath.Join(dir, fmt.Sprintf("%s_%s_all.deb", p.name, p.version))
		if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, deb).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb --build %s: %v\n%s", p.name, err, out)
		}
	}
	if err := os.RemoveAll(build); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dpkg-scanpackages", "--multiversion", ".", "/dev/null")
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	index, err := cmd.Output()
	if err != nil {
		t.Fatalf("dpkg-scanpackages: %v\n%s", err, stderr.String())
	}
	stanzas := strings.Split(strings.TrimSpace(string(index)), "\n\n")
	for stage := 0; stage <= 2; stage++ {
		var in []string
		for _, stanza := range stanzas {
			if !slices.ContainsFunc(testPackages, func(p testPackage) bool {
				return p.late > stage && strings.HasPrefix(stanza, "Package: "+p.name+"\n")
			}) {
				in = append(in, stanza)
			}
		}
		name := "Packages"
		if stage > 0 {
			name += "." + strconv.Itoa(stage)
		}
		write(t, filepath.Join(dir, name), 0o644, strings.Join(in, "\n\n")+"\n")
	}
	return repo{dir: dir}
}

// publish makes the packages of the given late stage (and earlier ones)
// part of the repository as v sees it: the VM's copy of the index gains
// them (the host's stays as it was).
func (r repo) publish(t testing.TB, v *vm, stage int) {
	t.Helper()
	v.sh(t, fmt.Sprintf("cp %[1]s/Packages.%[2]d %[1]s/Packages", r.dir, stage))
}

func write(t testing.TB, path string, mode os.FileMode, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// deb returns the path of a test package's file.
func (r repo) deb(name string) string {
	return filepath.Join(r.dir, name+"_1.0_all.deb")
}

// vm is a local VM reached over SSH as root, as a module.Target that
// counts the commands run through it.
type vm struct {
	client *sshx.Client
	// sudo runs the commands through sudo, as the engine does for modules
	// that need root when the login user is not root.
	sudo  bool
	execs atomic.Int32
	// onResult, when set, sees the result of every counted command.
	onResult func(module.ExecResult)
	mu       sync.Mutex
}

var _ module.Target = (*vm)(nil)

// newVM creates a local VM with login user root; see newVMAs.
func newVM(t *testing.T, r repo) *vm { return newVMAs(t, r, "root") }

// newVMAs creates a local VM on a driver and state dir of its own, with
// login user user (password-less sudo when not root), points
// its apt at r (and only at r: the VM reaches no network repository) with
// empty package lists, and destroys everything when the test ends. It
// skips the test where local VMs cannot run.
func newVMAs(t *testing.T, r repo, user string) *vm {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skipf("real installs run in local VMs, which need Linux and root (running as uid %d on %s)", os.Geteuid(), runtime.GOOS)
	}
	need := []string{"/usr/sbin/sshd", "/usr/bin/apt-get", "/usr/bin/dpkg"}
	if user != "root" {
		need = append(need, "/usr/bin/sudo")
	}
	for _, f := range need {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("real installs need %s on the host", f)
		}
	}
	state, err := os.MkdirTemp("/var/tmp", "soulstack-pkg-vms-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(state); err != nil {
			t.Error(err)
		}
	})
	cfg, _ := json.Marshal(map[string]any{"state_dir": state})
	prov := driversdk.Provider{Name: "local", FQDNSuffix: "local.test", Config: cfg}
	d := localcloud.New(localcloud.Options{Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))})

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vms, err := d.Create(ctx, driversdk.CreateRequest{
		Provider:       prov,
		RequestID:      fmt.Sprintf("pkg-test-%d", time.Now().UnixNano()),
		Profile:        json.RawMessage(fmt.Sprintf(`{"memory_mb": 1024, "ssh_user": %q}`, user)),
		Count:          1,
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, err := d.List(ctx, driversdk.ListRequest{Provider: prov})
		if err != nil {
			t.Errorf("cleanup: list VMs: %v", err)
		}
		var ids []string
		for _, v := range left {
			ids = append(ids, v.ID)
		}
		if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: ids}); err != nil {
			t.Errorf("cleanup: destroy %v: %v", ids, err)
		}
	})
	if err != nil {
		t.Fatalf("create a local VM: %v", err)
	}
	hostKey, _ := vms[0].Attributes["ssh_host_key"].(string)
	pool := sshx.NewPool(sshx.Options{})
	t.Cleanup(func() { pool.Close() })
	c, err := pool.Get(ctx, sshx.Target{Address: vms[0].PrimaryIP, User: user, PrivateKey: pem.EncodeToMemory(blk), HostKey: hostKey})
	if err != nil {
		t.Fatalf("ssh to the VM: %v", err)
	}
	v := &vm{client: c, sudo: user != "root"}
	v.upload(t, r.dir)
	v.sh(t, `set -e
rm -f /etc/apt/sources.list.d/* /var/lib/apt/periodic/*
echo 'deb [trusted=yes] file:`+r.dir+` ./' > /etc/apt/sources.list
rm -rf /var/lib/apt/lists/*
mkdir -p /var/lib/apt/lists/partial
echo 'APT::Update::Pre-Invoke { "echo update >> `+aptUpdatesLog+`"; };' > /etc/apt/apt.conf.d/99soulstack-test-count
test -r `+r.dir+`/Packages`)
	return v
}

// upload copies the files of the host directory dir into the VM, at the
// same path.
func (v *vm) upload(t testing.TB, dir string) {
	t.Helper()
	tarball := moduletest.DirTar(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := "'" + strings.ReplaceAll(dir, "'", `'\''`) + "'"
	res, err := v.exec(ctx, module.Command{Argv: []string{"/bin/sh", "-c", "mkdir -p -m 755 " + q + " && tar -x -o -C " + q}, Stdin: tarball})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("copy %s into the VM: %v (exit %d) %s", dir, err, res.ExitCode, res.Stderr)
	}
}

// aptUpdatesLog, in a VM, gets a line each time apt-get update runs there
// (an APT::Update::Pre-Invoke hook newVMAs installs).
const aptUpdatesLog = "/root/soulstack-test-apt-updates"

// aptUpdates returns how many times apt-get update has run in the VM.
func (v *vm) aptUpdates(t testing.TB) int {
	t.Helper()
	n, err := strconv.Atoi(v.sh(t, "cat "+aptUpdatesLog+" 2>/dev/null | wc -l"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// SID names the VM.
func (v *vm) SID() string { return "pkg-test-vm" }

// Exec runs a module's command and counts it.
func (v *vm) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	v.execs.Add(1)
	res, err := v.exec(ctx, cmd)
	v.mu.Lock()
	f := v.onResult
	v.mu.Unlock()
	if f != nil && err == nil {
		f(res)
	}
	return res, err
}

func (v *vm) exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	res, err := v.client.Exec(ctx, sshx.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: v.sudo})
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}

// sh runs a shell script in the VM, not counted, and returns its trimmed
// stdout; a failure fails the test.
func (v *vm) sh(t testing.TB, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := v.exec(ctx, module.Command{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("in the VM: %s: %v (exit %d)\n%s%s", script, err, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// run runs m with params (defaults applied) and returns the result, the
// output and how many commands it ran.
func (v *vm) run(t testing.TB, m module.Module, params map[string]any) (module.Result, map[string]any, int, error) {
	t.Helper()
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := v.execs.Load()
	res, err := m.Run(ctx, module.RunInfo{}, raw, v)
	out, _ := res.Output.(map[string]any)
	return res, out, int(v.execs.Load() - before), err
}

// testLog sends the driver's log to the test's.
type testLog struct{ t testing.TB }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
