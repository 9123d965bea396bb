package localcloud

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VM root is uid 0 of the host (there is no user namespace), so what keeps
// it inside its VM is what it lacks:
//
//   - Capabilities: every process the init starts (sshd, the userdata,
//     everything a login runs, setuid programs such as sudo) gets at most
//     vmCapabilities. The launcher drops every other capability from the
//     bounding set and clears the inheritable and ambient sets of the thread
//     that clones the init; the init keeps its own capabilities only to
//     build the VM's mounts and then makes itself undumpable, so that
//     nothing in the VM can ptrace it or open its /proc files.
//   - Filesystems: /proc/sys (but its per-network-namespace net/), the
//     sysrq trigger and the other /proc files that reach the kernel are
//     read-only or hidden, and /sys and the cgroup hierarchies under it are
//     read-only (a VM cannot raise its own limits). Without CAP_SYS_ADMIN
//     nothing in the VM can mount or remount anything, and without
//     CAP_MKNOD it cannot make a device node: /dev holds only the safe set
//     populateDev makes.
var vmCapabilities = []int{
	unix.CAP_CHOWN,
	unix.CAP_DAC_OVERRIDE,
	unix.CAP_FOWNER,
	unix.CAP_FSETID,
	unix.CAP_KILL,
	unix.CAP_SETGID,
	unix.CAP_SETUID,
	unix.CAP_SETPCAP,
	unix.CAP_SETFCAP,
	unix.CAP_NET_BIND_SERVICE,
	unix.CAP_SYS_CHROOT,
	unix.CAP_AUDIT_WRITE,
}

// Left out on purpose, among others: SYS_ADMIN (mount, and with it a
// devtmpfs of the host's disks), MKNOD, SYS_MODULE, SYS_PTRACE, SYS_RAWIO,
// DAC_READ_SEARCH (open_by_handle_at reaches any host file), BPF, PERFMON,
// SYS_BOOT, SYS_TIME, SYSLOG, MAC_*, LINUX_IMMUTABLE, NET_ADMIN (a VM
// could take another VM's address on the bridge), NET_RAW (forged
// frames), IPC_LOCK, SYS_NICE, SYS_RESOURCE, SYS_PACCT, WAKE_ALARM,
// BLOCK_SUSPEND, AUDIT_CONTROL, AUDIT_READ, CHECKPOINT_RESTORE.

// lastCap is the highest capability the running kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}

// confineThread drops every capability outside vmCapabilities from the
// calling thread's bounding set and clears its inheritable and ambient
// sets, keeping its effective and permitted ones. A process cloned from
// this thread (the VM's init) inherits that: it keeps its own
// capabilities, but every program it executes gets at most
// vmCapabilities, and nothing can add others back. It locks the calling
// goroutine to its thread for good: the restriction is the thread's.
func confineThread(extra ...int) error {
	runtime.LockOSThread()
	keep := map[int]bool{}
	for _, c := range append(slices.Clone(vmCapabilities), extra...) {
		keep[c] = true
	}
	for c := 0; c <= lastCap(); c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear the inheritable capabilities: %w", err)
	}
	return nil
}

// hideInit makes the init undumpable: without CAP_SYS_PTRACE, no process
// in the VM may ptrace it or open its /proc/1/{mem,environ,root,fd,exe}
// (the init keeps capabilities the VM's processes lack, and its
// executable and log are host files).
func hideInit() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the init undumpable: %w", err)
	}
	return nil
}

// procReadOnly are the /proc paths made read-only in a VM; procHidden
// are covered (files by /dev/null, directories by an empty tmpfs). Both
// follow what container runtimes do.
var (
	procReadOnly = []string{"sys", "sysrq-trigger", "bus", "fs", "irq"}
	procHidden   = []string{"kcore", "keys", "kallsyms", "timer_list", "sched_debug", "latency_stats", "acpi", "scsi", "asound"}
)

