package localcloud

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// pollInterval is how often waits look again.
const pollInterval = 10 * time.Millisecond

// stopTimeout bounds how long Destroy waits for a killed VM's processes
// and cgroups to go.
const stopTimeout = 10 * time.Second

// newVM is one VM to boot: its record and what only its first boot needs.
type newVM struct {
	rec      *vmRecord
	userdata string
	keys     []string
}

// prepare writes the files of the VM's first boot into its upper layer
// before the overlay is mounted: hostname, hosts, resolv.conf, a
// machine-id, sshd's config, host key and the authorized keys, a
// policy-rc.d that keeps package scripts from starting services, stock
// dotfiles for root, and the userdata.
func prepare(st store, h *hostState, vm newVM) error {
	v := vm.rec
	dir := st.vmDir(v.ID)
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	u := layer{lower: v.Spec.lower(), upper: filepath.Join(dir, "upper")}
	if !v.Spec.ownRoot() {
		if err := prepareView(u.upper, filepath.Join(dir, "layers")); err != nil {
			return err
		}
		u.subs = map[string]string{}
		for _, d := range viewLayers() {
			u.subs[d] = filepath.Join(dir, "layers", d, "upper")
		}
	}
	short, _, _ := strings.Cut(v.FQDN, ".")
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s %s\n%s\tsoulstack-local-gateway\n",
		v.IP, v.FQDN, short, h.gateway())
	var mid [16]byte
	_, _ = rand.Read(mid[:])
	block, hostKey, err := newHostKey(v.FQDN)
	if err != nil {
		return err
	}
	v.HostKey = hostKey

	keys := append(append([]string(nil), vm.keys...), parsedKeys(vm.userdata)...)
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"etc/hostname", []byte(v.FQDN + "\n"), 0o644},
		{"etc/hosts", []byte(hosts), 0o644},
		{"etc/resolv.conf", resolvConf(), 0o644},
		{"etc/machine-id", []byte(hex.EncodeToString(mid[:]) + "\n"), 0o444},
		{"etc/soulstack-local/sshd_config", []byte(sshdConfig), 0o644},
		// The VM's own host key is where a real VM keeps it (the host's
		// are hidden, prepareView), so that software reading /etc/ssh
		// (soul join's --host-key-dir) reports the VM's.
		{"etc/ssh/ssh_host_ed25519_key", pem.EncodeToMemory(block), 0o600},
		{"etc/ssh/ssh_host_ed25519_key.pub", []byte(v.HostKey + "\n"), 0o644},
		{"etc/soulstack-local/authorized_keys/" + v.Spec.SSHUser, []byte(strings.Join(keys, "\n") + "\n"), 0o644},
		{strings.TrimPrefix(vmCloudInitShim, "/"), []byte(cloudInitShim), 0o755},
		{"usr/sbin/policy-rc.d", []byte("#!/bin/sh\n# soulstack-local: package scripts start no services; start them yourself.\nexit 101\n"), 0o755},
	}
	if vm.userdata != "" {
		files = append(files, struct {
			path string
			data []byte
			mode os.FileMode
		}{strings.TrimPrefix(vmUserdata, "/"), []byte(vm.userdata), 0o600})
	}
	for _, f := range files {
		if err := u.write(f.path, f.data, f.mode); err != nil {
			return err
		}
	}
	// The host's root dotfiles come through the lower layer and may run
	// tools whose state changes under the VM (a pyenv rehash lock once
	// stalled every login for 60 s): root gets the stock ones.
	for _, name := range []string{".bashrc", ".profile"} {
		if b, err := os.ReadFile(filepath.Join(u.lower, "etc/skel", name)); err == nil {
			if err := u.write("root/"+name, b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// newHostKey makes a VM's ed25519 SSH host key: its private half as a
// PEM block and its public half in authorized_keys form.
func newHostKey(fqdn string) (*pem.Block, string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "root@"+fqdn)
	if err != nil {
		return nil, "", err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, "", err
	}
	return block, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))), nil
}

// parsedKeys returns the userdata's ssh_authorized_keys (the userdata was
// checked before).
func parsedKeys(text string) []string {
	ud, err := parseUserdata(text)
	if err != nil {
		return nil
	}
	return ud.SSHAuthorizedKeys
}

// sshdConfig is the VM's sshd configuration: nothing of the root's own
// /etc/ssh is used. Only the keys the driver wrote are trusted (not
// ~/.ssh/authorized_keys, which on the live host root would be the host's).
const sshdConfig = `# Written by soulstack-local.
Port 22
ListenAddress 0.0.0.0
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile /etc/soulstack-local/authorized_keys/%u
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
UseDNS no
PrintMotd no
X11Forwarding no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
`

