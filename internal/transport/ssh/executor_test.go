package ssh_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// TestExecutorUpload: the first connection uploads the soul binary to
// soul-<sha256> in the executor's directory, a file only its user can
// read; a second connection finds it and uploads nothing; a binary
// altered on the host is refused by its hash and replaced.
func TestExecutorUpload(t *testing.T) {
	t.Parallel()
	srv := sshtest.Start(t, sshtest.Options{})
	x := soulExecutor(t)
	var sum string
	for _, b := range x.Binaries {
		sum = b.SHA256
	}
	bin := filepath.Join(x.Dir, "soul-"+sum)
	c := connect(t, srv, ssh.Options{Executor: x})
	if x := c.Executor(); x != "" {
		t.Fatalf("before the first command the soul's record would say %q, want nothing yet", x)
	}
	if res := exec(t, c, ssh.Command{Argv: []string{"echo", "one"}}); string(res.Stdout) != "one\n" || c.ExecutorState() != "executor" || c.Executor() != "ssh: executor" {
		t.Fatalf("first command = %q, executor %q (%q)", res.Stdout, c.ExecutorState(), c.Executor())
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatalf("the uploaded binary: %v", err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("the binary's mode is %v, want 0700", fi.Mode().Perm())
	}
	if d, _ := os.Stat(x.Dir); d.Mode().Perm() != 0o700 {
		t.Errorf("the executor's directory mode is %v, want 0700", d.Mode().Perm())
	}
	inode := fi.Sys().(*syscall.Stat_t).Ino
	if h, ok := c.TakeReplacedExecutor(); ok {
		t.Fatalf("a first upload reported as the replacement of an altered binary (%s)", h)
	}

	c2 := connect(t, srv, ssh.Options{Executor: x})
	exec(t, c2, ssh.Command{Argv: []string{"true"}})
	if fi2, _ := os.Stat(bin); fi2.Sys().(*syscall.Stat_t).Ino != inode || c2.ExecutorState() != "executor" {
		t.Fatalf("a second connection uploaded the binary again (or did not run it: %q)", c2.ExecutorState())
	}

	// Tampered with on the host: refused, replaced, run.
	// (The running one is busy: it is replaced, as an attacker would.)
	if err := os.WriteFile(bin+".evil", []byte("#!/bin/sh\necho tampered\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".evil", bin); err != nil {
		t.Fatal(err)
	}
	c3 := connect(t, srv, ssh.Options{Executor: x})
	if res := exec(t, c3, ssh.Command{Argv: []string{"echo", "three"}}); string(res.Stdout) != "three\n" || c3.ExecutorState() != "executor" {
		t.Fatalf("after tampering: %q, executor %q", res.Stdout, c3.ExecutorState())
	}
	b, _ := os.ReadFile(bin)
	if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
		t.Fatal("the tampered binary was not replaced")
	}
	if h, ok := c3.TakeReplacedExecutor(); !ok || h != sum {
		t.Fatalf("the replacement of the tampered binary is not reported for audit: %q, %v", h, ok)
	}
	if _, ok := c3.TakeReplacedExecutor(); ok {
		t.Fatal("the replacement is reported twice")
	}
}

// TestExecutorFallback: where the executor cannot run — no binary for the
// host's architecture, a directory mounted noexec — the connection runs
// its commands through a shell, and says why.
func TestExecutorFallback(t *testing.T) {
	t.Parallel()
	srv := sshtest.Start(t, sshtest.Options{})
	x := soulExecutor(t)
	other := &ssh.Executor{Dir: x.Dir, Binaries: map[string]ssh.ExecutorBinary{}}
	for _, b := range x.Binaries {
		other.Binaries["riscv64"] = b
	}
	c := connect(t, srv, ssh.Options{Executor: other})
	if res := exec(t, c, ssh.Command{Argv: []string{"echo", "shell"}}); string(res.Stdout) != "shell\n" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
	if st := c.ExecutorState(); !strings.HasPrefix(st, "shell: no executor binary for Linux ") {
		t.Fatalf("executor state = %q", st)
	}
	if x := c.Executor(); !strings.HasPrefix(x, "ssh: shell (no executor binary for Linux ") || !strings.HasSuffix(x, ")") {
		t.Fatalf("the soul's record would say %q", x)
	}
	if x := connect(t, srv, ssh.Options{}).Executor(); x != "ssh: shell" {
		t.Fatalf("without an executor the soul's record would say %q", x)
	}

	if os.Geteuid() != 0 {
		return
	}
	noexec := t.TempDir()
	if err := unix.Mount("tmpfs", noexec, "tmpfs", unix.MS_NOEXEC, "mode=0700"); err != nil {
		t.Fatalf("mount a noexec tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(noexec, unix.MNT_DETACH) })
	x.Dir = noexec
	c = connect(t, srv, ssh.Options{Executor: x})
	if res := exec(t, c, ssh.Command{Argv: []string{"echo", "noexec"}}); string(res.Stdout) != "noexec\n" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
	if st := c.ExecutorState(); !strings.HasPrefix(st, "shell: ") {
		t.Fatalf("executor state on a noexec directory = %q", st)
	}
}

// TestExecutorKilledMidCommand: the executor is killed (SIGKILL) while a
// durable command runs; the command goes on under its supervisor, and the
// next exec of its id (a new executor on the same connection) attaches
// and returns its output; it ran once. A plain command running then fails
// disconnected, and the next one runs.
func TestExecutorKilledMidCommand(t *testing.T) {
	t.Parallel()
	h := newDurableHost(t, "executor")
	c := h.connect(t)
	dir := t.TempDir()
	ledger, started := filepath.Join(dir, "ledger"), filepath.Join(dir, "started")
	cmd := durable("killed", 1, ssh.Command{Script: "touch " + started + "; sleep 1; echo ran >> " + ledger + "; echo done"})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), cmd)
		errc <- err
	}()
	waitFile(t, started)
	for i := 0; i < 3; i++ {
		killExecutor(t, h.opts.Executor.Dir)
		if err := <-errc; !errors.Is(err, transport.ErrDisconnected) {
			t.Fatalf("exec while the executor was killed = %v, want disconnected", err)
		}
		if i < 2 {
			// Attach again, and kill that executor too.
			go func() {
				_, err := c.Exec(context.Background(), cmd)
				errc <- err
			}()
			// Killed once it serves (a start killed midway is tried
			// again by the next command, not this one).
			for deadline := time.Now().Add(10 * time.Second); c.ExecutorState() != "executor"; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no executor serves the connection: %q", c.ExecutorState())
				}
			}
		}
	}
	res := exec(t, c, cmd)
	if !res.Reattached || string(res.Stdout) != "done\n" || res.ExitCode != 0 {
		t.Fatalf("after the kills: reattached %v, %d %q %q", res.Reattached, res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := lines(t, ledger); len(got) != 1 {
		t.Fatalf("the command ran %d times", len(got))
	}
	if st := c.ExecutorState(); st != "executor" {
		t.Fatalf("executor state = %q", st)
	}
}

// TestDurableOtherSpool: a durable command started through the shell
// supervisor (the executor could not run then) is attached through it by
// a connection that has the executor; one started through the executor is
// never started again through a shell: where the executor cannot run, it
// is lost to that execution (run.command_lost).
func TestDurableOtherSpool(t *testing.T) {
	t.Parallel()
	h := newDurableHost(t, "executor")
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	shellOnly := h.opts
	shellOnly.Executor = &ssh.Executor{Dir: h.opts.Executor.Dir} // no binary: the shell, the same spools
	sc := connect(t, h.srv, shellOnly)
	xc := h.connect(t)

	viaShell := durable("via-shell", 1, ssh.Command{Script: "echo shell >> " + ledger + "; echo one"})
	if res := exec(t, sc, viaShell); res.Reattached || string(res.Stdout) != "one\n" {
		t.Fatalf("through the shell: %+v", res)
	}
	if res := exec(t, xc, viaShell); !res.Reattached || string(res.Stdout) != "one\n" {
		t.Fatalf("the executor's connection did not attach to the shell's command: %+v", res)
	}

	viaExecutor := durable("via-executor", 1, ssh.Command{Script: "echo executor >> " + ledger + "; echo two"})
	if res := exec(t, xc, viaExecutor); res.Reattached || string(res.Stdout) != "two\n" {
		t.Fatalf("through the executor: %+v", res)
	}
	if _, err := sc.Exec(context.Background(), viaExecutor); !errors.Is(err, transport.ErrCommandLost) {
		t.Fatalf("the shell with the executor's command = %v, want run.command_lost", err)
	}
	if got := lines(t, ledger); strings.Join(got, " ") != "shell executor" {
		t.Fatalf("ledger = %v, want each command once", got)
	}
}

// killExecutor sends SIGKILL to the executor running from dir.
func killExecutor(t *testing.T, dir string) {
	t.Helper()
	pid := waitExecutor(t, dir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// waitExecutor returns the PID of the executor running from dir.
func waitExecutor(t *testing.T, dir string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := osexec.Command("pgrep", "-f", "^"+dir+"/soul-[0-9a-f]+ exec --stdio").Output()
		if f := strings.Fields(string(out)); len(f) == 1 {
			pid, _ := strconv.Atoi(f[0])
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no executor of %s runs (pgrep: %q)", dir, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
