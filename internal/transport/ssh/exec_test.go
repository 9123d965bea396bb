package ssh_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

func TestExec(t *testing.T) {
	t.Parallel()
	c := connect(t, sshtest.Start(t, sshtest.Options{}), ssh.Options{})
	dir := filepath.Join(t.TempDir(), "dir with 'quotes' and spaces")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		cmd        ssh.Command
		wantExit   int
		wantSignal string
		wantStdout string
		wantStderr string // substring
	}{
		{name: "argv", cmd: ssh.Command{Argv: []string{"echo", "hello", "world"}}, wantStdout: "hello world\n"},
		{name: "script", cmd: ssh.Command{Script: "echo one; echo two >&2; exit 3"}, wantExit: 3, wantStdout: "one\n", wantStderr: "two"},
		{name: "false", cmd: ssh.Command{Argv: []string{"false"}}, wantExit: 1},
		{name: "exit 255", cmd: ssh.Command{Script: "exit 255"}, wantExit: 255},
		{name: "not found", cmd: ssh.Command{Argv: []string{"no-such-command-xyz"}}, wantExit: 127, wantStderr: "no-such-command-xyz"},
		{name: "killed by signal", cmd: ssh.Command{Script: "kill -TERM $$"}, wantExit: 143, wantSignal: "TERM"},
		{name: "LC_ALL", cmd: ssh.Command{Script: `printf %s "$LC_ALL"`}, wantStdout: "C"},
		{name: "LC_ALL in argv", cmd: ssh.Command{Argv: []string{"printenv", "LC_ALL"}}, wantStdout: "C\n"},
		{name: "env", cmd: ssh.Command{Argv: []string{"printenv", "A", "B_2"}, Env: map[string]string{"A": "x y", "B_2": "$HOME"}}, wantStdout: "x y\n$HOME\n"},
		{name: "env named like shell variables", cmd: ssh.Command{Argv: []string{"printenv", "l", "v", "m", "IFS"}, Env: map[string]string{"l": "1", "v": "2", "m": "3", "IFS": ":"}}, wantStdout: "1\n2\n3\n:\n"},
		{name: "env overrides LC_ALL", cmd: ssh.Command{Argv: []string{"printenv", "LC_ALL"}, Env: map[string]string{"LC_ALL": "C.UTF-8"}}, wantStdout: "C.UTF-8\n"},
		{name: "argv0 with =", cmd: ssh.Command{Argv: []string{"X=1", "y"}}, wantExit: 127},
		{name: "dir", cmd: ssh.Command{Argv: []string{"pwd"}, Dir: dir}, wantStdout: dir + "\n"},
		{name: "dir with script", cmd: ssh.Command{Script: "pwd; echo $0", Dir: dir}, wantStdout: dir + "\n/bin/sh\n"},
		{name: "missing dir", cmd: ssh.Command{Argv: []string{"pwd"}, Dir: "/no/such/dir"}, wantExit: 2, wantStderr: "/no/such/dir"},
		{name: "stdin", cmd: ssh.Command{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("shout\n")}, wantStdout: "SHOUT\n"},
		{name: "no stdin is EOF", cmd: ssh.Command{Argv: []string{"wc", "-c"}}, wantStdout: "0\n"},
		{name: "unread stdin", cmd: ssh.Command{Argv: []string{"true"}, Stdin: bytes.Repeat([]byte("x"), 4<<20)}},
		{name: "root needs no sudo", cmd: ssh.Command{Argv: []string{"id", "-u"}, Sudo: true}, wantStdout: strconv.Itoa(os.Geteuid()) + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := exec(t, c, tt.cmd)
			if res.ExitCode != tt.wantExit || res.Signal != tt.wantSignal {
				t.Errorf("exit %d signal %q, want %d %q (stderr %q)", res.ExitCode, res.Signal, tt.wantExit, tt.wantSignal, res.Stderr)
			}
			if tt.wantStdout != "" || len(res.Stdout) > 0 {
				if string(res.Stdout) != tt.wantStdout {
					t.Errorf("stdout %q, want %q", res.Stdout, tt.wantStdout)
				}
			}
			if !strings.Contains(string(res.Stderr), tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", res.Stderr, tt.wantStderr)
			}
		})
	}
}