// resolvConf is the host's resolv.conf without loopback name servers
// (a 127.0.0.53 stub is not reachable from the VM's network namespace).
func resolvConf() []byte {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out bytes.Buffer
	for _, l := range strings.SplitAfter(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.IsLoopback() {
				continue
			}
		}
		out.WriteString(l)
	}
	return out.Bytes()
}

// layer writes files into an overlay's upper layer before it is mounted.
// Directories it has to make take the mode and owner of the lower
// layer's directory of the same path, so that, say, /root stays 0700.
// In a view of the host (prepareView), subs has the upper layer of each
// top-level directory that is an overlay of its own.
type layer struct {
	lower, upper string
	subs         map[string]string
}

// route returns the layer and path within it of rel.
func (l layer) route(rel string) (layer, string) {
	first, rest, ok := strings.Cut(rel, "/")
	if up, sub := l.subs[first]; sub && ok {
		return layer{lower: filepath.Join(l.lower, first), upper: up}, rest
	}
	return l, rel
}

func (l layer) write(rel string, data []byte, mode os.FileMode) error {
	l, rel = l.route(rel)
	if err := l.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	p := filepath.Join(l.upper, rel)
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		// A whiteout (prepareView hid the lower's): the file replaces it.
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

func (l layer) mkdirs(rel string) error {
	if rel == "." || rel == "/" {
		return nil
	}
	p := filepath.Join(l.upper, rel)
	hidden := false
	if fi, err := os.Lstat(p); err == nil {
		if fi.IsDir() {
			return nil
		}
		// A whiteout (prepareView hid the lower's): the directory the VM
		// gets instead is empty of what the lower layer has there.
		if err := os.Remove(p); err != nil {
			return err
		}
		hidden = true
	}
	if err := l.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	mode, uid, gid := os.FileMode(0o755), 0, 0
	if fi, err := os.Stat(filepath.Join(l.lower, rel)); err == nil && fi.IsDir() {
		mode = fi.Mode().Perm() | fi.Mode()&os.ModeSticky
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(s.Uid), int(s.Gid)
		}
	}
	if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chown(p, uid, gid); err != nil {
		return err
	}
	if hidden {
		if err := unix.Setxattr(p, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			return err
		}
	}
	return os.Chmod(p, mode)
}

// boot starts a prepared VM and waits until its sshd answers on its
// address. The record is saved as soon as the init's PID is known.
func boot(ctx context.Context, st store, h *hostState, cg cgroupHost, v *vmRecord, mask []string) (err error) {
	dir := st.vmDir(v.ID)
	if err := makeCgroups(st, cg, v); err != nil {
		return err
	}
	var layers []string
	if !v.Spec.ownRoot() {
		layers = viewLayers()
	}
	bc, err := json.Marshal(bootConfig{Dir: dir, Lower: v.Spec.lower(), Layers: layers, FQDN: v.FQDN, SSHUser: v.Spec.SSHUser, Mask: mask, Nesting: v.Spec.Nesting})
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "init.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd, ctlW, stR, err := startLauncher(bc, logf)
	if err != nil {
		return err
	}
	defer ctlW.Close()
	defer stR.Close()
	// Whatever happens next, the launcher is reaped.
	launcherDone := false
	defer func() {
		if !launcherDone {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	withLog := func(step string, err error) error {
		return fmt.Errorf("%s: %w%s", step, err, logTail(filepath.Join(dir, "init.log")))
	}

	deadline := bootDeadline(ctx)
	_ = stR.SetReadDeadline(deadline)
	status := bufio.NewReader(stR)

	if err := joinCgroups(v.Cgroups, cmd.Process.Pid); err != nil {
		return err
	}
	if _, err := ctlW.Write([]byte{'c'}); err != nil {
		return withLog("start the VM", err)
	}
	line, err := statusLine(status)
	if err != nil {
		return withLog("start the VM", err)
	}
	pid, err := parsePIDLine(line)
	if err != nil {
		return withLog("start the VM", err)
	}
	_ = cmd.Wait()
	launcherDone = true
	v.PID = pid
	if v.PIDStart, err = procStart(pid); err != nil {
		return withLog("start the VM", err)
	}
	if err := st.saveVM(v); err != nil {
		return err
	}
	if err := addVMLink(ctx, h, v, pid); err != nil {
		return err
	}
	if _, err := ctlW.Write([]byte{'n'}); err != nil {
		return withLog("boot the VM", err)
	}
	line, err = statusLine(status)
	if err != nil {
		return withLog("boot the VM", err)
	}
	if line != "ready" {
		return withLog("boot the VM", fmt.Errorf("unexpected %q from the init", line))
	}
	return waitSSH(ctx, v.IP, deadline)
}

// bootDeadline is ctx's deadline, or bootTimeout from now.
func bootDeadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(bootTimeout)
}

// makeCgroups records the VM's cgroups, makes them and applies the
// spec's limits.
func makeCgroups(st store, cg cgroupHost, v *vmRecord) error {
	v.Cgroups = cg.paths(v.ID)
	if err := st.saveVM(v); err != nil {
		return err
	}
	if err := cg.create(v.Cgroups); err != nil {
		return err
	}
	return applyLimits(v.Cgroups, v.Spec)
}

// startLauncher starts the launcher of a VM with its boot config bc,
// logging to logf: it returns the launcher, the pipe the driver sends it
// its go-aheads on and the one it reports its status on.
func startLauncher(bc []byte, logf *os.File) (*exec.Cmd, *os.File, *os.File, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, nil, nil, err
	}
	becomeSubreaper()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"soulstack-local-launcher"}
	cmd.Env = []string{envRole + "=" + roleLauncher, envBoot + "=" + string(bc)}
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{ctlR, stW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, nil, nil, fmt.Errorf("start the launcher: %w", err)
	}
	return cmd, ctlW, stR, nil
}

