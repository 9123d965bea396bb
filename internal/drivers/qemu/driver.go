package qemu

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
)

// Options configure a Driver. The zero value is ready to use.
type Options struct {
	// Logger receives what the driver does; nil means slog.Default() at
	// the time of each call.
	Logger *slog.Logger
	// HostPorts are the host's TCP ports VMs may reach when a provider's
	// config has no host_ports; nil means [DefaultHostPort].
	// soul-cloud-qemu takes them from $SOULSTACK_KEEPER_PORTS, which the
	// keeper sets to its listen ports.
	HostPorts []uint16
}

// Driver implements driversdk.Driver with QEMU machines on this host. It
// keeps nothing in memory between calls: every VM is a record in the state
// dir and a QEMU process that outlives the driver's.
type Driver struct {
	logger    *slog.Logger
	hostPorts []uint16
}

var _ driversdk.Driver = (*Driver)(nil)

// New returns a Driver.
func New(opts Options) *Driver {
	return &Driver{logger: opts.Logger, hostPorts: opts.HostPorts}
}

// Capabilities: the driver resizes (with downtime), honours request IDs
// and lists its VMs.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}, nil
}

// ValidateProfile checks the provider config, the profile, the image it
// names and whether this host can run VMs (Linux, root, QEMU, /dev/net/tun).
func (d *Driver) ValidateProfile(ctx context.Context, p driversdk.Provider, profile json.RawMessage) error {
	cfg, err := ParseConfig(p.Config)
	if err != nil {
		return err
	}
	spec, err := ParseSpec(profile)
	if err != nil {
		return err
	}
	if _, err := fqdnSuffix(p); err != nil {
		return err
	}
	if err := checkHost(cfg); err != nil {
		return err
	}
	if spec.Image == ImageDebianBookworm {
		if _, err := os.Stat(filepath.Join(cfg.imagesDir(), ImageDebianBookworm, "image.json")); err != nil {
			if _, err := exec.LookPath("debootstrap"); err != nil {
				return &driversdk.Error{Code: codeUnavailable, Message: "the debian-bookworm image is not built yet and debootstrap is not installed (apt-get install debootstrap)"}
			}
		}
		return nil
	}
	img, err := imageFile(ctx, cfg, spec.Image)
	if err != nil {
		return err
	}
	return fitsDisk(img, spec)
}

func fitsDisk(img image, spec Spec) error {
	if int64(spec.DiskGB)<<30 < img.Size {
		return invalid("disk_gb", "%d GiB is smaller than the image (%.1f GiB)", spec.DiskGB, float64(img.Size)/(1<<30))
	}
	return nil
}

// checkHost says whether this host can run the driver's VMs.
func checkHost(cfg Config) error {
	if os.Geteuid() != 0 {
		return &driversdk.Error{Code: codeUnavailable, Message: "soul-cloud-qemu needs root (tap devices, the bridge and its nftables table)"}
	}
	if _, err := qemuBinary(cfg); err != nil {
		return err
	}
	for _, tool := range []string{"qemu-img", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return &driversdk.Error{Code: codeUnavailable, Message: tool + " is not installed (apt-get install qemu-utils iproute2)"}
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return &driversdk.Error{Code: codeUnavailable, Message: "no /dev/net/tun: tap devices cannot be made"}
	}
	return nil
}

func qemuBinary(cfg Config) (string, error) {
	if cfg.Binary != "" {
		if _, err := os.Stat(cfg.Binary); err != nil {
			return "", &driversdk.Error{Code: codeUnavailable, Field: "config.qemu_binary", Message: err.Error()}
		}
		return cfg.Binary, nil
	}
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", &driversdk.Error{Code: codeUnavailable, Message: "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)"}
	}
	return p, nil
}

func fqdnSuffix(p driversdk.Provider) (string, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(p.FQDNSuffix, "."), ".")
	if s == "" {
		s = DefaultFQDNSuffix
	}
	if err := localcloud.CheckFQDN("x." + s); err != nil {
		return "", invalid("fqdn_suffix", "%v", err)
	}
	return s, nil
}

