package docker_test

import (
	"os"
	"testing"

	"github.com/soulstack/soulstack/internal/localcloud"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

func TestMain(m *testing.M) {
	// Local VMs are started by re-executing the test binary.
	localcloud.RunIfChild()
	os.Exit(m.Run())
}

// newVM starts a local VM on the view of the host (it has the host's
// docker CLI, and no engine) logged into as
// sshUser; see moduletest.NewVM.
func newVM(t *testing.T, sshUser string) *moduletest.VM {
	t.Helper()
	return moduletest.NewVM(t, sshUser, "docker.test")
}
