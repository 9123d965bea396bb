package transport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

func TestMain(m *testing.M) {
	bustest.RunAgentIfAsked()
	os.Exit(m.Run())
}

// maxOutput is the output limit both transports get in the conformance
// suite: above the agent's chunk size, so that output crosses several
// bus messages.
const maxOutput = 1<<20 + 512<<10

// transports returns a connection over each transport to this machine as
// root: SSH through a real sshd, the agent through a real embedded NATS
// server and a real agent process.
func transports(t *testing.T) map[string]transport.Conn {
	t.Helper()
	srv := sshtest.Start(t, sshtest.Options{User: "root"})
	sc, err := ssh.Dial(t.Context(), ssh.Target{Address: srv.Addr, Port: srv.Port, User: srv.User, PrivateKey: srv.ClientKey, Retry: ssh.RetryPolicy{Attempts: 3, Interval: 10 * time.Millisecond}}, ssh.Options{MaxOutput: maxOutput})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })

	ca := bustest.NewCA(t)
	reg := bustest.NewRegistry()
	b, err := bus.Start(t.Context(), bus.Config{Listen: "127.0.0.1:0", CA: ca.CA, ServerCert: ca.ServerCert, Identities: reg, Heartbeat: 500 * time.Millisecond, MaxOutput: maxOutput})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	id := bustest.Issue(t, ca.CA, "conformance.example.com", time.Hour, time.Now())
	reg.Set(id.SID, id.Serial)
	bustest.StartAgents(t, bustest.AgentSpec{URLs: b.AgentURLs(), Identities: []bustest.Identity{id}, Heartbeat: 500 * time.Millisecond})
	bustest.WaitFor(t, 15*time.Second, "the agent", func() bool { return b.Present(id.SID) })
	ac, _ := b.Agent(id.SID)

	// SSH with the soul binary as the connection's executor.
	soul, sum := sshtest.BuildSoul(t, "")
	xc, err := ssh.Dial(t.Context(), ssh.Target{Address: srv.Addr, Port: srv.Port, User: srv.User, PrivateKey: srv.ClientKey, Retry: ssh.RetryPolicy{Attempts: 3, Interval: 10 * time.Millisecond}},
		ssh.Options{MaxOutput: maxOutput, Executor: &ssh.Executor{Dir: t.TempDir(), Binaries: map[string]ssh.ExecutorBinary{runtime.GOARCH: {Path: soul, SHA256: sum}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { xc.Close() })
	return map[string]transport.Conn{"ssh": sc, "agent": ac, "ssh-executor": executorConn{t: t, c: xc}}
}

// executorConn is an SSH connection that must run its plain commands
// through the executor: a command that went through the shell fails the
// test.
type executorConn struct {
	t *testing.T
	c *ssh.Client
}

func (x executorConn) Exec(ctx context.Context, cmd transport.Command) (transport.Result, error) {
	res, err := x.c.Exec(ctx, cmd)
	if st := x.c.ExecutorState(); cmd.Durable == nil && st != "executor" {
		x.t.Errorf("a plain command did not go through the executor: %q", st)
	}
	return res, err
}

// TestConformance runs one set of commands over SSH and over the agent
// and requires the same results: modules behave the same on either.
func TestConformance(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite logs in as root")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20/16*1+7) // 1 MiB + 112 bytes, two bus parts
	cases := []struct {
		name  string
		cmd   transport.Command
		check func(t *testing.T, res transport.Result)
	}{
		{"argv byte for byte", transport.Command{Argv: []string{"printf", "%s|%s|%s", "a b", `$HOME'"\`, "é\n*"}}, func(t *testing.T, r transport.Result) {
			want(t, r, `a b|$HOME'"\|é`+"\n*", "", 0)
		}},
		{"stdin", transport.Command{Argv: []string{"cat"}, Stdin: []byte("line 1\nline 2\x00\xff")}, func(t *testing.T, r transport.Result) {
			want(t, r, "line 1\nline 2\x00\xff", "", 0)
		}},
		{"env and stdin", transport.Command{Script: `printf '%s|%s|' "$A" "$LC_ALL"; cat`, Env: map[string]string{"A": "multi\nline \\ é $X"}, Stdin: []byte("input")}, func(t *testing.T, r transport.Result) {
			want(t, r, "multi\nline \\ é $X|C|input", "", 0)
		}},
		{"env overrides LC_ALL", transport.Command{Script: `printf %s "$LC_ALL"`, Env: map[string]string{"LC_ALL": "C.UTF-8"}}, func(t *testing.T, r transport.Result) {
			want(t, r, "C.UTF-8", "", 0)
		}},
		{"working dir", transport.Command{Argv: []string{"pwd"}, Dir: "/usr/lib"}, func(t *testing.T, r transport.Result) {
			want(t, r, "/usr/lib\n", "", 0)
		}},
		{"login dir", transport.Command{Argv: []string{"pwd"}}, func(t *testing.T, r transport.Result) {
			want(t, r, "/root\n", "", 0)
		}},
		{"non-zero exit and stderr", transport.Command{Script: "echo out; echo err >&2; exit 7"}, func(t *testing.T, r transport.Result) {
			want(t, r, "out\n", "err\n", 7)
		}},
		{"program not found", transport.Command{Argv: []string{"no-such-program-soulstack"}}, func(t *testing.T, r transport.Result) {
			if r.ExitCode != 127 {
				t.Errorf("exit %d, want 127", r.ExitCode)
			}
		}},
		{"killed by a signal", transport.Command{Script: "kill -s KILL $$"}, func(t *testing.T, r transport.Result) {
			if r.ExitCode != 137 || r.Signal != "KILL" {
				t.Errorf("exit %d signal %q, want 137 KILL", r.ExitCode, r.Signal)
			}
		}},
		{"large output kept whole", transport.Command{Argv: []string{"cat"}, Stdin: big}, func(t *testing.T, r transport.Result) {
			if !bytes.Equal(r.Stdout, big) || r.StdoutTruncated {
				t.Errorf("stdout %d bytes (truncated %v), want the %d bytes of stdin", len(r.Stdout), r.StdoutTruncated, len(big))
			}
		}},
		{"output cut at the limit", transport.Command{Script: fmt.Sprintf("head -c %d /dev/zero; head -c 999 /dev/zero | tr '\\0' e >&2", maxOutput+4000)}, func(t *testing.T, r transport.Result) {
			if !r.StdoutTruncated || r.StderrTruncated {
				t.Errorf("truncated stdout %v stderr %v, want true false", r.StdoutTruncated, r.StderrTruncated)
			}
			if !bytes.HasPrefix(r.Stdout, make([]byte, maxOutput)) || string(r.Stdout[maxOutput:]) != fmt.Sprintf("\n[output truncated: 4000 bytes over the %d-byte limit dropped]\n", maxOutput) {
				t.Errorf("stdout has %d bytes, tail %q", len(r.Stdout), r.Stdout[min(len(r.Stdout), maxOutput):])
			}
			if len(r.Stderr) != 999 {
				t.Errorf("stderr has %d bytes, want 999", len(r.Stderr))
			}
		}},
	}
	for name, c := range transports(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					res, err := c.Exec(t.Context(), tc.cmd)
					if err != nil {
						t.Fatalf("exec: %v", err)
					}
					tc.check(t, res)
				})
			}
			t.Run("invalid command", func(t *testing.T) {
				for _, cmd := range []transport.Command{
					{Argv: []string{"true"}, Env: map[string]string{"1BAD": "x"}},
					{Argv: []string{"true"}, Env: map[string]string{"__soulstack_x": "x"}},
					{Argv: []string{"echo", "a\x00b"}},
					{},
				} {
					_, err := c.Exec(t.Context(), cmd)
					if !errors.Is(err, transport.ErrInvalidCommand) || !strings.HasSuffix(transport.Code(err), ".invalid_command") {
						t.Errorf("%+v: err %v (code %q), want an invalid command", cmd, err, transport.Code(err))
					}
				}
			})
			t.Run("cancel kills the process", func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				pid := runUntil(t, c, ctx, cancel, context.Canceled)
				waitGone(t, pid)
			})
			t.Run("command outliving its step timeout", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
				// The deadline is what ends the command: cancel only
				// runs at cleanup.
				defer cancel()
				ctx, stop := context.WithTimeout(ctx, 2*time.Second)
				defer stop()
				pid := runUntil(t, c, ctx, func() {}, context.DeadlineExceeded)
				waitGone(t, pid)
			})
			t.Run("still serves after a cancel", func(t *testing.T) {
				res, err := c.Exec(t.Context(), transport.Command{Argv: []string{"echo", "ok"}})
				if err != nil || string(res.Stdout) != "ok\n" {
					t.Errorf("got %q, %v", res.Stdout, err)
				}
			})
		})
	}
}

