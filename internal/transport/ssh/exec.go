package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/internal/tracing"
	"github.com/soulstack/soulstack/internal/transport"
)

// Command is what Exec runs (transport.Command): Argv or Script, not
// both. Env values travel on the session's standard input ahead of Stdin,
// read by a short shell prologue that exports them and execs the command
// with the rest of the input, so they never appear in a command line
// (which any user of the host can read in /proc/*/cmdline); sshd's setenv,
// which most servers refuse, is not used. Dir empty means the login
// directory. Sudo wraps the command in "sudo -n --" when the target user
// is not root, which fails at once with ErrSudoPassword instead of
// prompting.
type Command = transport.Command

// Result is how a command ended (transport.Result). A non-zero exit code
// is a result, not an error; StdoutTruncated and StderrTruncated report
// that a stream went past Options.MaxOutput.
type Result = transport.Result

// maxCommandLine is the longest command line built: sshd hands it, behind
// the PID line, to the login shell as one argument, which Linux caps at
// 128 KiB.
const maxCommandLine = 128<<10 - 256

// cancelGrace bounds how long Exec waits for a killed session to wind down
// before returning.
const cancelGrace = 5 * time.Second

// Exec runs cmd on the client's host with LC_ALL=C. It returns the exit
// code and the captured output; errors are transport failures (wrapping
// ErrDisconnected when the connection broke), invalid commands
// (ErrInvalidCommand), sudo failures (ErrSudoPassword, ErrSudoMissing) and
// the context's error when ctx ends first, in which case the remote
// command's process group is sent SIGKILL, its session closed, and the
// output captured so far returned. Error messages never contain the command
// line, since its arguments may hold data the caller does not want logged.
func (c *Client) Exec(ctx context.Context, cmd Command) (Result, error) {
	// A span per command: where and how it ended, never its text.
	ctx, span := tracing.Tracer().Start(ctx, "ssh.exec", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("server.address", c.target.Address), attribute.Int("server.port", c.target.WithDefaults().Port), attribute.String("user.name", c.target.User)))
	res, err := c.exec(ctx, cmd)
	span.SetAttributes(attribute.Int("process.exit.code", res.ExitCode))
	if err != nil {
		span.SetStatus(otelcodes.Error, "ssh exec failed")
	}
	span.End()
	return res, err
}

func (c *Client) exec(ctx context.Context, cmd Command) (Result, error) {
	sudo := cmd.Sudo && c.target.User != "root"
	line, stdin, err := commandLine(cmd, sudo)
	if err != nil {
		return Result{}, fmt.Errorf("ssh exec on %s: %w", c.target, err)
	}
	marker, err := newMarker()
	if err != nil {
		return Result{}, fmt.Errorf("ssh exec on %s: %w", c.target, err)
	}
	select {
	case c.slots <- struct{}{}:
		c.busy.Add(1)
		c.touch()
		defer func() {
			c.touch()
			if c.busy.Add(-1) == 0 && c.retired.Load() {
				_ = c.Close() // the pool let it go while this command ran
			}
			<-c.slots
		}()
	case <-ctx.Done():
		return Result{}, fmt.Errorf("ssh exec on %s: %w", c.target, context.Cause(ctx))
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("ssh exec on %s: %w", c.target, context.Cause(ctx))
	}
	var res Result
	x := c.executor(ctx)
	switch {
	case cmd.Durable != nil:
		res, err = c.execDurable(ctx, cmd, x, func(forget []string) (Result, error) {
			dline, err := c.durableLine(marker, line, len(stdin) > 0, cmd.Durable, forget)
			if err != nil {
				return Result{}, err
			}
			return c.runDurable(ctx, marker, dline, stdin, sudo, cmd.Durable)
		})
	case x != nil:
		res, err = x.exec(ctx, cmd, nil)
	default:
		res, err = c.run(ctx, marker, line, stdin, sudo)
	}
	if err != nil {
		return res, fmt.Errorf("ssh exec on %s: %w", c.target, err)
	}
	if sudo {
		if err := sudoFailure(res); err != nil {
			return res, fmt.Errorf("ssh exec on %s: %w", c.target, err)
		}
	}
	return res, nil
}

