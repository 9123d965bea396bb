// Package standard links in the default set of modules: importing it for
// its side effects registers every module family of the first catalog.
//
//	import _ "github.com/soulstack/soulstack/internal/modules/standard"
package standard

import (
	// The module families, each registering its states at init.
	_ "github.com/soulstack/soulstack/internal/modules/cloud"
	_ "github.com/soulstack/soulstack/internal/modules/command"
	_ "github.com/soulstack/soulstack/internal/modules/docker"
	_ "github.com/soulstack/soulstack/internal/modules/file"
	_ "github.com/soulstack/soulstack/internal/modules/pkg"
	_ "github.com/soulstack/soulstack/internal/modules/postgres"
	_ "github.com/soulstack/soulstack/internal/modules/script"
)
