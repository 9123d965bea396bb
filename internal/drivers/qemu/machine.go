package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/digitalocean/go-qemu/qmp"

	"github.com/soulstack/soulstack/driversdk"
)

// consoleBytes bounds what QEMU keeps of a VM's serial console: a ring
// buffer in its memory, read through QMP, so a chatty guest cannot fill
// the host's disk.
const consoleBytes = 1 << 20

// machine is how to start one VM's QEMU process.
type machine struct {
	binary string
	accel  string // kvm or tcg
	vm     *vmRecord
	dir    string
	img    image
}

func (m machine) qmpPath() string { return filepath.Join(m.dir, "qmp.sock") }

// args is QEMU's command line: a q35 machine with the VM's CPUs and
// memory, its overlay and NoCloud seed as virtio disks, a virtio NIC on
// its tap with its stable MAC, an entropy source (sshd and cloud-init
// wait for entropy otherwise), the serial console in a ring buffer, QMP
// on a socket in the VM's dir, and QEMU's seccomp sandbox (spawning stays
// and setsid allowed: -daemonize needs them); QEMU
// daemonizes, so the VM outlives the driver process.
func (m machine) args() []string {
	v := m.vm
	a := []string{
		"-name", "soulstack-" + v.ID + ",process=soulstack-" + v.ID,
		"-machine", "q35",
		"-smp", strconv.Itoa(v.Spec.CPUs), "-m", strconv.Itoa(v.Spec.MemoryMB),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-chardev", "ringbuf,id=console,size=" + strconv.Itoa(consoleBytes), "-serial", "chardev:console",
		"-qmp", "unix:" + m.qmpPath() + ",server=on,wait=off",
		"-drive", "file=" + filepath.Join(m.dir, "disk.qcow2") + ",if=virtio,format=qcow2,discard=unmap",
		"-drive", "file=" + filepath.Join(m.dir, "seed.iso") + ",if=virtio,format=raw,readonly=on",
		"-netdev", "tap,id=net0,ifname=" + v.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=net0,mac=" + v.MAC,
		"-device", "virtio-rng-pci",
		"-sandbox", "on,obsolete=deny,resourcecontrol=deny",
		"-pidfile", filepath.Join(m.dir, "qemu.pid"), "-daemonize",
	}
	if m.accel == AccelKVM {
		a = append(a, "-accel", "kvm", "-cpu", "host")
	} else {
		a = append(a, "-accel", "tcg,thread=multi", "-cpu", "max")
	}
	if m.img.Kernel != "" {
		a = append(a, "-kernel", m.img.Kernel, "-initrd", m.img.Initrd, "-append", m.img.Cmdline)
	}
	return a
}

// start starts the VM's QEMU process and returns once QMP says the
// machine runs.
func (m machine) start(ctx context.Context) (pid int, err error) {
	_ = os.Remove(m.qmpPath())
	cmd := exec.CommandContext(ctx, m.binary, m.args()...)
	cmd.Dir = m.dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Its own session before it daemonizes: a signal to the driver's
	// process group never reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return 0, &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("start VM %s: %s: %v: %s", m.vm.ID, m.binary, err, strings.TrimSpace(stderr.String()))}
	}
	b, err := os.ReadFile(filepath.Join(m.dir, "qemu.pid"))
	if err != nil {
		return 0, fmt.Errorf("VM %s: QEMU wrote no pid file: %w", m.vm.ID, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("VM %s: QEMU's pid file: %w", m.vm.ID, err)
	}
	for {
		var st struct {
			Status  string `json:"status"`
			Running bool   `json:"running"`
		}
		err := qmpRun(ctx, m.qmpPath(), "query-status", nil, &st)
		if err == nil && st.Running {
			return pid, nil
		}
		if !processAlive(pid, m.vm.ID) {
			return 0, &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("VM %s: QEMU exited while starting (status %q, %v)", m.vm.ID, st.Status, err)}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return pid, err
		}
	}
}

// qmpRun runs one QMP command on the socket at path and decodes its
// return value into out (when not nil). The call ends with ctx.
func qmpRun(ctx context.Context, path, command string, args any, out any) error {
	mon, err := qmp.NewSocketMonitor("unix", path, 2*time.Second)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = mon.Disconnect()
		case <-done:
		}
	}()
	if err := mon.Connect(); err != nil {
		_ = mon.Disconnect()
		return fmt.Errorf("QMP %s: %w", path, err)
	}
	defer mon.Disconnect()
	cmd := map[string]any{"execute": command}
	if args != nil {
		cmd["arguments"] = args
	}
	b, _ := json.Marshal(cmd)
	raw, err := mon.Run(b)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("QMP %s: %w", command, err)
	}
	if out == nil {
		return nil
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return fmt.Errorf("QMP %s: %w", command, err)
	}
	return json.Unmarshal(resp.Return, out)
}

