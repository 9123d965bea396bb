package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/probe"
	"github.com/soulstack/soulstack/internal/transport"
)

// DefaultMaxOutput is the per-stream output limit when a request sets
// none: the SSH transport's default.
const DefaultMaxOutput = wire.DefaultMaxOutput

// killGrace bounds how long Run waits for a killed command's output pipes
// to close (a grandchild that left the process group may hold them).
const killGrace = 5 * time.Second

// errInvalid marks a command that cannot be run as given.
var errInvalid = errors.New("invalid command")

// Run executes req on this host with the SSH transport's semantics: the
// program is exec'd directly (no shell unless Script), with the agent's
// environment, then LC_ALL=C, then req.Env; req.Stdin then end of file on
// standard input; in req.Dir or the user's home directory; under
// "sudo -n --" when req.Sudo and the agent is not root. Each output stream
// keeps req.MaxOutput bytes and ends with the truncation marker when cut.
// The command leads its own process group, which is killed with SIGKILL
// when ctx ends (or TimeoutMS passes); the output so far is returned with
// Cancelled set. A program that cannot be found exits 127 and a directory
// that cannot be entered exits 2, as through sshd's shell.
//
// A probe (req.Probe) is answered in this process when package probe can
// answer it with this process's rights; otherwise its argv runs.
func Run(ctx context.Context, req wire.ExecRequest) Outcome {
	if out, ok := answerProbe(ctx, req); ok {
		return out
	}
	argv, err := commandArgv(req)
	if err != nil {
		return Outcome{ExecEnd: wire.ExecEnd{Code: "agent.invalid_command", Error: err.Error()}}
	}
	if req.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	max := req.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	stdout, stderr := transport.NewCapture(max), transport.NewCapture(max)
	end := func(code int, signal string, cancelled bool) wire.ExecEnd {
		return wire.ExecEnd{ExitCode: code, Signal: signal, Cancelled: cancelled}
	}
	dir := req.Dir
	if dir == "" {
		if dir, err = os.UserHomeDir(); err != nil {
			dir = "/"
		}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(stderr, "sh: 1: cd: can't cd to %s\n", dir)
		return finish(end(2, "", false), stdout, stderr)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "env: '%s': No such file or directory\n", argv[0])
		return finish(end(127, "", false), stdout, stderr)
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = bytes.NewReader(req.Stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = killGrace
	err = cmd.Run()
	cancelled := ctx.Err() != nil
	if cancelled && cmd.Process != nil {
		// The leader may have exited on its own while the group lives on.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return finish(end(0, "", false), stdout, stderr)
	case errors.As(err, &exitErr):
		ws, _ := exitErr.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return finish(end(128+int(ws.Signal()), strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG"), cancelled), stdout, stderr)
		}
		return finish(end(exitErr.ExitCode(), "", cancelled), stdout, stderr)
	case cancelled:
		return finish(end(-1, "", true), stdout, stderr)
	default:
		// The program was found but could not be started (not executable).
		fmt.Fprintf(stderr, "env: '%s': %v\n", argv[0], errors.Unwrap(err))
		return finish(end(126, "", false), stdout, stderr)
	}
}

// Outcome is how a command Run executed ended, with its captured output.
type Outcome struct {
	wire.ExecEnd
	Stdout, Stderr []byte
}

// answerProbe answers a plain probe natively: as root, or as another
// user when the probe does not need root.
func answerProbe(ctx context.Context, req wire.ExecRequest) (Outcome, bool) {
	if req.Probe == nil || req.Durable != nil || (req.Sudo && os.Geteuid() != 0) {
		return Outcome{}, false
	}
	rep, ok := probe.Answer(ctx, *req.Probe)
	if !ok {
		return Outcome{}, false
	}
	max := req.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	c := transport.NewCapture(max)
	c.Write(rep.Stdout)
	return finish(wire.ExecEnd{ExitCode: rep.Exit}, c, transport.NewCapture(max)), true
}

func finish(e wire.ExecEnd, stdout, stderr *transport.Capture) Outcome {
	o := Outcome{ExecEnd: e}
	o.Stdout, o.StdoutTruncated = stdout.Bytes()
	o.Stderr, o.StderrTruncated = stderr.Bytes()
	return o
}

// commandArgv checks req as the SSH transport does and returns the
// program and arguments to exec.
func commandArgv(req wire.ExecRequest) ([]string, error) {
	bad := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case len(req.Argv) > 0 && req.Script != "":
		return bad("both argv and script given")
	case len(req.Argv) == 0 && req.Script == "":
		return bad("neither argv nor script given")
	}
	argv := req.Argv
	if req.Script != "" {
		if strings.IndexByte(req.Script, 0) >= 0 {
			return bad("script contains a NUL byte")
		}
		argv = []string{"/bin/sh", "-c", req.Script}
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("argv[%d] contains a NUL byte", i)
		}
	}
	if argv[0] == "" {
		return bad("argv[0] is empty")
	}
	if strings.IndexByte(req.Dir, 0) >= 0 {
		return bad("dir contains a NUL byte")
	}
	for k, v := range req.Env {
		if err := transport.CheckEnv(k, v); err != nil {
			return bad("%v", err)
		}
	}
	if req.Sudo && os.Geteuid() != 0 {
		argv = append([]string{"sudo", "-n", "--"}, argv...)
	}
	return argv, nil
}
