package localcloud

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/soulstack/soulstack/driversdk"
)

// Defaults for the provider config and the profile spec.
const (
	DefaultStateDir   = "/var/lib/soulstack-local"
	DefaultSubnet     = "10.213.0.0/24"
	DefaultFQDNSuffix = "local.test"
	DefaultCPUs       = 1.0
	DefaultMemoryMB   = 1024
	DefaultSSHUser    = "root"
	// DefaultHostPort is the keeper's default API port: the one host
	// port VMs may reach when neither host_ports nor the keeper
	// (Options.HostPorts) says otherwise.
	DefaultHostPort = 8420

	// MinMemoryMB is the smallest memory limit a VM may get: its init,
	// sshd and a login shell need a few megabytes each.
	MinMemoryMB = 64
	// MaxCPUs bounds the cpus a VM may ask for.
	MaxCPUs = 1024

	maxMemoryMB = 1 << 30
)

// Config is the provider's driver-specific config: {"subnet":
// "10.213.0.0/24", "state_dir": "/var/lib/soulstack-local", "host_ports":
// [8420]}. Every key is optional.
type Config struct {
	// Subnet is the IPv4 network of the bridge: the driver takes its first
	// address and gives the VMs the others. Empty means the first of
	// 10.213.0.0/24, 10.213.1.0/24, … that overlaps no route or address on
	// the host. A configured subnet that overlaps one is refused.
	Subnet netip.Prefix
	// StateDir holds the driver's state and the VMs' upper layers.
	StateDir string
	// HostPorts are the TCP ports on the host's own addresses VMs may
	// connect to (the keeper's API and agent listeners); everything else
	// they send to the host, but DNS, is refused. nil (no host_ports key)
	// means the driver's Options.HostPorts; an empty list allows none.
	HostPorts []uint16
	// LoopbackPorts are the keeper's own ports (the driver's
	// Options.HostPorts, from the keeper): what VMs send to these among
	// HostPorts at their gateway goes to 127.0.0.1, where a keeper on
	// loopback listens. Other host ports (a service listening on the
	// gateway's address) are reached as they are. Not in a provider's
	// config.
	LoopbackPorts []uint16
	// BaseRoots are the directories profiles may name as base_root. A
	// profile is anyone's to write (an inline one is part of a scenario),
	// a provider's config only an admin's: a base root is trusted as a
	// whole, so the provider says which ones exist.
	BaseRoots []string
	// BasesDir holds the bases the driver builds (profile key base);
	// empty means <state_dir>/bases. They stay when the VMs go: a base
	// is built once and shared by every VM made on it.
	BasesDir string
	// DebianMirror is where debootstrap fetches Debian bases from.
	DebianMirror string
	// AllowNesting lets profiles ask for nesting (see Spec.Nesting). It
	// is the provider's, an admin's, to give: a nesting VM's root can
	// reach the host.
	AllowNesting bool
}

// NestingDocker is the one value of the profile key nesting: the VM
// runs a container engine (see nesting_linux.go for what that costs).
const NestingDocker = "docker"

// DefaultDebianMirror is the Debian archive bases are built from.
const DefaultDebianMirror = "http://deb.debian.org/debian"

// basesDir is where the driver keeps its bases.
func (c Config) basesDir() string {
	if c.BasesDir != "" {
		return c.BasesDir
	}
	return filepath.Join(c.StateDir, "bases")
}

// Bases the driver can build, by the name a profile's base gives: a
// Debian suite debootstrapped with the packages a VM needs.
var bases = map[string]struct{ suite, include string }{
	"debian-bookworm": {"bookworm", "openssh-server,iproute2,sudo"},
}