// console returns what the VM's serial console holds (its last
// consoleBytes), for error messages and tests.
func console(ctx context.Context, dir string) (string, error) {
	var s string
	err := qmpRun(ctx, filepath.Join(dir, "qmp.sock"), "ringbuf-read",
		map[string]any{"device": "console", "size": consoleBytes, "format": "utf8"}, &s)
	return s, err
}

// processAlive reports whether pid is the QEMU process of VM id (not a
// later process that reuses the number).
func processAlive(pid int, id string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// A zombie has exited.
		if _, rest, ok := strings.Cut(string(st), ") "); ok && strings.HasPrefix(rest, "Z") {
			return false
		}
	}
	return bytes.Contains(b, []byte("soulstack-"+id+",process="))
}

// stop ends the VM's QEMU process: with grace, a clean ACPI power-off
// first (the guest shuts down, QEMU exits), then after grace QMP quit,
// then SIGKILL. It returns once the process is gone.
func stop(ctx context.Context, v *vmRecord, dir string, grace time.Duration) error {
	pid := qemuPID(v, dir)
	if pid == 0 {
		return nil
	}
	v.PID = pid
	sock := filepath.Join(dir, "qmp.sock")
	if grace > 0 {
		if err := qmpRun(ctx, sock, "system_powerdown", nil, nil); err == nil && waitGone(ctx, v, grace) {
			return nil
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = qmpRun(qctx, sock, "quit", nil, nil)
	cancel()
	if waitGone(ctx, v, 5*time.Second) {
		return nil
	}
	if err := syscall.Kill(v.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill VM %s (pid %d): %w", v.ID, v.PID, err)
	}
	if !waitGone(ctx, v, 10*time.Second) {
		return fmt.Errorf("VM %s (pid %d) is still running after SIGKILL", v.ID, v.PID)
	}
	return nil
}

// qemuPID finds the QEMU process of v: the recorded pid, else the one its
// pid file names, else any process carrying the VM's unique name. A
// create cut short (its deadline killed the launcher while QEMU
// daemonized, or it failed before the pid was recorded) leaves a VM
// process the record does not name; destroying the VM must still end it.
// 0 when there is none.
func qemuPID(v *vmRecord, dir string) int {
	if processAlive(v.PID, v.ID) {
		return v.PID
	}
	if b, err := os.ReadFile(filepath.Join(dir, "qemu.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && processAlive(pid, v.ID) {
			return pid
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && processAlive(pid, v.ID) {
			return pid
		}
	}
	return 0
}

func waitGone(ctx context.Context, v *vmRecord, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for processAlive(v.PID, v.ID) {
		if time.Now().After(deadline) || sleepCtx(ctx, 50*time.Millisecond) != nil {
			return false
		}
	}
	return true
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

// probeKVM boots kernel under KVM with no root filesystem and reports
// whether it got as far as looking for one (the kernel's panic message):
// on some hosts /dev/kvm opens and firmware runs, but a Linux guest hangs
// or QEMU aborts on an MSR. It takes about a second where KVM works and
// at most its timeout where it does not.
func probeKVM(ctx context.Context, binary, kernel, dir string) (bool, string) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false, "no /dev/kvm"
	}
	if kernel == "" {
		return false, "no kernel to probe KVM with (build the debian-bookworm image, or install a kernel in /boot)"
	}
	log := filepath.Join(dir, "kvm-probe.log")
	_ = os.Remove(log)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults", "-no-user-config",
		"-display", "none", "-no-reboot", "-kernel", kernel, "-append", "console=ttyS0 panic=-1 root=/dev/soulstack-kvm-probe",
		"-serial", "file:"+log)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	b, _ := os.ReadFile(log)
	_ = os.Remove(log)
	if bytes.Contains(b, []byte("Kernel panic")) || bytes.Contains(b, []byte("VFS: Unable to mount root")) {
		return true, "a probe kernel booted under KVM"
	}
	why := strings.TrimSpace(string(out))
	if ctx.Err() != nil {
		why = "the probe kernel did not boot within 20 s"
	} else if why == "" && err != nil {
		why = err.Error()
	}
	return false, "KVM opens but a guest does not run: " + why
}
