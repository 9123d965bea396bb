// Package packaging_test installs the Debian packages scripts/package
// builds on a real Debian VM (the QEMU driver's debian-bookworm image,
// with its own systemd) and runs the packaged keeper there.
package packaging_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/qemu"
	"github.com/soulstack/soulstack/internal/drivers/qemu/qemutest"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
)

// vm is a booted QEMU VM the test logs in to as debian.
type vm struct {
	t    *testing.T
	conn *sshx.Client
}

// run runs script on the VM as root (sudo) and returns its stdout,
// failing the test on a non-zero exit.
func (v *vm) run(script string, stdin ...byte) string {
	v.t.Helper()
	out, rc := v.try(script, stdin...)
	if rc != 0 {
		v.t.Fatalf("on the VM, exit %d:\n%s\n%s", rc, script, out)
	}
	return out
}

func (v *vm) try(script string, stdin ...byte) (string, int) {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := v.conn.Exec(ctx, sshx.Command{Argv: []string{"sudo", "-n", "sh", "-c", script}, Stdin: stdin})
	if err != nil {
		v.t.Fatalf("on the VM: %v\n%s", err, script)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

// boot makes a debian-bookworm VM and logs in to it.
func boot(t *testing.T) *vm {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	spub, _ := gossh.NewPublicKey(pub)
	state, err := os.MkdirTemp("/var/tmp", "soulstack-package-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	t.Cleanup(func() { qemutest.NothingLeft(t, state) })
	cfg, _ := json.Marshal(map[string]any{"state_dir": state, "images_dir": qemutest.ImagesDir()})
	prov := driversdk.Provider{Name: "qemu", FQDNSuffix: "package.test", Config: cfg, KeeperID: "package-test"}
	d := qemu.New(qemu.Options{})
	ctx := context.Background()
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "package-test", RunID: "package-test",
		Profile: json.RawMessage(`{"memory_mb": 1024, "disk_gb": 4}`), Count: 1, Names: []string{"deb.package.test"},
		AuthorizedKeys: []string{string(gossh.MarshalAuthorizedKey(spub))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(context.Background(), driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID}}); err != nil {
			t.Errorf("destroy the VM: %v", err)
		}
	})
	hostKey, _ := vms[0].Attributes["ssh_host_key"].(string)
	conn, err := sshx.Dial(ctx, sshx.Target{Address: vms[0].PrimaryIP, User: "debian", PrivateKey: pem.EncodeToMemory(blk), HostKey: hostKey,
		Retry: sshx.RetryPolicy{Attempts: 90, Interval: 3 * time.Second}, RetryAuth: true}, sshx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	v := &vm{t: t, conn: conn}
	v.run("cloud-init status --wait >/dev/null; true")
	return v
}

// TestPackagesOnDebian: the packages scripts/package builds install with
// dpkg -i on a Debian VM with its own systemd; the keeper's unit starts as
// the soulstack user (Type=notify: systemctl start returns once it serves)
// and soulctl works against it; systemctl restart in the middle of a run
// drains it (the step in flight finishes, the run resumes after the
// restart and each command ran once); systemctl reload keeps it serving;
// apt-get remove stops it and leaves its data. The same tree packaged
// twice gives the same bytes.
func TestPackagesOnDebian(t *testing.T) {
	qemutest.RequireImageBuild(t)
	t.Parallel()
	dist, again := t.TempDir(), t.TempDir()
	build := func(dir string) error {
		cmd := exec.Command("../scripts/package")
		cmd.Env = append(os.Environ(), "DIST="+dir, "SOURCE_DATE_EPOCH=1780000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("scripts/package: %v\n%s", err, out)
		}
		return nil
	}
	// The packages are built (twice) while the VM boots: both take a
	// minute or more, and the boot is mostly one emulating core.
	var buildErr error
	var building sync.WaitGroup
	building.Go(func() {
		if buildErr = build(dist); buildErr == nil {
			buildErr = build(again)
		}
	})
	t.Cleanup(building.Wait) // before the directories go, whatever happens
	v := boot(t)
	building.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	if len(debs) != 4 {
		t.Fatalf("packages = %v, want 4", debs)
	}
	for _, p := range debs {
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(again, filepath.Base(p)))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s is not the same bytes when built again (%v)", filepath.Base(p), err)
		}
	}

	for _, name := range []string{"soulstack-keeper", "soulstack-soulctl", "soulstack-soul"} {
		p := filepath.Join(dist, name+"_0.24.0_amd64.deb")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		v.run("cat > /tmp/"+filepath.Base(p), b...)
	}
	if out, rc := v.try("dpkg -i /tmp/soulstack-*.deb"); rc != 0 {
		t.Fatalf("dpkg -i: exit %d\n%s\n%s", rc, out, v.run("journalctl -u soulstack-keeper --no-pager | tail -40"))
	}
	if got := strings.TrimSpace(v.run("systemctl is-active soulstack-keeper.service; systemctl is-enabled soulstack-keeper.service; ps -o user= -C keeper")); got != "active\nenabled\nsoulstack" {
		t.Fatalf("after dpkg -i the keeper is:\n%s\n%s", got, v.run("journalctl -u soulstack-keeper --no-pager | tail -30"))
	}
	if got := v.run("keeper version; systemctl show -p Type --value soulstack-keeper; stat -c '%U %a' /var/lib/soulstack-keeper; stat -c '%U %G %a' /etc/soulstack/keeper.yml"); got != "keeper 0.24.0\nnotify\nsoulstack 700\nroot soulstack 640\n" {
		t.Fatalf("the installed keeper:\n%s", got)
	}
	// soulctl against it, with the admin token the keeper made; the VM
	// itself becomes a soul over SSH with the keeper's key.
	env := "export SOULSTACK_KEEPER=http://127.0.0.1:8420 SOULSTACK_TOKEN=$(cat /var/lib/soulstack-keeper/admin.token); "
	v.run("cat /var/lib/soulstack-keeper/ssh/id_ed25519.pub >> /home/debian/.ssh/authorized_keys")
	v.run(env + "soulctl soul add self.package.test --address 127.0.0.1 --user debian")
	v.run(`cat > /tmp/slow.yaml <<'EOF'
steps:
  - name: first
    on: self.package.test
    module: core.command.ran
    params: {cmd: "sleep 8; echo first >> /tmp/ledger"}
  - name: second
    on: self.package.test
    module: core.command.ran
    params: {cmd: "echo second >> /tmp/ledger"}
EOF`)
	out := v.run(env + "soulctl run /tmp/slow.yaml --detach")
	id := ""
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "run_") {
			id = strings.Trim(f, ".:,")
		}
	}
	if id == "" {
		t.Fatalf("no run id in %q", out)
	}
	v.run(fmt.Sprintf("for i in $(seq 60); do %s soulctl runs get %s -o json | grep -q '\"phase\": *\"Running\"' && exit 0; sleep 0.5; done; exit 1", env, id))
	time.Sleep(2 * time.Second) // the first step is in flight
	v.run("systemctl restart soulstack-keeper.service")
	final := v.run(env + "soulctl runs wait " + id + " -o json")
	if !strings.Contains(final, `"phase": "Succeeded"`) {
		t.Fatalf("the run across systemctl restart:\n%s\n%s", final, v.run("journalctl -u soulstack-keeper --no-pager | tail -40"))
	}
	if got := v.run("cat /tmp/ledger"); got != "first\nsecond\n" {
		t.Fatalf("the ledger after the restart = %q, want each command once", got)
	}
	if logs := v.run("journalctl -u soulstack-keeper --no-pager"); !strings.Contains(logs, "draining") {
		t.Errorf("the keeper's journal shows no drain on systemctl restart:\n%s", logs)
	}
	v.run("systemctl reload soulstack-keeper.service && sleep 1 && systemctl is-active soulstack-keeper.service")
	v.run(env + "soulctl soul get self.package.test")

	// The daily backup: enabled by the package, started here by hand as
	// its timer would, while the keeper serves; the backup restores into
	// an empty data dir and its audit log verifies there.
	if got := v.run("systemctl is-enabled soulstack-keeper-backup.timer; systemctl is-active soulstack-keeper-backup.timer"); got != "enabled\nactive\n" {
		t.Fatalf("the backup timer is:\n%s", got)
	}
	if out, rc := v.try("systemctl start soulstack-keeper-backup.service"); rc != 0 {
		t.Fatalf("the backup service: exit %d\n%s\n%s", rc, out, v.run("journalctl -u soulstack-keeper-backup --no-pager | tail -40"))
	}
	backup := strings.TrimSpace(v.run("ls /var/backups/soulstack/keeper-*.backup"))
	if got := v.run("stat -c '%U %a' " + backup + " /var/backups/soulstack; stat -c %U /var/lib/soulstack-keeper/keeper.db*"); !strings.HasPrefix(got, "soulstack 600\nsoulstack 700\n") || strings.Contains(got, "root") {
		t.Fatalf("the backup and the data dir's files after it:\n%s", got)
	}
	v.run("keeper restore " + backup + " --data-dir /tmp/restored --data-key /var/lib/soulstack-keeper/data.key")
	if got := v.run("keeper audit verify --data-dir /tmp/restored"); !strings.Contains(got, "audit chain OK") {
		t.Fatalf("audit verify of the restored backup:\n%s", got)
	}
	if got := v.run("systemctl is-active soulstack-keeper.service"); got != "active\n" {
		t.Fatalf("the keeper after the backup: %s", got)
	}

	v.run("DEBIAN_FRONTEND=noninteractive apt-get remove -y soulstack-keeper >/dev/null")
	if got, _ := v.try("systemctl is-active soulstack-keeper.service"); strings.TrimSpace(got) == "active" {
		t.Fatal("the keeper still runs after apt-get remove")
	}
	if got := v.run("test ! -e /usr/bin/keeper && ls /var/lib/soulstack-keeper"); !strings.Contains(got, "keeper.db") || !strings.Contains(got, "data.key") {
		t.Fatalf("after apt-get remove the data dir holds:\n%s", got)
	}
}
