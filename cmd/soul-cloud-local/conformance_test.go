package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/plugin"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// TestPlugin runs the built soul-cloud-local as the keeper does (a real
// plugin process, gRPC through go-plugin) and makes real VMs on this
// host with it.
func TestPlugin(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skipf("the local driver makes VMs only as root on Linux (this is %s, uid %d)", runtime.GOOS, os.Geteuid())
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Skip("the local driver needs the host's sshd (apt-get install openssh-server)")
	}
	bin := drivertest.Build(t, "github.com/soulstack/soulstack/cmd/soul-cloud-local")

	t.Run("conformance", func(t *testing.T) {
		drivertest.Run(t, drivertest.Options{
			Binary:      bin,
			Provider:    driversdk.Provider{Name: "local", Config: stateConfig(t)},
			Profile:     json.RawMessage(`{"cpus": 1, "memory_mb": 256}`),
			ResizeSpec:  json.RawMessage(`{"memory_mb": 512}`),
			UnknownVMID: "vm-00000000",
		})
	})

	t.Run("VMs outlive the plugin process", func(t *testing.T) {
		testOutlive(t, bin)
	})
}

// stateConfig returns a provider config with a state dir of the test's
// own, removed at the end.
func stateConfig(t *testing.T) json.RawMessage {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "soul-cloud-local-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg, err := json.Marshal(map[string]string{"state_dir": dir})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testOutlive makes a VM, kills the plugin process with SIGKILL, and
// checks that the VM still answers SSH and that the next plugin process
// lists it as running and destroys it.
func testOutlive(t *testing.T, bin string) {
	pluginDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(pluginDir, "soul-cloud-local")); err != nil {
		t.Fatal(err)
	}
	h, err := plugin.New(plugin.Config{PluginDir: pluginDir, Base: base.Base{Log: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx := context.Background()
	d, err := h.Driver(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	prov := driversdk.Provider{Name: "local", FQDNSuffix: "local.test", Config: stateConfig(t)}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	block, _ := ssh.MarshalPrivateKey(priv, "")

	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "outlive", RunID: "outlive", Count: 1,
		Names: []string{"outlive.local.test"}, AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(sshPub))}})
	t.Cleanup(func() {
		if len(vms) > 0 {
			if err := d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID}}); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create: %v, %v", vms, err)
	}

	pid := h.PID("local")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the plugin process %d: %v", pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.PID("local") == pid; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed plugin process is still reported running")
		}
	}

	c, err := sshx.Dial(ctx, sshx.Target{Address: vms[0].PrimaryIP, User: "root", PrivateKey: pem.EncodeToMemory(block),
		HostKey: vms[0].Attributes["ssh_host_key"].(string), Retry: sshx.RetryPolicy{Attempts: 1}}, sshx.Options{})
	if err != nil {
		t.Fatalf("ssh to the VM after its driver died: %v", err)
	}
	res, err := c.Exec(ctx, sshx.Command{Argv: []string{"hostname"}})
	c.Close()
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "outlive.local.test" {
		t.Fatalf("hostname after the driver died: %q, %v", res.Stdout, err)
	}

	listed, err := d.List(ctx, driversdk.ListRequest{Provider: prov, Tags: map[string]string{driversdk.TagRequestID: "outlive"}})
	if err != nil || len(listed) != 1 || listed[0].ID != vms[0].ID || listed[0].Attributes["state"] != "running" {
		t.Fatalf("List from a new plugin process: %+v, %v", listed, err)
	}
	if now := h.PID("local"); now == 0 || now == pid {
		t.Fatalf("no new plugin process (pid %d, was %d)", now, pid)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID}}); err != nil {
		t.Fatalf("Destroy from a new plugin process: %v", err)
	}
	vms = nil
}
