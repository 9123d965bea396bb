package qemu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
)

// Defaults for the provider config and the profile spec.
const (
	DefaultStateDir        = "/var/lib/soulstack-qemu"
	DefaultFQDNSuffix      = "qemu.test"
	DefaultDebianMirror    = "http://deb.debian.org/debian"
	DefaultImage           = ImageDebianBookworm
	DefaultCPUs            = 1
	DefaultMemoryMB        = 1024
	DefaultDiskGB          = 4
	DefaultSSHUser         = "debian"
	DefaultShutdownTimeout = 60 * time.Second
	// DefaultHostPort is the keeper's default API port: the one host
	// port VMs may reach when neither host_ports nor the keeper says
	// otherwise.
	DefaultHostPort = 8420

	// MinMemoryMB is the least memory a VM may get: a Debian kernel,
	// systemd and cloud-init need about that much to boot.
	MinMemoryMB = 256
	// MaxCPUs bounds the cpus a VM may ask for.
	MaxCPUs = 64
	// MaxDiskGB bounds disk_gb.
	MaxDiskGB   = 4096
	maxMemoryMB = 1 << 20
)

// The accelerators of the provider's accel key.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// ImageDebianBookworm is the image the driver builds itself from
// Debian's packages (see images.go).
const ImageDebianBookworm = "debian-bookworm"

// Config is the provider's driver-specific config. Every key is
// optional:
//
//	{"state_dir": "/var/lib/soulstack-qemu", "subnet": "10.214.0.0/24",
//	 "accel": "auto", "host_ports": [8420], "image_dirs": ["/srv/images"],
//	 "debian_mirror": "http://deb.debian.org/debian", "shutdown_timeout": "60s"}
type Config struct {
	// StateDir holds the VMs' disks, seeds, QMP sockets and records, and
	// the host network's record.
	StateDir string
	// Subnet is the IPv4 network of the VMs' bridge: the host takes its
	// first address, VMs the others. Empty: the first free /24 from
	// 10.213.0.0/24 on, as the local driver picks.
	Subnet netip.Prefix
	// Accel is auto (KVM when a probe guest really runs under it, else
	// TCG), kvm or tcg.
	Accel string
	// HostPorts are the host's TCP ports VMs may reach; nil: the
	// keeper's (Options.HostPorts).
	HostPorts []uint16
	// ImageDirs are the directories a profile's image path may be in. A
	// profile is anyone's to write, so an image path outside them (any
	// file of the host, as a disk a VM reads) is refused. The state dir's
	// images dir (images_dir) is always one.
	ImageDirs []string
	// ImagesDir holds the images the driver builds (debian-bookworm);
	// empty: <state_dir>/images. They stay when the VMs go, and several
	// state dirs may share one.
	ImagesDir string
	// DebianMirror is where the debian-bookworm image is built from.
	DebianMirror string
	// ShutdownTimeout is how long a resize waits for the guest to power
	// off cleanly before it stops the machine hard.
	ShutdownTimeout time.Duration
	// Binary is the QEMU system emulator; empty: qemu-system-x86_64 in
	// $PATH.
	Binary string
}

// imagesDir is where the driver keeps the images it builds, and where
// image paths are allowed by default.
func (c Config) imagesDir() string {
	if c.ImagesDir != "" {
		return c.ImagesDir
	}
	return filepath.Join(c.StateDir, "images")
}

// Spec is a VM profile: {"cpus": 2, "memory_mb": 2048, "disk_gb": 10,
// "image": "debian-bookworm", "ssh_user": "debian"}. All keys are
// optional.
type Spec struct {
	CPUs     int `json:"cpus"`
	MemoryMB int `json:"memory_mb"`
	DiskGB   int `json:"disk_gb"`
	// Image is debian-bookworm (built by the driver) or the absolute path
	// of a cloud image (qcow2 or raw) in one of the config's image_dirs,
	// booted through its own boot loader.
	Image string `json:"image"`
	// SSHUser is the login user the keeper connects as: cloud-init's
	// default user on Debian's images is debian (password-less sudo).
	SSHUser string `json:"ssh_user"`
}

// Error codes this driver returns besides the SDK's.
const (
	codeProfileInvalid  = driversdk.CodeProfileInvalid
	codeUnavailable     = driversdk.CodeDriverUnavailable
	codeNotFound        = driversdk.CodeVMNotFound
	codeFailed          = driversdk.CodeDriverFailed
	codeTimeout         = driversdk.CodeDriverTimeout
	codeNotOwned        = driversdk.CodeNotOwned
	codeRequestInvalid  = "request.invalid"
	codeUserdataInvalid = "userdata.invalid"
	codeQuota           = "quota.exceeded"
)

