package keeper

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/localcloud"
)

// TestKeeperDirsEnv: the keeper names its data and plugin dirs, absolute,
// in the variable soul-cloud-local reads.
func TestKeeperDirsEnv(t *testing.T) {
	t.Parallel()
	if envKeeperDirs != localcloud.EnvKeeperDirs || envKeeperPorts != localcloud.EnvKeeperPorts {
		t.Fatalf("the keeper sets %s and %s, the local driver reads %s and %s", envKeeperDirs, envKeeperPorts, localcloud.EnvKeeperDirs, localcloud.EnvKeeperPorts)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := keeperDirsEnv(config.Config{DataDir: ".keeper", PluginDir: "/opt/plugins", Listen: "0.0.0.0:9000"})
	want := []string{envKeeperDirs + "=" + filepath.Join(wd, ".keeper") + ":/opt/plugins", envKeeperPorts + "=9000"}
	if !slices.Equal(got, want) {
		t.Errorf("keeperDirsEnv = %q, want %q", got, want)
	}
	if got := localcloud.ParsePorts("9000"); !slices.Equal(got, []uint16{9000}) {
		t.Errorf("the driver reads %v from %s=9000", got, envKeeperPorts)
	}
	// A port the kernel picks is not known before the listener is up.
	if got := keeperDirsEnv(config.Config{DataDir: "/d", PluginDir: "/p", Listen: "127.0.0.1:0"}); len(got) != 1 {
		t.Errorf("keeperDirsEnv with port 0 = %q", got)
	}
}
