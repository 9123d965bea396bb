package keeper_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// sshdSessions returns the PIDs of the per-connection processes of srv's
// sshd, which this test started: one per open connection.
func sshdSessions(t *testing.T, srv *sshtest.Server) []int {
	t.Helper()
	pids, err := srv.ConnectionPIDs()
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

func accepted(srv *sshtest.Server) int { return strings.Count(srv.Log(), "Accepted publickey") }

// TestRunsShareWarmConnections: runs in a row on one soul use one SSH
// connection; a connection whose server side died is redialled by the
// next run without failing its step; deleting the soul closes it.
func TestRunsShareWarmConnections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "warm.local.test", srv)
	sc := "steps:\n  - name: one\n    on: warm.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n  - name: two\n    on: warm.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n"
	runOnce := func(what string) {
		t.Helper()
		run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc})
		if err != nil {
			t.Fatal(err)
		}
		final := waitFor(t, c, run.ID, what, func(r *client.Run) bool { return client.Terminal(r.Phase) })
		if final.Phase != "Succeeded" {
			t.Fatalf("%s: run %s %+v", what, final.Phase, final.Error)
		}
	}

	runOnce("the first run")
	runOnce("the second run")
	if n := accepted(srv); n != 1 {
		t.Fatalf("two runs made %d SSH connections, want 1:\n%s", n, srv.Log())
	}
	// The second run's host key check made a connection of its own that
	// ended before authentication; its sshd process may take a moment to
	// exit.
	sessions := sshdSessions(t, srv)
	for deadline := time.Now().Add(10 * time.Second); len(sessions) != 1 && time.Now().Before(deadline); sessions = sshdSessions(t, srv) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(sessions) != 1 {
		t.Fatalf("%d sshd sessions open between runs, want 1", len(sessions))
	}

	// The server side of the warm connection dies between runs.
	if err := syscall.Kill(sessions[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	runOnce("the run after the connection died")
	if n := accepted(srv); n != 2 {
		t.Fatalf("%d SSH connections after the dead one, want 2 (one redial)", n)
	}

	if err := c.SoulDelete(context.Background(), "warm.local.test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(sshdSessions(t, srv)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the deleted soul's connection is still open: sshd sessions %v", sshdSessions(t, srv))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIdleWarmConnectionIsClosed: with ssh.idle_timeout set in keeper.yml,
// the keeper closes a connection no run has used for that long, and the
// next run dials a new one.
func TestIdleWarmConnectionIsClosed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(cfg, []byte("ssh:\n  idle_timeout: 1s\n  max_idle: 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := serve(t, dir, "--config", cfg)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "idle.local.test", srv)
	sc := "steps:\n  - name: one\n    on: idle.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n"
	runOnce := func(what string) {
		t.Helper()
		run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc})
		if err != nil {
			t.Fatal(err)
		}
		final := waitFor(t, c, run.ID, what, func(r *client.Run) bool { return client.Terminal(r.Phase) })
		if final.Phase != "Succeeded" {
			t.Fatalf("%s: run %s %+v", what, final.Phase, final.Error)
		}
	}
	runOnce("the first run")
	// The sweeper closes the connection once it has been idle for 1s;
	// the deadline only bounds a broken sweeper.
	deadline := time.Now().Add(30 * time.Second)
	for len(sshdSessions(t, srv)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle connection is still open: sshd sessions %v", sshdSessions(t, srv))
		}
		time.Sleep(50 * time.Millisecond)
	}
	runOnce("the run after the idle timeout")
	if n := accepted(srv); n != 2 {
		t.Fatalf("%d SSH logins, want 2 (the idle connection closed, a new one dialed)", n)
	}
}

// keeperConnsTo counts the keeper process's established TCP connections
// to ip:port, from its file descriptors and /proc/<pid>/net/tcp.
func keeperConnsTo(t *testing.T, k *proc, ip string, port int) int {
	t.Helper()
	pid := strconv.Itoa(k.Cmd.Process.Pid)
	fds, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/" + pid + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	addr := net.ParseIP(ip).To4()
	if addr == nil {
		t.Fatalf("%q is not an IPv4 address", ip)
	}
	// /proc/net/tcp writes an IPv4 address as the hex of its 32-bit value
	// in host (little endian) order.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", addr[3], addr[2], addr[1], addr[0], port)
	raw, err := os.ReadFile("/proc/" + pid + "/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[2] == want && f[3] == "01" && inodes[f[9]] {
			n++
		}
	}
	return n
}