func reqInvalid(field, format string, args ...any) *driversdk.Error {
	return &driversdk.Error{Code: codeRequestInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// plan is a checked CreateRequest.
type plan struct {
	cfg    Config
	spec   Spec
	suffix string
	names  []string
}

func (d *Driver) plan(req driversdk.CreateRequest) (plan, error) {
	var p plan
	var err error
	if p.cfg, err = ParseConfig(req.Provider.Config); err != nil {
		return p, err
	}
	if p.spec, err = ParseSpec(req.Profile); err != nil {
		return p, err
	}
	if p.suffix, err = fqdnSuffix(req.Provider); err != nil {
		return p, err
	}
	if req.Count < 1 || req.Count > 256 {
		return p, reqInvalid("count", "must be from 1 to 256, not %d", req.Count)
	}
	if len(req.Names) != 0 && len(req.Names) != req.Count {
		return p, reqInvalid("names", "has %d names for %d VMs", len(req.Names), req.Count)
	}
	if len(req.Userdata) != 0 && len(req.Userdata) != req.Count {
		return p, reqInvalid("userdata", "has %d entries for %d VMs", len(req.Userdata), req.Count)
	}
	for i, u := range req.Userdata {
		if len(u) > maxUserdata {
			return p, &driversdk.Error{Code: codeUserdataInvalid, Field: fmt.Sprintf("userdata[%d]", i), Message: fmt.Sprintf("is %d bytes, more than %d", len(u), maxUserdata)}
		}
	}
	for i, k := range req.AuthorizedKeys {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(strings.TrimSpace(k), "\r\n") {
			return p, reqInvalid(fmt.Sprintf("authorized_keys[%d]", i), "is not one authorized_keys line")
		}
	}
	p.names = make([]string, req.Count)
	seen := map[string]bool{}
	for i, n := range req.Names {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		if err := localcloud.CheckFQDN(n); err != nil {
			return p, reqInvalid(fmt.Sprintf("names[%d]", i), "%v", err)
		}
		if seen[n] {
			return p, reqInvalid(fmt.Sprintf("names[%d]", i), "%q is given twice", n)
		}
		seen[n] = true
		p.names[i] = n
	}
	return p, nil
}

// Create makes req.Count VMs and returns once each one's QEMU runs; the
// address is the VM's from the start (a static one from the subnet,
// through its NoCloud network config). The keeper then waits for SSH and
// for cloud-init to finish, as for any cloud. A repeated request (same
// RequestID) returns the VMs the first one made, making only those it did
// not finish. If any VM fails, the VMs this call made are destroyed again.
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	p, err := d.plan(req)
	if err != nil {
		return nil, err
	}
	if err := checkHost(p.cfg); err != nil {
		return nil, err
	}
	binary, _ := qemuBinary(p.cfg)
	img, err := d.resolveImage(ctx, p.cfg, p.spec)
	if err != nil {
		return nil, timeoutOr(ctx, err)
	}
	if err := fitsDisk(img, p.spec); err != nil {
		return nil, err
	}
	st := store{dir: p.cfg.StateDir}
	if err := os.MkdirAll(filepath.Join(st.dir, vmsDir), 0o700); err != nil {
		return nil, err
	}
	unlock, err := localcloud.Flock(ctx, filepath.Join(st.dir, "state.lock"))
	if err != nil {
		return nil, timeoutOr(ctx, err)
	}
	defer unlock()
	recs, err := st.vms()
	if err != nil {
		return nil, err
	}
	have, missing := d.existing(ctx, st, recs, req)
	var made []*vmRecord
	if missing > 0 {
		if err := capacity(st, p.spec, missing); err != nil {
			return nil, err
		}
		net, err := d.hostNetwork(ctx, st, p.cfg)
		if err != nil {
			return nil, timeoutOr(ctx, err)
		}
		done := false
		defer func() {
			if !done {
				d.undo(ctx, st, made)
			}
		}()
		accel, err := d.accel(ctx, p.cfg, binary, img)
		if err != nil {
			return nil, err
		}
		used := usedAddrs(recs)
		next, stop := iter.Pull(localcloud.VMAddrs(net.Subnet))
		defer stop()
		for i := range have {
			if have[i] != nil {
				continue
			}
			ip, err := freeAddr(next, used, net.Subnet)
			if err != nil {
				return nil, err
			}
			v, err := d.makeVM(ctx, st, p, req, i, ip, net, accel, binary, img)
			if v != nil {
				made = append(made, v)
			}
			if err != nil {
				return nil, timeoutOr(ctx, err)
			}
			have[i] = v
		}
		done = true
	}
	out := make([]driversdk.VM, len(have))
	for i, v := range have {
		out[i] = v.info(true)
	}
	return out, nil
}

// existing are the VMs of req's slots that an earlier call of the same
// request made and that run, by slot (nil where one is missing), and how
// many are missing; a VM it did not finish starting is removed.
func (d *Driver) existing(ctx context.Context, st store, recs []*vmRecord, req driversdk.CreateRequest) ([]*vmRecord, int) {
	have := make([]*vmRecord, req.Count)
	for _, v := range recs {
		if v.Tags[driversdk.TagRequestID] != req.RequestID || v.Index >= req.Count {
			continue
		}
		if v.PID == 0 || !processAlive(v.PID, v.ID) {
			d.remove(context.WithoutCancel(ctx), st, v)
			continue
		}
		have[v.Index] = v
	}
	missing := 0
	for _, v := range have {
		if v == nil {
			missing++
		}
	}
	return have, missing
}

// hostNetwork makes sure of the host's bridge, NAT and the forwarding of
// the keeper's ports for the VMs of cfg's subnet.
func (d *Driver) hostNetwork(ctx context.Context, st store, cfg Config) (localcloud.HostNetwork, error) {
	hostPorts := cfg.HostPorts
	if hostPorts == nil {
		hostPorts = d.hostPorts
	}
	return localcloud.EnsureHostNetwork(ctx, st.dir, cfg.Subnet, hostPorts, d.hostPorts)
}

// usedAddrs are the addresses the VMs hold.
func usedAddrs(recs []*vmRecord) map[netip.Addr]bool {
	used := map[netip.Addr]bool{}
	for _, v := range recs {
		used[v.IP] = true
	}
	return used
}

// freeAddr is the next address of the subnet no VM uses.
func freeAddr(next func() (netip.Addr, bool), used map[netip.Addr]bool, subnet netip.Prefix) (netip.Addr, error) {
	for {
		a, ok := next()
		if !ok {
			return netip.Addr{}, &driversdk.Error{Code: codeQuota, Message: fmt.Sprintf("the subnet %s has no free address left", subnet)}
		}
		if !used[a] {
			return a, nil
		}
	}
}

// timeoutOr reports err as driver.timeout when ctx's deadline caused it.
func timeoutOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		var de *driversdk.Error
		if !errors.As(err, &de) || de.Code == codeFailed {
			return &driversdk.Error{Code: codeTimeout, Message: "the call's deadline passed: " + err.Error()}
		}
	}
	return err
}