func want(t *testing.T, r transport.Result, stdout, stderr string, code int) {
	t.Helper()
	if string(r.Stdout) != stdout || string(r.Stderr) != stderr || r.ExitCode != code {
		t.Errorf("got stdout %q stderr %q exit %d\nwant stdout %q stderr %q exit %d", r.Stdout, r.Stderr, r.ExitCode, stdout, stderr, code)
	}
}

// runUntil runs a command that writes its PID then sleeps for a minute
// (in a child, so that only killing the process group ends both), ends
// ctx with stop once the PID is written, and requires Exec to return
// wantErr, with the output written before. It returns the sleeper's PID.
func runUntil(t *testing.T, c transport.Conn, ctx context.Context, stop func(), wantErr error) int {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	go func() {
		for ctx.Err() == nil {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				stop()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	q := ssh.Quote(pidFile)
	script := fmt.Sprintf("echo started; sleep 60 & echo $! > %[1]s.tmp && mv %[1]s.tmp %[1]s; wait", q)
	res, err := c.Exec(ctx, transport.Command{Script: script})
	if !errors.Is(err, wantErr) {
		t.Fatalf("err = %v, want %v", err, wantErr)
	}
	if !strings.Contains(string(res.Stdout), "started") {
		t.Errorf("output before the end was lost: %q", res.Stdout)
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
		if i == 200 {
			t.Fatalf("process %d still running after the command ended: %s", pid, stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
