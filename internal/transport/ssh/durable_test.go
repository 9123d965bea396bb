package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// durableHost is a real sshd and a client whose spool is a directory of the
// test's own: with mode "executor" durable commands go through the soul
// binary (its directory the test's own too), with "shell" through the
// shell supervisor.
type durableHost struct {
	srv   *sshtest.Server
	spool string
	opts  ssh.Options
}

// modes are the two ways a durable command takes.
var modes = []string{"shell", "executor"}

func newDurableHost(t *testing.T, mode string) *durableHost {
	t.Helper()
	h := &durableHost{srv: sshtest.Start(t, sshtest.Options{}), spool: t.TempDir()}
	h.opts = ssh.Options{Spool: h.spool}
	if mode == "executor" {
		h.opts.Executor = soulExecutor(t)
	}
	return h
}

// soulExecutor is the soul binary (built once per test binary) as the
// executor, in a directory of t's own on the host.
func soulExecutor(t *testing.T) *ssh.Executor {
	t.Helper()
	soulOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ssh-test-soul-")
		if err != nil {
			t.Fatal(err)
		}
		soulDir = dir
		soulPath, soulSum = sshtest.BuildSoul(t, dir)
	})
	if soulPath == "" {
		t.Fatal("the soul binary did not build")
	}
	return &ssh.Executor{Dir: t.TempDir(), Binaries: map[string]ssh.ExecutorBinary{runtime.GOARCH: {Path: soulPath, SHA256: soulSum}}}
}

var (
	soulOnce                   sync.Once
	soulDir, soulPath, soulSum string
)

func (h *durableHost) connect(t *testing.T) *ssh.Client {
	t.Helper()
	c := connect(t, h.srv, h.opts)
	if h.opts.Executor != nil {
		// Cleanups run last first: this one before connect's Close.
		t.Cleanup(func() {
			if st := c.ExecutorState(); st != "" && st != "executor" {
				t.Errorf("the executor did not run: %s", st)
			}
		})
	}
	return c
}

func durable(id string, epoch int64, cmd ssh.Command) ssh.Command {
	cmd.Durable = &transport.Durable{ID: id, Run: "run_test", Epoch: epoch, Digest: "d-" + id}
	return cmd
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestDurableSemantics: a durable command has the semantics of any other
// command (argv, script, env, stdin, dir, exit codes, signals), run
// through the supervisor.
func TestDurableSemantics(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testDurableSemantics(t, newDurableHost(t, mode))
		})
	}
}

func testDurableSemantics(t *testing.T, h *durableHost) {
	c := h.connect(t)
	for i, tt := range []struct {
		cmd                ssh.Command
		exit               int
		signal, out, errIn string
	}{
		{cmd: ssh.Command{Argv: []string{"echo", "hello", "world"}}, out: "hello world\n"},
		{cmd: ssh.Command{Script: "echo one; echo two >&2; exit 3"}, exit: 3, out: "one\n", errIn: "two"},
		{cmd: ssh.Command{Script: "kill -TERM $$"}, exit: 143, signal: "TERM"},
		{cmd: ssh.Command{Argv: []string{"printenv", "A", "LC_ALL"}, Env: map[string]string{"A": "x y"}}, out: "x y\nC\n"},
		{cmd: ssh.Command{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("shout\n")}, out: "SHOUT\n"},
		{cmd: ssh.Command{Argv: []string{"wc", "-c"}}, out: "0\n"},
		{cmd: ssh.Command{Argv: []string{"pwd"}, Dir: "/tmp"}, out: "/tmp\n"},
		{cmd: ssh.Command{Argv: []string{"no-such-command-xyz"}}, exit: 127, errIn: "no-such-command-xyz"},
	} {
		res := exec(t, c, durable(fmt.Sprintf("sem-%d", i), 1, tt.cmd))
		if res.ExitCode != tt.exit || res.Signal != tt.signal || string(res.Stdout) != tt.out || !strings.Contains(string(res.Stderr), tt.errIn) || res.Reattached {
			t.Errorf("case %d: exit %d signal %q stdout %q stderr %q reattached %v; want exit %d signal %q stdout %q stderr with %q",
				i, res.ExitCode, res.Signal, res.Stdout, res.Stderr, res.Reattached, tt.exit, tt.signal, tt.out, tt.errIn)
		}
		if strings.Contains(string(res.Stderr), "soulstack-pid-") {
			t.Errorf("case %d: a supervisor line leaked into stderr: %q", i, res.Stderr)
		}
	}
}