// undo destroys the VMs a failed Create made, and the host network when
// no VM is left on it.
func (d *Driver) undo(ctx context.Context, st store, made []*vmRecord) {
	ctx = context.WithoutCancel(ctx)
	for _, v := range made {
		if err := d.remove(ctx, st, v); err != nil {
			d.log().WarnContext(ctx, "undo a failed create", "vm", v.ID, "err", err)
		}
	}
	if left, err := st.vms(); err == nil && len(left) == 0 {
		if err := localcloud.TeardownHostNetwork(ctx, st.dir); err != nil {
			d.log().WarnContext(ctx, "undo a failed create: host network", "err", err)
		}
	}
}

// makeVM makes VM index i of req: its record, host key, overlay, seed,
// tap, and QEMU process.
func (d *Driver) makeVM(ctx context.Context, st store, p plan, req driversdk.CreateRequest, i int, ip netip.Addr,
	net localcloud.HostNetwork, accel, binary string, img image) (*vmRecord, error) {
	id := newVMID()
	name := p.names[i]
	if name == "" {
		name = id + "." + p.suffix
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	v := &vmRecord{
		ID: id, Index: i, FQDN: name, IP: ip, MAC: localcloud.MACFor(ip), Tap: tapName(id), Spec: p.spec, Accel: accel, Image: img,
		Tags:      map[string]string{driversdk.TagRunID: req.RunID, driversdk.TagRequestID: req.RequestID, driversdk.TagKeeper: req.Provider.KeeperID},
		CreatedAt: time.Now().UTC(), HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))),
	}
	dir := st.vmDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := st.saveVM(v); err != nil {
		return v, err
	}
	if err := makeOverlay(ctx, img, filepath.Join(dir, "disk.qcow2"), p.spec.DiskGB); err != nil {
		return v, err
	}
	sd := seed{InstanceID: id, FQDN: name, IP: netip.PrefixFrom(ip, net.Subnet.Bits()), Gateway: net.Gateway, MAC: v.MAC,
		DNS: hostResolvers(net.Gateway), HostKey: string(pem.EncodeToMemory(block)), HostKeyPub: v.HostKey,
		AuthorizedKeys: req.AuthorizedKeys, Root: p.spec.SSHUser == "root"}
	if len(req.Userdata) > 0 {
		sd.Userdata = req.Userdata[i]
	}
	if err := sd.writeISO(filepath.Join(dir, "seed.iso")); err != nil {
		return v, fmt.Errorf("VM %s: NoCloud seed: %w", id, err)
	}
	if err := localcloud.AddTap(ctx, net, v.Tap); err != nil {
		return v, err
	}
	localcloud.ForgetNeighbour(ctx, net, ip)
	pid, err := machine{binary: binary, accel: accel, vm: v, dir: dir, img: img}.start(ctx)
	v.PID = pid
	if serr := st.saveVM(v); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return v, err
	}
	d.log().InfoContext(ctx, "VM started", "vm", id, "fqdn", name, "ip", ip, "accel", accel, "pid", pid)
	return v, nil
}