func baseNames() []string {
	var out []string
	for n := range bases {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Spec is a VM profile: {"cpus": 1, "memory_mb": 512, "ssh_user": "root",
// "base_root": "/srv/bookworm"}. All keys are optional.
type Spec struct {
	// CPUs is the CPU time a VM may use, in CPUs (0.5 is half of one).
	CPUs float64 `json:"cpus"`
	// MemoryMB is the VM's memory limit; it has no swap.
	MemoryMB int `json:"memory_mb"`
	// SSHUser is the user the AuthorizedKeys log in as; a user other than
	// root is made at first boot when the root filesystem lacks it, with
	// password-less sudo when sudo is installed.
	SSHUser string `json:"ssh_user"`
	// BaseRoot, when set, is the directory the VMs' root overlay is built
	// on (a debootstrapped tree, say) instead of the host's live /. The
	// driver never writes to it.
	BaseRoot string `json:"base_root,omitempty"`
	// Base, when set, names a root the driver builds once and keeps in
	// its bases dir (debian-bookworm: a debootstrapped Debian 12 with
	// openssh-server, iproute2 and sudo), instead of the view of the
	// host. It excludes BaseRoot.
	Base string `json:"base,omitempty"`

	// Nesting, when "docker", gives the VM what a container engine
	// needs (see nestingCapabilities); the provider must allow it.
	Nesting string `json:"nesting,omitempty"`

	// baseDir is where Base was built, found at Create.
	baseDir string
}

// lower is the directory the VM's root overlay is built on.
func (s Spec) lower() string {
	switch {
	case s.BaseRoot != "":
		return s.BaseRoot
	case s.baseDir != "":
		return s.baseDir
	}
	return "/"
}

// ownRoot reports whether the VM is built on a root of its own (a
// base_root or a base) rather than on the view of the host.
func (s Spec) ownRoot() bool { return s.BaseRoot != "" || s.Base != "" }

var (
	userRE     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
)

// maxHostname is the longest name sethostname(2) accepts.
const maxHostname = 64

func invalid(field, format string, args ...any) *driversdk.Error {
	return &driversdk.Error{Code: codeProfileInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Error codes this driver returns besides the SDK's.
const (
	codeProfileInvalid  = driversdk.CodeProfileInvalid
	codeUnavailable     = driversdk.CodeDriverUnavailable
	codeNotFound        = driversdk.CodeVMNotFound
	codeFailed          = driversdk.CodeDriverFailed
	codeTimeout         = driversdk.CodeDriverTimeout
	codeRequestInvalid  = "request.invalid"
	codeUserdataInvalid = "userdata.invalid"
	codeQuota           = "quota.exceeded"
)

// objectKeys decodes raw as a JSON object and refuses keys outside known,
// naming the first unknown one (in sorted order) with prefix.
func objectKeys(raw json.RawMessage, known []string, prefix string) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return m, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalid(strings.TrimSuffix(prefix, "."), "must be a JSON object")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return nil, invalid(prefix+k, "unknown key (known: %s)", strings.Join(known, ", "))
		}
	}
	return m, nil
}

func decodeString(m map[string]json.RawMessage, key, field string) (string, bool, error) {
	raw, ok := m[key]
	if !ok {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, invalid(field, "must be a string")
	}
	return s, true, nil
}

// ParseConfig decodes a provider config strictly and fills in defaults.
// Problems are *driversdk.Error with code profile.invalid and a Field
// prefixed "config.".
func ParseConfig(raw json.RawMessage) (Config, error) {
	m, err := objectKeys(raw, []string{"allow_nesting", "base_roots", "bases_dir", "debian_mirror", "host_ports", "state_dir", "subnet"}, "config.")
	if err != nil {
		return Config{}, err
	}
	c := Config{StateDir: DefaultStateDir, DebianMirror: DefaultDebianMirror}
	if d, ok, err := decodeString(m, "bases_dir", "config.bases_dir"); err != nil {
		return Config{}, err
	} else if ok {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" || strings.ContainsAny(d, ",:\\\n") {
			return Config{}, invalid("config.bases_dir", "%q is not an absolute path other than / without ',', ':', '\\' or a newline", d)
		}
		c.BasesDir = filepath.Clean(d)
	}
	if u, ok, err := decodeString(m, "debian_mirror", "config.debian_mirror"); err != nil {
		return Config{}, err
	} else if ok {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "file:/") {
			return Config{}, invalid("config.debian_mirror", "%q is not an http://, https:// or file:/ URL", u)
		}
		c.DebianMirror = u
	}
	if v, ok := m["allow_nesting"]; ok {
		if err := json.Unmarshal(v, &c.AllowNesting); err != nil {
			return Config{}, invalid("config.allow_nesting", "must be true or false")
		}
	}
	if v, ok := m["base_roots"]; ok {
		var roots []string
		if err := json.Unmarshal(v, &roots); err != nil {
			return Config{}, invalid("config.base_roots", "must be a list of absolute paths")
		}
		for _, r := range roots {
			if !filepath.IsAbs(r) || filepath.Clean(r) == "/" || strings.ContainsAny(r, ",:\\\n") {
				return Config{}, invalid("config.base_roots", "%q is not an absolute path other than / without ',', ':', '\\' or a newline", r)
			}
			c.BaseRoots = append(c.BaseRoots, filepath.Clean(r))
		}
	}
	if v, ok := m["host_ports"]; ok {
		var ports []float64
		if err := json.Unmarshal(v, &ports); err != nil || ports == nil {
			return Config{}, invalid("config.host_ports", "must be a list of TCP port numbers such as [%d]", DefaultHostPort)
		}
		c.HostPorts = []uint16{}
		for _, p := range ports {
			if p != math.Trunc(p) || p < 1 || p > 65535 {
				return Config{}, invalid("config.host_ports", "%v is not a TCP port number (1-65535)", p)
			}
			if !slices.Contains(c.HostPorts, uint16(p)) {
				c.HostPorts = append(c.HostPorts, uint16(p))
			}
		}
	}
	if s, ok, err := decodeString(m, "state_dir", "config.state_dir"); err != nil {
		return Config{}, err
	} else if ok {
		if !filepath.IsAbs(s) {
			return Config{}, invalid("config.state_dir", "must be an absolute path, not %q", s)
		}
		c.StateDir = filepath.Clean(s)
	}
	// The upper and work dirs of every VM sit under the state dir and go
	// into overlay mount options, where these characters separate fields.
	if strings.ContainsAny(c.StateDir, ",:\\\n") {
		return Config{}, invalid("config.state_dir", "must not contain ',', ':', '\\' or a newline")
	}
	if s, ok, err := decodeString(m, "subnet", "config.subnet"); err != nil {
		return Config{}, err
	} else if ok {
		p, err := parseSubnet(s)
		if err != nil {
			return Config{}, invalid("config.subnet", "%v", err)
		}
		c.Subnet = p
	}
	return c, nil
}

