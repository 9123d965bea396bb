package localcloud

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/soulstack/soulstack/driversdk"
	"golang.org/x/crypto/ssh"
)

// Options configure a Driver. The zero value is ready to use.
type Options struct {
	// Logger receives what the driver does; nil means slog.Default() at
	// the time of each call (driversdk.Serve points it at the keeper).
	Logger *slog.Logger
	// Hide are host directories no VM may see even where its view of the
	// host would show them (a keeper's data and plugin dirs under /usr,
	// say): each is covered by an empty read-only tmpfs in every VM. The
	// driver's state dir always is. soul-cloud-local takes them from
	// $SOULSTACK_KEEPER_DIRS, which the keeper sets (EnvKeeperDirs).
	Hide []string
	// HostPorts are the host's TCP ports VMs may reach when a provider's
	// config has no host_ports; nil means [DefaultHostPort].
	// soul-cloud-local takes them from $SOULSTACK_KEEPER_PORTS, which the
	// keeper sets to its listen port (EnvKeeperPorts).
	HostPorts []uint16
}

// EnvKeeperPorts names the variable through which the keeper tells
// soul-cloud-local the TCP ports it listens on (comma-separated), for
// Options.HostPorts.
const EnvKeeperPorts = "SOULSTACK_KEEPER_PORTS"

// ParsePorts reads a comma-separated list of TCP ports such as
// $SOULSTACK_KEEPER_PORTS; what is not a port is left out, and nothing
// valid gives nil.
func ParsePorts(s string) []uint16 {
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16); err == nil && n > 0 {
			out = append(out, uint16(n))
		}
	}
	return out
}

// EnvKeeperDirs names the variable through which the keeper tells
// soul-cloud-local its data and plugin dirs (a list as in $PATH) for
// Options.Hide.
const EnvKeeperDirs = "SOULSTACK_KEEPER_DIRS"

// Driver is the local cloud: it implements driversdk.Driver with
// namespace VMs on this host. It keeps nothing in memory between calls:
// everything is in the state dir, so several Driver values and processes
// may share one.
type Driver struct {
	logger    *slog.Logger
	hide      []string
	hostPorts []uint16
	// euid returns the effective user ID; tests replace it.
	euid func() int
}

var _ driversdk.Driver = (*Driver)(nil)

// New returns a Driver.
func New(opts Options) *Driver {
	d := &Driver{logger: opts.Logger, euid: geteuid, hostPorts: opts.HostPorts}
	for _, p := range opts.Hide {
		if filepath.IsAbs(p) {
			d.hide = append(d.hide, filepath.Clean(p))
		}
	}
	return d
}

func (d *Driver) log() *slog.Logger {
	if d.logger != nil {
		return d.logger
	}
	return slog.Default()
}

// RunIfChild turns the process into a VM's launcher or init when the
// driver started it as one (the driver re-executes its own binary to
// start VMs), and never returns then; otherwise it returns at once. Call
// it first thing in main, and in TestMain of tests that create VMs.
func RunIfChild() {
	runChild()
}

// Capabilities reports that the driver resizes live, honours request IDs
// and lists its VMs.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}, nil
}

// ValidateProfile checks the provider config and the profile spec, and
// whether this host can run VMs at all (Linux, root, the tools, a free
// subnet). A host that cannot is an error with code driver.unavailable.
func (d *Driver) ValidateProfile(ctx context.Context, p driversdk.Provider, profile json.RawMessage) error {
	cfg, err := ParseConfig(p.Config)
	if err != nil {
		return err
	}
	spec, err := ParseSpec(profile)
	if err != nil {
		return err
	}
	if err := cfg.allows(spec); err != nil {
		return err
	}
	if _, err := fqdnSuffix(p); err != nil {
		return err
	}
	return d.checkHost(ctx, cfg, spec)
}

func fqdnSuffix(p driversdk.Provider) (string, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(p.FQDNSuffix, "."), ".")
	if s == "" {
		s = DefaultFQDNSuffix
	}
	if err := checkFQDN("x." + s); err != nil {
		return "", invalid("fqdn_suffix", "%v", err)
	}
	return s, nil
}

// createPlan is a checked CreateRequest.
type createPlan struct {
	cfg      Config
	spec     Spec
	suffix   string
	names    []string // per index; empty: <vm-id>.<suffix>
	userdata []string
	keys     []string
}

// Create makes req.Count VMs and returns once each one's sshd answers. A
// repeated request (same RequestID) returns the VMs the first one made,
// making only those it did not get to. If any VM fails, the VMs this call
// made are destroyed again and the error says why.
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	plan, err := d.plan(req)
	if err != nil {
		return nil, err
	}
	return d.create(ctx, req, plan)
}