func invalid(field, format string, args ...any) *driversdk.Error {
	return &driversdk.Error{Code: codeProfileInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// strictObject decodes raw (a JSON object, or empty) into out after
// refusing any key not in known, naming the first such key (sorted) with
// prefix; a value of the wrong type is named too.
func strictObject(raw json.RawMessage, known []string, prefix string, out any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return invalid(strings.TrimSuffix(prefix, "."), "must be a JSON object")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return invalid(prefix+k, "unknown key (known: %s)", strings.Join(known, ", "))
		}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		field := strings.TrimSuffix(prefix, ".")
		if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
			field = prefix + te.Field
			return invalid(field, "must be a %s", te.Type)
		}
		return invalid(field, "%v", err)
	}
	return nil
}

// ParseConfig decodes a provider config strictly and fills in defaults.
// Problems are *driversdk.Error with code profile.invalid and a Field
// prefixed "config.".
func ParseConfig(raw json.RawMessage) (Config, error) {
	var in struct {
		StateDir        string    `json:"state_dir"`
		Subnet          string    `json:"subnet"`
		Accel           string    `json:"accel"`
		HostPorts       *[]uint16 `json:"host_ports"`
		ImageDirs       []string  `json:"image_dirs"`
		ImagesDir       string    `json:"images_dir"`
		DebianMirror    string    `json:"debian_mirror"`
		ShutdownTimeout string    `json:"shutdown_timeout"`
		Binary          string    `json:"qemu_binary"`
	}
	known := []string{"accel", "debian_mirror", "host_ports", "image_dirs", "images_dir", "qemu_binary", "shutdown_timeout", "state_dir", "subnet"}
	if err := strictObject(raw, known, "config.", &in); err != nil {
		return Config{}, err
	}
	c := Config{StateDir: DefaultStateDir, Accel: AccelAuto, DebianMirror: DefaultDebianMirror, ShutdownTimeout: DefaultShutdownTimeout}
	if in.StateDir != "" {
		if err := checkDir(in.StateDir); err != nil {
			return Config{}, invalid("config.state_dir", "%v", err)
		}
		c.StateDir = filepath.Clean(in.StateDir)
	}
	if in.Subnet != "" {
		p, err := netip.ParsePrefix(in.Subnet)
		if err != nil || !p.Addr().Is4() || p != p.Masked() || p.Bits() > 29 || p.Bits() < 16 {
			return Config{}, invalid("config.subnet", "%q is not an IPv4 network from /16 to /29 such as 10.214.0.0/24", in.Subnet)
		}
		c.Subnet = p
	}
	switch in.Accel {
	case "":
	case AccelAuto, AccelKVM, AccelTCG:
		c.Accel = in.Accel
	default:
		return Config{}, invalid("config.accel", "%q is not auto, kvm or tcg", in.Accel)
	}
	if in.HostPorts != nil {
		c.HostPorts = []uint16{}
		for i, p := range *in.HostPorts {
			if p == 0 {
				return Config{}, invalid(fmt.Sprintf("config.host_ports[%d]", i), "0 is not a TCP port")
			}
			c.HostPorts = append(c.HostPorts, p)
		}
	}
	if err := c.setImageDirs(in.ImagesDir, in.ImageDirs); err != nil {
		return Config{}, err
	}
	if in.DebianMirror != "" {
		u := in.DebianMirror
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "file:/") {
			return Config{}, invalid("config.debian_mirror", "%q is not an http://, https:// or file:/ URL", u)
		}
		c.DebianMirror = u
	}
	if in.ShutdownTimeout != "" {
		d, err := time.ParseDuration(in.ShutdownTimeout)
		if err != nil || d < time.Second || d > time.Hour {
			return Config{}, invalid("config.shutdown_timeout", "%q is not a duration from 1s to 1h", in.ShutdownTimeout)
		}
		c.ShutdownTimeout = d
	}
	if in.Binary != "" {
		if !filepath.IsAbs(in.Binary) {
			return Config{}, invalid("config.qemu_binary", "%q is not an absolute path", in.Binary)
		}
		c.Binary = filepath.Clean(in.Binary)
	}
	c.ImageDirs = append(c.ImageDirs, c.imagesDir())
	return c, nil
}

