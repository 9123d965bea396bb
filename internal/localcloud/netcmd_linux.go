package localcloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// This file is the one place that runs iproute2 and util-linux: links,
// addresses and routes are made with ip(8), and the VM side of a link is
// set up with nsenter(1) running ip inside the VM's network namespace.

// errNoDevice is what deleting a link that is already gone reports.
var errNoDevice = errors.New("no such device")

// toolPath finds a host tool in $PATH or, since the keeper may start the
// driver with a PATH that lacks them, in the usual system directories.
func toolPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in $PATH or the system directories", name)
}

// run runs a host tool and returns its standard output; a failure carries
// the tool's standard error.
func run(ctx context.Context, stdin string, name string, args ...string) ([]byte, error) {
	path, err := toolPath(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		// "No such device": the kernel removed a veth with its namespace
		// between our check and the delete.
		if strings.Contains(msg, "Cannot find device") || strings.Contains(msg, "No such device") || strings.Contains(msg, "does not exist") {
			return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), errNoDevice, msg)
		}
		if msg == "" || ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), errors.Join(err, ctx.Err()))
		}
		return nil, fmt.Errorf("%s %s: %s", name, strings.Join(args, " "), msg)
	}
	return stdout.Bytes(), nil
}

// hostNetworks lists the IPv4 networks of every route (in all tables) and
// every address on the host, except default routes.
func hostNetworks(ctx context.Context) ([]usedNet, error) {
	var out []usedNet
	b, err := run(ctx, "", "ip", "-j", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	var routes []struct {
		Type string `json:"type"`
		Dst  string `json:"dst"`
		Dev  string `json:"dev"`
	}
	if err := json.Unmarshal(nonEmptyJSON(b), &routes); err != nil {
		return nil, fmt.Errorf("ip route: %w", err)
	}
	for _, r := range routes {
		if r.Dst == "" || r.Dst == "default" {
			continue
		}
		p, err := parseRouteDst(r.Dst)
		if err != nil {
			continue
		}
		what := "route " + r.Dst
		if r.Type != "" && r.Type != "unicast" {
			what = "route " + r.Type + " " + r.Dst
		}
		if r.Dev != "" {
			what += " dev " + r.Dev
		}
		out = append(out, usedNet{Prefix: p, Dev: r.Dev, What: what})
	}
	b, err = run(ctx, "", "ip", "-j", "-4", "addr", "show")
	if err != nil {
		return nil, err
	}
	var links []struct {
		IfName   string `json:"ifname"`
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(nonEmptyJSON(b), &links); err != nil {
		return nil, fmt.Errorf("ip addr: %w", err)
	}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			addr, err := netip.ParseAddr(a.Local)
			if err != nil {
				continue
			}
			p, err := addr.Prefix(a.PrefixLen)
			if err != nil {
				continue
			}
			out = append(out, usedNet{Prefix: p, Dev: l.IfName,
				What: fmt.Sprintf("address %s/%d on %s", a.Local, a.PrefixLen, l.IfName)})
		}
	}
	return out, nil
}

func nonEmptyJSON(b []byte) []byte {
	if len(bytes.TrimSpace(b)) == 0 {
		return []byte("[]")
	}
	return b
}

func parseRouteDst(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// uplinkMTU is the MTU of the default route's device, which the VMs'
// links take so that full-size packets leave the host unfragmented; 1500
// without a default route.
func uplinkMTU(ctx context.Context) int {
	b, err := run(ctx, "", "ip", "-j", "-4", "route", "show", "default")
	if err != nil {
		return 1500
	}
	var routes []struct {
		Dev string `json:"dev"`
	}
	if json.Unmarshal(nonEmptyJSON(b), &routes) != nil || len(routes) == 0 || routes[0].Dev == "" {
		return 1500
	}
	raw, err := os.ReadFile("/sys/class/net/" + routes[0].Dev + "/mtu")
	if err != nil {
		return 1500
	}
	mtu, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || mtu < 576 {
		return 1500
	}
	return mtu
}

// linkExists reports whether the host has a network device name.
func linkExists(name string) bool {
	_, err := os.Lstat("/sys/class/net/" + name)
	return err == nil
}

// addBridge makes the bridge with a fixed MAC (otherwise it takes the
// lowest MAC of its ports, which changes as VMs come and go) and gives it
// the gateway address.
func addBridge(ctx context.Context, h *hostState) error {
	gw := netip.PrefixFrom(h.gateway(), h.Subnet.Bits())
	if !linkExists(h.Bridge) {
		if _, err := run(ctx, "", "ip", "link", "add", h.Bridge, "address", macFor(h.gateway()),
			"mtu", strconv.Itoa(h.MTU), "type", "bridge"); err != nil {
			return err
		}
	}
	if _, err := run(ctx, "", "ip", "addr", "replace", gw.String(), "dev", h.Bridge); err != nil {
		return err
	}
	// The keeper may listen on loopback alone: the nft table sends what VMs
	// address to the gateway's host ports to 127.0.0.1, which the kernel
	// routes from this interface only with route_localnet.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+h.Bridge+"/route_localnet", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("route_localnet on %s: %w", h.Bridge, err)
	}
	_, err := run(ctx, "", "ip", "link", "set", h.Bridge, "up")
	return err
}

// delLink deletes a network device; one that is already gone is no error.
func delLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	_, err := run(ctx, "", "ip", "link", "del", name)
	if errors.Is(err, errNoDevice) {
		return nil
	}
	return err
}

// addVMLink makes the VM's veth pair: the host end on the bridge, the
// other end moved into the network namespace of pid as eth0, with the
// VM's stable MAC, then sets up eth0, lo and the default route in there.
func addVMLink(ctx context.Context, h *hostState, v *vmRecord, pid int) error {
	mtu := strconv.Itoa(h.MTU)
	if _, err := run(ctx, "", "ip", "link", "add", v.veth(), "mtu", mtu, "type", "veth",
		"peer", "name", "eth0", "mtu", mtu, "address", v.mac(), "netns", strconv.Itoa(pid)); err != nil {
		return err
	}
	if _, err := run(ctx, "", "ip", "link", "set", v.veth(), "master", h.Bridge, "up"); err != nil {
		return err
	}
	batch := fmt.Sprintf("link set lo up\naddr add %s dev eth0\nlink set eth0 up\nroute add default via %s\n",
		netip.PrefixFrom(v.IP, h.Subnet.Bits()), h.gateway())
	ip, err := toolPath("ip") // nsenter's own PATH lookup may not find it
	if err != nil {
		return err
	}
	_, err = run(ctx, batch, "nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "--", ip, "-batch", "-")
	return err
}

// delNeighbour forgets the host's ARP entry for a VM's address.
func delNeighbour(ctx context.Context, ip netip.Addr, dev string) {
	if linkExists(dev) {
		_, _ = run(ctx, "", "ip", "neigh", "del", ip.String(), "dev", dev)
	}
}