// run starts the command line behind a first statement that reports the
// login shell's PID on stderr (stripped from the result). The shell then
// execs the command, so that PID leads the command's process group, which
// is what a cancelled Exec kills: sshd does not deliver SSH signal requests
// to root sessions.
func (c *Client) run(ctx context.Context, marker, line string, stdin []byte, sudo bool) (Result, error) {
	st, err := c.start(ctx, marker, "echo "+marker+" $$ >&2; exec "+line, stdin)
	if err != nil {
		return Result{}, err
	}
	defer st.sess.Close()
	pid := st.sniffer
	var waitErr error
	select {
	case waitErr = <-st.done:
	case <-ctx.Done():
		st.sess.Signal(gossh.SIGKILL) // honoured for non-root sessions only
		finished := false
		select {
		case <-pid.found:
			c.killGroup(ctx, pid.get(), sudo)
		case <-st.done:
			finished = true
		case <-time.After(cancelGrace):
		}
		st.sess.Close()
		if !finished {
			select {
			case <-st.done:
			case <-time.After(cancelGrace):
			}
		}
		return st.result(), context.Cause(ctx)
	}
	res := st.result()
	var exitErr *gossh.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		res.ExitCode = exitErr.ExitStatus()
		res.Signal = exitErr.Signal()
	default:
		return res, fmt.Errorf("%w: %v", ErrDisconnected, waitErr)
	}
	return res, nil
}

// started is a command line started on a session of its own: its output
// captures, the sniffer of its marker lines, and its end (done).
type started struct {
	sess           *gossh.Session
	stdout, stderr *transport.Capture
	sniffer        *pidSniffer
	done           chan error
}

// start opens a session, starts line on it with stdin, then end of file,
// on its standard input, and captures its output (stderr through the
// sniffer of marker's lines).
func (c *Client) start(ctx context.Context, marker, line string, stdin []byte) (*started, error) {
	sess, err := c.newSession(ctx)
	if err != nil {
		return nil, err
	}
	in, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("open session: %w", err)
	}
	st := &started{sess: sess, stdout: transport.NewCapture(c.opts.MaxOutput), stderr: transport.NewCapture(c.opts.MaxOutput), done: make(chan error, 1)}
	st.sniffer = newPIDSniffer(marker, st.stderr)
	sess.Stdout, sess.Stderr = st.stdout, st.sniffer
	if err := sess.Start(line); err != nil {
		sess.Close()
		// x/crypto/ssh quotes the command line in this error, and the
		// line holds the command's arguments: never pass its text on.
		if errors.Is(err, io.EOF) || !c.alive() {
			return nil, fmt.Errorf("start command: %w", ErrDisconnected)
		}
		return nil, errors.New("start command: the server refused the exec request")
	}
	// The writer ends when stdin is written or when the channel closes,
	// whichever comes first; a command that never reads its stdin must
	// not turn into an error.
	go func() {
		if len(stdin) > 0 {
			in.Write(stdin)
		}
		in.Close()
	}()
	go func() { st.done <- sess.Wait() }()
	return st, nil
}

// result is what the command wrote so far, the sniffer's held-back bytes
// passed on.
func (st *started) result() Result {
	st.sniffer.flush()
	return result(st.stdout, st.stderr)
}

// Session opening retries: sshd frees a finished session's slot a moment
// after it is closed, so a new session opened at once on a busy connection
// may be refused ("no more sessions").
const (
	sessionAttempts = 8
	sessionBackoff  = 5 * time.Millisecond // doubled after each refusal
)

// newSession opens a session, retrying while the server refuses it for
// lack of a free session slot.
func (c *Client) newSession(ctx context.Context) (*gossh.Session, error) {
	backoff := sessionBackoff
	for attempt := 1; ; attempt++ {
		sess, err := c.conn.NewSession()
		if err == nil {
			return sess, nil
		}
		var oce *gossh.OpenChannelError
		if !errors.As(err, &oce) {
			return nil, fmt.Errorf("open session: %w: %v", ErrDisconnected, err)
		}
		if attempt == sessionAttempts || (oce.Reason != gossh.ConnectionFailed && oce.Reason != gossh.ResourceShortage) {
			return nil, fmt.Errorf("open session: %w", err)
		}
		if err := c.opts.Sleep(ctx, backoff); err != nil {
			return nil, err
		}
		backoff *= 2
	}
}

