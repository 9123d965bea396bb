package localcloud

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The driver's packet rules live in one nftables table per state dir
// (table inet soulstack_local_<id>), made through netlink, so the host
// needs no nft tool and teardown is one table deletion. In nft syntax:
//
//	chain prerouting { type nat hook prerouting priority dstnat; policy accept;
//	  iifname <bridge> ip daddr <gateway> tcp dport <keeper port> dnat ip to 127.0.0.1  # one per host_ports entry that is the keeper's
//	}
//	chain postrouting { type nat hook postrouting priority srcnat; policy accept;
//	  ip saddr <subnet> oifname != <bridge> masquerade }
//	chain forward { type filter hook forward priority filter; policy accept;
//	  iifname <bridge> ip daddr 169.254.0.0/16 reject with icmpx admin-prohibited  # cloud metadata
//	  iifname <bridge> accept                                # egress, and VM to VM (br_netfilter)
//	  oifname <bridge> ct state established,related accept  # replies
//	  oifname <bridge> drop                                  # nothing else reaches the VMs
//	  meta nfproto ipv4 iifname != "soulbr*" oifname != "soulbr*" drop  # only with guard
//	}
//	chain input { type filter hook input priority filter; policy accept;
//	  iifname <bridge> ct state established,related accept
//	  iifname <bridge> meta l4proto { icmp, ipv6-icmp } accept
//	  iifname <bridge> meta l4proto { tcp, udp } th dport 53 accept  # a resolver on the host
//	  iifname <bridge> tcp dport <host port> accept                  # one rule per host_ports entry
//	  iifname <bridge> meta l4proto tcp reject with tcp reset         # no other host service
//	  iifname <bridge> reject with icmpx admin-prohibited
//	}
//
// The prerouting rules let a keeper that listens on loopback alone (its
// default) answer the VMs at the gateway's address: what they send to a
// host port there goes to 127.0.0.1 (the bridge has route_localnet), and
// its answers come back as from the gateway.
//
// Whatever a VM sends to one of the host's own addresses (the bridge's or
// any other: the kernel delivers them all through input) meets the input
// chain; only the keeper's listeners (host_ports) and DNS answer.
// The guard rule is added when IPv4 forwarding was off before any local
// driver turned it on: it keeps the host forwarding nothing but the VMs'
// traffic, as it did before.

// setupTable replaces the driver's table with a fresh one for h, in one
// netlink transaction.
func setupTable(h *hostState, guard bool) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: h.Table}
	// Adding then deleting makes the deletion valid whether or not the
	// table exists; the batch then recreates it.
	c.AddTable(t)
	c.DelTable(t)
	t = c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	rule(post, ipv4(), saddrIn(h.Subnet), ifname(expr.MetaKeyOIFNAME, expr.CmpOpNeq, exactIf(h.Bridge)),
		[]expr.Any{&expr.Masq{}})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	loopback := netip.AddrFrom4([4]byte{127, 0, 0, 1}).As4()
	for _, p := range h.HostPorts {
		if !slices.Contains(h.LoopbackPorts, p) {
			continue // another host service's, on the gateway's address
		}
		rule(pre, ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, exactIf(h.Bridge)), ipv4(), daddrIn(netip.PrefixFrom(h.gateway(), 32)),
			l4proto(unix.IPPROTO_TCP), dport(p), []expr.Any{
				&expr.Immediate{Register: 1, Data: loopback[:]},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
			})
	}
	// Link-local addresses are the cloud metadata services' (the host's
	// cloud credentials): not reachable from VMs.
	rule(fwd, ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, exactIf(h.Bridge)), ipv4(), daddrIn(linkLocal),
		[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})
	rule(fwd, ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, exactIf(h.Bridge)), verdict(expr.VerdictAccept))
	rule(fwd, ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, exactIf(h.Bridge)), ctEstablished(), verdict(expr.VerdictAccept))
	rule(fwd, ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, exactIf(h.Bridge)), verdict(expr.VerdictDrop))
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	fromVMs := ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, exactIf(h.Bridge))
	rule(in, fromVMs, ctEstablished(), verdict(expr.VerdictAccept))
	for _, proto := range []byte{unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6} {
		rule(in, fromVMs, l4proto(proto), verdict(expr.VerdictAccept))
	}
	for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		rule(in, fromVMs, l4proto(proto), dport(53), verdict(expr.VerdictAccept))
	}
	for _, p := range h.HostPorts {
		rule(in, fromVMs, l4proto(unix.IPPROTO_TCP), dport(p), verdict(expr.VerdictAccept))
	}
	// Refused at once rather than dropped, so a VM's client fails fast.
	rule(in, fromVMs, l4proto(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})
	rule(in, fromVMs, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})
	if guard {
		rule(fwd, ipv4(),
			ifname(expr.MetaKeyIIFNAME, expr.CmpOpNeq, []byte(bridgePrefix)),
			ifname(expr.MetaKeyOIFNAME, expr.CmpOpNeq, []byte(bridgePrefix)),
			verdict(expr.VerdictDrop))
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: set up table inet %s: %w", h.Table, err)
	}
	return nil
}

// deleteTable removes the driver's table; a missing one is no error.
func deleteTable(name string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table inet %s: %w", name, err)
	}
	return nil
}

// tableExists reports whether the inet table name exists.
func tableExists(name string) (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	for _, t := range tables {
		if t.Name == name {
			return true, nil
		}
	}
	return false, nil
}

func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

func saddrIn(p netip.Prefix) []expr.Any { return addrIn(12, p) }

func daddrIn(p netip.Prefix) []expr.Any { return addrIn(16, p) }

// addrIn matches the IPv4 header's address at offset (12 source, 16
// destination) against p.
func addrIn(offset uint32, p netip.Prefix) []expr.Any {
	addr := p.Addr().As4()
	mask := netip.PrefixFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), p.Bits()).Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask[:], Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:]},
	}
}

// exactIf is an interface name as the kernel compares it: NUL-padded to
// IFNAMSIZ. A shorter, unpadded value matches names with that prefix.
func exactIf(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func ifname(key expr.MetaKey, op expr.CmpOp, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: data},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// dport matches the destination port of TCP or UDP (the same offset in
// both headers); it follows an l4proto match.
func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func verdict(k expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: k}}
}