var subreaper sync.Once

// becomeSubreaper makes the driver process the parent of the VMs' inits
// once their launchers exit, so that Destroy reaps a killed init at once
// instead of leaving a zombie for the host's init to collect. When the
// driver exits, the inits pass on to the next reaper up: they do not die
// with it.
func becomeSubreaper() {
	subreaper.Do(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })
}

// bootTimeout bounds a VM's boot when the context has no deadline.
const bootTimeout = 60 * time.Second

// waitSSH waits until the VM's sshd sends its banner to the host.
func waitSSH(ctx context.Context, ip netip.Addr, deadline time.Time) error {
	addr := netip.AddrPortFrom(ip, 22).String()
	var last error
	for {
		d := net.Dialer{Deadline: time.Now().Add(time.Second)}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			banner, rerr := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if rerr == nil && strings.HasPrefix(banner, "SSH-") {
				return nil
			}
			err = fmt.Errorf("no SSH banner: %v", rerr)
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("sshd on %s not reachable: %w", addr, last)
		}
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// logTail returns the end of a VM's init log for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "; init log: " + strings.TrimSpace(string(b))
}

// procStart returns a process's start time in clock ticks after boot
// (field 22 of /proc/PID/stat).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("malformed /proc stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// running reports whether the VM's init is alive (not a zombie).
func (v *vmRecord) running() bool {
	if v.PID <= 0 {
		return false
	}
	start, err := procStart(v.PID)
	if err != nil || start != v.PIDStart {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(v.PID) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// teardown removes every trace of a VM: its processes (SIGKILL to its
// init ends its PID namespace, whose mounts go with it), its link, its
// neighbour entry, its cgroups and its directory.
func teardown(ctx context.Context, st store, h *hostState, cg cgroupHost, v *vmRecord) error {
	deadline := time.Now().Add(stopTimeout)
	if len(v.Cgroups) == 0 {
		v.Cgroups = cg.paths(v.ID)
	}
	var errs []error
	if v.PID > 0 {
		if err := killInit(v.PID, v.PIDStart, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	// A create that died before recording the init's PID leaves its
	// processes findable by cgroup.
	if err := killCgroupProcs(v.Cgroups, deadline); err != nil {
		errs = append(errs, err)
	}
	if err := delLink(ctx, v.veth()); err != nil {
		errs = append(errs, err)
	}
	if h != nil && v.IP.IsValid() {
		delNeighbour(ctx, v.IP, h.Bridge)
	}
	if err := removeCgroups(v.Cgroups, deadline); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(st.vmDir(v.ID)); err != nil {
		return err
	}
	return nil
}

// killInit sends SIGKILL to a VM's init through a pidfd (so a recycled
// PID is never hit) and waits until it has exited.
func killInit(pid int, start uint64, deadline time.Time) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if s, err := procStart(pid); err != nil || s != start {
		return nil // gone, or the PID is another process's now
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return fmt.Errorf("VM init %d did not exit after SIGKILL", pid)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for %d: %w", pid, err)
		}
		if n > 0 {
			// Reap it if it is this process's child (see becomeSubreaper).
			_ = unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED|unix.WNOHANG, nil)
			return nil
		}
	}
}

// killCgroupProcs SIGKILLs whatever is left in a VM's cgroups until they
// are empty.
func killCgroupProcs(paths []string, deadline time.Time) error {
	for {
		left := 0
		for _, p := range paths {
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					left++
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes left in %s", left, paths[0])
		}
		time.Sleep(pollInterval)
	}
}