// killGroup sends SIGKILL to the process group led by pid, from a session
// of its own; with sudo when the command ran under sudo. It is best effort
// and bounded by cancelGrace.
func (c *Client) killGroup(ctx context.Context, pid int, sudo bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
	defer cancel()
	line, _, err := commandLine(Command{Script: "kill -s KILL -- -" + strconv.Itoa(pid)}, sudo)
	if err != nil {
		return
	}
	sess, err := c.conn.NewSession()
	if err != nil {
		return
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	sess.Run(line)
}

// newMarker returns a word unique to one Exec that tags the PID line.
func newMarker() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("marker: %w", err)
	}
	return "soulstack-pid-" + hex.EncodeToString(b[:]), nil
}

// pidSniffer passes stderr on to w, except the lines led by the exec's
// marker word that come first: "<marker> <pid>" (a plain command's shell)
// or the supervisor's lines (see supervisorScript), which it parses. It
// holds output back while it may still be such a line, up to 64 KiB.
type pidSniffer struct {
	mu     sync.Mutex
	marker []byte
	w      io.Writer
	found  chan struct{} // closed once pid is known
	buf    []byte
	sv     supervised
	seen   bool // a marker line was parsed
	done   bool
}

func newPIDSniffer(marker string, w io.Writer) *pidSniffer {
	return &pidSniffer{marker: []byte(marker + " "), w: w, found: make(chan struct{})}
}

const sniffLimit = 64 << 10

func (s *pidSniffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return s.w.Write(p)
	}
	s.buf = append(s.buf, p...)
	for !s.done && len(s.buf) > 0 {
		j := bytes.IndexByte(s.buf, '\n')
		n := min(len(s.buf), len(s.marker))
		if !bytes.Equal(s.buf[:n], s.marker[:n]) {
			switch {
			case s.seen:
				s.pass() // past the marker lines: the command's own stderr
			case j >= 0:
				// A line before the first marker line (sshd's "Could not
				// chdir to home directory"): passed on, still sniffing.
				s.w.Write(s.buf[:j+1])
				s.buf = s.buf[j+1:]
				continue
			case len(s.buf) > sniffLimit:
				s.pass()
			}
			break
		}
		if j < 0 {
			if len(s.buf) > sniffLimit {
				// A marker line that never ends is not the shell's:
				// whatever the server sends, no more than sniffLimit is
				// held back.
				s.pass()
			}
			break // the rest of the line is on its way
		}
		had := s.sv.pid
		s.sv.parse(string(s.buf[len(s.marker):j]))
		s.seen = true
		if had == 0 && s.sv.pid > 1 {
			close(s.found)
		}
		s.buf = s.buf[j+1:]
	}
	return len(p), nil
}

// pass ends the sniffing: what is held back and all that follows goes to
// w.
func (s *pidSniffer) pass() {
	s.done = true
	if len(s.buf) > 0 {
		s.w.Write(s.buf)
	}
	s.buf = nil
}

func (s *pidSniffer) get() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sv.pid
}

// supervised returns what the marker lines said.
func (s *pidSniffer) supervised() supervised {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sv
}

// flush passes on whatever is still held back.
func (s *pidSniffer) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.pass()
	}
}

func result(stdout, stderr *transport.Capture) Result {
	out, outCut := stdout.Bytes()
	errb, errCut := stderr.Bytes()
	return Result{Stdout: out, Stderr: errb, StdoutTruncated: outCut, StderrTruncated: errCut}
}

// sudoFailure recognises sudo refusing to run the command. With -n, sudo
// prints its refusal and exits 1 before the command starts.
func sudoFailure(res Result) error {
	stderr := string(res.Stderr)
	switch {
	case res.ExitCode == 1 && strings.HasPrefix(stderr, "sudo: a password is required"):
		return fmt.Errorf("%w: add a NOPASSWD sudoers rule for the user", ErrSudoPassword)
	case res.ExitCode == 127 && strings.Contains(stderr, "sudo") &&
		(strings.Contains(stderr, "No such file or directory") || strings.Contains(stderr, "not found")):
		// env(1) could not find sudo to exec.
		return ErrSudoMissing
	}
	return nil
}

