package qemu

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/drivers/qemu/qemutest"
)

// TestStopEndsTheProcessTheRecordDoesNotName: a create cut short (its
// deadline killed the launcher while QEMU daemonized) leaves a VM whose
// record has no pid. Destroying it must still end its QEMU process — it
// once reported the VM destroyed and left QEMU running.
func TestStopEndsTheProcessTheRecordDoesNotName(t *testing.T) {
	qemutest.Require(t)
	for _, pidfile := range []bool{true, false} {
		name := "no pid file"
		if pidfile {
			name = "pid file"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			v := &vmRecord{ID: newVMID()}
			args := []string{
				"-name", "soulstack-" + v.ID + ",process=soulstack-" + v.ID,
				"-machine", "none", "-nodefaults", "-no-user-config", "-display", "none",
				"-qmp", "unix:" + filepath.Join(dir, "qmp.sock") + ",server=on,wait=off",
				"-daemonize",
			}
			if pidfile {
				args = append(args, "-pidfile", filepath.Join(dir, "qemu.pid"))
			}
			if out, err := exec.Command("qemu-system-x86_64", args...).CombinedOutput(); err != nil {
				t.Fatalf("start QEMU: %v: %s", err, out)
			}
			pid := qemuPID(v, dir)
			if pid == 0 {
				t.Fatal("the daemonized QEMU process was not found by its name")
			}
			t.Cleanup(func() {
				if processAlive(pid, v.ID) {
					_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := stop(ctx, v, dir, 0); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if processAlive(pid, v.ID) {
				t.Fatalf("stop returned but QEMU (pid %d) still runs", pid)
			}
			if v.PID != pid {
				t.Errorf("the record names pid %d, want the process stopped (%d)", v.PID, pid)
			}
			// Another VM's process is never taken for this one.
			other := &vmRecord{ID: newVMID()}
			if got := qemuPID(other, t.TempDir()); got != 0 {
				t.Errorf("qemuPID of a VM with no process = %d, want 0", got)
			}
		})
	}
}