// parseSubnet accepts an IPv4 network from /8 to /29 written with its
// network address ("10.213.0.0/24").
func parseSubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR network such as %s", s, DefaultSubnet)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%q: only IPv4 networks are supported", s)
	}
	if p.Bits() < 8 || p.Bits() > 29 {
		return netip.Prefix{}, fmt.Errorf("%q: the prefix length must be between /8 and /29", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
	}
	return p, nil
}

var specKeys = []string{"base", "base_root", "cpus", "memory_mb", "nesting", "ssh_user"}

// ParseSpec decodes a profile spec strictly and fills in defaults. It
// checks the values' types and ranges; whether base_root holds a usable
// root filesystem is checked by the driver on the host. Problems are
// *driversdk.Error with code profile.invalid naming the key.
func ParseSpec(raw json.RawMessage) (Spec, error) {
	s := Spec{CPUs: DefaultCPUs, MemoryMB: DefaultMemoryMB, SSHUser: DefaultSSHUser}
	return s, s.merge(raw)
}

// merge overwrites the fields of s that raw sets, with the same checks as
// ParseSpec.
func (s *Spec) merge(raw json.RawMessage) error {
	m, err := objectKeys(raw, specKeys, "")
	if err != nil {
		return err
	}
	if v, ok := m["cpus"]; ok {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return invalid("cpus", "must be a number of CPUs such as 1 or 0.5")
		}
		if math.IsNaN(f) || f < 0.01 || f > MaxCPUs {
			return invalid("cpus", "must be between 0.01 and %d, not %v", MaxCPUs, f)
		}
		s.CPUs = f
	}
	if v, ok := m["memory_mb"]; ok {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) {
			return invalid("memory_mb", "must be a whole number of megabytes")
		}
		if f < MinMemoryMB || f > maxMemoryMB {
			return invalid("memory_mb", "must be between %d and %d, not %v", MinMemoryMB, maxMemoryMB, f)
		}
		s.MemoryMB = int(f)
	}
	if u, ok, err := decodeString(m, "ssh_user", "ssh_user"); err != nil {
		return err
	} else if ok {
		if !userRE.MatchString(u) {
			return invalid("ssh_user", "%q is not a valid user name", u)
		}
		s.SSHUser = u
	}
	if b, ok, err := decodeString(m, "base_root", "base_root"); err != nil {
		return err
	} else if ok {
		if !filepath.IsAbs(b) {
			return invalid("base_root", "must be an absolute path, not %q", b)
		}
		if strings.ContainsAny(b, ",:\\\n") {
			return invalid("base_root", "must not contain ',', ':', '\\' or a newline")
		}
		b = filepath.Clean(b)
		if b == "/" {
			b = ""
		}
		s.BaseRoot = b
	}
	if b, ok, err := decodeString(m, "base", "base"); err != nil {
		return err
	} else if ok {
		if _, known := bases[b]; !known {
			return invalid("base", "%q is not a base this driver builds (known: %s)", b, strings.Join(baseNames(), ", "))
		}
		s.Base = b
	}
	if n, ok, err := decodeString(m, "nesting", "nesting"); err != nil {
		return err
	} else if ok {
		if n != "" && n != NestingDocker {
			return invalid("nesting", "%q is not a nesting this driver knows (known: %s)", n, NestingDocker)
		}
		s.Nesting = n
	}
	if s.Base != "" && s.BaseRoot != "" {
		return invalid("base", "base and base_root exclude each other")
	}
	return nil
}

// allows refuses a spec that asks for what the provider config does not
// give: nesting without allow_nesting.
func (c Config) allows(s Spec) error {
	if s.Nesting != "" && !c.AllowNesting {
		return invalid("nesting", "the provider does not allow nesting: its config needs allow_nesting: true (a nesting VM's root can reach the host)")
	}
	return nil
}

// checkFQDN reports whether name can be a VM's hostname.
func checkFQDN(name string) error {
	if len(name) > maxHostname {
		return fmt.Errorf("%q is longer than %d characters", name, maxHostname)
	}
	if !hostnameRE.MatchString(name) {
		return fmt.Errorf("%q is not a lowercase DNS name", name)
	}
	return nil
}
