package moduletest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/sshtest"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
)

// VM is a module.Target on a local VM (internal/localcloud: an overlay
// over this host's /, so it has the host's programs and packages) that
// records every command it runs, so tests can count round trips and look
// for secrets. Commands run through sudo when the login user is not root,
// as the engine does for modules that need root. A test package that uses
// it must call localcloud.RunIfChild first in its TestMain: VMs are
// started by re-executing the test binary.
type VM struct {
	driversdk.VM
	// ClientKey is the private key (OpenSSH PEM) the VM authorizes for
	// its SSH user, for tests that register the VM as a soul.
	ClientKey []byte
	// StateDir is the driver's state dir, which holds the VM's writable
	// layer (see UpperDir).
	StateDir string
	client   *sshx.Client
	target   sshx.Target
	// twin is the same VM through the soul executor (WithExecutor).
	twin *VM

	mu   sync.Mutex
	cmds []module.Command
}

var _ module.Target = (*VM)(nil)

// NewVM starts one local VM logged into as sshUser, named under suffix,
// and destroys it when the test ends. It skips the test where local VMs
// cannot run, or when a file in needs is missing on the host.
func NewVM(t *testing.T, sshUser, suffix string, needs ...string) *VM {
	t.Helper()
	return NewVMWith(t, VMOptions{SSHUser: sshUser, Suffix: suffix, Needs: needs})
}

// BasesDir is where VMs of tests keep the bases the local driver builds
// (the profile key base): every test package of this machine shares it,
// so Debian is debootstrapped once (a minute or two), not per test.
const BasesDir = "/var/cache/soulstack-localcloud-test/bases"

// VMOptions says what NewVMWith makes.
type VMOptions struct {
	// SSHUser is the login user (root when empty); Suffix the FQDN suffix.
	SSHUser, Suffix string
	// Base is the profile's base ("debian-bookworm": a VM without the
	// host's packages, on a base kept in BasesDir); empty means the view
	// of the host.
	Base string
	// Nesting is the profile's nesting ("docker"); the provider config
	// then allows it.
	Nesting string
	// Needs are host files without which the test is skipped.
	Needs []string
	// HostPorts are the host's TCP ports the VM may reach (the provider's
	// host_ports); nil means the driver's default.
	HostPorts []uint16
}

