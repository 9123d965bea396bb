package localcloud

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// VMs are started by re-executing the test binary.
	RunIfChild()
	os.Exit(m.Run())
}
