// Command soul-cloud-local is the zero-config CloudDriver plugin: its VMs
// are sets of Linux namespaces on the host it runs on, each with its own
// address on a bridge, hostname, overlay root, cgroup limits and sshd.
// The keeper starts it from its plugin dir or $PATH for providers with
// driver "local":
//
//	{"name": "local", "driver": "local", "fqdn_suffix": "local.test",
//	 "config": {"subnet": "10.213.0.0/24", "state_dir": "/var/lib/soulstack-local"}}
//
// with profiles such as {"cpus": 1, "memory_mb": 512, "ssh_user": "root"}.
// It needs root on Linux and the host's iproute2, util-linux and
// openssh-server. It is a convenience for demos, tests and laptops, not a
// hardened sandbox, but VM root is not a way into the host: it sees only a
// view of the host's system directories, lacks the dangerous capabilities
// and reaches only DNS and the provider's host_ports on the host. Package
// localcloud documents what that protects and what not, the config and
// profile keys, the userdata it honours, what it leaves on the host, and
// its limits.
//
// Run by hand, without a keeper, it prints a hint and exits.
package main

import (
	"os"
	"path/filepath"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
)

func main() {
	// VMs are started by re-executing this binary; in one of those, this
	// call never returns.
	localcloud.RunIfChild()
	// The keeper's data and plugin dirs are hidden from VMs wherever
	// they are, and its listen port is the one VMs may reach on the host
	// unless the provider's host_ports says otherwise.
	hide := filepath.SplitList(os.Getenv(localcloud.EnvKeeperDirs))
	ports := localcloud.ParsePorts(os.Getenv(localcloud.EnvKeeperPorts))
	driversdk.Serve(localcloud.New(localcloud.Options{Hide: hide, HostPorts: ports}))
}
