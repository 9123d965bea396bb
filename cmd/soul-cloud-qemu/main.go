// Command soul-cloud-qemu is the CloudDriver plugin for QEMU/KVM machines
// on the host it runs on: each VM is one QEMU process (KVM when a guest
// really runs under it, else QEMU's software emulation) with its own
// kernel, systemd and cloud-init, a copy-on-write disk on a cloud image,
// a NoCloud seed with the keeper's userdata, and a static address on a
// bridge with NAT. The keeper starts it for providers with driver "qemu":
//
//	{"name": "kvm", "driver": "qemu", "fqdn_suffix": "kvm.example",
//	 "config": {"state_dir": "/var/lib/soulstack-qemu", "accel": "auto"}}
//
// with profiles such as {"cpus": 2, "memory_mb": 2048, "disk_gb": 10,
// "image": "debian-bookworm", "ssh_user": "debian"}. It needs root on
// Linux and Debian's qemu-system-x86 and qemu-utils (and debootstrap to
// build the debian-bookworm image). docs/drivers/qemu.md says how to run
// it, and package qemu what it makes on the host.
//
// Run by hand, without a keeper, it prints a hint and exits.
package main

import (
	"os"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/qemu"
	"github.com/soulstack/soulstack/internal/localcloud"
)

func main() {
	// The keeper names its listen ports, the host ports VMs may reach.
	ports := localcloud.ParsePorts(os.Getenv(localcloud.EnvKeeperPorts))
	driversdk.Serve(qemu.New(qemu.Options{HostPorts: ports}))
}