// commandLine builds the command the login shell (which must be POSIX)
// runs, and the standard input to send it:
//
//	[env LC_ALL=C sudo -n --] env LC_ALL=C [/bin/sh -c <envPrologue> sh] program args…
//
// With Env, the input starts with the environment header (see envHeader)
// that the prologue consumes, followed by cmd.Stdin.
func commandLine(cmd Command, sudo bool) (string, []byte, error) {
	bad := func(format string, args ...any) (string, []byte, error) {
		return "", nil, fmt.Errorf("%w: %s", ErrInvalidCommand, fmt.Sprintf(format, args...))
	}
	switch {
	case len(cmd.Argv) > 0 && cmd.Script != "":
		return bad("both argv and script given")
	case len(cmd.Argv) == 0 && cmd.Script == "":
		return bad("neither argv nor script given")
	}
	var body []string
	if cmd.Script != "" {
		if strings.IndexByte(cmd.Script, 0) >= 0 {
			return bad("script contains a NUL byte")
		}
		body = []string{"/bin/sh", "-c", cmd.Script}
	} else {
		for i, a := range cmd.Argv {
			if strings.IndexByte(a, 0) >= 0 {
				return bad("argv[%d] contains a NUL byte", i)
			}
		}
		if cmd.Argv[0] == "" {
			return bad("argv[0] is empty")
		}
		body = cmd.Argv
		if strings.IndexByte(body[0], '=') >= 0 {
			// env(1) would take NAME=VALUE as an assignment.
			body = append([]string{"/bin/sh", "-c", `exec "$@"`, "sh"}, body...)
		}
	}
	if cmd.Dir != "" {
		if strings.IndexByte(cmd.Dir, 0) >= 0 {
			return bad("dir contains a NUL byte")
		}
		body = append([]string{"/bin/sh", "-c", `cd -- "$1" || exit; shift; exec "$@"`, "sh", cmd.Dir}, body...)
	}
	stdin := cmd.Stdin
	if len(cmd.Env) > 0 {
		header, err := envHeader(cmd.Env)
		if err != nil {
			return "", nil, err
		}
		body = append([]string{"/bin/sh", "-c", envPrologue, "sh"}, body...)
		stdin = append(header, cmd.Stdin...)
	}
	var b strings.Builder
	if sudo {
		b.WriteString("env LC_ALL=C sudo -n -- ")
	}
	b.WriteString("env LC_ALL=C ")
	b.WriteString(quoteArgs(body))
	if b.Len() > maxCommandLine {
		return bad("command line is %d bytes, over the %d a remote shell accepts", b.Len(), maxCommandLine)
	}
	return b.String(), stdin, nil
}

// envPrologue reads the environment header from standard input, one
// NAME=VALUE line per variable up to an empty line, exports each variable
// with its value decoded by printf %b, and execs the command with the rest
// of standard input. The shell's read builtin takes a pipe one byte at a
// time, so not a byte past the header is consumed. A header cut short
// fails with status 125 before the command runs.
const envPrologue = `while :; do
IFS= read -r __soulstack_l || { echo "soulstack: environment header cut short" >&2; exit 125; }
[ -n "$__soulstack_l" ] || break
__soulstack_v=$(printf '%bx' "${__soulstack_l#*=}") &&
export "${__soulstack_l%%=*}=${__soulstack_v%x}" || exit 125
done
unset __soulstack_l __soulstack_v
exec "$@"`

// envHeader encodes env for envPrologue, sorted by name: one line
// NAME=VALUE per variable, then an empty line. Printable ASCII other than
// the backslash is written as it is; every other byte of a value (the
// backslash, newlines and other control bytes, the bytes of UTF-8
// sequences) as the printf %b octal escape \0ooo, so no value spans lines
// and printf gives back exactly its bytes.
func envHeader(env map[string]string) ([]byte, error) {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	var b []byte
	for _, k := range names {
		v := env[k]
		if err := transport.CheckEnv(k, v); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidCommand, err)
		}
		b = append(b, k...)
		b = append(b, '=')
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c >= 0x20 && c < 0x7f && c != '\\' {
				b = append(b, c)
				continue
			}
			b = append(b, '\\', '0', '0'+c>>6, '0'+c>>3&7, '0'+c&7)
		}
		b = append(b, '\n')
	}
	return append(b, '\n'), nil
}
