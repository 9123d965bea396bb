package docker_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/module"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
	"golang.org/x/crypto/ssh"
)

func TestMain(m *testing.M) {
	// Local VMs are started by re-executing the test binary.
	localcloud.RunIfChild()
	os.Exit(m.Run())
}

// vmTarget is a module.Target on a local VM that records every command
// it runs, so tests can count round trips and look for secrets.
type vmTarget struct {
	vm     driversdk.VM
	client *sshx.Client

	mu   sync.Mutex
	cmds []module.Command
}

// SID returns the VM's FQDN.
func (t *vmTarget) SID() string { return t.vm.FQDN }

// Exec records cmd and runs it on the VM, through sudo when the login
// user is not root, as the engine does for modules that need root.
func (t *vmTarget) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	t.mu.Lock()
	t.cmds = append(t.cmds, cmd)
	t.mu.Unlock()
	res, err := t.client.Exec(ctx, sshx.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, Sudo: true})
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}

// calls returns how many commands ran so far.
func (t *vmTarget) calls() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cmds)
}

// commands returns the commands run so far.
func (t *vmTarget) commands() []module.Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]module.Command(nil), t.cmds...)
}

// sh runs a shell script on the VM as root, outside the record, and
// returns its trimmed standard output; a failure fails the test.
func (t *vmTarget) sh(tb testing.TB, script string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := t.client.Exec(ctx, sshx.Command{Script: script, Sudo: true})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("%s: %v (exit %d) %s", script, err, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// newVM starts one local VM (an overlay over the host's /, so it has the
// host's docker CLI) logged into as sshUser, and destroys it when
// the test ends. It skips the test where local VMs cannot run.
func newVM(t *testing.T, sshUser string) *vmTarget {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skipf("local VMs need root on Linux (running as uid %d on %s)", os.Geteuid(), runtime.GOOS)
	}
	for _, f := range []string{"/usr/sbin/sshd"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("the VM test needs %s on the host", f)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "soulstack-docker-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	d := localcloud.New(localcloud.Options{})
	prov := driversdk.Provider{Name: "local", FQDNSuffix: "docker.test", Config: json.RawMessage(`{"state_dir":"` + dir + `"}`)}
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vms, err := d.Create(ctx, driversdk.CreateRequest{
		Provider: prov, RequestID: "docker", Count: 1,
		Profile:        json.RawMessage(`{"cpus": 1, "memory_mb": 1024, "ssh_user": "` + sshUser + `"}`),
		AuthorizedKeys: []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))},
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
	c, err := sshx.Dial(ctx, sshx.Target{
		Address: vms[0].PrimaryIP, User: sshUser, PrivateKey: pem.EncodeToMemory(blk), HostKey: hostKey,
		ConnectTimeout: 10 * time.Second,
	}, sshx.Options{})
	if err != nil {
		t.Fatalf("ssh to the VM: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &vmTarget{vm: vms[0], client: c}
}
