package localcloud

import "golang.org/x/sys/unix"

// A VM made with the profile key nesting: docker runs a container engine
// (Debian's docker.io: dockerd, containerd and runc). Probed on this
// driver's VMs, such an engine needs, beyond what every VM has:
//
//   - CAP_SYS_ADMIN, to mount a container's root, /proc and /dev and to
//     make its namespaces; CAP_NET_ADMIN, to bring up the loopback link of
//     a container's network namespace (and docker0 when the bridge is on);
//     CAP_MKNOD and CAP_NET_RAW, because they are in the capability set
//     Docker gives every container, and runc cannot give a container a
//     capability its own bounding set lacks ("unable to apply caps");
//   - the cgroup hierarchies writable, so that runc makes each container's
//     cgroup below the VM's own;
//   - the keyring calls answering ENOSYS rather than EPERM: runc joins a
//     session keyring per container and goes on without one only when the
//     kernel says the calls do not exist. They stay refused.
//
// User namespaces stay refused, so rootless engines do not run either.
// The cost is the VM's isolation: CAP_SYS_ADMIN lets root in the VM mount
// anything the kernel offers (a devtmpfs with the host's disks, for one),
// remount the masks away and raise its own cgroup limits, so root in a
// nesting VM can reach the host. That is why the provider config must
// allow it (allow_nesting) before a profile may ask for it.

// keyringSyscalls are the denied system calls a nesting VM sees as
// missing (ENOSYS) rather than refused (EPERM).
var keyringSyscalls = []uintptr{unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY}

// nestingCapabilities are the capabilities a VM with this nesting has
// beyond vmCapabilities.
func nestingCapabilities(nesting string) []int {
	if nesting != NestingDocker {
		return nil
	}
	return []int{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_MKNOD, unix.CAP_NET_RAW}
}
