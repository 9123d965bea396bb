package keeper

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/localcloud"
)

// TestKeeperDirsEnv: the keeper names its data and plugin dirs, absolute,
// in the variable soul-cloud-local reads.
func TestKeeperDirsEnv(t *testing.T) {
	t.Parallel()
	if envKeeperDirs != localcloud.EnvKeeperDirs {
		t.Fatalf("the keeper sets %s, the local driver reads %s", envKeeperDirs, localcloud.EnvKeeperDirs)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := keeperDirsEnv(config.Config{DataDir: ".keeper", PluginDir: "/opt/plugins"})
	want := envKeeperDirs + "=" + filepath.Join(wd, ".keeper") + ":/opt/plugins"
	if len(got) != 1 || got[0] != want {
		t.Errorf("keeperDirsEnv = %q, want %q", got, want)
	}
}