func TestExecStdinPassthrough(t *testing.T) {
	t.Parallel()
	c := connect(t, sshtest.Start(t, sshtest.Options{}), ssh.Options{})
	in := make([]byte, 3<<20)
	rand.Read(in)
	res := exec(t, c, ssh.Command{Argv: []string{"cat"}, Stdin: in})
	if res.ExitCode != 0 || !bytes.Equal(res.Stdout, in) {
		t.Fatalf("exit %d, %d bytes back, want the %d sent unchanged", res.ExitCode, len(res.Stdout), len(in))
	}
}

func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	c := connect(t, sshtest.Start(t, sshtest.Options{}), ssh.Options{MaxOutput: 1000})
	res := exec(t, c, ssh.Command{Script: "head -c 5000 /dev/zero; head -c 999 /dev/zero | tr '\\0' e >&2"})
	if !res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("truncated stdout %v stderr %v, want true false", res.StdoutTruncated, res.StderrTruncated)
	}
	if !bytes.HasPrefix(res.Stdout, make([]byte, 1000)) || !bytes.Contains(res.Stdout[1000:], []byte("output truncated: 4000 bytes")) {
		t.Errorf("stdout %q", res.Stdout)
	}
	if len(res.Stderr) != 999 {
		t.Errorf("stderr has %d bytes, want 999", len(res.Stderr))
	}
}

func TestExecCancel(t *testing.T) {
	t.Parallel()
	c := connect(t, sshtest.Start(t, sshtest.Options{}), ssh.Options{})
	pid := cancelSleep(t, c, false)
	waitGone(t, pid)
	// The connection still serves commands.
	if res := exec(t, c, ssh.Command{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("true after cancel exited %d", res.ExitCode)
	}
}

func TestExecInvalidCommands(t *testing.T) {
	t.Parallel()
	c := connect(t, sshtest.Start(t, sshtest.Options{}), ssh.Options{})
	tests := []struct {
		name string
		cmd  ssh.Command
	}{
		{"empty", ssh.Command{}},
		{"both", ssh.Command{Argv: []string{"true"}, Script: "true"}},
		{"bad env name", ssh.Command{Argv: []string{"true"}, Env: map[string]string{"A-B": "secret-value"}}},
		{"nul in env", ssh.Command{Argv: []string{"true"}, Env: map[string]string{"A": "secret\x00value"}}},
		{"reserved env name", ssh.Command{Argv: []string{"true"}, Env: map[string]string{"__soulstack_l": "secret-value"}}},
		{"nul in argv", ssh.Command{Argv: []string{"echo", "a\x00b"}}},
		{"too long", ssh.Command{Script: strings.Repeat("x", 200<<10)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.Exec(t.Context(), tt.cmd)
			if !errors.Is(err, ssh.ErrInvalidCommand) {
				t.Fatalf("err = %v, want ErrInvalidCommand", err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows an env value: %v", err)
			}
		})
	}
}

func TestExecAsNonRootUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to log in as another user")
	}
	s := sshtest.Start(t, sshtest.Options{User: sshtest.NonRootUser(t)})
	c := connect(t, s, ssh.Options{})
	res := exec(t, c, ssh.Command{Argv: []string{"id", "-un"}})
	if got := strings.TrimSpace(string(res.Stdout)); got != sshtest.TestUser {
		t.Fatalf("id -un = %q (stderr %q), want %s", got, res.Stderr, sshtest.TestUser)
	}
	// The test user has no sudo rule: sudo -n must fail clearly, not hang.
	_, err := c.Exec(t.Context(), ssh.Command{Argv: []string{"id", "-u"}, Sudo: true})
	want := ssh.ErrSudoPassword
	if _, lerr := osexec.LookPath("sudo"); lerr != nil {
		want = ssh.ErrSudoMissing
	}
	if !errors.Is(err, want) {
		t.Fatalf("sudo err = %v, want %v", err, want)
	}
}