// hostResolvers are the name servers of the host's /etc/resolv.conf that
// a VM can reach (not the host's loopback stubs); the gateway when there
// are none.
func hostResolvers(gateway netip.Addr) []netip.Addr {
	var out []netip.Addr
	if f, err := os.Open("/etc/resolv.conf"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "nameserver" {
				if a, err := netip.ParseAddr(fields[1]); err == nil && a.Is4() && !a.IsLoopback() {
					out = append(out, a)
				}
			}
		}
		f.Close()
	}
	if len(out) == 0 {
		out = []netip.Addr{gateway}
	}
	return out
}

// capacity refuses, with quota.exceeded, n more VMs of spec that the host
// cannot hold: their memory must fit in what the host has available (less
// a reserve for the host itself), and their disks, were they to fill, in
// the state dir's free space.
func capacity(st store, spec Spec, n int) error {
	const reserveMB = 512
	if avail, err := memAvailableMB(); err == nil {
		if want := int64(n) * int64(spec.MemoryMB); want > avail-reserveMB {
			return &driversdk.Error{Code: codeQuota, Field: "memory_mb", Message: fmt.Sprintf("%d VMs of %d MB need %d MB; the host has %d MB available (less %d MB kept for the host)",
				n, spec.MemoryMB, want, avail, reserveMB)}
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(st.dir, &fs); err == nil {
		free := int64(fs.Bavail) * int64(fs.Bsize)
		if want := int64(n) * int64(spec.DiskGB) << 30; want > free {
			return &driversdk.Error{Code: codeQuota, Field: "disk_gb", Message: fmt.Sprintf("%d VMs of %d GiB need %d GiB; %s has %.1f GiB free",
				n, spec.DiskGB, want>>30, st.dir, float64(free)/(1<<30))}
		}
	}
	return nil
}

func memAvailableMB() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

// accelState is the KVM probe's answer, kept for one boot of the host.
type accelState struct {
	BootID string `json:"boot_id"`
	Binary string `json:"binary"`
	KVM    bool   `json:"kvm"`
	Why    string `json:"why"`
}

// accel is the accelerator new VMs get: tcg or kvm as configured, or for
// auto KVM when a probe guest boots under it, else TCG. The answer is a
// fact of the host's boot and QEMU binary, kept in the images dir, which
// several state dirs may share: each of them does not probe again (where
// KVM hangs, the probe costs its whole 20 s timeout).
func (d *Driver) accel(ctx context.Context, cfg Config, binary string, img image) (string, error) {
	if cfg.Accel == AccelTCG {
		return AccelTCG, nil
	}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	path := filepath.Join(cfg.imagesDir(), "accel.json")
	var known accelState
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &known) == nil &&
		known.BootID == strings.TrimSpace(string(bootID)) && known.Binary == binary {
	} else {
		kernel := img.Kernel
		if kernel == "" {
			if built, err := os.ReadFile(filepath.Join(cfg.imagesDir(), ImageDebianBookworm, "image.json")); err == nil {
				var bi image
				if json.Unmarshal(built, &bi) == nil {
					kernel = bi.Kernel
				}
			}
		}
		if kernel == "" {
			if m, _ := filepath.Glob("/boot/vmlinuz-*"); len(m) > 0 {
				kernel = m[len(m)-1]
			}
		}
		ok, why := probeKVM(ctx, binary, kernel, cfg.StateDir)
		known = accelState{BootID: strings.TrimSpace(string(bootID)), Binary: binary, KVM: ok, Why: why}
		if kernel != "" && os.MkdirAll(cfg.imagesDir(), 0o700) == nil {
			b, _ := json.Marshal(known)
			_ = localcloud.WriteFileAtomic(path, b)
		}
		d.log().InfoContext(ctx, "KVM probe", "kvm", ok, "why", why)
	}
	switch {
	case known.KVM:
		return AccelKVM, nil
	case cfg.Accel == AccelKVM:
		return "", &driversdk.Error{Code: codeUnavailable, Field: "config.accel", Message: "accel is kvm but " + known.Why}
	}
	return AccelTCG, nil
}

// Destroy stops VMs and removes every trace of them (process, overlay,
// seed, tap); when the last VM of the state dir goes, so do the bridge and
// the nft table. IDs of VMs already destroyed are skipped; an ID the
// driver never made is vm.not_found, and then nothing is destroyed.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	cfg, err := ParseConfig(req.Provider.Config)
	if err != nil {
		return err
	}
	st := store{dir: cfg.StateDir}
	if err := os.MkdirAll(st.dir, 0o700); err != nil {
		return err
	}
	unlock, err := localcloud.Flock(ctx, filepath.Join(st.dir, "state.lock"))
	if err != nil {
		return timeoutOr(ctx, err)
	}
	defer unlock()
	recs, err := d.known(st, req.VMIDs)
	if err != nil {
		return err
	}
	if err := owned(recs, req.Provider.KeeperID); err != nil {
		return err
	}
	for _, v := range recs {
		if !v.IP.IsValid() {
			// No record: a create that died (creates hold the state lock
			// this holds now, so none is still making it).
			if err := d.remove(ctx, st, v); err != nil {
				return timeoutOr(ctx, err)
			}
			continue
		}
		unlock, err := st.lockVM(ctx, v.ID)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return timeoutOr(ctx, err)
		}
		err = d.remove(ctx, st, v)
		unlock()
		if err != nil {
			return timeoutOr(ctx, err)
		}
	}
	left, err := st.vms()
	if err != nil {
		return err
	}
	if len(left) == 0 {
		return localcloud.TeardownHostNetwork(ctx, st.dir)
	}
	return nil
}

