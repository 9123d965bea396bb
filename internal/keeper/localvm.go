package keeper

import (
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/soulstack/soulstack/internal/config"
)

// envKeeperDirs is the variable through which driver plugins learn the
// keeper's own directories; soul-cloud-local hides them from its VMs
// wherever they are (localcloud.EnvKeeperDirs, the same name).
const envKeeperDirs = "SOULSTACK_KEEPER_DIRS"

// envKeeperPorts names the keeper's listen port to driver plugins; VMs of
// soul-cloud-local may reach it on the host (localcloud.EnvKeeperPorts).
const envKeeperPorts = "SOULSTACK_KEEPER_PORTS"

// keeperDirsEnv is the plugin environment naming the keeper's data dir
// and plugin dir, absolute, as a list like $PATH, and its listen port
// with the extra ports VMs may reach (the agent listener's and the
// embedded bus's), comma-separated.
func keeperDirsEnv(c config.Config, extra ...string) []string {
	var dirs []string
	for _, d := range []string{c.DataDir, c.PluginDir} {
		if a, err := filepath.Abs(d); err == nil {
			dirs = append(dirs, a)
		}
	}
	env := []string{envKeeperDirs + "=" + strings.Join(dirs, string(os.PathListSeparator))}
	var ports []string
	if _, port, err := net.SplitHostPort(c.Listen); err == nil && port != "0" {
		ports = append(ports, port)
	}
	for _, p := range extra {
		if p != "" && p != "0" {
			ports = append(ports, p)
		}
	}
	if len(ports) > 0 {
		env = append(env, envKeeperPorts+"="+strings.Join(ports, ","))
	}
	return env
}
