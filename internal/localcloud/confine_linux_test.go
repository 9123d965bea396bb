package localcloud

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"golang.org/x/sys/unix"
)

// hostSecrets are files that stand for a keeper's data dir (admin.token,
// data.key) in the places a keeper's data dir may be: under /root, /home,
// /var/lib, /var/tmp, /srv, /opt and /etc/soulstack…. They are removed
// when the test ends.
type hostSecrets struct {
	value string   // what every file holds
	paths []string // every file
}

func newHostSecrets(t *testing.T) hostSecrets {
	t.Helper()
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := hostSecrets{value: "sst_escape_" + hex.EncodeToString(b[:])}
	for _, parent := range []string{"/root", "/home", "/var/lib", "/var/tmp", "/srv", "/opt", "/etc"} {
		if _, err := os.Stat(parent); err != nil {
			continue
		}
		dir, err := os.MkdirTemp(parent, "soulstack-escape-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		data := filepath.Join(dir, ".keeper")
		if err := os.Mkdir(data, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"admin.token", "data.key"} {
			p := filepath.Join(data, name)
			if err := os.WriteFile(p, []byte(s.value+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s.paths = append(s.paths, p)
		}
	}
	return s
}

// hostSecretFile is a host secret's path and the SHA-256 of its content.
type hostSecretFile struct{ path, sha256 string }

// escapeScript is run in a VM as root, over SSH and from the userdata's
// runcmd. Each attack prints "blocked NAME" or "ESCAPED NAME"; the
// control prints "control ok host-ports" when a connection made the way
// the attacks make theirs reaches a host_ports port.
func escapeScript(secrets hostSecrets, checkout string, hostPID int, disk [2]uint32, hostKeys []hostSecretFile,
	closedPort, openPort int, hostAddrs []string) string {
	var b strings.Builder
	b.WriteString(`#!/bin/bash
try() { name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ESCAPED $name"; else echo "blocked $name"; fi; }
nonempty() { test -n "$("$@" 2>/dev/null)"; }
gw=$(ip -4 route show default | awk '{print $3}')
`)
	for i, p := range secrets.paths {
		fmt.Fprintf(&b, "try read-secret-%d cat %s\n", i, shellQuote(p))
	}
	fmt.Fprintf(&b, `try find-secrets nonempty sh -c "find / -path /proc -prune -o \\( -name admin.token -o -name data.key \\) -print | grep -F soulstack-escape-"
try find-escape-dirs nonempty find / -path /proc -prune -o -name 'soulstack-escape-*' -print
try find-other-vms nonempty find / -path /proc -prune -o -name vm.json -print
try read-checkout test -e %[1]s
try shadow-hashes nonempty awk -F: '$2 != "*"' /etc/shadow /etc/gshadow
try mknod-host-disk sh -c 'mknod /dev/hostdisk b %[2]d %[3]d && head -c 512 /dev/hostdisk'
try mknod-host-disk-root sh -c 'mknod /hostdisk b %[2]d %[3]d && head -c 512 /hostdisk'
try block-devices nonempty find / -path /proc -prune -o -type b -print
try mount-tmpfs sh -c 'mkdir -p /mnt/x && mount -t tmpfs x /mnt/x'
try mount-bind sh -c 'mkdir -p /mnt/x && mount --bind / /mnt/x'
try mount-proc sh -c 'mkdir -p /mnt/x && mount -t proc proc /mnt/x'
try mount-devtmpfs sh -c 'mkdir -p /mnt/x && mount -t devtmpfs d /mnt/x'
try remount-root-rw mount -o remount,rw /usr
try remount-sys-rw mount -o remount,rw /sys
try remount-proc-sys-rw mount -o remount,rw /proc/sys
try write-host-sysctl sh -c 'v=$(cat /proc/sys/vm/swappiness) && echo "$v" > /proc/sys/vm/swappiness'
try sysrq sh -c 'echo h > /proc/sysrq-trigger'
try raise-own-limit sh -c 'for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max; do [ -e "$f" ] && cat "$f" > "$f" && exit 0; done; exit 1'
try signal-host-process kill -0 %[4]d
try read-host-environ grep -qa %[5]s /proc/%[4]d/environ
try ptrace-init perl -e 'exit(syscall(101, 16, 1, 0, 0) == 0 ? 0 : 1)'
try read-init-environ cat /proc/1/environ
try read-init-root ls /proc/1/root/
try read-init-exe head -c 1 /proc/1/exe
try host-root-keyring perl -e 'exit(syscall(%[6]d, 0, -4, 0) >= 0 ? 0 : 1)'
try user-namespace unshare --user --map-root-user true
`, shellQuote(checkout), disk[0], disk[1], hostPID, shellQuote(secrets.value), unix.SYS_KEYCTL)
	// The VM has a host key of its own at the host's key's path: what
	// must not be readable is the host's (its digest, not its content, is
	// in the script).
	for i, k := range hostKeys {
		fmt.Fprintf(&b, "try read-host-ssh-key-%d test \"$(sha256sum < %s | cut -d' ' -f1)\" = %s\n", i, shellQuote(k.path), k.sha256)
	}
	fmt.Fprintf(&b, "try connect-host-port-bridge timeout 5 bash -c \"exec 3<>/dev/tcp/$gw/%d\"\n", closedPort)
	for i, a := range hostAddrs {
		fmt.Fprintf(&b, "try connect-host-port-addr-%d timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d'\n", i, a, closedPort)
	}
	b.WriteString("try connect-cloud-metadata timeout 5 bash -c 'exec 3<>/dev/tcp/169.254.169.254/80'\n")
	fmt.Fprintf(&b, `if timeout 5 bash -c "exec 3<>/dev/tcp/$gw/%d"; then echo "control ok host-ports"; fi
echo "capbnd $(awk '/^CapBnd/ {print $2}' /proc/self/status)"
echo "capeff $(awk '/^CapEff/ {print $2}' /proc/self/status)"
echo "dev $(cd /dev && ls -A | sort | xargs)"
`, openPort)
	return b.String()
}

// TestVMCannotReachHost is what root in a VM tries to get out of it, over
// SSH and from the userdata's runcmd: read a keeper's admin.token and
// data.key by path and by find(1) wherever a data dir may be, the checkout,
// other VMs' state, password hashes and the host's SSH keys; make a node of
// the host's disk and read it; mount and remount; change host sysctls,
// trigger sysrq, raise its own limits; signal, read and ptrace host
// processes and the init; connect to a host port that is not in
// host_ports on the bridge's and on the host's other addresses; reach the
// host root's keyring; make a user namespace. Each must
// fail, while a host_ports port still answers, and every process has
// only vmCapabilities.
func TestVMCannotReachHost(t *testing.T) {
	t.Parallel()
	secrets := newHostSecrets(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	checkout := filepath.Join(wd, "confine_linux_test.go")

	// A host process with the secret in its environment.
	sleeper := exec.Command("sleep", "600")
	sleeper.Env = []string{"SOULSTACK_ESCAPE=" + secrets.value}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		t.Fatal(err)
	}
	disk := [2]uint32{unix.Major(st.Dev), unix.Minor(st.Dev)}
	keyPaths, _ := filepath.Glob("/etc/ssh/ssh_host_*_key")
	var hostKeys []hostSecretFile
	for _, f := range append(keyPaths, "/var/lib/systemd/credential.secret", "/var/lib/systemd/random-seed", "/etc/ssl/private/ssl-cert-snakeoil.key") {
		if b, err := os.ReadFile(f); err == nil {
			sum := sha256.Sum256(b)
			hostKeys = append(hostKeys, hostSecretFile{path: f, sha256: hex.EncodeToString(sum[:])})
		}
	}

	// A host-only service: it listens on every host address, and counts
	// connections, which must stay 0.
	closed, err := net.Listen("tcp", ":0") // IPv4 and IPv6
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	var reached atomic.Int32
	go func() {
		for {
			c, err := closed.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	open, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	go func() {
		for {
			c, err := open.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var hostAddrs []string
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback != 0 || strings.HasPrefix(ifc.Name, bridgePrefix) || strings.HasPrefix(ifc.Name, "ssv") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				hostAddrs = append(hostAddrs, p.Addr().String())
			}
		}
	}
	script := escapeScript(secrets, checkout, sleeper.Process.Pid, disk, hostKeys,
		closed.Addr().(*net.TCPAddr).Port, open.Addr().(*net.TCPAddr).Port, hostAddrs)

	e := newEnv(t, map[string]any{"host_ports": []int{open.Addr().(*net.TCPAddr).Port}})
	userdata := "#cloud-config\nwrite_files:\n  - path: /root/escape.sh\n    permissions: '0755'\n    encoding: b64\n    content: " +
		base64.StdEncoding.EncodeToString([]byte(script)) + "\nruncmd:\n  - /root/escape.sh > /root/escape-userdata.out 2>&1\n"
	vm := e.create(t, driversdk.CreateRequest{RequestID: "escape", Userdata: []string{userdata}})[0]

	wantCaps := uint64(0)
	for _, c := range vmCapabilities {
		wantCaps |= 1 << c
	}
	check := func(t *testing.T, script, out string) {
		t.Helper()
		if strings.Contains(out, secrets.value) {
			t.Errorf("the host's secret is in the VM's output:\n%s", out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		blocked := 0
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "ESCAPED "):
				t.Errorf("attack %s succeeded", strings.TrimPrefix(l, "ESCAPED "))
			case strings.HasPrefix(l, "blocked "):
				blocked++
			}
		}
		if want := strings.Count(script, "\ntry "); blocked != want {
			t.Errorf("%d attacks blocked, want all %d:\n%s", blocked, want, out)
		}
		for _, c := range []string{"control ok host-ports"} {
			if !slices.Contains(lines, c) {
				t.Errorf("no %q: the VM cannot reach what it should (output:\n%s)", c, out)
			}
		}
		// /dev holds the safe set only.
		if want := "dev fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero"; !slices.Contains(lines, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
		for _, set := range []string{"capbnd", "capeff"} {
			if want := fmt.Sprintf("%s %016x", set, wantCaps); !slices.Contains(lines, want) {
				t.Errorf("want %q in:\n%s", want, out)
			}
		}
	}
	t.Run("ssh", func(t *testing.T) {
		// Over SSH also the bridge's IPv6 link-local addresses, known
		// once the bridge is up.
		full := script
		h, err := store{dir: e.dir}.loadHost()
		if err != nil || h == nil {
			t.Fatalf("host state: %v, %v", h, err)
		}
		br, err := net.InterfaceByName(h.Bridge)
		if err != nil {
			t.Fatal(err)
		}
		addrs, _ := br.Addrs()
		for i, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() {
				full += fmt.Sprintf("try connect-host-port-ipv6-%d timeout 5 bash -c 'exec 3<>/dev/tcp/%s%%eth0/%d'\n", i, p.Addr(), closed.Addr().(*net.TCPAddr).Port)
				full += fmt.Sprintf("if timeout 5 bash -c 'exec 3<>/dev/tcp/%s%%eth0/%d'; then echo 'control ok host-ports-ipv6'; fi\n", p.Addr(), open.Addr().(*net.TCPAddr).Port)
			}
		}
		// find(1) walks all of / three times: slow on a loaded machine.
		out := e.runFor(t, vm, "root", full, 3*time.Minute)
		check(t, full, out)
		if strings.Contains(full, "ipv6") && !strings.Contains(out, "control ok host-ports-ipv6") {
			t.Errorf("a host_ports port does not answer over IPv6, so the IPv6 attacks prove nothing:\n%s", out)
		}
	})
	t.Run("userdata", func(t *testing.T) {
		// runcmd runs after sshd is up; boot-finished says it is done.
		e.runFor(t, vm, "root", "for i in $(seq 1800); do test -e "+vmBootFinished+" && exit 0; sleep 0.1; done; exit 1", 3*time.Minute)
		check(t, script, e.run(t, vm, "root", "cat /root/escape-userdata.out"))
	})
	if n := reached.Load(); n != 0 {
		t.Errorf("the host-only port got %d connections from the VM", n)
	}
	// The host is as it was.
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the host process: %v", err)
	}
}

// TestDriverOptions: a directory the view of the host shows (under /usr)
// is empty in the VM when it is in Options.Hide, as the keeper's data and
// plugin dirs are, while its sibling shows; and Options.HostPorts (the
// keeper's listen port) is what VMs reach when the provider config has no
// host_ports.
func TestDriverOptions(t *testing.T) {
	t.Parallel()
	parent, err := os.MkdirTemp("/usr/local/share", "soulstack-hide-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	secret := filepath.Join(parent, "keeper", "hidden")
	shown := filepath.Join(parent, "shown", "file")
	for _, p := range []string{secret, shown} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keeper, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	go func() {
		for {
			c, err := keeper.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := keeper.Addr().(*net.TCPAddr).Port
	e := newEnv(t, nil)
	e.d = New(Options{Logger: testLogger(t), Hide: []string{filepath.Dir(secret), "relative/ignored"}, HostPorts: []uint16{uint16(port)}})
	vm := e.create(t, driversdk.CreateRequest{RequestID: "hide"})[0]
	got := e.run(t, vm, "root", fmt.Sprintf("ls -A %s | wc -l; cat %s; touch %s/new 2>/dev/null && echo writable || echo read-only",
		shellQuote(filepath.Dir(secret)), shellQuote(shown), shellQuote(filepath.Dir(secret))))
	if got != "0\nx\nread-only" {
		t.Errorf("in the VM: %q, want the hidden dir empty and read-only and its sibling shown", got)
	}
	e.run(t, vm, "root", fmt.Sprintf("gw=$(ip -4 route show default | awk '{print $3}'); timeout 5 bash -c \"exec 3<>/dev/tcp/$gw/%d\"", port))
}

// TestWriteUnderWhiteout: a file the driver writes into a directory the
// view hides (the host has /etc/soulstack-local, say) lands in a new
// directory that stays empty of the lower layer's entries, and one written
// where the view hid a file replaces the whiteout.
func TestWriteUnderWhiteout(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	for _, d := range []string{filepath.Join(lower, "a"), upper} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "a", "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "key"), []byte("the host's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"a", "key"} {
		if err := whiteout(upper, lower, rel); err != nil {
			t.Fatal(err)
		}
	}
	l := layer{lower: lower, upper: upper}
	if err := l.write("a/new", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file written where the view hid the lower's (the VM's own SSH
	// host key at the host's key's path) replaces the whiteout.
	if err := l.write("key", []byte("the VM's"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if n, err := unix.Getxattr(filepath.Join(upper, "a"), "trusted.overlay.opaque", b); err != nil || string(b[:n]) != "y" {
		t.Errorf("upper/a is not opaque: %q, %v", b, err)
	}
	merged := filepath.Join(dir, "merged")
	work := filepath.Join(dir, "work")
	for _, d := range []string{merged, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("test", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	ents, err := os.ReadDir(filepath.Join(merged, "a"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "new" {
		t.Errorf("merged a/ = %v, %v; want only new", ents, err)
	}
	if b, err := os.ReadFile(filepath.Join(merged, "key")); err != nil || string(b) != "the VM's" {
		t.Errorf("merged key = %q, %v; want the file written over the whiteout", b, err)
	}
}