// TestDurableRunsOnce: a second exec of the same id, on a new connection,
// attaches to the finished command and returns its result; the command ran
// once.
func TestDurableRunsOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testDurableRunsOnce(t, newDurableHost(t, mode))
		})
	}
}

func testDurableRunsOnce(t *testing.T, h *durableHost) {
	ledger := filepath.Join(t.TempDir(), "ledger")
	cmd := durable("once", 1, ssh.Command{Script: "echo ran >> " + ledger + "; echo out; echo err >&2; exit 4"})
	first := exec(t, h.connect(t), cmd)
	again := exec(t, h.connect(t), cmd)
	if !again.Reattached || first.Reattached {
		t.Fatalf("reattached: first %v, again %v", first.Reattached, again.Reattached)
	}
	if again.ExitCode != 4 || string(again.Stdout) != "out\n" || string(again.Stderr) != "err\n" {
		t.Fatalf("reattached result = %d %q %q", again.ExitCode, again.Stdout, again.Stderr)
	}
	if got := lines(t, ledger); len(got) != 1 {
		t.Fatalf("the command ran %d times", len(got))
	}
}

// TestDurableSurvivesACut: the connection dies while the command runs (the
// sshd process of the connection killed); the command goes on, and an exec
// of its id over a new connection attaches and returns its output.
func TestDurableSurvivesACut(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testDurableSurvivesACut(t, newDurableHost(t, mode))
		})
	}
}

func testDurableSurvivesACut(t *testing.T, h *durableHost) {
	dir := t.TempDir()
	ledger, started := filepath.Join(dir, "ledger"), filepath.Join(dir, "started")
	cmd := durable("cut", 1, ssh.Command{Script: "touch " + started + "; sleep 1.5; echo ran >> " + ledger + "; echo done"})
	c := h.connect(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), cmd)
		errc <- err
	}()
	waitFile(t, started)
	pids, err := h.srv.ConnectionPIDs()
	if err != nil || len(pids) == 0 {
		t.Fatalf("sshd connection processes = %v, %v", pids, err)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL) // the sshd processes of the server this test started
	}
	if err := <-errc; !errors.Is(err, transport.ErrDisconnected) {
		t.Fatalf("exec over the cut connection = %v, want disconnected", err)
	}
	res := exec(t, h.connect(t), cmd)
	if !res.Reattached || string(res.Stdout) != "done\n" || res.ExitCode != 0 {
		t.Fatalf("after the redial: reattached %v, %d %q %q", res.Reattached, res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := lines(t, ledger); len(got) != 1 {
		t.Fatalf("the command ran %d times", len(got))
	}
}

// TestDurableDetachAndCancel: an exec whose context ends with
// transport.ErrDetach lets the command go on (it is reattached later); one
// cancelled otherwise kills it.
func TestDurableDetachAndCancel(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testDurableDetachAndCancel(t, newDurableHost(t, mode))
		})
	}
}

func testDurableDetachAndCancel(t *testing.T, h *durableHost) {
	c := h.connect(t)
	dir := t.TempDir()
	for _, detach := range []bool{true, false} {
		name := fmt.Sprint("detach-", detach)
		started, ledger := filepath.Join(dir, name+".started"), filepath.Join(dir, name+".ledger")
		cmd := durable(name, 1, ssh.Command{Script: "touch " + started + "; sleep 1; echo ran >> " + ledger})
		ctx, cancel := context.WithCancelCause(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, cmd)
			errc <- err
		}()
		waitFile(t, started)
		cause := errors.New("cancelled by the test")
		if detach {
			cause = fmt.Errorf("keeper stopping: %w", transport.ErrDetach)
		}
		cancel(cause)
		if err := <-errc; !errors.Is(err, cause) {
			t.Fatalf("%s: exec = %v", name, err)
		}
		time.Sleep(1500 * time.Millisecond)
		if got := lines(t, ledger); len(got) != map[bool]int{true: 1, false: 0}[detach] {
			t.Fatalf("%s: the command finished %d times", name, len(got))
		}
	}
}

