package localcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soulstack/soulstack/driversdk"
)

func geteuid() int { return os.Geteuid() }

// cleanupTimeout bounds the undoing of a failed Create, which runs even
// when the call's context is done.
const cleanupTimeout = 30 * time.Second

// checkHost reports whether VMs with spec can run here: root, ip(8) and
// nsenter(1), sshd and a shell in the root the VMs are built on, pidfds,
// cgroups with a memory controller, and a configured subnet that overlaps
// nothing on the host.
func (d *Driver) checkHost(ctx context.Context, cfg Config, spec Spec) error {
	if uid := d.euid(); uid != 0 {
		return unavailable("the local driver must run as root: it makes network namespaces, a bridge, mounts and cgroups (running as uid %d)", uid)
	}
	for tool, pkg := range map[string]string{"ip": "iproute2", "nsenter": "util-linux"} {
		if _, err := toolPath(tool); err != nil {
			return unavailable("%s is not installed (apt-get install %s)", tool, pkg)
		}
	}
	if spec.Base != "" && spec.baseDir == "" {
		// Built at Create when missing.
		if exists(filepath.Join(cfg.basesDir(), spec.Base, "usr/sbin/sshd")) {
			return nil
		}
		if _, err := toolPath("debootstrap"); err != nil {
			return unavailable("base %s is not built yet and debootstrap is not installed (apt-get install debootstrap)", spec.Base)
		}
		return nil
	}
	lower := spec.lower()
	if spec.BaseRoot != "" {
		if !slices.Contains(cfg.BaseRoots, spec.BaseRoot) {
			return invalid("base_root", "%s is not one of the provider's base roots (config.base_roots: %s)",
				spec.BaseRoot, strings.Join(cfg.BaseRoots, ", "))
		}
		if fi, err := os.Stat(spec.BaseRoot); err != nil || !fi.IsDir() {
			return invalid("base_root", "%s is not a directory", spec.BaseRoot)
		}
		// A symlink on the way (/proc/1/root is one) could lead anywhere.
		if real, err := filepath.EvalSymlinks(spec.BaseRoot); err != nil || real != spec.BaseRoot {
			return invalid("base_root", "%s must be a real directory, not reached through a symlink", spec.BaseRoot)
		}
	}
	for _, f := range []string{"usr/sbin/sshd", "bin/sh"} {
		if fi, err := os.Stat(filepath.Join(lower, f)); err != nil || fi.Mode()&0o111 == 0 {
			if spec.BaseRoot != "" {
				return invalid("base_root", "%s has no executable /%s (a root for VMs needs openssh-server)", spec.BaseRoot, f)
			}
			if spec.Base != "" {
				return unavailable("base %s in %s has no executable /%s: remove it to have it built again", spec.Base, lower, f)
			}
			return unavailable("/%s is missing on the host: the VMs run the host's own (apt-get install openssh-server)", f)
		}
	}
	if spec.SSHUser != "root" {
		_, err := idLookup{root: lower}.uid(spec.SSHUser)
		if _, uerr := os.Stat(filepath.Join(lower, "usr/sbin/useradd")); err != nil && uerr != nil {
			return invalid("ssh_user", "%q does not exist in the VMs' root and it has no useradd to make it", spec.SSHUser)
		}
	}
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return unavailable("the kernel has no pidfd_open (Linux 5.3 or later is needed): %v", err)
	}
	unix.Close(fd)
	if _, err := detectCgroups(); err != nil {
		return unavailable("%v", err)
	}
	if cfg.Subnet.IsValid() {
		h, err := store{dir: cfg.StateDir}.loadHost()
		if err != nil {
			return err
		}
		if h != nil && h.Subnet != cfg.Subnet {
			return invalid("config.subnet", "the VMs of this state dir use %s: destroy them before changing the subnet to %s", h.Subnet, cfg.Subnet)
		}
		if h == nil {
			used, err := hostNetworks(ctx)
			if err != nil {
				return err
			}
			if c := conflicts(cfg.Subnet, used, bridgePrefix+instanceID(cfg.StateDir)); len(c) > 0 {
				return invalid("config.subnet", "%s overlaps what the host already uses: %s", cfg.Subnet, strings.Join(c, "; "))
			}
		}
	}
	return nil
}