// NewVMWith starts one local VM as o says; see NewVM. A VM on a base
// gets 10 minutes to start, since the first one builds the base.
func NewVMWith(t *testing.T, o VMOptions) *VM {
	t.Helper()
	sshUser, suffix := o.SSHUser, o.Suffix
	if sshUser == "" {
		sshUser = "root"
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skipf("local VMs need root on Linux (running as uid %d on %s)", os.Geteuid(), runtime.GOOS)
	}
	needs := o.Needs
	if o.Base == "" {
		needs = append([]string{"/usr/sbin/sshd"}, needs...)
	}
	for _, f := range needs {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("the VM test needs %s on the host", f)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "soulstack-vm-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	d := localcloud.New(localcloud.Options{})
	prov, rawProfile := o.request(dir, sshUser, suffix)
	authorized, clientKey := clientKeys(t)
	timeout := time.Minute
	if o.Base != "" {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	vms, err := d.Create(ctx, driversdk.CreateRequest{
		Provider: prov, RequestID: "moduletest", Count: 1,
		Profile:        rawProfile,
		AuthorizedKeys: []string{authorized},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := d.List(ctx, driversdk.ListRequest{Provider: prov})
		if err != nil {
			t.Errorf("cleanup: list VMs: %v", err)
		}
		var ids []string
		for _, vm := range list {
			ids = append(ids, vm.ID)
		}
		if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: ids}); err != nil {
			t.Errorf("cleanup: destroy %v: %v", ids, err)
		}
	})
	if err != nil || len(vms) != 1 {
		t.Fatalf("create a VM: %v (%d VMs)", err, len(vms))
	}
	hostKey, _ := vms[0].Attributes["ssh_host_key"].(string)
	target := sshx.Target{
		Address: vms[0].PrimaryIP, User: sshUser, PrivateKey: clientKey, HostKey: hostKey,
		ConnectTimeout: 10 * time.Second,
	}
	c, err := sshx.Dial(ctx, target, sshx.Options{})
	if err != nil {
		t.Fatalf("ssh to the VM: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &VM{VM: vms[0], ClientKey: clientKey, StateDir: dir, client: c, target: target}
}

// WithExecutor makes CheckThenApply run every check a second time through
// the soul executor (`soul exec --stdio` over SSH, which answers probes in
// its own process), uploaded and started now, so that neither its upload
// nor its process shows in a check's comparison; both checks must predict
// the same.
func (v *VM) WithExecutor(t *testing.T) {
	t.Helper()
	bin, sum := sshtest.BuildSoul(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sshx.Dial(ctx, v.target, sshx.Options{Executor: &sshx.Executor{
		Binaries: map[string]sshx.ExecutorBinary{runtime.GOARCH: {Path: bin, SHA256: sum}},
	}})
	if err != nil {
		t.Fatalf("ssh to the VM: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if res, err := c.Exec(ctx, sshx.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the executor: %v (exit %d)", err, res.ExitCode)
	}
	if st := c.ExecutorState(); st != "executor" {
		t.Fatalf("the executor does not run on the VM: %s", st)
	}
	v.twin = &VM{VM: v.VM, ClientKey: v.ClientKey, StateDir: v.StateDir, client: c, target: v.target}
}

// request is the local provider (its state in dir) and the profile of o's
// VM.
func (o VMOptions) request(dir, sshUser, suffix string) (driversdk.Provider, json.RawMessage) {
	cfg := map[string]any{"state_dir": dir, "bases_dir": BasesDir}
	profile := map[string]any{"cpus": 1, "memory_mb": 1024, "ssh_user": sshUser}
	if o.Base != "" {
		profile["base"] = o.Base
	}
	if o.Nesting != "" {
		profile["nesting"] = o.Nesting
		cfg["allow_nesting"] = true
	}
	if o.HostPorts != nil {
		cfg["host_ports"] = o.HostPorts
	}
	rawCfg, _ := json.Marshal(cfg)
	rawProfile, _ := json.Marshal(profile)
	return driversdk.Provider{Name: "local", FQDNSuffix: suffix, Config: rawCfg}, rawProfile
}

// clientKeys makes the test's SSH key: its authorized_keys line and its
// private key (PEM).
func clientKeys(t *testing.T) (string, []byte) {
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
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))), pem.EncodeToMemory(blk)
}

// UpperDir is the writable layer of a VM on a base: every file the VM
// writes lands there, so comparing it before and after shows whether a
// command changed the VM's filesystem.
func (v *VM) UpperDir() string { return filepath.Join(v.StateDir, "vms", v.ID, "upper") }

// SID returns the VM's FQDN.
func (v *VM) SID() string { return v.FQDN }

// Exec records cmd and runs it on the VM as root.
func (v *VM) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	v.mu.Lock()
	v.cmds = append(v.cmds, cmd)
	v.mu.Unlock()
	res, err := v.client.Exec(ctx, sshx.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: true, Probe: cmd.Probe})
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}

// Calls returns how many commands ran so far.
func (v *VM) Calls() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.cmds)
}

// Commands returns the commands run so far.
func (v *VM) Commands() []module.Command {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]module.Command(nil), v.cmds...)
}

// Sh runs a shell script on the VM as root, outside the record, and
// returns its trimmed standard output; a failure fails the test.
func (v *VM) Sh(tb testing.TB, script string) string {
	tb.Helper()
	return v.ShFor(tb, script, time.Minute)
}

// ShFor is Sh with a timeout other than a minute.
func (v *VM) ShFor(tb testing.TB, script string, timeout time.Duration) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := v.client.Exec(ctx, sshx.Command{Script: script, Sudo: true})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("%s: %v (exit %d) %s", script, err, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}