// TestDurableFencing: once the soul has seen epoch 2 of a run, a command or
// a cancel of epoch 1 is refused (run.fenced); a digest that differs under
// one id is refused (run.replay_diverged).
func TestDurableFencing(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testDurableFencing(t, newDurableHost(t, mode))
		})
	}
}

func testDurableFencing(t *testing.T, h *durableHost) {
	c := h.connect(t)
	dir := t.TempDir()
	ledger, started := filepath.Join(dir, "ledger"), filepath.Join(dir, "started")
	// Epoch 2 starts a command; the zombie of epoch 1 tries a command and
	// a cancel of it.
	long := durable("fence-long", 2, ssh.Command{Script: "touch " + started + "; sleep 1; echo long >> " + ledger})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), long)
		errc <- err
	}()
	waitFile(t, started)
	_, err := c.Exec(context.Background(), durable("fence-zombie", 1, ssh.Command{Script: "echo zombie >> " + ledger}))
	if !errors.Is(err, transport.ErrFenced) || transport.Code(err) != "run.fenced" {
		t.Fatalf("a command of an older epoch = %v, want run.fenced", err)
	}
	zombie := long
	zombie.Durable = &transport.Durable{ID: long.Durable.ID, Run: "run_test", Epoch: 1, Digest: long.Durable.Digest}
	ctx, cancel := context.WithCancel(context.Background())
	zerr := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, zombie)
		zerr <- err
	}()
	if err := <-zerr; !errors.Is(err, transport.ErrFenced) {
		t.Fatalf("an attach of an older epoch = %v, want run.fenced", err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("the command of the later epoch: %v", err)
	}
	if got := lines(t, ledger); len(got) != 1 || got[0] != "long" {
		t.Fatalf("ledger = %v, want only the later epoch's command", got)
	}
	diverged := durable("fence-long", 2, ssh.Command{Script: "echo other"})
	diverged.Durable.Digest = "another"
	if _, err := c.Exec(context.Background(), diverged); !errors.Is(err, transport.ErrDiverged) {
		t.Fatalf("another command under the same id = %v, want run.replay_diverged", err)
	}
}

// TestDurableSpool: output past MaxOutput is cut in the spool and marked
// truncated; Forget removes a spool entry with the next command; an entry
// of another boot with no exit status is a lost command.
func TestDurableSpool(t *testing.T) {
	t.Parallel()
	h := newDurableHost(t, "shell")
	h.opts.MaxOutput = 1000
	c := h.connect(t)
	res := exec(t, c, durable("big", 1, ssh.Command{Script: "head -c 100000 /dev/zero | tr '\\0' x"}))
	if !res.StdoutTruncated || len(res.Stdout) > 1100 {
		t.Fatalf("big output: %d bytes, truncated %v", len(res.Stdout), res.StdoutTruncated)
	}
	if fi, err := os.Stat(filepath.Join(h.spool, "big.out")); err != nil || fi.Size() != 1001 {
		t.Fatalf("spooled output = %v, %v; want 1001 bytes", fi, err)
	}
	c.Forget([]string{"big"})
	exec(t, c, durable("next", 1, ssh.Command{Argv: []string{"true"}}))
	if left, _ := filepath.Glob(filepath.Join(h.spool, "big.*")); len(left) > 0 {
		t.Fatalf("a forgotten entry is still spooled: %v", left)
	}
	// A command that started in another boot and never ended.
	for name, v := range map[string]string{"rebooted.meta": "d-rebooted another-boot 1", "rebooted.pid": "1"} {
		if err := os.WriteFile(filepath.Join(h.spool, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Exec(context.Background(), durable("rebooted", 1, ssh.Command{Argv: []string{"true"}})); !errors.Is(err, transport.ErrCommandLost) || !strings.Contains(err.Error(), "rebooted") {
		t.Fatalf("a command lost by a reboot = %v, want run.command_lost", err)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if i > 200 {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
