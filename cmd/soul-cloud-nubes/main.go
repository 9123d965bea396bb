// Command soul-cloud-nubes is the Nubes CloudDriver plugin, through
// Nubes' deck-api (the API its own Terraform provider calls). The keeper
// starts it from its plugin dir or $PATH for providers with driver
// "nubes":
//
//	{"name": "nubes", "driver": "nubes", "fqdn_suffix": "example.com",
//	 "credentials_ref": "env:NUBES_TOKEN",
//	 "config": {"vapp_uid": "…", "address_key": "…"}}
//
// with profiles such as {"cpus": 2, "memory_gb": 4, "image":
// "Debian_13-20G"}. The credentials are a deck-api token copied from the
// Nubes portal. docs/drivers/nubes.md lists the config and profile keys
// and what is known of the API only from the provider's source.
//
// Run by hand, without a keeper, it prints a hint and exits.
package main

import (
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/nubes"
)

// version is set at build time (-ldflags -X main.version=…).
var version = "dev"

func main() {
	driversdk.Serve(&nubes.Driver{Version: version})
}
