// Command terraform-provider-soulstack is the Terraform/OpenTofu provider
// soulstack/soulstack: it serves internal/tfprovider over the plugin
// protocol (version 6) to terraform or tofu, which start it.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/soulstack/soulstack/internal/tfprovider"
	"github.com/soulstack/soulstack/internal/version"
)

func main() {
	debug := flag.Bool("debug", false, "run as a debuggable process (prints TF_REATTACH_PROVIDERS)")
	flag.Parse()
	err := providerserver.Serve(context.Background(), tfprovider.New(version.String()), providerserver.ServeOpts{
		Address: tfprovider.Address,
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