func TestExecWithSudo(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to log in as another user")
	}
	s := sshtest.Start(t, sshtest.Options{User: sshtest.NonRootSudoUser(t)})
	c := connect(t, s, ssh.Options{})
	res := exec(t, c, ssh.Command{
		Script: `id -u; printf '%s|%s|' "$LC_ALL" "$V"; pwd`,
		Env:    map[string]string{"V": "it's $x"},
		Dir:    "/root",
		Sudo:   true,
	})
	if want := "0\nC|it's $x|/root\n"; string(res.Stdout) != want || res.ExitCode != 0 {
		t.Errorf("exit %d stdout %q stderr %q, want %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	res = exec(t, c, ssh.Command{Argv: []string{"id", "-u"}})
	if string(res.Stdout) == "0\n" {
		t.Error("without Sudo the command ran as root")
	}

	// Cancelling a command run under sudo kills it too.
	waitGone(t, cancelSleep(t, c, true))
}

// cancelSleep runs a long sleep, cancels it once it has started and
// returns its PID. The "remote" host is this machine, so the command tells
// its PID through a file.
func cancelSleep(t *testing.T, c *ssh.Client, sudo bool) int {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		defer cancel()
		for ctx.Err() == nil {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	script := fmt.Sprintf("echo $$ > %[1]s.tmp && mv %[1]s.tmp %[1]s && exec sleep 60", ssh.Quote(pidFile))
	_, err := c.Exec(ctx, ssh.Command{Script: script, Sudo: sudo})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file holds %q", b)
	}
	return pid
}

// waitGone waits for a process on this machine to end.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for i := 0; ; i++ {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if i == 100 {
			t.Fatalf("remote process %d still running after cancel: %s", pid, stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Environment values never appear in a command line on the host: while the
// command runs, no /proc/*/cmdline holds them (sudo, which stays the
// command's parent, used to show them for the whole run). The command sees
// each value byte for byte and still gets its own standard input.
func TestExecEnvNeverInCommandLines(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to log in as other users and to read every process's command line")
	}
	users := []struct {
		name string
		user func(testing.TB) string
		sudo bool
	}{
		{"root", func(testing.TB) string { return "root" }, false},
		{"non-root", sshtest.NonRootUser, false},
		{"sudo", sshtest.NonRootSudoUser, true},
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, sshtest.Start(t, sshtest.Options{User: u.user(t)}), ssh.Options{})
			canary := "canary-" + rand.Text()
			env := map[string]string{
				"SECRET":  canary,
				"TRICKY":  "line one\nit's \"quoted\" $HOME `id` \\ %s %b \\0101 é ☃\n\n" + canary + "\n",
				"EMPTY":   "",
				"NEWLINE": "\n",
			}
			// A directory the command's user can write, for the handshake.
			dir, err := os.MkdirTemp("", "envcanary")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
			script := `printf '%s|' "$SECRET" "$TRICKY" "$EMPTY" "$NEWLINE" "${UNSET-unset}"
touch "$1"
while [ ! -e "$2" ]; do sleep 0.02; done
cat`
			type outcome struct {
				res ssh.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := c.Exec(t.Context(), ssh.Command{
					Argv:  []string{"/bin/sh", "-c", script, "sh", ready, goOn},
					Env:   env,
					Stdin: []byte("the program's own\x00input\n"),
					Sudo:  u.sudo,
				})
				done <- outcome{res, err}
			}()
			for {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				select {
				case o := <-done:
					t.Fatalf("the command ended before it was ready: %v, exit %d, stderr %q", o.err, o.res.ExitCode, o.res.Stderr)
				case <-time.After(10 * time.Millisecond):
				}
			}
			if leaks := cmdlinesHolding(t, canary); len(leaks) > 0 {
				t.Errorf("the value is in command lines while the command runs: %q", leaks)
			}
			if err := os.WriteFile(goOn, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			want := canary + "|" + env["TRICKY"] + "||\n|unset|the program's own\x00input\n"
			if string(o.res.Stdout) != want || o.res.ExitCode != 0 {
				t.Errorf("exit %d stdout %q\nwant %q (stderr %q)", o.res.ExitCode, o.res.Stdout, want, o.res.Stderr)
			}
		})
	}
}

// cmdlinesHolding returns the command lines of this host's processes that
// contain s.
func cmdlinesHolding(t *testing.T, s string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(procs) == 0 {
		t.Fatalf("list processes: %v (%d found)", err, len(procs))
	}
	var found []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, p+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return found
}
