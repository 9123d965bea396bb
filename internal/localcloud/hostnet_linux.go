package localcloud

import (
	"context"
	"iter"
	"net/netip"
	"strconv"
)

// HostNetwork is the host side of a state dir's VM network as this
// driver makes it, for other drivers whose VMs live on this host
// (soul-cloud-qemu): a bridge with the subnet's first address, NAT out
// of the host, and the input filter that lets VMs reach only DNS and the
// allowed ports on the host (see nft_linux.go).
type HostNetwork struct {
	Subnet  netip.Prefix
	Bridge  string
	Gateway netip.Addr
	MTU     int
}

// EnsureHostNetwork sets up (or checks) the host network of the VMs kept
// in stateDir, as the local driver does for its own: subnet is the
// configured one (invalid for the first free one), hostPorts the TCP
// ports VMs may reach on the host (nil: DefaultHostPort). Its record is
// stateDir/host.json.
func EnsureHostNetwork(ctx context.Context, stateDir string, subnet netip.Prefix, hostPorts, loopbackPorts []uint16) (HostNetwork, error) {
	h, err := ensureHost(ctx, store{dir: stateDir}, Config{StateDir: stateDir, Subnet: subnet, HostPorts: hostPorts, LoopbackPorts: loopbackPorts})
	if err != nil {
		return HostNetwork{}, err
	}
	return HostNetwork{Subnet: h.Subnet, Bridge: h.Bridge, Gateway: h.gateway(), MTU: h.MTU}, nil
}

// TeardownHostNetwork removes what EnsureHostNetwork made for stateDir.
func TeardownHostNetwork(ctx context.Context, stateDir string) error {
	return teardownHost(ctx, store{dir: stateDir})
}

// KnownHostNetwork is the host network recorded in stateDir, if any.
func KnownHostNetwork(stateDir string) (HostNetwork, bool, error) {
	h, err := store{dir: stateDir}.loadHost()
	if err != nil || h == nil {
		return HostNetwork{}, false, err
	}
	return HostNetwork{Subnet: h.Subnet, Bridge: h.Bridge, Gateway: h.gateway(), MTU: h.MTU}, true, nil
}

// AddTap makes the persistent tap device name on the bridge, with the
// network's MTU, for a VM process to open.
func AddTap(ctx context.Context, h HostNetwork, name string) error {
	if !linkExists(name) {
		if _, err := run(ctx, "", "ip", "tuntap", "add", "dev", name, "mode", "tap"); err != nil {
			return err
		}
	}
	_, err := run(ctx, "", "ip", "link", "set", name, "mtu", strconv.Itoa(h.MTU), "master", h.Bridge, "up")
	return err
}

// DeleteLink deletes a network device; one already gone is no error.
func DeleteLink(ctx context.Context, name string) error { return delLink(ctx, name) }

// LinkExists reports whether the network device name exists.
func LinkExists(name string) bool { return linkExists(name) }

// ForgetNeighbour drops the host's ARP entry for ip on the bridge, so
// that a later VM with the address is reached at once.
func ForgetNeighbour(ctx context.Context, h HostNetwork, ip netip.Addr) {
	delNeighbour(ctx, ip, h.Bridge)
}

// VMAddrs are the addresses of subnet a VM may have, in order.
func VMAddrs(subnet netip.Prefix) iter.Seq[netip.Addr] { return vmAddrs(subnet) }

// MACFor is the stable MAC address for a VM with address ip.
func MACFor(ip netip.Addr) string { return macFor(ip) }

// Flock takes an exclusive flock(2) on path (creating it) and returns
// the function that releases it.
func Flock(ctx context.Context, path string) (func(), error) { return flock(ctx, path) }

// WriteFileAtomic writes data to path through a temporary file and a
// rename.
func WriteFileAtomic(path string, data []byte) error { return writeFileAtomic(path, data, 0o600) }

// CheckFQDN checks that name can be a VM's hostname (a lowercase DNS name
// sethostname(2) takes).
func CheckFQDN(name string) error { return checkFQDN(name) }