// known returns the records of ids, leaving out those already destroyed;
// an ID never made is vm.not_found.
func (d *Driver) known(st store, ids []string) ([]*vmRecord, error) {
	var recs []*vmRecord
	var missing []string
	for _, id := range ids {
		if !vmIDRE.MatchString(id) {
			missing = append(missing, id)
			continue
		}
		v, err := st.loadVM(id)
		if errors.Is(err, os.ErrNotExist) {
			v, err = st.partial(id)
		}
		switch {
		case err != nil:
			return nil, err
		case v != nil:
			recs = append(recs, v)
		case !st.destroyed(id):
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, &driversdk.Error{Code: codeNotFound, Message: "no VM " + strings.Join(missing, ", ")}
	}
	return recs, nil
}

// remove stops a VM at once and deletes it.
func (d *Driver) remove(ctx context.Context, st store, v *vmRecord) error {
	dir := st.vmDir(v.ID)
	if err := stop(ctx, v, dir, 0); err != nil {
		return err
	}
	if err := localcloud.DeleteLink(ctx, v.Tap); err != nil {
		return err
	}
	if net, ok, _ := localcloud.KnownHostNetwork(st.dir); ok && v.IP.IsValid() {
		localcloud.ForgetNeighbour(ctx, net, v.IP)
	}
	if err := st.addTombstone(v.ID); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	d.log().InfoContext(ctx, "VM destroyed", "vm", v.ID, "fqdn", v.FQDN)
	return nil
}

// owned refuses, with driver.not_owned, VMs of another keeper deployment.
// A VM with no keeper tag (one whose create died before its first record)
// is nobody's, and may go.
func owned(recs []*vmRecord, keeper string) error {
	var theirs []string
	for _, v := range recs {
		if k, ok := v.Tags[driversdk.TagKeeper]; ok && k != keeper {
			theirs = append(theirs, v.ID)
		}
	}
	if len(theirs) == 0 {
		return nil
	}
	slices.Sort(theirs)
	return &driversdk.Error{Code: codeNotOwned, Message: fmt.Sprintf("VM %s does not carry this keeper's tag %s: it was made by another keeper deployment; nothing was changed", strings.Join(theirs, ", "), driversdk.TagKeeper)}
}

// Resize gives VMs new cpus, memory_mb or disk_gb (keys the spec leaves
// out keep their values; the disk only grows; the image cannot change):
// the guest is powered off cleanly (ACPI, up to the config's
// shutdown_timeout, then stopped hard), the disk grown, and the machine
// started again with the new size: CausedDowntime. A VM that already has
// the resulting spec is left alone and reported Unchanged.
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	cfg, err := ParseConfig(req.Provider.Config)
	if err != nil {
		return nil, err
	}
	st := store{dir: cfg.StateDir}
	recs, err := d.known(st, req.VMIDs)
	if err != nil {
		return nil, err
	}
	if len(recs) != len(req.VMIDs) {
		return nil, &driversdk.Error{Code: codeNotFound, Message: "some of " + strings.Join(req.VMIDs, ", ") + " are destroyed"}
	}
	for _, v := range recs {
		if !v.IP.IsValid() {
			return nil, &driversdk.Error{Code: codeNotFound, Message: "VM " + v.ID + " was never completely made (its create died): destroy it"}
		}
	}
	if err := owned(recs, req.Provider.KeeperID); err != nil {
		return nil, err
	}
	specs := make([]Spec, len(recs))
	for i, v := range recs {
		if specs[i], err = ParseResize(req.Spec, v.Spec); err != nil {
			return nil, err
		}
	}
	binary, err := qemuBinary(cfg)
	if err != nil {
		return nil, err
	}
	net, ok, err := localcloud.KnownHostNetwork(st.dir)
	if err != nil || !ok {
		return nil, fmt.Errorf("the host network of %s is not recorded: %v", st.dir, err)
	}
	out := make([]driversdk.ResizeResult, len(recs))
	for i, v := range recs {
		out[i].VMID = v.ID
		if specs[i] == v.Spec && processAlive(v.PID, v.ID) {
			out[i].Unchanged = true
			continue
		}
		unlock, err := st.lockVM(ctx, v.ID)
		if err != nil {
			return nil, timeoutOr(ctx, err)
		}
		err = d.restart(ctx, st, cfg, v, specs[i], net, binary)
		unlock()
		if err != nil {
			return nil, timeoutOr(ctx, err)
		}
		out[i].CausedDowntime = true
	}
	return out, nil
}

