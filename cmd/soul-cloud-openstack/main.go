// Command soul-cloud-openstack is the CloudDriver plugin for OpenStack
// clouds (Nova, Neutron, Keystone v3). The keeper starts it from its
// plugin dir or $PATH for providers with driver "openstack":
//
//	{"name": "os", "driver": "openstack", "region": "RegionOne",
//	 "fqdn_suffix": "os.example.com", "credentials_ref": "file:/etc/soulstack/openstack.json",
//	 "config": {"interface": "public"}}
//
// docs/drivers/openstack.md describes the config, profile and
// credential keys. Run by hand, without a keeper, it prints a hint and
// exits.
package main

import (
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/openstack"
)

func main() {
	driversdk.Serve(openstack.New())
}
