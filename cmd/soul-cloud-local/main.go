// Command soul-cloud-local is the zero-config CloudDriver plugin: it makes
// lightweight "VMs" out of Linux namespaces on the host it runs on (see
// package localcloud). The keeper starts it; run by hand it prints a hint.
// It must run as root on Linux.
package main

import (
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
)

func main() {
	// The driver starts VMs by re-executing this binary.
	localcloud.RunIfChild()
	driversdk.Serve(localcloud.New(localcloud.Options{}))
}
