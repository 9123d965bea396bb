// Command soul-cloud-hcloud is the Hetzner Cloud CloudDriver plugin, on
// Hetzner's official Go SDK (hcloud-go v2). The keeper starts it from its
// plugin dir or $PATH for providers with driver "hcloud":
//
//	{"name": "hetzner", "driver": "hcloud", "region": "fsn1",
//	 "fqdn_suffix": "example.com", "credentials_ref": "env:HCLOUD_TOKEN",
//	 "config": {}}
//
// with profiles such as {"server_type": "cx22", "image": "ubuntu-24.04"}.
// The credentials are a Hetzner Cloud API token with read and write
// access. docs/drivers/hcloud.md lists the config and profile keys, how
// idempotency, ownership labels and orphans work, and what was tested
// against a fake of the API rather than against Hetzner.
//
// Run by hand, without a keeper, it prints a hint and exits.
package main

import (
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/hcloud"
)

// version is set at build time (-ldflags -X main.version=…).
var version = "dev"

func main() {
	driversdk.Serve(&hcloud.Driver{Version: version})
}