// restart powers a VM off, applies spec, and starts it again.
func (d *Driver) restart(ctx context.Context, st store, cfg Config, v *vmRecord, spec Spec, net localcloud.HostNetwork, binary string) error {
	dir := st.vmDir(v.ID)
	start := time.Now()
	if err := stop(ctx, v, dir, cfg.ShutdownTimeout); err != nil {
		return err
	}
	if spec.DiskGB > v.Spec.DiskGB {
		if err := growDisk(ctx, filepath.Join(dir, "disk.qcow2"), spec.DiskGB); err != nil {
			return err
		}
	}
	v.Spec = spec
	v.PID = 0
	if err := st.saveVM(v); err != nil {
		return err
	}
	if err := localcloud.AddTap(ctx, net, v.Tap); err != nil {
		return err
	}
	pid, err := machine{binary: binary, accel: v.Accel, vm: v, dir: dir, img: v.Image}.start(ctx)
	v.PID = pid
	if serr := st.saveVM(v); serr != nil && err == nil {
		err = serr
	}
	if err == nil {
		d.log().InfoContext(ctx, "VM resized", "vm", v.ID, "cpus", spec.CPUs, "memory_mb", spec.MemoryMB, "disk_gb", spec.DiskGB, "seconds", time.Since(start).Seconds())
	}
	return err
}

