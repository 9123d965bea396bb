package localcloud

import (
	"errors"
	"iter"
	"net/netip"
)

// usedNet is a network the host already uses: a route's destination or
// an address's network.
type usedNet struct {
	Prefix netip.Prefix
	Dev    string
	What   string // "route 10.0.0.0/8 dev eth0", for messages
}

// conflicts returns what in used overlaps p, ignoring the routes and
// addresses of the device skipDev (the driver's own bridge).
func conflicts(p netip.Prefix, used []usedNet, skipDev string) []string {
	var out []string
	for _, u := range used {
		if skipDev != "" && u.Dev == skipDev {
			continue
		}
		if u.Prefix.Overlaps(p) {
			out = append(out, u.What)
		}
	}
	return out
}

// errNoFreeSubnet is returned when every candidate subnet is in use.
var errNoFreeSubnet = errors.New("no free subnet among 10.213.0.0/24 … 10.223.255.0/24: set config.subnet")

// pickSubnet returns the first /24 from 10.213.0.0/24 on (through
// 10.223.255.0/24) that overlaps nothing in used.
func pickSubnet(used []usedNet, skipDev string) (netip.Prefix, error) {
	for second := 213; second <= 223; second++ {
		for third := 0; third <= 255; third++ {
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(second), byte(third), 0}), 24)
			if len(conflicts(p, used, skipDev)) == 0 {
				return p, nil
			}
		}
	}
	return netip.Prefix{}, errNoFreeSubnet
}

// vmAddrs returns the addresses of subnet VMs may have, in order: all
// but the network address, the gateway (the first address) and the
// broadcast address.
func vmAddrs(subnet netip.Prefix) iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		gw := subnet.Addr().Next()
		for a := gw.Next(); subnet.Contains(a); a = a.Next() {
			if !subnet.Contains(a.Next()) {
				return // broadcast
			}
			if !yield(a) {
				return
			}
		}
	}
}
