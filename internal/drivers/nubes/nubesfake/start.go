package nubesfake

import (
	"context"
	"os"
	"time"
)

// TB is what StartLocal needs of a test (testing.TB has it).
type TB interface {
	Helper()
	Fatal(args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// StartLocal serves a fake on loopback that accepts token, its VMs local
// VMs (NewLocalMachines with hostPorts and docker, kept in a directory
// under /var/tmp); when tb ends every VM it made is destroyed and the
// fake closed. The process must call localcloud.RunIfChild first thing.
func StartLocal(tb TB, token string, hostPorts []uint16, docker bool) (*Fake, *LocalMachines) {
	tb.Helper()
	f, err := Listen("127.0.0.1:0", token)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(f.Close)
	state, err := os.MkdirTemp("/var/tmp", "soulstack-nubesfake-")
	if err != nil {
		tb.Fatal(err)
	}
	machines := NewLocalMachines(state, hostPorts, docker)
	f.Machines = machines
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := machines.DestroyAll(ctx); err != nil {
			tb.Errorf("destroy the fake's VMs: %v", err)
		}
		os.RemoveAll(state)
	})
	return f, machines
}