// setImageDirs checks and sets images_dir (where built images go) and
// image_dirs (where images are looked for).
func (c *Config) setImageDirs(imagesDir string, imageDirs []string) error {
	if imagesDir != "" {
		if err := checkDir(imagesDir); err != nil {
			return invalid("config.images_dir", "%v", err)
		}
		c.ImagesDir = filepath.Clean(imagesDir)
	}
	for i, d := range imageDirs {
		if err := checkDir(d); err != nil {
			return invalid(fmt.Sprintf("config.image_dirs[%d]", i), "%v", err)
		}
		c.ImageDirs = append(c.ImageDirs, filepath.Clean(d))
	}
	return nil
}

func checkDir(d string) error {
	if !filepath.IsAbs(d) || filepath.Clean(d) == "/" || strings.ContainsAny(d, ",:\\\n") {
		return fmt.Errorf("%q is not an absolute path other than / without ',', ':', '\\' or a newline", d)
	}
	return nil
}

// ParseSpec decodes a profile spec strictly and fills in defaults.
// Problems are *driversdk.Error with code profile.invalid naming the key.
func ParseSpec(raw json.RawMessage) (Spec, error) {
	s := Spec{CPUs: DefaultCPUs, MemoryMB: DefaultMemoryMB, DiskGB: DefaultDiskGB, Image: DefaultImage, SSHUser: DefaultSSHUser}
	if err := strictObject(raw, []string{"cpus", "disk_gb", "image", "memory_mb", "ssh_user"}, "", &s); err != nil {
		return Spec{}, err
	}
	return s, s.check()
}

func (s Spec) check() error {
	switch {
	case s.CPUs < 1 || s.CPUs > MaxCPUs:
		return invalid("cpus", "%d is not from 1 to %d", s.CPUs, MaxCPUs)
	case s.MemoryMB < MinMemoryMB || s.MemoryMB > maxMemoryMB:
		return invalid("memory_mb", "%d is not from %d to %d", s.MemoryMB, MinMemoryMB, maxMemoryMB)
	case s.DiskGB < 1 || s.DiskGB > MaxDiskGB:
		return invalid("disk_gb", "%d is not from 1 to %d", s.DiskGB, MaxDiskGB)
	case s.Image == "":
		return invalid("image", "must not be empty: %s or the absolute path of a cloud image", ImageDebianBookworm)
	case s.Image != ImageDebianBookworm && (!filepath.IsAbs(s.Image) || strings.ContainsAny(s.Image, ",\n")):
		return invalid("image", "%q is neither %s nor an absolute path (without ',' or a newline)", s.Image, ImageDebianBookworm)
	case !userRE(s.SSHUser):
		return invalid("ssh_user", "%q is not a user name", s.SSHUser)
	}
	return nil
}

func userRE(u string) bool {
	if u == "" || len(u) > 32 {
		return false
	}
	for i, r := range u {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && (r == '-' || (r >= '0' && r <= '9')))
		if !ok {
			return false
		}
	}
	return true
}

// ParseResize decodes a resize spec: any of cpus, memory_mb and disk_gb
// (disk_gb may only grow), applied over cur.
func ParseResize(raw json.RawMessage, cur Spec) (Spec, error) {
	next := cur
	var in struct {
		CPUs     *int    `json:"cpus"`
		MemoryMB *int    `json:"memory_mb"`
		DiskGB   *int    `json:"disk_gb"`
		Image    *string `json:"image"`
		SSHUser  *string `json:"ssh_user"`
	}
	if err := strictObject(raw, []string{"cpus", "disk_gb", "image", "memory_mb", "ssh_user"}, "", &in); err != nil {
		return Spec{}, err
	}
	if in.CPUs != nil {
		next.CPUs = *in.CPUs
	}
	if in.MemoryMB != nil {
		next.MemoryMB = *in.MemoryMB
	}
	if in.DiskGB != nil {
		next.DiskGB = *in.DiskGB
	}
	if in.Image != nil && *in.Image != cur.Image {
		return Spec{}, invalid("image", "a VM's image cannot change (it is %s): make a new VM", cur.Image)
	}
	if next.DiskGB < cur.DiskGB {
		return Spec{}, invalid("disk_gb", "a disk only grows: %d is less than the VM's %d", next.DiskGB, cur.DiskGB)
	}
	return next, next.check()
}
