package localcloud

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// buildRoot mounts the VM's filesystems under <dir>/merged, in the init's
// own mount namespace: the root overlay, then fresh /proc, /sys (with the
// cgroup hierarchies rooted at the VM's cgroup), /dev, /run and /tmp, and
// empty read-only tmpfs over the masked paths. Nothing is mounted in the
// host's namespace, so nothing is left to unmount when the VM dies.
func buildRoot(bc bootConfig) error {
	// Mounts must not propagate to the host, whatever / was (shared, on
	// systemd hosts).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)

	m := filepath.Join(bc.Dir, "merged")
	if len(bc.Layers) > 0 {
		if err := mountView(bc, m); err != nil {
			return err
		}
	} else {
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", bc.Lower, filepath.Join(bc.Dir, "upper"), filepath.Join(bc.Dir, "work"))
		if err := unix.Mount("soulstack-root", m, "overlay", unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount the root overlay (%s): %w", opts, err)
		}
	}
	mounts := []struct {
		target, fstype, source string
		flags                  uintptr
		data                   string
	}{
		// A procfs made after the PID namespace shows only the VM's
		// processes; a sysfs made in the VM's network namespace shows only
		// its links.
		{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		// Read-only: sysfs reaches the host's devices and kernel.
		{"sys", "sysfs", "sysfs", unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		// Not nodev: it holds the device nodes.
		{"dev", "tmpfs", "dev", unix.MS_NOSUID, "mode=755,size=1m"},
		{"run", "tmpfs", "run", unix.MS_NOSUID | unix.MS_NODEV, "mode=755"},
		{"tmp", "tmpfs", "tmp", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	}
	for _, mt := range mounts {
		target := filepath.Join(m, mt.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(mt.source, target, mt.fstype, mt.flags, mt.data); err != nil {
			return fmt.Errorf("mount %s on /%s: %w", mt.fstype, mt.target, err)
		}
	}
	if err := mountCgroups(filepath.Join(m, "sys/fs/cgroup"), bc.Nesting != ""); err != nil {
		return err
	}
	if err := populateDev(filepath.Join(m, "dev")); err != nil {
		return err
	}
	if err := confineProc(filepath.Join(m, "proc"), filepath.Join(m, "dev/null")); err != nil {
		return err
	}
	// sshd's privilege separation directory and the usual lock dir.
	for dir, mode := range map[string]os.FileMode{"run/sshd": 0o755, "run/lock": 0o1777} {
		if err := os.Mkdir(filepath.Join(m, dir), mode); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(m, dir), mode); err != nil {
			return err
		}
	}
	for _, p := range bc.Mask {
		target := filepath.Join(m, p)
		if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount("soulstack-mask", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
			"mode=755,size=4k"); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// mountCgroups mounts the host's cgroup hierarchies again at dir. Done
// inside the VM's cgroup namespace, each is rooted at the VM's own cgroup,
// so the VM sees its limits at the usual places
// (/sys/fs/cgroup/memory/memory.limit_in_bytes on v1, memory.max on v2)
// and software that makes cgroups (Docker) works.
func mountCgroups(dir string, writable bool) error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return err
	}
	// Read-only: the VM's cgroup is the root of what it sees, and its
	// limits are the host's to set. A nesting VM's container engine
	// makes cgroups of its own under it (see nesting_linux.go).
	var flags uintptr = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if writable {
		flags &^= unix.MS_RDONLY
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		if err := unix.Mount("cgroup2", dir, "cgroup2", flags, ""); err != nil {
			return fmt.Errorf("mount cgroup2: %w", err)
		}
		return nil
	}
	if err := unix.Mount("cgroup", dir, "tmpfs", flags&^unix.MS_RDONLY, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount /sys/fs/cgroup: %w", err)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, cm := range mounts {
		rel, ok := strings.CutPrefix(cm.point, "/sys/fs/cgroup/")
		if !ok || strings.Contains(rel, "/") {
			continue
		}
		target := filepath.Join(dir, rel)
		if err := os.Mkdir(target, 0o755); err != nil {
			return err
		}
		fstype, data := "cgroup", strings.Join(cm.controllers, ",")
		if cm.v2 {
			fstype, data = "cgroup2", ""
		}
		if err := unix.Mount("cgroup", target, fstype, flags, data); err != nil {
			return fmt.Errorf("mount cgroup %s: %w", rel, err)
		}
	}
	// Co-mounted controllers have symlinks (cpuacct -> cpu,cpuacct).
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		if to, err := os.Readlink(filepath.Join("/sys/fs/cgroup", e.Name())); err == nil {
			_ = os.Symlink(to, filepath.Join(dir, e.Name()))
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("make /sys/fs/cgroup read-only: %w", err)
	}
	return nil
}

// populateDev fills the VM's /dev tmpfs: the usual character devices, a
// private devpts instance (so ptys are the VM's own), /dev/shm and
// /dev/mqueue of the VM's IPC namespace, and the fd links.
func populateDev(dev string) error {
	nodes := []struct {
		name         string
		major, minor uint32
	}{
		{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
	}
	for _, n := range nodes {
		if err := unix.Mknod(filepath.Join(dev, n.name), unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", n.name, err)
		}
	}
	for dir, mode := range map[string]os.FileMode{"pts": 0o755, "shm": 0o1777, "mqueue": 0o755} {
		if err := os.Mkdir(filepath.Join(dev, dir), mode); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := unix.Mount("mqueue", filepath.Join(dev, "mqueue"), "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /dev/mqueue: %w", err)
	}
	links := map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// enterRoot makes <dir>/merged the root of the init's mount namespace and
// drops every host mount from it.
func enterRoot(bc bootConfig) error {
	if err := os.Chdir(filepath.Join(bc.Dir, "merged")); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// "." then removes it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host root: %w", err)
	}
	return os.Chdir("/")
}
