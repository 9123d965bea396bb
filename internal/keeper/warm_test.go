package keeper_test

import (
	"context"
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
	raw, err := os.ReadFile(filepath.Join(srv.Dir, "sshd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(raw))
	children, err := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(children)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, n)
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
	sessions := sshdSessions(t, srv)
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
