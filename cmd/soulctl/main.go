// Command soulctl is the operator CLI of Soul Stack: it manages a keeper's
// providers, profiles, souls, API tokens and audit log, browses the module
// catalog, and runs scenarios with live progress over the Operator API. See
// the cli package for its commands.
package main

import (
	"os"

	"github.com/soulstack/soulstack/internal/cli"
)

func main() {
	os.Exit(cli.Main())
}
