// Package localcloud is the zero-config cloud behind soul-cloud-local: a
// driversdk.Driver whose "VMs" are sets of Linux namespaces on the host
// the driver runs on. They boot in a fraction of a second, cost a few
// megabytes each, answer SSH with the keeper's key and run apt, which
// makes them right for demos, tests and laptops.
//
// It is a convenience, not a hardened sandbox, but root in a VM is not a
// way into the host: see "What a VM cannot do" below for what that
// covers and what it does not.
//
// # What a VM is
//
//   - Network: its own network namespace whose eth0 (a veth pair, the host
//     end on the driver's bridge) has the next free address of the
//     subnet, a MAC derived from that address (so an address used again
//     never meets a stale neighbour entry) and the MTU of the host's uplink;
//     the default route is the bridge's address, the subnet's first one.
//     Outbound traffic is masqueraded (nftables), so apt works inside;
//     nothing from outside the host reaches a VM.
//   - Hostname: the FQDN the keeper asked for (CreateRequest.Names), or
//     <vm-id>.<fqdn_suffix> (default suffix local.test), in its own UTS
//     namespace and in its /etc/hostname and /etc/hosts.
//   - Root: in its own mount namespace, a view of the host's system
//     directories, not the host's live /: the VM's / is a directory of
//     its own with empty /root, /home, /tmp, /srv, /opt, /mnt, /media and
//     /boot and the host's top-level symlinks (bin -> usr/bin), and /usr,
//     /etc and /var (and /bin, /sbin, /lib… where they are directories)
//     are overlays whose lower layer is the host's directory and whose
//     upper layer, under the state dir, takes every change: packages
//     installed in a VM are in that VM only. In /etc the host's password
//     hashes read "*" (the accounts stay), shadow- and gshadow-, the SSH
//     host keys, security/opasswd, krb5.keytab, ipsec and ppp secrets and
//     /etc/soulstack* are not there, and ssl/private, letsencrypt,
//     wireguard, openvpn, NetworkManager's connections, wpa_supplicant,
//     sssd, kubernetes, rancher and cni are empty; /var has only cache,
//     lib, lock, run and spool, its tmp, log, backups, mail, local and opt
//     are empty, /var/lib holds only
//     what dpkg says an installed package owns (without systemd's
//     credential.secret and random-seed), and the data of services
//     (/var/lib/postgresql and /etc/postgresql, mysql, docker, containerd,
//     redis…) is empty: a VM makes its own PostgreSQL cluster. With a
//     base or a base_root, the root is one overlay on that directory
//     instead. Fresh
//     /proc (its own PID namespace), /sys (its own links; /sys/fs/cgroup
//     rooted at its own cgroup), /dev (null, zero, full, random, urandom,
//     tty, a private devpts, /dev/shm, /dev/mqueue), /run and /tmp; the
//     driver's state dir is hidden under an empty read-only tmpfs.
//   - Limits: a cgroup with the profile's cpus (CFS quota) and memory_mb
//     (memory limit, no swap), on cgroup v2 hosts and on v1 or hybrid ones;
//     Resize rewrites them while the VM runs.
//   - sshd: the root's own /usr/sbin/sshd with a config and authorized
//     keys of the VM's own under /etc/soulstack-local and an ed25519 host
//     key of its own in /etc/ssh, where a real VM keeps it (reported as the
//     attribute ssh_host_key, for pinning; the host's keys, public halves
//     too, are not in the VM). It
//     trusts the request's AuthorizedKeys and the userdata's
//     ssh_authorized_keys for ssh_user only (root by default), keys only,
//     no passwords; ~/.ssh/authorized_keys files are not read.
//   - PID 1: an init (this same binary, re-executed) that applies the
//     userdata, runs sshd, reaps orphans and on SIGTERM stops every process
//     of the VM. There is no systemd: package scripts start no services
//     (/usr/sbin/policy-rc.d exits 101), start them yourself.
//
// # What a VM cannot do
//
// There is no user namespace: uid 0 in a VM is uid 0 of the host. What
// keeps it inside is what it lacks and what it cannot see:
//
//   - Files: only the view above. /root, /home, /work and any checkout,
//     /tmp, /srv, /opt, /etc/shadow's hashes and the SSH host keys are not
//     in a VM; the keeper's data dir (admin.token, data.key, keeper.db)
//     and plugin dir, which the keeper names to soul-cloud-local in
//     $SOULSTACK_KEEPER_DIRS (Options.Hide), and the driver's state dir
//     (other VMs' layers and the bases) are not either, wherever they
//     are: where the view would show them, an empty read-only tmpfs
//     covers them.
//   - Capabilities: after its mounts are made, the init executes itself
//     again with a bounding set of CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
//     KILL, SETGID, SETUID, SETPCAP, SETFCAP, NET_BIND_SERVICE,
//     SYS_CHROOT and AUDIT_WRITE, so no process in a VM (setuid programs
//     such as sudo included) has SYS_ADMIN (no mount, no remount, no
//     devtmpfs), MKNOD (no device nodes: /dev has only the set above),
//     SYS_PTRACE, SYS_MODULE, SYS_RAWIO, DAC_READ_SEARCH, BPF, PERFMON,
//     SYS_BOOT, SYS_TIME, NET_ADMIN, NET_RAW or the others. The init
//     itself is undumpable: nothing in the VM can ptrace it or open its
//     /proc/1 files.
//   - The kernel: /proc/sys (but its per-namespace net/), sysrq-trigger,
//     /proc/bus, fs and irq are read-only; kcore, keys, kallsyms,
//     timer_list, sched_debug, acpi and scsi are hidden; /sys and the
//     cgroup mounts are read-only (a VM cannot raise its own limits).
//     Host processes are not in its PID namespace.
//   - System calls: a seccomp filter refuses keyctl, add_key and
//     request_key (the kernel's keyrings are not namespaced: root's user
//     keyring in a VM would be the host root's), kexec, module loading,
//     open_by_handle_at, bpf, perf_event_open, userfaultfd, new user
//     namespaces, and 32-bit system calls on x86-64 (32-bit programs do
//     not run). On other architectures than amd64 and arm64 there is no
//     filter.
//   - The network: from the bridge, the host answers only DNS (port 53),
//     ICMP and the TCP ports of the provider's host_ports (by default the
//     keeper's listen port and its agent listener's), on any of its addresses; other TCP
//     connections are reset and everything else refused. Egress
//     goes out masqueraded, except to 169.254.0.0/16 (cloud metadata
//     services). VMs of one state dir reach each other; VMs of another
//     state dir, and anything else forwarded to a bridge, do not.
//
// It does not protect against: a kernel bug (all VMs share the host's
// kernel, and the filter refuses only the system calls above, not a
// full container profile); what the view shows on purpose (the host's
// /usr, /etc minus the entries above, installed packages' state); other
// VMs of the same state dir over the network; secrets of the host kept
// elsewhere under /usr, /etc or a package's /var/lib directory than the
// places above (another keeper's data dir there, say); and resource
// exhaustion
// beyond the cgroup's cpu and memory limits (disk space of the state
// dir's filesystem, for one). A base_root is trusted as a whole. Docker's
// engine does not run in such a VM (it needs SYS_ADMIN); the docker client
// does. A VM made with nesting: docker (below) gives up most of this.
//
// # Provider config and profile
//
// The provider config (driversdk.Provider.Config) takes seven optional
// keys:
//
//	{"subnet": "10.213.0.0/24", "state_dir": "/var/lib/soulstack-local",
//	 "host_ports": [8420], "base_roots": ["/srv/soulstack/bookworm"],
//	 "bases_dir": "/var/lib/soulstack-local/bases", "debian_mirror": "http://deb.debian.org/debian",
//	 "allow_nesting": false}
//
// subnet is the bridge's IPv4 network (/8 to /29). When set, a subnet that
// overlaps any route (in every routing table) or address on the host is
// refused with profile.invalid, field config.subnet; when not set, the
// driver takes the first of 10.213.0.0/24, 10.213.1.0/24, … that overlaps
// nothing. The subnet stays while the state dir has VMs. state_dir holds
// the driver's state and the VMs' upper layers; put it on a filesystem
// overlayfs accepts as an upper layer (not on overlayfs itself). Several
// drivers with different state dirs can share a host: each has its own
// bridge and table. host_ports are the TCP ports on the host's own
// addresses VMs may connect to; [] allows none. Without the key, it is the
// keeper's listen port and its agent listener's port, where VMs join (the
// keeper names them to soul-cloud-local in $SOULSTACK_KEEPER_PORTS), or 8420, the keeper's default, when the
// driver runs without a keeper. VMs reach the keeper there when it
// listens on more than loopback (self_onboard). base_roots are the
// directories profiles may name as base_root: profiles, inline ones in
// scenarios included, are written by whoever runs a scenario, the
// provider config only by an admin.
// bases_dir (default <state_dir>/bases) keeps the bases the driver builds
// for the profile key base, from debian_mirror; they stay when the VMs
// go. allow_nesting (default false) lets profiles ask for nesting.
//
// The profile spec takes six optional keys; any other is profile.invalid
// naming the key:
//
//	{"cpus": 1, "memory_mb": 512, "ssh_user": "root", "base": "debian-bookworm", "nesting": "docker"}
//
// They are:
//
//   - cpus: a number of CPUs, fractions allowed (default 1).
//   - memory_mb: a whole number of megabytes, at least 64 (default 1024).
//   - ssh_user: the user the keys log in as (default root). A user the
//     root filesystem lacks is made at first boot, with a home, no
//     password and, when sudo is installed, password-less sudo.
//   - base: build the VMs' root on a base the driver makes: only
//     debian-bookworm for now, a Debian 12 minbase with openssh-server,
//     iproute2 and sudo, debootstrapped (debootstrap must be installed)
//     into the bases dir by the first Create that needs it (a minute or
//     two; later ones reuse it) and never written again. Such VMs have
//     none of the host's packages and are not affected by host upgrades;
//     use it for VMs that live long or must start without what the host
//     has installed (PostgreSQL, Docker…). It excludes base_root.
//   - base_root: build the VMs' root on this directory, one of the
//     provider's base_roots and not reached through a symlink, instead of
//     the view of the host. The driver never writes to it and shows all
//     of it to the VM; it needs /bin/sh, /usr/sbin/sshd, and useradd for
//     an ssh_user it lacks. The host's directories change under running
//     VMs (a host upgrade leaves a VM's copied-up dpkg status out of step
//     with the files it sees), so for VMs that live long or install
//     packages, use base, or make an immutable root once, for example
//     debootstrap --include=openssh-server,iproute2,sudo bookworm /srv/soulstack/bookworm,
//     and list it in base_roots.
//   - nesting: docker lets a container engine run in the VM (Debian's
//     docker.io: dockerd, containerd, runc), when the provider config has
//     allow_nesting: true (otherwise profile.invalid, field nesting). The
//     VM's processes then also have SYS_ADMIN (containers' mounts and
//     namespaces), NET_ADMIN (their links, docker0), MKNOD and NET_RAW (in
//     the set Docker gives every container, which runc cannot grant from a
//     bounding set without them); the cgroup hierarchies are writable
//     (runc makes the containers' cgroups below the VM's), and keyctl,
//     add_key and request_key fail with ENOSYS instead of EPERM (runc goes
//     on without a session keyring only then). User namespaces stay
//     refused. Start dockerd yourself (no systemd), with the flag
//     --storage-driver=vfs (overlay2 does not stack on the VM's overlay
//     root); core.docker.installed does this. The cost: SYS_ADMIN lets
//     root in the VM mount what the kernel offers (a devtmpfs with the
//     host's disks among it), unmount the masks and raise its own cgroup
//     limits, and NET_ADMIN and NET_RAW let it take or forge other VMs'
//     addresses on the bridge. Root in a nesting VM can reach the host:
//     give it only to VMs you would trust with root on the host (tests,
//     a laptop), never to scenario authors you do not trust with the
//     host. Only that VM is affected; the others keep the confinement
//     above. Such a VM has the attribute nesting.
//
// Resize takes the same keys; cpus and memory_mb change live (no downtime),
// the ones it leaves out stay, and ssh_user, base, base_root and nesting
// cannot change.
//
// # Userdata
//
// A VM's cloud-init userdata is honoured at its first boot, as cloud-init
// would: a #cloud-config document's write_files (path, content, encoding
// b64/gzip/gz+b64, permissions, owner, append, defer) and
// ssh_authorized_keys before sshd starts, then deferred files and runcmd
// (strings as shell lines, lists as argv) or a #! script after, with their
// output in /var/log/cloud-init-output.log, and last
// /var/lib/cloud/instance/boot-finished. Create returns when sshd answers,
// before runcmd is done. Other cloud-config keys and userdata formats are
// refused (userdata.invalid) rather than silently skipped.
//
// The init reports its progress as cloud-init does, so that whoever waits
// for cloud-init (the keeper does, before a cloud-made soul's first step)
// waits for these VMs too: /run/cloud-init/status.json from the start of
// the first boot (stage modules-final, not finished), then, once the
// userdata is done, status.json finished and /run/cloud-init/result.json,
// {"v1": {"datasource": "soulstack-local", "errors": [...]}}, with what
// failed (a user that could not be made, a write_files item, a runcmd or
// #! script that exited non-zero, which also leaves a "soulstack-local:
// ... exited with N" line in the output log). A VM has no cloud-init of
// its own; /usr/local/bin/cloud-init, first on the PATH, is a small
// shell script that answers only "cloud-init status" from result.json:
// "status: running" until it exists, then "done" or "error" (exit 1),
// --wait until it is no longer running, --long with the errors; other
// commands exit 3.
//
// # State and what stays on the host
//
// Everything the driver knows is in the state dir (vms/<id>/vm.json with
// the VM's tags soulstack.run_id, soulstack.request_id and soulstack.keeper,
// address, spec, cgroups and init PID), under a flock(2), so a new driver process (the
// keeper restarts crashed plugins) knows the VMs of the old one, and List
// reports each running or stopped. A VM's init logs to vms/<id>/init.log
// there; inside the VM, sshd logs to /var/log/soulstack-local-sshd.log.
// VMs do not die with the driver: their
// inits lead sessions of their own and are nobody's children but the
// driver's while it lives (it is their subreaper, to reap them at once on
// Destroy). A repeated Create with the same RequestID returns the VMs the
// first one made.
//
// # Addresses and ownership
//
// A VM's only address is its bridge address, reachable from this host
// (and from other VMs of the state dir) only: the driver reports it as
// the VM's PrivateIP and PrimaryIP, and in Addresses as private on eth0.
// A local VM has no public address, so its soul is reached at the private
// one whatever the address setting, unless it says address: public, which
// fails the create (cloud.address_missing).
//
// Every VM is tagged soulstack.keeper with the calling keeper deployment's
// id (Provider.KeeperID). Destroy and Resize refuse, with driver.not_owned
// and before touching any VM of the call, a VM whose soulstack.keeper is
// another deployment's. A VM recorded before the tag existed (state of an
// older driver) has no soulstack.keeper: it counts as owned by whichever
// keeper uses the state dir, since a state dir is one keeper's; such VMs
// keep working, and the keeper lists them as orphans when it has no soul
// for them.
//
// With VMs up, the host has the bridge soulbr<id> and the table
// inet soulstack_local_<id> (<id> derived from the state dir), IPv4
// forwarding on, and cgroups named soulstack-local/<vm-id> (on v1 in every
// hierarchy, below the driver's own cgroup in those with controllers and
// at the root of the others, which init systems use to track services; on
// v2 at the root). Destroy kills
// a VM's init (its PID namespace, and with it every process and mount of
// the VM, goes too), removes its link, neighbour entry, cgroups and
// directory, and remembers the ID so that destroying it again succeeds;
// when the state dir's last VM goes, so do the bridge, the table and the
// cgroup parents, and forwarding is set back to what it was before any
// local driver changed it. What remains is the state dir itself, with the
// list of destroyed IDs and the bases built for the profile key base, and
// /run/soulstack-local/host.lock.
//
// # Requirements
//
// Linux 5.3 or later, root, ip (iproute2), nsenter (util-linux), sshd
// (openssh-server) in the VMs' root, and kernel support for overlayfs
// (with trusted xattrs on the state dir's filesystem), nf_tables with NAT
// and reject, veth and bridges. A host that lacks one answers
// ValidateProfile and Create with driver.unavailable, saying what is
// missing, before anything is made; other systems than Linux always do.
//
// # Limits
//
// IPv4 only. A VM does not restart: after a host reboot its state is
// stopped and it can only be destroyed. Software that needs systemd as PID 1
// does not run, nor does Docker's engine without nesting: docker. ping works
// through ICMP sockets (no NET_RAW), not raw ones. A rename across /usr,
// /etc, /var and the rest of / crosses overlays (EXDEV; mv copies). A
// host firewall whose
// forward chain drops by default (Docker's iptables rules, for one) also
// drops the VMs' outbound traffic. On cgroup v2 the driver enables the cpu,
// memory and pids controllers in the root cgroup and leaves them on.
//
// Drivers re-execute their own binary to start VMs, so a program that
// serves this driver calls RunIfChild first thing in main (and tests that
// make VMs, in TestMain).
package localcloud
