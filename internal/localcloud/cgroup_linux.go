package localcloud

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupParent is the directory the VMs' cgroups are made in.
const cgroupParent = "soulstack-local"

// cpuPeriod is the CFS period the CPU quota is expressed in (100 ms).
const cpuPeriod = 100000

// cgroupHost says where VM cgroups go on this host.
//
// On a pure cgroup v2 host (/sys/fs/cgroup is cgroup2) a VM gets
// /sys/fs/cgroup/soulstack-local/<id>, with the cpu, memory and pids
// controllers enabled down to it; the parent sits at the root because a
// cgroup with processes of its own (the driver's) cannot delegate
// controllers. On a v1 or hybrid host a VM gets one cgroup in every
// hierarchy, below the driver's own cgroup there
// (<mount><own path>/soulstack-local/<id>), so whatever accounts for the
// driver also accounts for its VMs.
type cgroupHost struct {
	v2 bool
	// parents are the soulstack-local directories, one per hierarchy.
	parents []string
}

func detectCgroups() (cgroupHost, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return cgroupHost{}, fmt.Errorf("cgroups: %w", err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return cgroupHost{v2: true, parents: []string{filepath.Join("/sys/fs/cgroup", cgroupParent)}}, nil
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return cgroupHost{}, err
	}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return cgroupHost{}, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	var h cgroupHost
	memory := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "4:memory:/some/path", "0::/path" for the unified hierarchy.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, m := range mounts {
			if !m.serves(parts[1]) {
				continue
			}
			own := parts[2]
			if m.root != "/" {
				own = strings.TrimPrefix(own, m.root)
			}
			if m.tracking() {
				own = "/"
			}
			h.parents = append(h.parents, filepath.Join(m.point, own, cgroupParent))
			if slices.Contains(m.controllers, "memory") {
				memory = true
			}
			break
		}
	}
	if err := sc.Err(); err != nil {
		return cgroupHost{}, fmt.Errorf("cgroups: %w", err)
	}
	if !memory {
		return cgroupHost{}, errors.New("cgroups: no cgroup v1 memory hierarchy is mounted")
	}
	return h, nil
}

// cgroupMount is one cgroup filesystem mount from /proc/self/mountinfo.
type cgroupMount struct {
	point       string
	root        string
	v2          bool
	controllers []string // v1: cpu, memory, name=systemd…
}

// tracking reports whether m is a hierarchy without controllers
// (name=systemd, or the unified one of a hybrid host), which an init
// system uses to track and kill a service's processes: VM cgroups there
// go at the root, so that stopping the service that runs the driver does
// not take its VMs down.
func (m cgroupMount) tracking() bool {
	if m.v2 {
		return true
	}
	for _, c := range m.controllers {
		if !strings.HasPrefix(c, "name=") && c != "xattr" && c != "none" {
			return false
		}
	}
	return true
}

// serves reports whether m is the hierarchy of a /proc/self/cgroup line
// with these controllers ("" for the unified hierarchy).
func (m cgroupMount) serves(ctrls string) bool {
	if ctrls == "" {
		return m.v2
	}
	if m.v2 {
		return false
	}
	for _, c := range strings.Split(ctrls, ",") {
		if !slices.Contains(m.controllers, c) {
			return false
		}
	}
	return true
}

func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root point options [optional…] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 {
			continue
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		m := cgroupMount{point: unescapeMount(fields[4]), root: unescapeMount(fields[3]), v2: fstype == "cgroup2"}
		if !m.v2 {
			for _, o := range strings.Split(fields[sep+3], ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent=") && o != "clone_children" {
					m.controllers = append(m.controllers, o)
				}
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes of mountinfo paths (\040 for a
// space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// paths returns the cgroup directories of VM id.
func (h cgroupHost) paths(id string) []string {
	out := make([]string, len(h.parents))
	for i, p := range h.parents {
		out[i] = filepath.Join(p, id)
	}
	return out
}

// create makes the cgroup directories of a VM and their parents. Another
// driver (another state dir) may remove an empty parent between our mkdir
// of it and of the VM's directory (removeCgroupParents); that shows as a
// missing directory, and the whole path is made again.
func (h cgroupHost) create(paths []string) error {
	for attempt := 0; ; attempt++ {
		err := h.createOnce(paths)
		if err == nil || attempt == 4 || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
}

func (h cgroupHost) createOnce(paths []string) error {
	for _, p := range paths {
		parent := filepath.Dir(p)
		if h.v2 {
			if err := enableControllers(filepath.Dir(parent)); err != nil {
				return err
			}
		}
		if err := h.mkdir(parent); err != nil {
			return err
		}
		if h.v2 {
			if err := enableControllers(parent); err != nil {
				return err
			}
		}
		if err := h.mkdir(p); err != nil {
			return err
		}
	}
	return nil
}

// mkdir makes a cgroup directory, or checks one that exists.
func (h cgroupHost) mkdir(p string) error {
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroups: %w", err)
	}
	if h.v2 {
		return nil // an empty v2 cpuset means the parent's
	}
	return fillCpuset(p)
}

// fillCpuset gives a v1 cpuset cgroup its parent's CPUs and memory nodes
// when it has none (a new one has none, and no process can join it then).
// It fills the parents first: another call may have made a parent a
// moment ago and not filled it yet.
func fillCpuset(p string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		v, err := os.ReadFile(filepath.Join(p, f))
		if err != nil {
			return nil // not a cpuset hierarchy
		}
		if strings.TrimSpace(string(v)) != "" {
			continue
		}
		parent := filepath.Dir(p)
		if err := fillCpuset(parent); err != nil {
			return err
		}
		pv, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			return fmt.Errorf("cgroups: %w", err)
		}
		if err := writeCgroupFile(filepath.Join(p, f), strings.TrimSpace(string(pv))); err != nil {
			return err
		}
	}
	return nil
}

// enableControllers turns on cpu, memory and pids (those available) for
// the children of a v2 cgroup.
func enableControllers(dir string) error {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	on, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	var want []string
	for _, c := range []string{"cpu", "memory", "pids"} {
		if slices.Contains(strings.Fields(string(avail)), c) && !slices.Contains(strings.Fields(string(on)), c) {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return nil
	}
	return writeCgroupFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(want, " "))
}

func writeCgroupFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroups: write %q to %s: %w", value, path, err)
	}
	return nil
}