// List returns the VMs carrying every tag in req.Tags, running or not
// (attribute state: running, or stopped when its QEMU process is gone,
// after a reboot of the host, say).
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	cfg, err := ParseConfig(req.Provider.Config)
	if err != nil {
		return nil, err
	}
	recs, err := store{dir: cfg.StateDir}.vms()
	if err != nil {
		return nil, err
	}
	var out []driversdk.VM
	for _, v := range recs {
		match := true
		for k, want := range req.Tags {
			if v.Tags[k] != want {
				match = false
			}
		}
		if match {
			out = append(out, v.info(processAlive(v.PID, v.ID)))
		}
	}
	return out, nil
}

// info is how a VM is reported.
func (v *vmRecord) info(running bool) driversdk.VM {
	state := "stopped"
	if running {
		state = "running"
	}
	image := v.Spec.Image
	attrs := map[string]any{
		"cpus": v.Spec.CPUs, "memory_mb": v.Spec.MemoryMB, "disk_gb": v.Spec.DiskGB, "image": image,
		"ssh_user": v.Spec.SSHUser, "ssh_host_key": v.HostKey, "state": state, "mac": v.MAC, "accel": v.Accel,
		"created_at": v.CreatedAt.UTC().Format(time.RFC3339),
	}
	if !v.IP.IsValid() {
		// A create that died before its first record: nothing but the ID.
		attrs["state"] = "incomplete"
		return driversdk.VM{ID: v.ID, Attributes: attrs, Tags: maps.Clone(v.Tags)}
	}
	ip := v.IP.String()
	return driversdk.VM{ID: v.ID, FQDN: v.FQDN, PrimaryIP: ip, PrivateIP: ip, Attributes: attrs, Tags: maps.Clone(v.Tags),
		// The bridge is reachable from this host only: a private address.
		Addresses: []driversdk.Address{{IP: ip, Kind: driversdk.AddressPrivate, Network: "eth0"}}}
}