// lockState takes the state dir's lock, making the dir if needed.
func lockState(ctx context.Context, st store) (func(), error) {
	if err := os.MkdirAll(filepath.Join(st.dir, vmsDir), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return flock(ctx, filepath.Join(st.dir, lockFile))
}

func (d *Driver) create(ctx context.Context, req driversdk.CreateRequest, p createPlan) (_ []driversdk.VM, err error) {
	defer func() {
		var de *driversdk.Error
		if err != nil && ctx.Err() != nil && (!errors.As(err, &de) || de.Code == codeFailed) {
			err = &driversdk.Error{Code: codeTimeout, Message: "create VMs: the deadline passed: " + err.Error()}
		}
	}()
	if err := d.prepareBase(ctx, &p); err != nil {
		return nil, err
	}
	st := store{dir: p.cfg.StateDir}
	unlock, err := lockState(ctx, st)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := st.vms()
	if err != nil {
		return nil, err
	}
	have := requestVMs(all, req)
	if len(have) == req.Count {
		d.log().InfoContext(ctx, "create: request already done", "request_id", req.RequestID, "count", req.Count)
		return infos(have), nil
	}

	// undoHost removes the host network again when this call set it up
	// and then failed before making a VM.
	undoHost := func() {
		if len(all) == 0 {
			_ = teardownHost(context.WithoutCancel(ctx), st)
		}
	}
	if p.cfg.HostPorts == nil {
		p.cfg.HostPorts = d.hostPorts
	}
	p.cfg.LoopbackPorts = d.hostPorts
	h, err := ensureHost(ctx, st, p.cfg)
	if err != nil {
		undoHost()
		return nil, err
	}
	cg, err := detectCgroups()
	if err != nil {
		undoHost()
		return nil, unavailable("%v", err)
	}
	vms, err := newVMs(st, h, req, p, all, have)
	if err != nil {
		undoHost()
		return nil, err
	}
	start := time.Now()
	if err := d.bootAll(ctx, st, h, cg, vms); err != nil {
		return nil, err
	}
	for _, vm := range vms {
		have[vm.rec.Index] = vm.rec
		d.log().InfoContext(ctx, "created VM", "vm", vm.rec.ID, "fqdn", vm.rec.FQDN, "ip", vm.rec.IP, "pid", vm.rec.PID)
	}
	d.log().InfoContext(ctx, "create done", "count", len(vms), "seconds", time.Since(start).Seconds())
	return infos(have), nil
}

// prepareBase checks the host for the plan's spec and, for a spec with a
// base, builds or finds the base root and checks again with it.
func (d *Driver) prepareBase(ctx context.Context, p *createPlan) error {
	if err := d.checkHost(ctx, p.cfg, p.spec); err != nil {
		return err
	}
	if p.spec.Base == "" {
		return nil
	}
	dir, err := ensureBase(ctx, p.cfg, p.spec.Base, d.log())
	if err != nil {
		return err
	}
	p.spec.baseDir = dir
	return d.checkHost(ctx, p.cfg, p.spec)
}

// requestVMs are the VMs an earlier call made for the same request, by
// index: a retried create makes only the rest.
func requestVMs(all []*vmRecord, req driversdk.CreateRequest) map[int]*vmRecord {
	have := map[int]*vmRecord{}
	if req.RequestID == "" {
		return have
	}
	for _, v := range all {
		if v.Tags[driversdk.TagRequestID] == req.RequestID && v.Index < req.Count {
			have[v.Index] = v
		}
	}
	return have
}

// newVMs gives each VM the request still lacks an id, a free address on
// the host's subnet, its FQDN and the request's tags.
func newVMs(st store, h *hostState, req driversdk.CreateRequest, p createPlan, all []*vmRecord, have map[int]*vmRecord) ([]newVM, error) {
	used := map[string]bool{}
	for _, v := range all {
		if v.IP.IsValid() {
			used[v.IP.String()] = true
		}
	}
	next, stop := iter.Pull(vmAddrs(h.Subnet))
	defer stop()
	var vms []newVM
	for i := range req.Count {
		if have[i] != nil {
			continue
		}
		ip, ok := next()
		for ok && used[ip.String()] {
			ip, ok = next()
		}
		if !ok {
			return nil, &driversdk.Error{Code: codeQuota, Message: fmt.Sprintf("subnet %s has no free address for %d more VMs", h.Subnet, req.Count-len(have))}
		}
		id := newVMID()
		for exists(st.vmDir(id)) {
			id = newVMID()
		}
		fqdn := p.names[i]
		if fqdn == "" {
			fqdn = id + "." + p.suffix
		}
		tags := map[string]string{}
		for k, v := range map[string]string{driversdk.TagRequestID: req.RequestID, driversdk.TagRunID: req.RunID, driversdk.TagKeeper: req.Provider.KeeperID} {
			if v != "" {
				tags[k] = v
			}
		}
		rec := &vmRecord{ID: id, Index: i, FQDN: fqdn, IP: ip, Spec: p.spec, Tags: tags, CreatedAt: time.Now().UTC()}
		vms = append(vms, newVM{rec: rec, userdata: p.userdata[i], keys: p.keys})
	}
	return vms, nil
}

// bootAll saves, prepares and boots the VMs at once; when any fails, every
// one of them is torn down again (and the host network, when no VM is
// left).
func (d *Driver) bootAll(ctx context.Context, st store, h *hostState, cg cgroupHost, vms []newVM) error {
	// The state dir holds every VM's upper layer; a VM must not see it
	// through its lower layer (the init skips it when the lower lacks it).
	mask := append([]string{st.dir}, d.hide...)
	errs := make([]error, len(vms))
	var wg sync.WaitGroup
	for i, vm := range vms {
		wg.Go(func() {
			if err := st.saveVM(vm.rec); err != nil {
				errs[i] = err
				return
			}
			if err := prepare(st, h, vm); err != nil {
				errs[i] = fmt.Errorf("%s: prepare: %w", vm.rec.ID, err)
				return
			}
			if err := boot(ctx, st, h, cg, vm.rec, mask); err != nil {
				errs[i] = fmt.Errorf("%s: %w", vm.rec.ID, err)
			}
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, vm := range vms {
		if terr := teardown(cctx, st, h, cg, vm.rec); terr != nil {
			d.log().ErrorContext(ctx, "create: undo", "vm", vm.rec.ID, "err", terr)
		}
	}
	if left, _ := st.vms(); len(left) == 0 {
		removeCgroupParents(cg.parents)
		if terr := teardownHost(cctx, st); terr != nil {
			d.log().ErrorContext(ctx, "create: undo host network", "err", terr)
		}
	}
	return &driversdk.Error{Code: codeFailed, Message: "create VMs: " + err.Error()}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// infos reports VMs by index.
func infos(byIndex map[int]*vmRecord) []driversdk.VM {
	idx := make([]int, 0, len(byIndex))
	for i := range byIndex {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	out := make([]driversdk.VM, 0, len(idx))
	for _, i := range idx {
		v := byIndex[i]
		out = append(out, v.info(v.running()))
	}
	return out
}

// destroyable are the records of the VMs ids names, once each (a VM whose
// record cannot be read is destroyed by its id); an id that names no VM,
// and no VM destroyed before, is not found.
func destroyable(st store, ids []string) ([]*vmRecord, error) {
	var recs []*vmRecord
	var missing []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		switch {
		case !vmIDRE.MatchString(id):
			missing = append(missing, id)
		case exists(st.vmDir(id)):
			v, err := st.loadVM(id)
			if err != nil {
				v = &vmRecord{ID: id}
			}
			recs = append(recs, v)
		default:
			gone, err := st.destroyed(id)
			if err != nil {
				return nil, err
			}
			if !gone {
				missing = append(missing, id)
			}
		}
	}
	if len(missing) > 0 {
		return nil, notFound(missing)
	}
	return recs, nil
}

func (d *Driver) destroy(ctx context.Context, cfg Config, keeper string, ids []string) error {
	if uid := d.euid(); uid != 0 {
		return unavailable("the local driver must run as root (running as uid %d)", uid)
	}
	st := store{dir: cfg.StateDir}
	if !exists(st.dir) {
		if len(ids) == 0 {
			return nil
		}
		return notFound(slices.Clone(ids))
	}
	unlock, err := lockState(ctx, st)
	if err != nil {
		return err
	}
	defer unlock()
	recs, err := destroyable(st, ids)
	if err != nil {
		return err
	}
	if err := owned(recs, keeper); err != nil {
		return err
	}
	h, err := st.loadHost()
	if err != nil {
		return err
	}
	cg, _ := detectCgroups()
	var errs []error
	var done []string
	parents := slices.Clone(cg.parents)
	for _, v := range recs {
		for _, p := range v.Cgroups {
			parents = append(parents, filepath.Dir(p))
		}
		if err := teardown(ctx, st, h, cg, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.ID, err))
			continue
		}
		done = append(done, v.ID)
		d.log().InfoContext(ctx, "destroyed VM", "vm", v.ID, "fqdn", v.FQDN)
	}
	if err := st.addTombstones(done); err != nil {
		errs = append(errs, err)
	}
	if left, err := st.vms(); err == nil && len(left) == 0 {
		removeCgroupParents(parents)
		if err := teardownHost(ctx, st); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &driversdk.Error{Code: codeFailed, Message: "destroy: " + errors.Join(errs...).Error()}
	}
	return nil
}

func (d *Driver) resize(ctx context.Context, cfg Config, keeper string, ids []string, raw json.RawMessage) ([]driversdk.ResizeResult, error) {
	if uid := d.euid(); uid != 0 {
		return nil, unavailable("the local driver must run as root (running as uid %d)", uid)
	}
	st := store{dir: cfg.StateDir}
	if !exists(st.dir) {
		return nil, notFound(slices.Clone(ids))
	}
	unlock, err := lockState(ctx, st)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var recs []*vmRecord
	var missing []string
	for _, id := range ids {
		if !vmIDRE.MatchString(id) {
			missing = append(missing, id)
			continue
		}
		v, err := st.loadVM(id)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, id)
			continue
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, v)
	}
	if len(missing) > 0 {
		return nil, notFound(missing)
	}
	if err := owned(recs, keeper); err != nil {
		return nil, err
	}
	specs := make([]Spec, len(recs))
	for i, v := range recs {
		s := v.Spec
		if err := s.merge(raw); err != nil {
			return nil, err
		}
		if s.SSHUser != v.Spec.SSHUser {
			return nil, invalid("ssh_user", "cannot change on existing VMs (%s has %q)", v.ID, v.Spec.SSHUser)
		}
		if s.BaseRoot != v.Spec.BaseRoot {
			return nil, invalid("base_root", "cannot change on existing VMs")
		}
		if s.Base != v.Spec.Base {
			return nil, invalid("base", "cannot change on existing VMs")
		}
		if s.Nesting != v.Spec.Nesting {
			return nil, invalid("nesting", "cannot change on existing VMs")
		}
		specs[i] = s
	}
	out := make([]driversdk.ResizeResult, 0, len(recs))
	for i, v := range recs {
		if specs[i] == v.Spec {
			// Already this size: nothing to apply, nothing to save.
			out = append(out, driversdk.ResizeResult{VMID: v.ID, Unchanged: true})
			continue
		}
		if err := applyLimits(v.Cgroups, specs[i]); err != nil {
			return out, &driversdk.Error{Code: codeFailed, Message: fmt.Sprintf("resize %s: %v", v.ID, err)}
		}
		v.Spec = specs[i]
		if err := st.saveVM(v); err != nil {
			return out, err
		}
		d.log().InfoContext(ctx, "resized VM", "vm", v.ID, "cpus", v.Spec.CPUs, "memory_mb", v.Spec.MemoryMB)
		out = append(out, driversdk.ResizeResult{VMID: v.ID, CausedDowntime: false})
	}
	return out, nil
}

func (d *Driver) list(ctx context.Context, cfg Config, tags map[string]string) ([]driversdk.VM, error) {
	st := store{dir: cfg.StateDir}
	if !exists(st.dir) {
		return []driversdk.VM{}, nil
	}
	unlock, err := lockState(ctx, st)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := st.vms()
	if err != nil {
		return nil, err
	}
	out := []driversdk.VM{}
	for _, v := range all {
		if v.hasTags(tags) {
			out = append(out, v.info(v.running()))
		}
	}
	return out, nil
}