// applyLimits writes spec's CPU and memory limits to a VM's cgroups. The
// kernel applies them at once to running processes.
func applyLimits(paths []string, spec Spec) error {
	mem := int64(spec.MemoryMB) << 20
	quota := int64(spec.CPUs * cpuPeriod)
	limited := false
	for _, p := range paths {
		has := func(f string) bool { _, err := os.Stat(filepath.Join(p, f)); return err == nil }
		switch {
		case has("memory.max"): // v2
			if err := writeCgroupFile(filepath.Join(p, "memory.max"), strconv.FormatInt(mem, 10)); err != nil {
				return err
			}
			if has("memory.swap.max") {
				if err := writeCgroupFile(filepath.Join(p, "memory.swap.max"), "0"); err != nil {
					return err
				}
			}
			limited = true
		case has("memory.limit_in_bytes"): // v1
			if err := setV1Memory(p, mem); err != nil {
				return err
			}
			limited = true
		}
		switch {
		case has("cpu.max"):
			if err := writeCgroupFile(filepath.Join(p, "cpu.max"), fmt.Sprintf("%d %d", quota, cpuPeriod)); err != nil {
				return err
			}
		case has("cpu.cfs_quota_us"):
			if err := writeCgroupFile(filepath.Join(p, "cpu.cfs_period_us"), strconv.Itoa(cpuPeriod)); err != nil {
				return err
			}
			if err := writeCgroupFile(filepath.Join(p, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
				return err
			}
		}
	}
	if !limited {
		return errors.New("cgroups: no memory controller in the VM's cgroups")
	}
	return nil
}

// setV1Memory sets a v1 memory limit, and the memory+swap limit to the
// same value when swap is accounted (no swap for VMs). memsw must stay at
// or above the memory limit at every step.
func setV1Memory(p string, mem int64) error {
	limit := filepath.Join(p, "memory.limit_in_bytes")
	memsw := filepath.Join(p, "memory.memsw.limit_in_bytes")
	if _, err := os.Stat(memsw); err != nil {
		return writeCgroupFile(limit, strconv.FormatInt(mem, 10))
	}
	cur, err := readInt(limit)
	if err != nil {
		return err
	}
	order := []string{limit, memsw}
	if mem > cur {
		order = []string{memsw, limit}
	}
	for _, f := range order {
		if err := writeCgroupFile(f, strconv.FormatInt(mem, 10)); err != nil {
			return err
		}
	}
	return nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// memoryLimit reads a VM's memory limit in bytes from its cgroups.
func memoryLimit(paths []string) (int64, error) {
	for _, p := range paths {
		for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
			if v, err := readInt(filepath.Join(p, f)); err == nil {
				return v, nil
			}
		}
	}
	return 0, errors.New("cgroups: no memory limit file")
}

// joinCgroups moves process pid (all its threads) into the cgroups.
func joinCgroups(paths []string, pid int) error {
	for _, p := range paths {
		if err := writeCgroupFile(filepath.Join(p, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroups deletes a VM's cgroup directories, child cgroups first
// (software inside the VM, Docker say, makes its own). Processes that are
// still exiting keep a cgroup busy for a moment, so it retries until
// deadline.
func removeCgroups(paths []string, deadline time.Time) error {
	var errs []error
	for _, p := range paths {
		for {
			err := removeTree(p)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("cgroups: remove %s: %w", p, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// removeTree rmdirs a cgroup directory tree depth first; a missing one is
// no error. Cgroup directories hold only control files, which rmdir
// ignores.
func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	err = unix.Rmdir(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// removeCgroupParents removes soulstack-local cgroup directories that are
// empty (another driver's VMs may still use them).
func removeCgroupParents(dirs []string) {
	for _, p := range dirs {
		if filepath.Base(p) == cgroupParent {
			_ = unix.Rmdir(p)
		}
	}
}
