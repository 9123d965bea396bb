package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/transport"
)

func durableCmd(id string, epoch int64, script string) transport.Command {
	return transport.Command{Script: script, Durable: &transport.Durable{ID: id, Run: "run_bus", Epoch: epoch, Digest: "d-" + id}}
}

func count(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestAgentDurableCommands: through a real agent process with a spool, a
// durable command that the keeper let go of (its Exec detached) goes on;
// an Exec of the same id attaches (while it runs, and after it ended, from
// the spool) and never starts it again; once the soul has seen epoch 2 of
// the run, a command or a cancel of epoch 1 is refused; Forget removes the
// spool entry; another digest under a known id is refused.
func TestAgentDurableCommands(t *testing.T) {
	t.Parallel()
	e := startBus(t)
	id := e.soul(t, "durable.example.com")
	spool := t.TempDir()
	bustest.StartAgents(t, bustest.AgentSpec{URLs: e.bus.AgentURLs(), Identities: []bustest.Identity{id}, Heartbeat: testHeartbeat, Spool: spool})
	e.waitPresent(t, id.SID, true)
	c, ok := e.bus.Agent(id.SID)
	if !ok {
		t.Fatal("no agent")
	}
	dir := t.TempDir()
	ledger, started := filepath.Join(dir, "ledger"), filepath.Join(dir, "started")
	cmd := durableCmd("bus.0.1.1.x", 1, "touch "+started+"; sleep 1; echo ran >> "+ledger+"; echo out")

	// The keeper lets go while the command runs (its lease lost).
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, cmd)
		errc <- err
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if i > 200 {
			t.Fatal("the command never started")
		}
		time.Sleep(25 * time.Millisecond)
	}
	cancel(fmt.Errorf("lease lost: %w", transport.ErrDetach))
	if err := <-errc; !errors.Is(err, transport.ErrDetach) {
		t.Fatalf("detached exec = %v", err)
	}
	// The next execution (epoch 2) attaches while it still runs.
	cmd.Durable.Epoch = 2
	res, err := c.Exec(context.Background(), cmd)
	if err != nil || !res.Reattached || string(res.Stdout) != "out\n" {
		t.Fatalf("attach while running = %+v, %v", res, err)
	}
	// And again after it ended: from the spool.
	res, err = c.Exec(context.Background(), cmd)
	if err != nil || !res.Reattached || string(res.Stdout) != "out\n" {
		t.Fatalf("attach after the end = %+v, %v", res, err)
	}
	if n := count(t, ledger); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}
	// Epoch 1 is fenced now, for commands and for cancels.
	if _, err := c.Exec(context.Background(), durableCmd("bus.1.1.1.x", 1, "echo zombie >> "+ledger)); !errors.Is(err, transport.ErrFenced) {
		t.Fatalf("a command of an older epoch = %v, want run.fenced", err)
	}
	// A zombie that started a command in epoch 1 of another run, whose
	// next execution (epoch 2) attached, cannot cancel it any more.
	long := transport.Command{Script: "sleep 1; echo long >> " + ledger, Durable: &transport.Durable{ID: "bus.2.1.1.x", Run: "run_other", Epoch: 1, Digest: "d-long"}}
	zctx, zcancel := context.WithCancel(context.Background())
	zerr := make(chan error, 1)
	go func() {
		_, err := c.Exec(zctx, long)
		zerr <- err
	}()
	time.Sleep(200 * time.Millisecond)
	next := long
	next.Durable = &transport.Durable{ID: "bus.2.1.1.x", Run: "run_other", Epoch: 2, Digest: "d-long"}
	lerr := make(chan error, 1)
	go func() {
		res, err := c.Exec(context.Background(), next)
		if err == nil && !res.Reattached {
			err = errors.New("epoch 2 started the command again instead of attaching")
		}
		lerr <- err
	}()
	time.Sleep(200 * time.Millisecond)
	zcancel() // the zombie's cancel, of epoch 1
	if err := <-zerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the zombie's exec = %v", err)
	}
	if err := <-lerr; err != nil {
		t.Fatalf("the command of epoch 2: %v", err)
	}
	if n := count(t, ledger); n != 2 {
		t.Fatalf("ledger has %d lines, want 2 (the zombie's cancel must not have killed the command epoch 2 attached to)", n)
	}
	diverged := cmd
	diverged.Durable = &transport.Durable{ID: cmd.Durable.ID, Run: "run_bus", Epoch: 2, Digest: "another"}
	if _, err := c.Exec(context.Background(), diverged); !errors.Is(err, transport.ErrDiverged) {
		t.Fatalf("another digest under the id = %v, want run.replay_diverged", err)
	}
	entry := filepath.Join(spool, wire.Token(id.SID), cmd.Durable.ID)
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("spool entry: %v", err)
	}
	c.(transport.Forgetter).Forget([]string{cmd.Durable.ID})
	if _, err := c.Exec(context.Background(), durableCmd("bus.3.1.1.x", 2, "true")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry); !os.IsNotExist(err) {
		t.Fatalf("a forgotten spool entry is still there: %v", err)
	}
}