func (d *Driver) plan(req driversdk.CreateRequest) (createPlan, error) {
	var p createPlan
	var err error
	if p.cfg, err = ParseConfig(req.Provider.Config); err != nil {
		return p, err
	}
	if p.spec, err = ParseSpec(req.Profile); err != nil {
		return p, err
	}
	if err = p.cfg.allows(p.spec); err != nil {
		return p, err
	}
	if p.suffix, err = fqdnSuffix(req.Provider); err != nil {
		return p, err
	}
	if req.Count < 1 {
		return p, reqInvalid("count", "must be at least 1, not %d", req.Count)
	}
	if len(req.Names) != 0 && len(req.Names) != req.Count {
		return p, reqInvalid("names", "has %d names for %d VMs", len(req.Names), req.Count)
	}
	if len(req.Userdata) != 0 && len(req.Userdata) != req.Count {
		return p, reqInvalid("userdata", "has %d entries for %d VMs", len(req.Userdata), req.Count)
	}
	p.names = make([]string, req.Count)
	seen := map[string]bool{}
	for i, n := range req.Names {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		if err := checkFQDN(n); err != nil {
			return p, reqInvalid(fmt.Sprintf("names[%d]", i), "%v", err)
		}
		if seen[n] {
			return p, reqInvalid(fmt.Sprintf("names[%d]", i), "%q is given twice", n)
		}
		seen[n] = true
		p.names[i] = n
	}
	p.userdata = make([]string, req.Count)
	for i, u := range req.Userdata {
		if _, err := parseUserdata(u); err != nil {
			return p, &driversdk.Error{Code: codeUserdataInvalid, Field: fmt.Sprintf("userdata[%d]", i), Message: err.Error()}
		}
		p.userdata[i] = u
	}
	for i, k := range req.AuthorizedKeys {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(strings.TrimSpace(k), "\r\n") {
			return p, reqInvalid(fmt.Sprintf("authorized_keys[%d]", i), "is not one authorized_keys line")
		}
		p.keys = append(p.keys, strings.TrimSpace(k))
	}
	return p, nil
}

func reqInvalid(field, format string, args ...any) *driversdk.Error {
	return &driversdk.Error{Code: codeRequestInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Destroy removes VMs and every trace of them; when the last VM of the
// state dir goes, so do the bridge and the nft table, and IPv4 forwarding
// is set back as it was. IDs of VMs already destroyed are skipped; an ID
// the driver never made is vm.not_found, and then nothing is destroyed.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	cfg, err := ParseConfig(req.Provider.Config)
	if err != nil {
		return err
	}
	return d.destroy(ctx, cfg, req.Provider.KeeperID, req.VMIDs)
}

// Resize applies the spec's cpus and memory_mb to running VMs at once
// (cgroup limits change live: no downtime). Keys the spec leaves out keep
// their values; ssh_user and base_root cannot change. A VM that already
// has the resulting spec is left alone and reported Unchanged.
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	cfg, err := ParseConfig(req.Provider.Config)
	if err != nil {
		return nil, err
	}
	if _, err := objectKeys(req.Spec, specKeys, ""); err != nil {
		return nil, err
	}
	return d.resize(ctx, cfg, req.Provider.KeeperID, req.VMIDs, req.Spec)
}

// List returns the VMs carrying every tag in req.Tags, running or not
// (attribute state).
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	cfg, err := ParseConfig(req.Provider.Config)
	if err != nil {
		return nil, err
	}
	return d.list(ctx, cfg, req.Tags)
}

// info is how a VM is reported.
func (v *vmRecord) info(running bool) driversdk.VM {
	state := "stopped"
	if running {
		state = "running"
	}
	attrs := map[string]any{
		"cpus":         v.Spec.CPUs,
		"memory_mb":    v.Spec.MemoryMB,
		"ssh_user":     v.Spec.SSHUser,
		"ssh_host_key": v.HostKey,
		"state":        state,
		"mac":          v.mac(),
	}
	if v.Spec.BaseRoot != "" {
		attrs["base_root"] = v.Spec.BaseRoot
	}
	if v.Spec.Base != "" {
		attrs["base"] = v.Spec.Base
	}
	if v.Spec.Nesting != "" {
		attrs["nesting"] = v.Spec.Nesting // the VM is not confined as others are
	}
	if !v.CreatedAt.IsZero() {
		attrs["created_at"] = v.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	ip := ""
	if v.IP.IsValid() {
		ip = v.IP.String()
	}
	vm := driversdk.VM{ID: v.ID, FQDN: v.FQDN, PrimaryIP: ip, PrivateIP: ip, Attributes: attrs, Tags: maps.Clone(v.Tags)}
	if ip != "" {
		// The bridge address is reachable from this host only: private.
		// A local VM has no public address.
		vm.Addresses = []driversdk.Address{{IP: ip, Kind: driversdk.AddressPrivate, Network: "eth0"}}
	}
	return vm
}

// owned refuses, with driver.not_owned, the VMs among recs that carry
// another keeper deployment's tag. A VM without the tag was made before
// drivers tagged VMs with their keeper (protocol 1): the state dir is one
// keeper's, so it counts as that keeper's.
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
	return &driversdk.Error{Code: driversdk.CodeNotOwned, Message: fmt.Sprintf("VM %s does not carry this keeper's tag %s: it was made by another keeper deployment; nothing was changed", strings.Join(theirs, ", "), driversdk.TagKeeper)}
}

// hasTags reports whether the VM carries every tag in want.
func (v *vmRecord) hasTags(want map[string]string) bool {
	for k, val := range want {
		if got, ok := v.Tags[k]; !ok || got != val {
			return false
		}
	}
	return true
}

// notFound is the error for IDs the driver does not know.
func notFound(ids []string) error {
	slices.Sort(ids)
	return &driversdk.Error{Code: codeNotFound, Message: "no VM " + strings.Join(ids, ", ")}
}
