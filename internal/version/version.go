// Package version reports the build's version: set with
// -ldflags "-X github.com/soulstack/soulstack/internal/version.Version=v1.2.3",
// otherwise taken from the Go build info.
package version

import "runtime/debug"

// Version is the release version; empty means "read the build info".
var Version = ""

// String returns the version, the VCS revision when known, or "dev".
func String() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}