// confineProc makes the VM's procfs at proc (on the host's side of the
// pivot) safe to leave writable for root: the kernel-wide sysctls and
// triggers become read-only, the network sysctls (the VM's own namespace)
// stay writable. It runs after populateDev, whose null it binds.
func confineProc(proc, devNull string) error {
	// Once sys/ is read-only, its net/ is bound on itself and made
	// writable again (each bind mount has flags of its own).
	for _, p := range procReadOnly {
		if err := bindReadOnly(filepath.Join(proc, p)); err != nil {
			return err
		}
		if p == "sys" {
			net := filepath.Join(proc, "sys/net")
			if err := unix.Mount(net, net, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind /proc/sys/net: %w", err)
			}
			if err := unix.Mount("", net, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
				return fmt.Errorf("make /proc/sys/net writable: %w", err)
			}
		}
	}
	for _, p := range procHidden {
		target := filepath.Join(proc, p)
		fi, err := os.Stat(target)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("soulstack-mask", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=555,size=4k")
		} else {
			err = unix.Mount(devNull, target, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("hide /proc/%s: %w", p, err)
		}
	}
	// Without CAP_NET_RAW, ping uses ICMP sockets, which the VM's own
	// network namespace allows to every group.
	if err := os.WriteFile(filepath.Join(proc, "sys/net/ipv4/ping_group_range"), []byte("0 2147483647\n"), 0o644); err != nil {
		return fmt.Errorf("allow ICMP sockets: %w", err)
	}
	return nil
}

// bindReadOnly makes path a read-only bind mount of itself; a path the
// kernel lacks is skipped.
func bindReadOnly(path string) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", path, err)
	}
	if err := unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	return nil
}

// deniedSyscalls fail with EPERM in a VM: the kernel's keyrings are not
// namespaced (root's user keyring in a VM is the host root's), and the
// others load code into the kernel, reach files by handle, or are large
// kernel attack surfaces a VM does not need. The capabilities already
// refuse most of them to VM root; the filter holds even for what a
// capability check would let through.
var deniedSyscalls = []uintptr{
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
}

// seccompArch is the audit architecture of the system calls the filter
// knows; calls of any other (32-bit ones on x86-64) are refused.
func seccompArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// confineSyscalls installs on the calling thread a seccomp filter that
// refuses deniedSyscalls, new user namespaces (unshare and clone with
// CLONE_NEWUSER; clone3, whose flags it cannot read, says ENOSYS so that
// libc falls back to clone) and system calls of other architectures.
// It survives execve and is inherited by every child, so it is installed
// just before the init executes stage 2. It needs CAP_SYS_ADMIN (there is
// no no_new_privs: setuid programs such as sudo must keep working). On an
// architecture it does not know, it installs nothing and says so.
func confineSyscalls(nesting bool) error {
	arch, ok := seccompArch()
	if !ok {
		return fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		// Offsets in struct seccomp_data; args[0]'s low half on
		// little-endian machines (both arches above are).
		offNR, offArch, offArg0 = 0, 4, 16
		x32Bit                  = 0x40000000
	)
	eperm := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	enosys := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	prog := []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, K: arch, Jt: 1},
		{Code: ret, K: eperm},
		{Code: ld, K: offNR},
	}
	if runtime.GOARCH == "amd64" {
		prog = append(prog, unix.SockFilter{Code: jge, K: x32Bit, Jf: 1}, unix.SockFilter{Code: ret, K: eperm})
	}
	for _, nr := range deniedSyscalls {
		deny := eperm
		if nesting && slices.Contains(keyringSyscalls, nr) {
			deny = enosys
		}
		prog = append(prog, unix.SockFilter{Code: jeq, K: uint32(nr), Jf: 1}, unix.SockFilter{Code: ret, K: deny})
	}
	prog = append(prog, unix.SockFilter{Code: jeq, K: uint32(unix.SYS_CLONE3), Jf: 1}, unix.SockFilter{Code: ret, K: enosys})
	for _, nr := range []uintptr{unix.SYS_UNSHARE, unix.SYS_CLONE} {
		prog = append(prog,
			unix.SockFilter{Code: jeq, K: uint32(nr), Jf: 4},
			unix.SockFilter{Code: ld, K: offArg0},
			unix.SockFilter{Code: jset, K: unix.CLONE_NEWUSER, Jf: 1},
			unix.SockFilter{Code: ret, K: eperm},
			unix.SockFilter{Code: ret, K: allow},
		)
	}
	prog = append(prog, unix.SockFilter{Code: ret, K: allow})
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install the seccomp filter: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}
