package keeper

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/soulstack/soulstack/internal/config"
)

// envKeeperDirs is the variable through which driver plugins learn the
// keeper's own directories; soul-cloud-local hides them from its VMs
// wherever they are (localcloud.EnvKeeperDirs, the same name).
const envKeeperDirs = "SOULSTACK_KEEPER_DIRS"

// keeperDirsEnv is the plugin environment naming the keeper's data dir
// and plugin dir, absolute, as a list like $PATH.
func keeperDirsEnv(c config.Config) []string {
	var dirs []string
	for _, d := range []string{c.DataDir, c.PluginDir} {
		if a, err := filepath.Abs(d); err == nil {
			dirs = append(dirs, a)
		}
	}
	return []string{envKeeperDirs + "=" + strings.Join(dirs, string(os.PathListSeparator))}
}
